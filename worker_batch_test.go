package fleet_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/internal/redistest"
)

// TestWorkerBatchOutcomes: nil acks, an error nacks, a panic is recovered,
// nacked and recorded (state ERROR), and a later success brings the state
// back.
func TestWorkerBatchOutcomes(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		k := e.wk("batchy", "w1")
		qk := e.qk("batchy")
		q := fleet.NewQueue[job](e.F, "batchy", fleet.QueueOptions{BackoffBase: time.Hour, BackoffMax: time.Hour})
		var ran atomic.Int64
		w := fleet.NewBatchWorker(e.F, fleet.WorkerOptions{Type: "batchy", ID: "w1", Slots: 2, Heartbeat: 50 * time.Millisecond}, q,
			fleet.BatchFunc[wcfg, out, job](func(ctx context.Context, s *fleet.Slot[wcfg, out], t *fleet.Task[job]) error {
				ran.Add(1)
				s.Count("handled", 1)
				switch t.Payload.N {
				case 1:
					return errors.New("boom")
				case 2:
					panic("kaboom")
				case 3:
					return errors.Join(errors.New("bad forever"), fleet.ErrPermanent)
				}
				return nil
			}))
		startWorker(t, w)
		c := ctx(t)
		if _, err := q.Submit(c, job{URL: "https://example.com/ok", N: 0}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 5*time.Second, func() bool { return w.Stats().Done == 1 }, "ok task not done")
		if _, err := q.Submit(c, job{URL: "https://example.com/err", N: 1}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 5*time.Second, func() bool { return w.Stats().Failed == 1 }, "err task not failed")
		// The counter moves before the state is written: wait for the state.
		waitFor(t, 5*time.Second, func() bool {
			st := e.hgetall(t, k.State)
			return st["state"] == "ERROR" && strings.Contains(st["last_error"], "boom")
		}, "state after error %v", e.hgetall(t, k.State))
		if sched := e.zscores(t, qk.Scheduled); len(sched) != 1 || !strings.Contains(sched[0].Member, `"attempts":1`) || !strings.Contains(sched[0].Member, `"error":"boom"`) {
			t.Fatalf("scheduled %v", sched)
		}
		if _, err := q.Submit(c, job{URL: "https://example.com/panic", N: 2}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 5*time.Second, func() bool { return w.Stats().Failed == 2 }, "panic task not failed")
		waitFor(t, 5*time.Second, func() bool {
			st := e.hgetall(t, k.State)
			return st["state"] == "ERROR" && strings.Contains(st["last_error"], "panic: kaboom")
		}, "state after panic %v", e.hgetall(t, k.State))
		if sched := e.zscores(t, qk.Scheduled); len(sched) != 2 {
			t.Fatalf("scheduled after panic %v", sched)
		}
		if _, err := q.Submit(c, job{URL: "https://example.com/perm", N: 3}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 5*time.Second, func() bool { return len(e.lrange(t, qk.Dead)) == 1 }, "permanent failure not buried")
		if _, err := q.Submit(c, job{URL: "https://example.com/ok2", N: 0}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 5*time.Second, func() bool { return w.Stats().Done == 2 }, "second ok not done")
		waitFor(t, 5*time.Second, func() bool { return e.hgetall(t, k.State)["state"] == "IDLE" }, "state not back from ERROR")
		if st := e.hgetall(t, k.State); !strings.Contains(st["last_error"], "bad forever") {
			t.Fatalf("last_error is not kept: %v", st)
		}
		if s := w.Stats(); s.Done != 2 || s.Failed != 3 || ran.Load() != 5 {
			t.Fatalf("stats %+v ran %d", s, ran.Load())
		}
		if n := len(e.hgetall(t, qk.Body)); n != 0 {
			t.Fatalf("%d tasks still in processing", n)
		}
	})
}

// TestWorkerLeaseLost: when the lease is taken away, the handler's ctx is
// cancelled with ErrLeaseLost as the cause.
func TestWorkerLeaseLost(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		qk := e.qk("leasy")
		q := fleet.NewQueue[job](e.F, "leasy", fleet.QueueOptions{Lease: time.Second})
		cause := make(chan error, 1)
		started := make(chan struct{})
		w := fleet.NewBatchWorker(e.F, fleet.WorkerOptions{Type: "leasy", ID: "w1", Slots: 1, LeaseExtend: 50 * time.Millisecond}, q,
			fleet.BatchFunc[wcfg, out, job](func(ctx context.Context, s *fleet.Slot[wcfg, out], t *fleet.Task[job]) error {
				close(started)
				select {
				case <-ctx.Done():
					cause <- context.Cause(ctx)
				case <-time.After(10 * time.Second):
					cause <- nil
				}
				return ctx.Err()
			}))
		startWorker(t, w)
		id, err := q.Submit(ctx(t), job{URL: "https://example.com/x", N: 1})
		if err != nil {
			t.Fatal(err)
		}
		<-started
		// Past 2 leases the extender has kept it alive.
		time.Sleep(2100 * time.Millisecond)
		select {
		case c := <-cause:
			t.Fatalf("cancelled while the lease held: %v", c)
		default:
		}
		// Another owner takes the reservation: the lease token changes.
		e.do(t, e.Raw.B().Hset().Key(qk.Lease).FieldValue().FieldValue(id, "someone-else").Build())
		select {
		case c := <-cause:
			if !errors.Is(c, fleet.ErrLeaseLost) {
				t.Fatalf("cause %v", c)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("ctx not cancelled after the lease was lost")
		}
		waitFor(t, 5*time.Second, func() bool { return w.Stats().Failed == 1 }, "lease loss not counted")
	})
}

// TestWorkerGracefulStop: in-flight tasks finish within Stop's deadline;
// past it they are cancelled and re-queued without counting an attempt.
func TestWorkerGracefulStop(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		qk := e.qk("stoppy")
		q := fleet.NewQueue[job](e.F, "stoppy", fleet.QueueOptions{})
		var running atomic.Int64
		w := fleet.NewBatchWorker(e.F, fleet.WorkerOptions{Type: "stoppy", ID: "w1", Slots: 2}, q,
			fleet.BatchFunc[wcfg, out, job](func(ctx context.Context, s *fleet.Slot[wcfg, out], t *fleet.Task[job]) error {
				running.Add(1)
				select {
				case <-time.After(time.Duration(t.Payload.N) * time.Millisecond):
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			}))
		if err := w.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		c := ctx(t)
		// Two short tasks: Stop waits for them.
		if _, err := q.SubmitMany(c, []job{{URL: "https://example.com/a", N: 300}, {URL: "https://example.com/b", N: 300}}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 5*time.Second, func() bool { return running.Load() == 2 }, "tasks not started")
		sc, cancel := context.WithTimeout(c, 5*time.Second)
		if err := w.Stop(sc); err != nil {
			t.Fatalf("Stop = %v", err)
		}
		cancel()
		if s := w.Stats(); s.Done != 2 || s.Failed != 0 {
			t.Fatalf("stats %+v", s)
		}
		// No new tasks after Stop.
		if _, err := q.Submit(c, job{URL: "https://example.com/late", N: 1}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
		if running.Load() != 2 {
			t.Fatal("a stopped worker took a task")
		}
		late, err := q.Reserve(c, 1, 0) // clear the late one
		if err != nil || len(late) != 1 || late[0].Ack(c) != nil {
			t.Fatalf("late task: %v %v", late, err)
		}

		// Long tasks past the deadline: re-queued, attempts unchanged.
		running.Store(0)
		w2 := fleet.NewBatchWorker(e.F, fleet.WorkerOptions{Type: "stoppy", ID: "w2", Slots: 2}, q,
			fleet.BatchFunc[wcfg, out, job](func(ctx context.Context, s *fleet.Slot[wcfg, out], t *fleet.Task[job]) error {
				running.Add(1)
				<-ctx.Done()
				return ctx.Err()
			}))
		if err := w2.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		ids, err := q.SubmitMany(c, []job{{URL: "https://example.com/c", N: 1}, {URL: "https://example.com/d", N: 2}})
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, 5*time.Second, func() bool { return running.Load() == 2 }, "long tasks not started")
		sc, cancel = context.WithTimeout(c, 200*time.Millisecond)
		defer cancel()
		if err := w2.Stop(sc); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Stop past deadline = %v", err)
		}
		<-w2.Stopped()
		pending := e.lrange(t, qk.Pending)
		if len(pending) != 2 {
			t.Fatalf("pending %v", pending)
		}
		for _, id := range ids {
			found := false
			for _, b := range pending {
				if strings.Contains(b, id) && strings.Contains(b, `"attempts":0`) && !strings.Contains(b, "error") {
					found = true
				}
			}
			if !found {
				t.Fatalf("task %s not re-queued uncounted: %v", id, pending)
			}
		}
		if n := len(e.hgetall(t, qk.Body)); n != 0 {
			t.Fatalf("%d tasks still in processing", n)
		}
		if s := w2.Stats(); s.Done != 0 || s.Failed != 0 {
			t.Fatalf("interrupted tasks counted: %+v", s)
		}
		if st := e.hgetall(t, e.wk("stoppy", "w2").State); st["state"] != "IDLE" {
			t.Fatalf("final state %v", st)
		}
	})
}

// TestWorkerLoopEmits: each slot emits; the stream holds the outputs and
// the emit events reach a subscriber.
func TestWorkerLoopEmits(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		sub, err := fleet.Subscribe[fleet.StreamEntry[out]](c, e.F, "emitter.emit", fleet.SubscribeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		w := fleet.NewLoopWorker(e.F, fleet.WorkerOptions{Type: "emitter", ID: "w1", Slots: 3},
			fleet.LoopFunc[wcfg, out](func(ctx context.Context, s *fleet.Slot[wcfg, out]) error {
				for i := range 5 {
					if _, err := s.Emit(ctx, out{Slot: s.Index(), N: i}); err != nil {
						return err
					}
				}
				<-ctx.Done()
				return nil
			}))
		startWorker(t, w)
		st := fleet.NewStream[out](e.F, "emitter", fleet.StreamOptions{})
		waitFor(t, 5*time.Second, func() bool { n, _ := st.Len(c); return n == 15 }, "stream not at 15")
		got := map[out]bool{}
		for len(got) < 15 {
			select {
			case m := <-sub.C():
				got[m.Data] = true
			case <-time.After(5 * time.Second):
				t.Fatalf("events: %d of 15", len(got))
			}
		}
		entries, err := st.Pop(c, 100)
		if err != nil || len(entries) != 15 {
			t.Fatalf("Pop = %d, %v", len(entries), err)
		}
		if s := w.Stats(); s.Emitted != 15 || s.State != fleet.StateRunning {
			t.Fatalf("stats %+v", s)
		}
	})
}

// TestWorkerLoopError: a loop that fails is recorded and run again.
func TestWorkerLoopError(t *testing.T) {
	e := open(t, redistest.Targets(t)[0])
	var runs atomic.Int64
	w := fleet.NewLoopWorker(e.F, fleet.WorkerOptions{Type: "flaky", ID: "w1", Slots: 1},
		fleet.LoopFunc[wcfg, out](func(ctx context.Context, s *fleet.Slot[wcfg, out]) error {
			if runs.Add(1) == 1 {
				panic("first run")
			}
			<-ctx.Done()
			return nil
		}))
	startWorker(t, w)
	waitFor(t, 5*time.Second, func() bool { return runs.Load() == 2 }, "loop not run again")
	if st := e.hgetall(t, e.wk("flaky", "w1").State); st["state"] != "ERROR" || !strings.Contains(st["last_error"], "panic: first run") {
		t.Fatalf("state %v", st)
	}
}
