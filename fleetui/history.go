package fleetui

// The queues' history on the pages: the rates of the overview's rows, its
// chart of the last hour, and a queue's charts over 1 h, 24 h and 30 days,
// all read from the history that the Fleets keep in Redis
// (fleet.Queue.History; docs/SCHEMA.md) and drawn on the server as inline
// SVG of numbers only, which need no escaping.

import (
	"context"
	"fmt"
	"html/template"
	"strconv"
	"strings"
	"time"

	"github.com/fleet-go/fleet"
)

// histSpans are the spans a queue's charts show, by their query value,
// and how many buckets of the history one bar of the chart sums.
var histSpans = map[string]struct {
	span  time.Duration
	group int
	label string
}{
	"1h":  {time.Hour, 1, "minute"},
	"24h": {24 * time.Hour, 10, "10 minutes"},
	"30d": {fleet.HistoryDays, 1, "day"},
}

// rateMinutes is how many whole minutes the overview's rates average.
const rateMinutes = 5

// rates are a queue's tasks per minute over the last rateMinutes whole
// minutes.
type rates struct {
	Done, Failed string
}

// lastHour reads the last hour of every queue named, in order.
func (h *handler) lastHour(ctx context.Context, names []string) ([][]fleet.HistoryPoint, error) {
	out := make([][]fleet.HistoryPoint, len(names))
	for i, n := range names {
		ps, err := h.f.Queue(n).History(ctx, time.Hour)
		if err != nil {
			return nil, err
		}
		out[i] = ps
	}
	return out, nil
}

// rateOf averages the last rateMinutes whole minutes of ps (the current
// minute, still filling, left out).
func rateOf(ps []fleet.HistoryPoint) rates {
	if len(ps) < rateMinutes+1 {
		return rates{Done: "–", Failed: "–"}
	}
	var done, failed int64
	for _, p := range ps[len(ps)-1-rateMinutes : len(ps)-1] {
		done += p.Done
		failed += p.Failed
	}
	per := func(n int64) string { return strconv.FormatFloat(float64(n)/rateMinutes, 'f', 1, 64) }
	return rates{Done: per(done), Failed: per(failed)}
}

// group sums every n buckets of ps into one (Depth: the highest sample).
func group(ps []fleet.HistoryPoint, n int) []fleet.HistoryPoint {
	if n <= 1 {
		return ps
	}
	var out []fleet.HistoryPoint
	for i := 0; i < len(ps); i += n {
		g := fleet.HistoryPoint{At: ps[i].At, Depth: -1}
		for _, p := range ps[i:min(i+n, len(ps))] {
			g.Done += p.Done
			g.Failed += p.Failed
			g.Retried += p.Retried
			g.DeadLettered += p.DeadLettered
			g.Depth = max(g.Depth, p.Depth)
		}
		out = append(out, g)
	}
	return out
}

// sum adds the histories of several queues bucket by bucket (they cover
// the same span).
func sum(hs [][]fleet.HistoryPoint) []fleet.HistoryPoint {
	if len(hs) == 0 {
		return nil
	}
	out := make([]fleet.HistoryPoint, len(hs[0]))
	for i := range out {
		out[i] = fleet.HistoryPoint{At: hs[0][i].At, Depth: -1}
		for _, ps := range hs {
			if i < len(ps) {
				out[i].Done += ps[i].Done
				out[i].Failed += ps[i].Failed
				if ps[i].Depth >= 0 {
					out[i].Depth = max(out[i].Depth, 0) + ps[i].Depth
				}
			}
		}
	}
	return out
}

// barChart draws the done and the failed tasks of each bucket of ps as
// stacked bars (done below, failed above), with the peak and the span's
// ends written under it. id names the SVG for tests and styles.
func barChart(id string, ps []fleet.HistoryPoint, per string) template.HTML {
	const w, h = 600, 90
	if len(ps) == 0 {
		return ""
	}
	var peak int64 = 1
	var total, failed int64
	for _, p := range ps {
		peak = max(peak, p.Done+p.Failed)
		total += p.Done
		failed += p.Failed
	}
	bw := float64(w) / float64(len(ps))
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" id="%s" viewBox="0 0 %d %d" width="%d" height="%d" role="img" aria-label="tasks done and failed per %s: %d done, %d failed, peak %d" data-done="%d" data-failed="%d">`,
		id, w, h+16, w, h+16, per, total, failed, peak, total, failed)
	for i, p := range ps {
		x := float64(i) * bw
		dh := float64(h-2) * float64(p.Done) / float64(peak)
		fh := float64(h-2) * float64(p.Failed) / float64(peak)
		if p.Done > 0 {
			fmt.Fprintf(&b, `<rect class="done" x="%.1f" y="%.1f" width="%.1f" height="%.1f"><title>%s: %d done</title></rect>`, x, float64(h)-dh, max(bw-1, 0.5), dh, p.At.UTC().Format(time.DateTime), p.Done)
		}
		if p.Failed > 0 {
			fmt.Fprintf(&b, `<rect class="failed" x="%.1f" y="%.1f" width="%.1f" height="%.1f"><title>%s: %d failed</title></rect>`, x, float64(h)-dh-fh, max(bw-1, 0.5), fh, p.At.UTC().Format(time.DateTime), p.Failed)
		}
	}
	fmt.Fprintf(&b, `<text x="0" y="%d" font-size="11" fill="currentColor">%s</text>`, h+13, ps[0].At.UTC().Format("Jan 2 15:04"))
	fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="11" fill="currentColor" text-anchor="end">peak %d/%s · now</text>`, w, h+13, peak, per)
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// depthLine draws the depth samples of ps as a line (a bucket without a
// sample breaks it); w and h size it (the overview's sparkline is small).
// Empty when no bucket has a sample.
func depthLine(id string, ps []fleet.HistoryPoint, w, h int) template.HTML {
	var peak int64 = 1
	sampled := false
	for _, p := range ps {
		if p.Depth >= 0 {
			peak, sampled = max(peak, p.Depth), true
		}
	}
	if !sampled {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="spark" id="%s" viewBox="0 0 %d %d" width="%d" height="%d" role="img" aria-label="pending depth, peak %d">`, id, w, h, w, h, peak)
	var run []string
	flush := func() {
		switch len(run) {
		case 0:
		case 1: // a lone sample: a dot
			x, y, _ := strings.Cut(run[0], ",")
			fmt.Fprintf(&b, `<circle cx="%s" cy="%s" r="2" fill="currentColor"/>`, x, y)
		default:
			fmt.Fprintf(&b, `<polyline fill="none" stroke="currentColor" stroke-width="1.5" points="%s"/>`, strings.Join(run, " "))
		}
		run = run[:0]
	}
	step := float64(w) / float64(max(len(ps)-1, 1))
	for i, p := range ps {
		if p.Depth < 0 {
			flush()
			continue
		}
		y := float64(h-2) - float64(h-4)*float64(p.Depth)/float64(peak)
		run = append(run, fmt.Sprintf("%.1f,%.1f", float64(i)*step, y))
	}
	flush()
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}
