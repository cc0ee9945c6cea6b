package fleet_test

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/internal/costmeter"
)

// BenchmarkFlowFanOutIn: one op is a flow of 1 -> 1,000 -> 1 tasks over
// three queues (a root, 1,000 tasks after it, a join after the 1,000),
// run by three batch workers of 16 slots with no-op handlers, on a server
// of its own. join-start-ms is the time from the call of Submit to the
// start of the join's handler; cmds/edge and redis-µs/edge are the
// server's commands and CPU per edge (2,000 per flow), everything counted
// (the submit, the reserves and acks of the 1,002 tasks, and passing each
// end on). plain is the same 1,002 tasks submitted as plain tasks, one
// wave after the other (SubmitMany of the 1,000 once the root was acked,
// the join once they all were), for what the flow adds: flow/plain-cmds and
// flow/plain-cpu.
func BenchmarkFlowFanOutIn(b *testing.B) {
	const fan = 1000
	srv := costServer(b)
	type result struct{ ms, cmds, cpu float64 }
	run := func(b *testing.B, flow bool) result {
		costClean(b, srv)
		f := costFleet(b, srv.URL())
		qa := fleet.NewQueue[node](f, "ffi-a", fleet.QueueOptions{})
		qb := fleet.NewQueue[node](f, "ffi-b", fleet.QueueOptions{})
		qc := fleet.NewQueue[node](f, "ffi-c", fleet.QueueOptions{})
		var bDone, aDone atomic.Int64
		joinStarted := make(chan time.Time, 1)
		start := func(q *fleet.Queue[node], h func(tk *fleet.Task[node])) {
			w := fleet.NewBatchWorker(f, fleet.WorkerOptions{Type: "ffi-" + q.Name(), ID: "w", Slots: 16}, q,
				fleet.BatchFunc[wcfg, out, node](func(ctx context.Context, s *fleet.Slot[wcfg, out], tk *fleet.Task[node]) error {
					h(tk)
					return nil
				}))
			if err := w.Start(context.Background()); err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() {
				c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				_ = w.Stop(c)
			})
		}
		start(qa, func(*fleet.Task[node]) { aDone.Add(1) })
		start(qb, func(*fleet.Task[node]) { bDone.Add(1) })
		start(qc, func(*fleet.Task[node]) { joinStarted <- time.Now() })
		ctx := context.Background()
		m, err := costmeter.Start(ctx, costClient(b, srv.Addr, nil))
		if err != nil {
			b.Fatal(err)
		}
		var total time.Duration
		b.ResetTimer()
		for range b.N {
			t0 := time.Now()
			if flow {
				fl := fleet.NewFlow(f, fleet.FlowOptions{})
				root := fleet.AddStep(fl, qa, node{}, fleet.SubmitOptions{})
				mids := make([]*fleet.FlowStep, fan)
				for i := range mids {
					mids[i] = fleet.AddStep(fl, qb, node{N: i}, fleet.SubmitOptions{After: fleet.Steps(root)})
				}
				fleet.AddStep(fl, qc, node{}, fleet.SubmitOptions{After: fleet.Steps(mids...)})
				if err := fl.Submit(ctx); err != nil {
					b.Fatal(err)
				}
			} else {
				// The same waves, each submitted when the one before ended
				// (seen by this process: no cross-process hand-off).
				a0, b0 := aDone.Load(), bDone.Load()
				if _, err := qa.Submit(ctx, node{}); err != nil {
					b.Fatal(err)
				}
				for aDone.Load() == a0 {
					time.Sleep(50 * time.Microsecond)
				}
				if _, err := qb.SubmitMany(ctx, make([]node, fan)); err != nil {
					b.Fatal(err)
				}
				for bDone.Load() < b0+fan {
					time.Sleep(50 * time.Microsecond)
				}
				if _, err := qc.Submit(ctx, node{}); err != nil {
					b.Fatal(err)
				}
			}
			total += (<-joinStarted).Sub(t0)
		}
		b.StopTimer()
		// Let the last acks and ends settle before the meter stops.
		time.Sleep(100 * time.Millisecond)
		cost, err := m.Stop(ctx)
		if err != nil {
			b.Fatal(err)
		}
		edges := float64(2 * fan * b.N)
		res := result{ms: float64(total.Milliseconds()) / float64(b.N), cmds: float64(cost.Commands()) / edges,
			cpu: float64(cost.CPU.Microseconds()) / edges}
		b.ReportMetric(res.ms, "join-start-ms")
		b.ReportMetric(res.cmds, "cmds/edge")
		b.ReportMetric(res.cpu, "redis-µs/edge")
		if b.N > 1 {
			b.Logf("per edge: %s", cost.Breakdown(int(edges)))
		}
		return res
	}
	var plain result
	b.Run("plain", func(b *testing.B) { plain = run(b, false) })
	b.Run("flow", func(b *testing.B) {
		fl := run(b, true)
		if plain.cmds > 0 {
			b.ReportMetric(fl.cmds/plain.cmds, "flow/plain-cmds")
			b.ReportMetric(fl.cpu/plain.cpu, "flow/plain-cpu")
		}
	})
}

// BenchmarkWaitLatency: one op is a tracked task that a Fleet waits for
// (Queue.Wait) while another Fleet reserves and acks it. ack-p50/p99-µs
// are from the ack's call (the other Fleet's) to Wait's return, both on
// this process's clock; after-reply-p50-µs from the ack's reply, which can
// come after the waiter woke (then it counts 0).
func BenchmarkWaitLatency(b *testing.B) {
	srv := costServer(b)
	costClean(b, srv)
	waiter, acker := costFleet(b, srv.URL()), costFleet(b, srv.URL())
	wq := fleet.NewQueue[node](waiter, "wl", fleet.QueueOptions{})
	aq := fleet.NewQueue[node](acker, "wl", fleet.QueueOptions{})
	ctx := context.Background()
	lat := make([]time.Duration, 0, b.N)
	after := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		id, err := wq.SubmitWith(ctx, node{}, fleet.SubmitOptions{Track: true})
		if err != nil {
			b.Fatal(err)
		}
		tasks, err := aq.Reserve(ctx, 1, time.Second)
		if err != nil || len(tasks) != 1 {
			b.Fatal(tasks, err)
		}
		var wg sync.WaitGroup
		var back time.Time
		ready := make(chan struct{})
		wg.Go(func() {
			close(ready)
			if _, err := wq.Wait(ctx, id); err != nil {
				b.Error(err)
			}
			back = time.Now()
		})
		<-ready
		time.Sleep(2 * time.Millisecond) // the waiter armed its invalidation
		t0 := time.Now()
		if err := tasks[0].Ack(ctx); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		wg.Wait()
		lat = append(lat, back.Sub(t0))
		after = append(after, max(back.Sub(t1), 0))
	}
	b.StopTimer()
	slices.Sort(lat)
	slices.Sort(after)
	pct := func(d []time.Duration, p float64) float64 {
		return float64(d[min(len(d)-1, int(float64(len(d))*p))].Microseconds())
	}
	b.ReportMetric(pct(lat, 0.5), "ack-p50-µs")
	b.ReportMetric(pct(lat, 0.99), "ack-p99-µs")
	b.ReportMetric(pct(after, 0.5), "after-reply-p50-µs")
}
