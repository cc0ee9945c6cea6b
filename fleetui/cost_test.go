package fleetui_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/fleettest"
	"github.com/fleet-go/fleet/fleetui"
	"github.com/fleet-go/fleet/internal/costmeter"
	"github.com/fleet-go/fleet/internal/redistest"
)

// openPages are the pages an operator leaves open, which poll every
// Options.Refresh: the overview, a queue's page over each span of its
// history, and its list of pending tasks.
var openPages = []string{"/fleet/", "/fleet/queues/jobs", "/fleet/queues/jobs?span=24h", "/fleet/queues/jobs?span=30d", "/fleet/queues/jobs/pending"}

// costBed is a dashboard on a server of its own (so that INFO counts its
// commands alone), with a queue "jobs" of 10 pending tasks, 3 dead
// letters and a worker; cache picks the Fleet's client-side caching.
type costBed struct {
	srv *fleettest.Server
	f   *fleet.Fleet
	q   *fleet.Queue[job]
	h   http.Handler
}

func newCostBed(tb testing.TB, cache bool) *costBed {
	tb.Helper()
	ctx := context.Background()
	srv, err := fleettest.StartServer(ctx, fleettest.Config{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(srv.Stop)
	f, err := fleet.Open(ctx, fleet.Options{URL: srv.URL(), DisableCache: !cache})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = f.Close() })
	b := &costBed{srv: srv, f: f, q: fleet.NewQueue[job](f, "jobs", fleet.QueueOptions{}), h: fleetui.Handler(f, fleetui.Options{})}
	b.grow(tb, 13)
	ts, err := b.q.Reserve(ctx, 3, 0)
	if err != nil || len(ts) != 3 {
		tb.Fatalf("reserve: %d %v", len(ts), err)
	}
	for _, tk := range ts {
		if err := tk.DeadLetter(ctx, errors.New("dead")); err != nil {
			tb.Fatal(err)
		}
	}
	return b
}

// grow submits n more tasks, a thousand per call.
func (b *costBed) grow(tb testing.TB, n int) {
	tb.Helper()
	for n > 0 {
		batch := make([]job, min(n, 1000))
		for i := range batch {
			batch[i] = job{Note: fmt.Sprintf("task %d", n-i)}
		}
		if _, err := b.q.SubmitMany(context.Background(), batch); err != nil {
			tb.Fatal(err)
		}
		n -= len(batch)
	}
}

// render serves path and returns what the server did for it: its commands
// and its CPU.
func (b *costBed) render(tb testing.TB, path string) costmeter.Cost {
	tb.Helper()
	ctx := context.Background()
	m, err := costmeter.Start(ctx, b.f.Client())
	if err != nil {
		tb.Fatal(err)
	}
	rec := httptest.NewRecorder()
	b.h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
	c, err := m.Stop(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	if rec.Code != http.StatusOK {
		tb.Fatalf("GET %s: %d", path, rec.Code)
	}
	return c
}

// TestDashboardCostBounded: each page left open sends Redis as many
// commands, of the same kinds, with 20,000 tasks pending as with 10 (read
// without the client-side cache, which could only lower them).
func TestDashboardCostBounded(t *testing.T) {
	redistest.SingleURL(t) // the harness's programs must be there
	b := newCostBed(t, false)
	measure := func() map[string]map[string]int64 {
		out := map[string]map[string]int64{}
		for _, p := range openPages {
			out[p] = b.render(t, p).Calls
		}
		return out
	}
	small := measure()
	b.grow(t, 20_000)
	big := measure()
	for _, p := range openPages {
		if !maps.Equal(small[p], big[p]) {
			t.Errorf("GET %s: %v with 10 tasks, %v with 20,010", p, small[p], big[p])
		}
		t.Logf("GET %s: %d commands (%v)", p, costmeter.Cost{Calls: big[p]}.Commands(), slices.Sorted(maps.Keys(big[p])))
	}
}

// BenchmarkDashboardCost: what each page left open costs Redis per render,
// with 10 and with 100,000 tasks pending, with and without the client-side
// cache: cmds/render and server-µs/render. A page polls every
// Options.Refresh (2 s by default): its commands per second are half its
// cmds/render.
//
//	go test -run '^$' -bench BenchmarkDashboardCost -benchtime 200x ./fleetui
func BenchmarkDashboardCost(b *testing.B) {
	for _, cache := range []bool{false, true} {
		bed := newCostBed(b, cache)
		for _, size := range []int{10, 100_000} {
			if size > 10 {
				bed.grow(b, size-10)
			}
			for _, p := range openPages {
				b.Run(fmt.Sprintf("cache=%v/tasks=%d/%s", cache, size, p), func(b *testing.B) {
					bed.render(b, p) // warm the cache and the scripts
					var total costmeter.Cost
					for range b.N {
						total = total.Add(bed.render(b, p))
					}
					b.ReportMetric(float64(total.Commands())/float64(b.N), "cmds/render")
					b.ReportMetric(float64(total.CPU/time.Microsecond)/float64(b.N), "server-µs/render")
				})
			}
		}
	}
}
