package fleet_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/internal/redistest"
)

// concurrency tracks how many handlers run at once, and the most since a
// mark.
type concurrency struct {
	now, peak atomic.Int64
	// limit, when above 0, is the most that may run at a handler's start;
	// over counts the starts above it.
	limit, over atomic.Int64
}

func (c *concurrency) enter() {
	n := c.now.Add(1)
	if l := c.limit.Load(); l > 0 && n > l {
		c.over.Add(1)
	}
	for p := c.peak.Load(); n > p && !c.peak.CompareAndSwap(p, n); p = c.peak.Load() {
	}
}

func (c *concurrency) leave() { c.now.Add(-1) }

// hwSlots reads the slots of a worker's :hardware.
func hwSlots(t *testing.T, e *env, k wkeys) int {
	s, _ := e.get(t, k.Hardware)
	var hw fleet.Hardware
	_ = json.Unmarshal([]byte(s), &hw)
	return hw.Slots
}

// A batch worker under load goes from 8 slots to 2: once the tasks that ran
// then have ended, never more than 2 run; it goes back to 8 and runs more
// than 2 again; every task is handled and acked exactly once, and the
// stats and :hardware report the count.
func TestWorkerSetSlotsUnderLoad(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		k := e.wk("resize", "w1")
		qk := e.qk("resize")
		q := fastQueue(e.F, "resize", 30*time.Second)
		var conc concurrency
		var mu sync.Mutex
		handled, acked := map[string]int{}, map[string]int{}
		var ackedN atomic.Int64
		// late counts the handler's starts on slots 2..7 once the shrink
		// returned: at most one each, a task that its slot let start before
		// the shrink and whose goroutine reached the handler after it (a
		// stalled goroutine on a loaded machine).
		var shrunk atomic.Bool
		late := map[int]int{}
		w := fleet.NewBatchWorker(e.F, fleet.WorkerOptions{Type: "resize", ID: "w1", Slots: 8, Heartbeat: 20 * time.Millisecond,
			OnTaskEnd: func(id string, err error) {
				if err == nil {
					mu.Lock()
					acked[id]++
					mu.Unlock()
					ackedN.Add(1)
				}
			}}, q,
			fleet.BatchFunc[wcfg, out, job](func(ctx context.Context, s *fleet.Slot[wcfg, out], t *fleet.Task[job]) error {
				conc.enter()
				defer conc.leave()
				mu.Lock()
				handled[t.ID]++
				if shrunk.Load() && s.Index() >= 2 {
					late[s.Index()]++
				}
				mu.Unlock()
				time.Sleep(10 * time.Millisecond) // the work
				return nil
			}))
		const n = 400
		ids := submitJobs(t, q, n)
		startWorker(t, w)
		waitFor(t, 20*time.Second, func() bool { return conc.peak.Load() == 8 }, "never 8 at once (peak %d)", later(func() any { return conc.peak.Load() }))

		if err := w.SetSlots(2); err != nil {
			t.Fatal(err)
		}
		shrunk.Store(true)
		if w.Slots() != 2 || w.Stats().Slots != 2 {
			t.Fatalf("after SetSlots(2): Slots %d, stats %d", w.Slots(), w.Stats().Slots)
		}
		// The tasks that ran at the shrink end; from then on no slot past
		// the second starts a task (but one it let start before), and 30
		// more tasks run on the two left.
		waitFor(t, 20*time.Second, func() bool { return conc.now.Load() <= 2 }, "still %d running", later(func() any { return conc.now.Load() }))
		base := ackedN.Load()
		waitFor(t, 20*time.Second, func() bool { return ackedN.Load() >= base+30 }, "only %d acked at 2 slots", later(func() any { return ackedN.Load() - base }))
		mu.Lock()
		for i, n := range late {
			if n > 1 {
				t.Errorf("slot %d started %d tasks after the shrink to 2", i, n)
			}
		}
		mu.Unlock()
		if t.Failed() {
			t.FailNow()
		}
		waitFor(t, 5*time.Second, func() bool {
			var st fleet.WorkerStats
			s, _ := e.get(t, k.Stats)
			_ = json.Unmarshal([]byte(s), &st)
			return st.Slots == 2 && hwSlots(t, e, k) == 2 && len(st.PerSlot) == 2
		}, "stats %v, hardware %v after the shrink", later(func() any { s, _ := e.get(t, k.Stats); return s }), later(func() any { s, _ := e.get(t, k.Hardware); return s }))

		conc.peak.Store(0)
		if err := w.SetSlots(8); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 20*time.Second, func() bool { return conc.peak.Load() > 2 }, "never more than 2 after the grow (peak %d)", later(func() any { return conc.peak.Load() }))
		waitFor(t, 5*time.Second, func() bool { return hwSlots(t, e, k) == 8 }, "hardware after the grow: %v", later(func() any { s, _ := e.get(t, k.Hardware); return s }))

		waitFor(t, 60*time.Second, func() bool { return ackedN.Load() == n }, "%d of %d acked", later(func() any { return ackedN.Load() }), n)
		waitQueueGone(t, e, qk)
		mu.Lock()
		defer mu.Unlock()
		assertAllHandled(t, e, qk, ids, handled)
		for _, id := range ids {
			if handled[id] != 1 || acked[id] != 1 {
				t.Fatalf("task %s handled %d times, acked %d times", id, handled[id], acked[id])
			}
		}
		if st := w.Stats(); st.Done != n || st.Failed != 0 || st.Slots != 8 {
			t.Fatalf("stats %+v", st)
		}
	})
}

// Tasks reserved for slots that a shrink takes away go back to the queue at
// once, not after their lease: a worker with 4 slots holding 4 tasks (one
// running, three waiting behind a gate of the test) shrinks to 1.
func TestWorkerShrinkPutsBackReserved(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		qk := e.qk("shrinkback")
		q := fastQueue(e.F, "shrinkback", time.Hour)
		var conc concurrency
		gate := make(chan struct{})
		var ackedN atomic.Int64
		w := fleet.NewBatchWorker(e.F, fleet.WorkerOptions{Type: "shrinkback", ID: "w1", Slots: 4,
			OnTaskEnd: func(id string, err error) {
				if err == nil {
					ackedN.Add(1)
				}
			}}, q,
			fleet.BatchFunc[wcfg, out, job](func(ctx context.Context, s *fleet.Slot[wcfg, out], t *fleet.Task[job]) error {
				conc.enter()
				defer conc.leave()
				select {
				case <-gate:
				case <-ctx.Done():
					return ctx.Err()
				}
				return nil
			}))
		submitJobs(t, q, 8)
		startWorker(t, w)
		waitFor(t, 10*time.Second, func() bool { return conc.now.Load() == 4 }, "4 never ran (%d)", later(func() any { return conc.now.Load() }))
		if err := w.SetSlots(1); err != nil {
			t.Fatal(err)
		}
		conc.limit.Store(1)
		close(gate)
		// The 4 running end; then one at a time, every task acked once. The
		// hour-long lease would hold anything stranded.
		waitFor(t, 20*time.Second, func() bool { return ackedN.Load() == 8 }, "%d of 8 acked", later(func() any { return ackedN.Load() }))
		waitQueueGone(t, e, qk)
		if o := conc.over.Load(); o != 0 {
			t.Fatalf("%d tasks started while 1 or more ran at 1 slot", o)
		}
		if st := w.Stats(); st.Done != 8 || st.Slots != 1 || len(st.PerSlot) != 1 {
			t.Fatalf("stats %+v", st)
		}
	})
}

// A pushed config with a slots member resizes the worker; bad values are
// refused by UpdateConfig and PushConfig (nothing written), and by the
// worker for a config written behind fleet's back (last_error, ERROR,
// OnConfig, the count kept). The catalog's schema does not judge it.
func TestWorkerSlotsFromConfig(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		k := e.wk("cfgslots", "w1")
		q := fastQueue(e.F, "cfgslots", 30*time.Second)
		var conc concurrency
		gate := make(chan struct{})
		refused := make(chan error, 10)
		w := fleet.NewBatchWorker(e.F, fleet.WorkerOptions{Type: "cfgslots", ID: "w1", Slots: 1, Heartbeat: 20 * time.Millisecond,
			OnConfig: func(gen int64, err error) {
				if err != nil {
					refused <- err
				}
			}}, q,
			fleet.BatchFunc[wcfg, out, job](func(ctx context.Context, s *fleet.Slot[wcfg, out], t *fleet.Task[job]) error {
				conc.enter()
				defer conc.leave()
				select {
				case <-gate:
				case <-ctx.Done():
				}
				return nil
			}))
		if err := e.F.PublishCatalog(c, w.Catalog()); err != nil {
			t.Fatal(err)
		}
		startWorker(t, w)
		if gen, err := e.F.UpdateConfig(c, "cfgslots", "w1", json.RawMessage(`{"slots":3,"rate":5}`)); err != nil || gen != 1 {
			t.Fatalf("UpdateConfig slots 3 = %d, %v", gen, err)
		}
		waitFor(t, 5*time.Second, func() bool { return w.Slots() == 3 }, "slots %d after gen 1", later(func() any { return w.Slots() }))
		submitJobs(t, q, 3)
		waitFor(t, 10*time.Second, func() bool { return conc.now.Load() == 3 }, "3 never ran at once (%d)", later(func() any { return conc.now.Load() }))
		close(gate)
		waitFor(t, 5*time.Second, func() bool { return hwSlots(t, e, k) == 3 }, "hardware %v", later(func() any { s, _ := e.get(t, k.Hardware); return s }))

		for _, bad := range []string{`{"slots":0}`, `{"slots":-2}`, `{"slots":2.5}`, `{"slots":"4"}`, `{"slots":70000}`} {
			if gen, err := e.F.UpdateConfig(c, "cfgslots", "w1", json.RawMessage(bad)); !errors.Is(err, fleet.ErrInvalidConfig) || gen != 0 || !strings.Contains(err.Error(), "slots") {
				t.Fatalf("UpdateConfig %s = %d, %v; want ErrInvalidConfig naming slots", bad, gen, err)
			}
			if err := e.F.PushConfig(c, "cfgslots", "w1", json.RawMessage(bad), 50); !errors.Is(err, fleet.ErrInvalidConfig) || !strings.Contains(err.Error(), "slots") {
				t.Fatalf("PushConfig %s = %v; want ErrInvalidConfig naming slots", bad, err)
			}
		}
		if g, _ := e.get(t, k.Gen); g != "1" {
			t.Fatalf("gen after refused configs = %q", g)
		}
		if cfg, _ := e.get(t, k.Config); cfg != `{"rate":5,"slots":3}` {
			t.Fatalf("config after refused configs = %s", cfg)
		}
		// A whole config pushed with gen 7 resizes too.
		if err := e.F.PushConfig(c, "cfgslots", "w1", map[string]any{"slots": 2}, 7); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 5*time.Second, func() bool { return w.Slots() == 2 && w.Gen() == 7 }, "slots %d at gen %d", later(func() any { return w.Slots() }), later(func() any { return w.Gen() }))

		// Written by another client: the worker refuses it and keeps 2.
		e.do(t, e.Raw.B().Set().Key(k.Config).Value(`{"slots":0}`).Build())
		e.do(t, e.Raw.B().Set().Key(k.Gen).Value("8").Build())
		select {
		case err := <-refused:
			if !errors.Is(err, fleet.ErrInvalidConfig) || !strings.Contains(err.Error(), "slots") {
				t.Fatalf("OnConfig error %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("gen 8 never refused")
		}
		waitFor(t, 5*time.Second, func() bool {
			st := e.hgetall(t, k.State)
			return st["state"] == "ERROR" && strings.Contains(st["last_error"], "slots") && st["applied_gen"] == "7"
		}, "state %v", later(func() any { return e.hgetall(t, k.State) }))
		if w.Slots() != 2 || w.Gen() != 7 {
			t.Fatalf("after the refused gen 8: slots %d, gen %d", w.Slots(), w.Gen())
		}
	})
}

// SetSlots refuses a count out of range, and a loop or chunk worker, changing
// nothing; before Start it sets the count Start runs with.
func TestWorkerSetSlotsBadInput(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		q := fastQueue(e.F, "badslots", 30*time.Second)
		w := fleet.NewBatchWorker(e.F, fleet.WorkerOptions{Type: "badslots", ID: "w1", Slots: 2}, q,
			fleet.BatchFunc[wcfg, out, job](func(ctx context.Context, s *fleet.Slot[wcfg, out], t *fleet.Task[job]) error { return nil }))
		for _, n := range []int{0, -1, fleet.MaxSlots + 1} {
			if err := w.SetSlots(n); !errors.Is(err, fleet.ErrInvalidArgument) || !strings.Contains(err.Error(), "slots") {
				t.Fatalf("SetSlots(%d) = %v; want ErrInvalidArgument naming slots", n, err)
			}
		}
		if w.Slots() != 2 {
			t.Fatalf("Slots after refused SetSlots = %d", w.Slots())
		}
		if err := w.SetSlots(3); err != nil {
			t.Fatal(err)
		}
		startWorker(t, w)
		k := e.wk("badslots", "w1")
		if got := hwSlots(t, e, k); got != 3 {
			t.Fatalf("hardware slots %d, want 3", got)
		}
		if st := w.Stats(); st.Slots != 3 || len(st.PerSlot) != 3 {
			t.Fatalf("stats %+v", st)
		}

		lw := fleet.NewLoopWorker(e.F, fleet.WorkerOptions{Type: "badslots", ID: "loop1", Slots: 2}, idleLoop())
		if err := lw.SetSlots(3); !errors.Is(err, fleet.ErrInvalidArgument) || lw.Slots() != 2 {
			t.Fatalf("loop SetSlots = %v, slots %d", err, lw.Slots())
		}
		cw := fleet.NewChunkWorker(e.F, fleet.WorkerOptions{Type: "badslots", ID: "chunk1", Slots: 2}, q, fleet.ChunkOptions{MinSize: 1, MaxSize: 10},
			fleet.ChunkFunc[wcfg, out, job](func(ctx context.Context, s *fleet.Slot[wcfg, out], c *fleet.Chunk[job]) error { return nil }))
		if err := cw.SetSlots(3); !errors.Is(err, fleet.ErrInvalidArgument) || !strings.Contains(err.Error(), "chunk worker") || cw.Slots() != 2 {
			t.Fatalf("chunk SetSlots = %v, slots %d", err, cw.Slots())
		}
		bad := fleet.NewBatchWorker[wcfg, out, job](e.F, fleet.WorkerOptions{Type: "bad type!"}, q, nil)
		if err := bad.SetSlots(2); !errors.Is(err, fleet.ErrInvalidName) && !errors.Is(err, fleet.ErrInvalidArgument) {
			t.Fatalf("SetSlots on a worker with bad options = %v", err)
		}
	})
}

// A task a slot took with its ack just before a shrink does not start, and
// goes back to the head of its queue at once (the lease is an hour): the
// shrink comes from OnTaskEnd, which runs after the ack took the next task
// and before the slot starts it.
func TestWorkerShrinkPutsBackTaken(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		qk := e.qk("shrinktaken")
		q := fastQueue(e.F, "shrinktaken", time.Hour)
		gate := make(chan struct{})
		var once sync.Once
		var w *fleet.Worker
		var mu sync.Mutex
		handled, acked := map[string]int{}, map[string]int{}
		w = fleet.NewBatchWorker(e.F, fleet.WorkerOptions{Type: "shrinktaken", ID: "w1", Slots: 2,
			OnTaskEnd: func(id string, err error) {
				mu.Lock()
				if err == nil {
					acked[id]++
				}
				mu.Unlock()
				once.Do(func() {
					if err := w.SetSlots(1); err != nil {
						t.Error(err)
					}
				})
			}}, q,
			fleet.BatchFunc[wcfg, out, job](func(ctx context.Context, s *fleet.Slot[wcfg, out], t *fleet.Task[job]) error {
				mu.Lock()
				handled[t.ID]++
				mu.Unlock()
				if t.Payload.N == 0 {
					select {
					case <-gate:
					case <-ctx.Done():
						return ctx.Err()
					}
				}
				return nil
			}))
		ids := submitJobs(t, q, 6)
		startWorker(t, w)
		// Job 0 runs behind the gate, job 1 was acked; the rest wait in
		// the queue, none held by the worker.
		waitFor(t, 10*time.Second, func() bool {
			return len(e.lrange(t, qk.Pending)) == 4 && len(e.zscores(t, qk.Processing)) == 1
		}, "queue %v", later(func() any { return e.dump(t) }))
		mu.Lock()
		if len(handled) != 2 || handled[ids[0]] != 1 || handled[ids[1]] != 1 {
			t.Errorf("handled before the gate opened: %v", handled)
		}
		mu.Unlock()
		close(gate)
		waitQueueGone(t, e, qk)
		waitFor(t, 10*time.Second, func() bool { return w.Stats().Done == 6 }, "done %d", later(func() any { return w.Stats().Done }))
		mu.Lock()
		defer mu.Unlock()
		for _, id := range ids {
			if handled[id] != 1 || acked[id] != 1 {
				t.Fatalf("task %s handled %d times, acked %d times", id, handled[id], acked[id])
			}
		}
	})
}
