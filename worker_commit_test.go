package fleet_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/internal/redistest"
)

// TestWorkerGroupAcks: a batch worker whose slots finish tasks together
// group-commits their acks. 600 tasks through 16 slots whose handlers
// finish in waves: each task is handled and acked exactly once (OnTaskEnd
// says nil once per task), and no key of the queue but its registration
// is left.
func TestWorkerGroupAcks(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		runGroupAcks(t, e.F, "grouped", 640)
		k := e.qk("grouped")
		for _, key := range []string{k.Pending, k.Processing, k.Body, k.Lease, k.Scheduled, k.Dead, k.Dedup} {
			waitFor(t, 5*time.Second, func() bool { _, ok := e.get(t, key); return !ok }, "%s left: %v", key, later(func() any { return e.dump(t) }))
		}
	})
}

// TestWorkerGroupAcksCost: on a server of its own, the same run costs far
// fewer scripts than tasks: the waves' acks (and next tasks) share calls.
// Without the group commit each task costs at least one script.
func TestWorkerGroupAcksCost(t *testing.T) {
	t.Parallel()
	s, f := ownServer(t, fleet.Options{})
	before := ownCalls(t, s)
	const n = 1600
	runGroupAcks(t, f, "grouped", n)
	after := ownCalls(t, s)
	scripts := after["evalsha"] + after["eval"] - before["evalsha"] - before["eval"]
	t.Logf("%d tasks, %d scripts", n, scripts)
	if scripts >= n/2 {
		t.Fatalf("%d scripts for %d tasks; want under %d (acks grouped)", scripts, n, n/2)
	}
}

// runGroupAcks submits n tasks to queue name (n a multiple of 16), runs
// them through a worker of 16 slots whose handlers wait for each other in
// waves of 16, so that the slots finish together, and checks that each
// task ended once, without error.
func runGroupAcks(t *testing.T, f *fleet.Fleet, name string, n int) {
	t.Helper()
	const slots = 16
	q := fleet.NewQueue[job](f, name, fleet.QueueOptions{})
	items := make([]job, n)
	for i := range items {
		items[i] = jobN(i)
	}
	if _, err := q.SubmitMany(ctx(t), items); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	ended := map[string]int{}
	var failed []error
	wave := newWaves(slots)
	w := fleet.NewBatchWorker(f, fleet.WorkerOptions{Type: "grouper", ID: name, Slots: slots,
		OnTaskEnd: func(id string, err error) {
			mu.Lock()
			defer mu.Unlock()
			ended[id]++
			if err != nil {
				failed = append(failed, err)
			}
		}}, q,
		fleet.BatchFunc[wcfg, out, job](func(ctx context.Context, _ *fleet.Slot[wcfg, out], _ *fleet.Task[job]) error {
			wave.wait(ctx)
			return nil
		}))
	startWorker(t, w)
	waitFor(t, 60*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(ended) == n }, "tasks ended: %d of %d", later(func() any { mu.Lock(); defer mu.Unlock(); return len(ended) }), n)
	mu.Lock()
	defer mu.Unlock()
	for id, c := range ended {
		if c != 1 {
			t.Fatalf("task %s ended %d times", id, c)
		}
	}
	if len(failed) > 0 {
		t.Fatalf("%d tasks failed, the first: %v", len(failed), failed[0])
	}
	if st := w.Stats(); st.Done != int64(n) || st.Failed != 0 {
		t.Fatalf("stats %+v; want %d done", st, n)
	}
}

// waves lets handlers go in groups of size: each waits until size have
// arrived (or its ctx ends, or a second passed: a wave short of tasks).
type waves struct {
	mu   sync.Mutex
	size int
	n    int
	go_  chan struct{}
}

func newWaves(size int) *waves { return &waves{size: size, go_: make(chan struct{})} }

func (w *waves) wait(ctx context.Context) {
	w.mu.Lock()
	ch := w.go_
	w.n++
	if w.n == w.size {
		close(w.go_)
		w.n, w.go_ = 0, make(chan struct{})
	}
	w.mu.Unlock()
	select {
	case <-ch:
	case <-ctx.Done():
	case <-time.After(time.Second):
	}
}

// TestWorkerGroupAcksConnectionCut: the worker's connection is cut again
// and again while its slots' grouped calls are in flight. A call cut off
// has an outcome nobody knows: the tasks it took are handed back, and the
// acks it carried either applied or not (OnTaskEnd says ErrUnavailable);
// a task whose ack did not apply runs again after its lease. In the end
// every task was handled and acked, none is lost, and the queue's keys are
// gone.
func TestWorkerGroupAcksConnectionCut(t *testing.T) {
	t.Parallel()
	px := startProxied(t, fleet.Options{})
	p, direct, wf, e := px.P, px.Direct, px.Through, px.E
	k := e.qk("cut")
	opts := fleet.QueueOptions{Lease: time.Second, MaxAttempts: 1000}
	const n = 960
	ids := submitJobs(t, fleet.NewQueue[job](direct, "cut", opts), n)
	runSweeper(t, direct, 100*time.Millisecond)

	var mu sync.Mutex
	handled := map[string]int{}
	var odd []error
	done := 0
	wave := newWaves(16)
	w := fleet.NewBatchWorker(wf, fleet.WorkerOptions{Type: "cutter", ID: "w", Slots: 16,
		OnTaskEnd: func(id string, err error) {
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				done++
			case !errors.Is(err, fleet.ErrUnavailable) && !errors.Is(err, fleet.ErrLeaseLost):
				odd = append(odd, err)
			}
		}}, fleet.NewQueue[job](wf, "cut", opts),
		fleet.BatchFunc[wcfg, out, job](func(ctx context.Context, _ *fleet.Slot[wcfg, out], tk *fleet.Task[job]) error {
			mu.Lock()
			handled[tk.ID]++
			mu.Unlock()
			wave.wait(ctx)
			return nil
		}))
	startWorker(t, w)
	progress := func() int { mu.Lock(); defer mu.Unlock(); return done }
	for cut := 1; cut <= 4; cut++ {
		waitFor(t, 30*time.Second, func() bool { return progress() >= cut*n/6 }, "no progress before cut %d: %d done", cut, later(func() any { return progress() }))
		p.Cut()
	}
	waitQueueGone(t, e, k)
	mu.Lock()
	defer mu.Unlock()
	if len(odd) > 0 {
		t.Fatalf("%d tasks ended with an unexpected error, the first: %v", len(odd), odd[0])
	}
	assertAllHandled(t, e, k, ids, handled)
	again := 0
	for _, c := range handled {
		again += c - 1
	}
	t.Logf("%d tasks, %d acked with a reply, %d handled again after a cut", n, done, again)
}

// TestWorkerStopWhileGroupAckHeld: a worker is stopped, and its Fleet
// closed, while the replies to its grouped acks are held back (the
// commands reach the server; nothing comes back). Stop returns at its
// deadline plus StopGrace with ctx's error, without waiting for the held
// calls; Close then returns once those calls give up, with every slot
// returned (Stopped is closed). Nothing is lost: the held acks applied on
// the server or their tasks come back after their lease, and a second
// worker drains the queue; no task goes to the dead letters.
func TestWorkerStopWhileGroupAckHeld(t *testing.T) {
	t.Parallel()
	px := startProxied(t, fleet.Options{})
	p, direct, wf, e := px.P, px.Direct, px.Through, px.E
	k := e.qk("held")
	opts := fleet.QueueOptions{Lease: 2 * time.Second, MaxAttempts: 1000}
	const n = 400
	ids := submitJobs(t, fleet.NewQueue[job](direct, "held", opts), n)

	var mu sync.Mutex
	handled := map[string]int{}
	var odd []error
	returned, parked := 0, 0
	// Once gated, handlers wait at the gate: the test holds the replies
	// while they are sure to be mid-task, then opens it, so that their
	// acks go out into held calls.
	var gated atomic.Bool
	gate := make(chan struct{})
	handler := func(ctx context.Context, _ *fleet.Slot[wcfg, out], tk *fleet.Task[job]) error {
		mu.Lock()
		handled[tk.ID]++
		mu.Unlock()
		if gated.Load() {
			mu.Lock()
			parked++
			mu.Unlock()
			<-gate
		}
		time.Sleep(time.Millisecond)
		mu.Lock()
		returned++
		mu.Unlock()
		return nil
	}
	onEnd := func(id string, err error) {
		if err != nil && !errors.Is(err, fleet.ErrUnavailable) && !errors.Is(err, fleet.ErrLeaseLost) && !errors.Is(err, fleet.ErrClosed) {
			mu.Lock()
			odd = append(odd, err)
			mu.Unlock()
		}
	}
	w := fleet.NewBatchWorker(wf, fleet.WorkerOptions{Type: "held", ID: "w1", Slots: 8, StopGrace: 200 * time.Millisecond,
		OnTaskEnd: onEnd}, fleet.NewQueue[job](wf, "held", opts), fleet.BatchFunc[wcfg, out, job](handler))
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	count := func() (int, int) { mu.Lock(); defer mu.Unlock(); return len(handled), returned }
	waitFor(t, 30*time.Second, func() bool { h, _ := count(); return h >= n/4 }, "no progress")
	gated.Store(true)
	waitFor(t, 30*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return parked > 0 }, "no handler reached the gate")
	p.HoldReplies()
	_, atHold := count()
	gated.Store(false)
	close(gate)
	// A handler that returns after the hold has its ack in a held call (or
	// waiting for one).
	waitFor(t, 10*time.Second, func() bool { _, r := count(); return r > atHold }, "no handler returned after the hold")

	sctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	err := w.Stop(sctx)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Stop with its replies held: %v; want context.DeadlineExceeded", err)
	}
	select {
	case <-w.Stopped():
		t.Fatal("the worker stopped while its ack was held: the ack cannot have returned")
	default:
	}
	closeDone := make(chan error, 1)
	go func() { closeDone <- wf.Close() }()
	select {
	case err := <-closeDone:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("Close did not return while the replies were held")
	}
	select {
	case <-w.Stopped():
	default:
		t.Fatal("Close returned before the worker's slots did")
	}
	p.Thaw()

	// What the held calls did not end comes back after its lease.
	runSweeper(t, direct, 100*time.Millisecond)
	w2 := fleet.NewBatchWorker(direct, fleet.WorkerOptions{Type: "held", ID: "w2", Slots: 8, OnTaskEnd: onEnd},
		fleet.NewQueue[job](direct, "held", opts), fleet.BatchFunc[wcfg, out, job](handler))
	startWorker(t, w2)
	waitQueueGone(t, e, k)
	mu.Lock()
	defer mu.Unlock()
	if len(odd) > 0 {
		t.Fatalf("%d tasks ended with an unexpected error, the first: %v", len(odd), odd[0])
	}
	assertAllHandled(t, e, k, ids, handled)
}
