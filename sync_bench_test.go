package fleet_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/fleet-go/fleet"
)

// BenchmarkSyncQueue: Sync of a queue of 1M pending tasks, each with a
// dedup key, on a redis-server of the benchmark's own, while another
// client PINGs in a loop. "rebuild" starts from an empty :dedup (Sync adds
// 1M entries), "steady" from a sound one (Sync changes nothing). Reported:
// tasks/s (the queue's tasks over Sync's time) and the PING latency
// percentiles during Sync. Run:
//
//	go test -run '^$' -bench SyncQueue -benchtime 1x -timeout 30m .
func BenchmarkSyncQueue(b *testing.B) {
	const n = 1_000_000
	ctx := context.Background()
	s := costServer(b)
	f := costFleet(b, s.URL())
	raw := costClient(b, s.Addr, nil)

	// Fill: pipelined RPUSH of 1,000 bodies each.
	start := time.Now()
	var cmds rueidis.Commands
	bodies := make([]string, 0, 1000)
	for i := range n {
		bodies = append(bodies, fmt.Sprintf(`{"id":"t%d","payload":{"url":"https://example.com/%d","n":%d},"attempts":0,"dedup":"d%d"}`, i, i, i%1000, i))
		if len(bodies) == cap(bodies) {
			cmds = append(cmds, raw.B().Rpush().Key("fleet:queue:big").Element(bodies...).Build())
			bodies = bodies[:0]
		}
		if len(cmds) == 50 || i == n-1 {
			for _, r := range raw.DoMulti(ctx, cmds...) {
				if err := r.Error(); err != nil {
					b.Fatal(err)
				}
			}
			cmds = cmds[:0]
		}
	}
	b.Logf("filled %d tasks in %v", n, time.Since(start))

	reset := func() {
		if err := raw.Do(ctx, raw.B().Unlink().Key("fleet:queue:big:dedup").Build()).Error(); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("rebuild", func(b *testing.B) {
		syncWithPings(b, f, raw, n, "tasks/s", reset, func(r fleet.SyncReport) bool { return r.DedupAdded == n })
	})
	b.Run("steady", func(b *testing.B) {
		syncWithPings(b, f, raw, n, "tasks/s", nil, func(r fleet.SyncReport) bool { return r.Fixed() == 0 })
	})
}

// BenchmarkSyncPool: Sync of a pool of 1M items written by a client that
// keeps only the documented keys (the pool hash, no indexes), on a
// redis-server of the benchmark's own, while another client PINGs in a
// loop. "rebuild" drops the indexes first (Sync indexes 1M items),
// "steady" starts from sound ones. Reported: items/s and the PING latency
// percentiles during Sync. Run:
//
//	go test -run '^$' -bench SyncPool -benchtime 1x -timeout 30m .
func BenchmarkSyncPool(b *testing.B) {
	const n = 1_000_000
	ctx := context.Background()
	s := costServer(b)
	f := costFleet(b, s.URL())
	raw := costClient(b, s.Addr, nil)

	start := time.Now()
	var cmds rueidis.Commands
	for i := 0; i < n; i += 1000 {
		hs := raw.B().Hset().Key("fleet:pool:big").FieldValue()
		for j := i; j < i+1000; j++ {
			hs = hs.FieldValue(fmt.Sprintf("item-%d", j), fmt.Sprintf(`{"p":"Y29va2ll","t":{"site":"s%d","fresh":true},"x":null}`, j%100))
		}
		cmds = append(cmds, hs.Build())
		if len(cmds) == 50 || i+1000 >= n {
			for _, r := range raw.DoMulti(ctx, cmds...) {
				if err := r.Error(); err != nil {
					b.Fatal(err)
				}
			}
			cmds = cmds[:0]
		}
	}
	if err := raw.Do(ctx, raw.B().Sadd().Key("fleet:pools").Member("big").Build()).Error(); err != nil {
		b.Fatal(err)
	}
	b.Logf("filled %d items in %v", n, time.Since(start))

	reset := func() {
		for _, k := range []string{"all", "free", "held", "exp", "bad", "tags"} {
			if err := raw.Do(ctx, raw.B().Unlink().Key("fleet:pidx:big:"+k).Build()).Error(); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("rebuild", func(b *testing.B) {
		syncWithPings(b, f, raw, n, "items/s", reset, func(fleet.SyncReport) bool { return true })
	})
	b.Run("steady", func(b *testing.B) {
		syncWithPings(b, f, raw, n, "items/s", nil, func(r fleet.SyncReport) bool { return r.Fixed() == 0 })
	})
}

// syncWithPings runs Sync b.N times (after reset, when set, outside the
// timer) while another client PINGs in a loop, checks each report with ok,
// and reports n per second of Sync as unit and the PING latencies.
func syncWithPings(b *testing.B, f *fleet.Fleet, raw rueidis.Client, n int, unit string, reset func(), ok func(fleet.SyncReport) bool) {
	ctx := context.Background()
	var lat []time.Duration
	for range b.N {
		if reset != nil {
			b.StopTimer()
			reset()
			b.StartTimer()
		}
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				t0 := time.Now()
				if err := raw.Do(ctx, raw.B().Ping().Build()).Error(); err != nil {
					b.Error(err)
					return
				}
				lat = append(lat, time.Since(t0))
			}
		})
		t0 := time.Now()
		r, err := f.Sync(ctx)
		d := time.Since(t0)
		close(stop)
		wg.Wait()
		if err != nil {
			b.Fatal(err)
		}
		if !ok(r) {
			b.Fatalf("report %+v", r)
		}
		b.ReportMetric(float64(n)/d.Seconds(), unit)
	}
	slices.Sort(lat)
	if len(lat) > 0 {
		p := func(q float64) float64 { return float64(lat[int(q*float64(len(lat)-1))]) / 1e6 }
		b.ReportMetric(p(0.5), "ping-p50-ms")
		b.ReportMetric(p(0.99), "ping-p99-ms")
		b.ReportMetric(float64(lat[len(lat)-1])/1e6, "ping-max-ms")
	}
}
