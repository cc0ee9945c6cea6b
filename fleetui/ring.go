package fleetui

import (
	"fmt"
	"html/template"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fleet-go/fleet"
)

// sample is what the overview saw at one moment: each queue's counts and
// each worker's done and failed counters (by "<type>|<id>").
type sample struct {
	at     time.Time
	queues map[string]fleet.QueueCounts
	done   map[string]int64
	failed map[string]int64
}

// ring keeps the samples of the last history, at most one per every. It is
// safe for concurrent use.
type ring struct {
	mu      sync.Mutex
	every   time.Duration
	history time.Duration
	s       []sample
}

func newRing(every, history time.Duration) *ring {
	return &ring{every: every, history: history}
}

// add records s unless the last sample is younger than every, and drops
// the samples older than history.
func (r *ring) add(s sample) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if n := len(r.s); n > 0 && s.at.Sub(r.s[n-1].at) < r.every {
		return
	}
	r.s = append(r.s, s)
	cut := 0
	for cut < len(r.s)-1 && s.at.Sub(r.s[cut].at) > r.history {
		cut++
	}
	r.s = append(r.s[:0], r.s[cut:]...)
}

// snapshot returns a copy of the samples, oldest first.
func (r *ring) snapshot() []sample {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]sample(nil), r.s...)
}

// growth sums, by type, how much the counters of m rose from a to b. A
// counter that went down (its worker restarted) counts its new value; a
// worker first seen in b counts nothing, since its counters hold all it
// did before.
func growth(a, b map[string]int64) map[string]int64 {
	out := map[string]int64{}
	for k, v := range b {
		prev, ok := a[k]
		if !ok {
			continue
		}
		typ, _, _ := strings.Cut(k, "|")
		if v >= prev {
			out[typ] += v - prev
		} else {
			out[typ] += v
		}
	}
	return out
}

// rates are a type's tasks per minute over the ring's span.
type rates struct {
	Done, Failed string // per minute, or "–" without two samples
}

// typeRates returns the rates of every type seen, and the span they cover.
func typeRates(ss []sample) (map[string]rates, time.Duration) {
	out := map[string]rates{}
	if len(ss) < 2 {
		return out, 0
	}
	done, failed := map[string]int64{}, map[string]int64{}
	for i := 1; i < len(ss); i++ {
		for t, n := range growth(ss[i-1].done, ss[i].done) {
			done[t] += n
		}
		for t, n := range growth(ss[i-1].failed, ss[i].failed) {
			failed[t] += n
		}
	}
	span := ss[len(ss)-1].at.Sub(ss[0].at)
	perMin := func(n int64) string {
		return strconv.FormatFloat(float64(n)*float64(time.Minute)/float64(span), 'f', 1, 64)
	}
	for k := range ss[len(ss)-1].done {
		typ, _, _ := strings.Cut(k, "|")
		out[typ] = rates{Done: perMin(done[typ]), Failed: perMin(failed[typ])}
	}
	return out, span
}

// sparkline draws the pending depth of queue name over the samples as an
// inline SVG. It holds numbers only, so it needs no escaping.
func sparkline(ss []sample, name string) template.HTML {
	const w, h = 120, 24
	if len(ss) < 2 {
		return ""
	}
	var maxV int64 = 1
	for _, s := range ss {
		maxV = max(maxV, s.queues[name].Pending)
	}
	t0, span := ss[0].at, ss[len(ss)-1].at.Sub(ss[0].at)
	var pts strings.Builder
	for _, s := range ss {
		x := float64(w) * float64(s.at.Sub(t0)) / float64(span)
		y := float64(h-2) - float64(h-4)*float64(s.queues[name].Pending)/float64(maxV)
		fmt.Fprintf(&pts, "%.1f,%.1f ", x, y)
	}
	return template.HTML(fmt.Sprintf(`<svg class="spark" viewBox="0 0 %d %d" width="%d" height="%d" role="img" aria-label="pending depth, peak %d"><polyline fill="none" stroke="currentColor" stroke-width="1.5" points="%s"/></svg>`,
		w, h, w, h, maxV, strings.TrimSpace(pts.String())))
}

// doneChart draws the tasks done per minute by all workers, one bar per
// interval between samples, as an inline SVG of numbers only.
func doneChart(ss []sample) template.HTML {
	const w, h = 480, 80
	if len(ss) < 2 {
		return ""
	}
	type bar struct{ x0, x1, v float64 }
	var bars []bar
	maxV := 1.0
	t0, span := ss[0].at, ss[len(ss)-1].at.Sub(ss[0].at)
	for i := 1; i < len(ss); i++ {
		var n int64
		for _, v := range growth(ss[i-1].done, ss[i].done) {
			n += v
		}
		dt := ss[i].at.Sub(ss[i-1].at)
		v := float64(n) * float64(time.Minute) / float64(dt)
		maxV = max(maxV, v)
		bars = append(bars, bar{float64(w) * float64(ss[i-1].at.Sub(t0)) / float64(span), float64(w) * float64(ss[i].at.Sub(t0)) / float64(span), v})
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" viewBox="0 0 %d %d" width="%d" height="%d" role="img" aria-label="tasks done per minute, peak %.1f">`, w, h+14, w, h+14, maxV)
	for _, br := range bars {
		bh := (h - 2) * br.v / maxV
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="currentColor"/>`, br.x0, float64(h)-bh, max(br.x1-br.x0-1, 1), bh)
	}
	fmt.Fprintf(&b, `<text x="0" y="%d" font-size="11" fill="currentColor">peak %.1f/min</text>`, h+12, maxV)
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}
