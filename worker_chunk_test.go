package fleet_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/internal/redistest"
)

// chunkLog records what a chunk worker's handler and OnTaskEnd saw.
type chunkLog struct {
	mu      sync.Mutex
	sizes   []int
	handled map[string]int
	ends    map[string]error
}

func newChunkLog() *chunkLog {
	return &chunkLog{handled: map[string]int{}, ends: map[string]error{}}
}

func (l *chunkLog) chunk(c *fleet.Chunk[job]) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sizes = append(l.sizes, len(c.Tasks))
	for _, t := range c.Tasks {
		l.handled[t.ID]++
	}
}

func (l *chunkLog) end(id string, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ends[id] = err
}

func (l *chunkLog) ended() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.ends)
}

// TestChunkWorkerSizes: 25 tasks in the queue before the start, chunks of
// 5 to 10 with a MaxWait of an hour: every chunk holds 5 to 10 tasks and
// every task is handled once and acked, the queue's keys gone. Then 3
// tasks on a worker of MinSize 5 and a MaxWait of 300 ms: one chunk of 3,
// handed over no sooner than MaxWait after their submit.
func TestChunkWorkerSizes(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		k := e.qk("chunky")
		q := fleet.NewQueue[job](e.F, "chunky", fleet.QueueOptions{})
		ids := submitJobs(t, q, 25)
		l := newChunkLog()
		w := fleet.NewChunkWorker(e.F, fleet.WorkerOptions{Type: "chunky", ID: "w1", Slots: 1, OnTaskEnd: l.end}, q,
			fleet.ChunkOptions{MinSize: 5, MaxSize: 10, MaxWait: time.Hour},
			fleet.ChunkFunc[wcfg, out, job](func(ctx context.Context, s *fleet.Slot[wcfg, out], c *fleet.Chunk[job]) error {
				l.chunk(c)
				return nil
			}))
		startWorker(t, w)
		waitFor(t, 10*time.Second, func() bool { return l.ended() == 25 }, "ended %d of 25", later(func() any { return l.ended() }))
		waitQueueGone(t, e, k)
		l.mu.Lock()
		total := 0
		for _, n := range l.sizes {
			if n < 5 || n > 10 {
				t.Errorf("a chunk of %d tasks; want 5 to 10 (all: %v)", n, l.sizes)
			}
			total += n
		}
		for _, id := range ids {
			if l.handled[id] != 1 || l.ends[id] != nil {
				t.Errorf("task %s handled %d times, ended with %v", id, l.handled[id], l.ends[id])
			}
		}
		l.mu.Unlock()
		if total != 25 {
			t.Fatalf("chunks %v hold %d tasks; want 25", l.sizes, total)
		}
		if s := w.Stats(); s.Done != 25 || s.Failed != 0 {
			t.Fatalf("stats %+v", s)
		}

		// MaxWait: fewer than MinSize go once it passed.
		q2 := fleet.NewQueue[job](e.F, "waity", fleet.QueueOptions{})
		l2 := newChunkLog()
		got := make(chan time.Time, 4)
		w2 := fleet.NewChunkWorker(e.F, fleet.WorkerOptions{Type: "waity", ID: "w1", Slots: 2, OnTaskEnd: l2.end}, q2,
			fleet.ChunkOptions{MinSize: 5, MaxSize: 10, MaxWait: 300 * time.Millisecond},
			fleet.ChunkFunc[wcfg, out, job](func(ctx context.Context, s *fleet.Slot[wcfg, out], c *fleet.Chunk[job]) error {
				l2.chunk(c)
				got <- time.Now()
				return nil
			}))
		startWorker(t, w2)
		sent := time.Now()
		submitJobs(t, q2, 3)
		at := <-got
		waitFor(t, 10*time.Second, func() bool { return l2.ended() == 3 }, "ended %d of 3", later(func() any { return l2.ended() }))
		if d := at.Sub(sent); d < 300*time.Millisecond {
			t.Fatalf("a chunk of 3 went after %v; want MaxWait (300ms) at least", d)
		}
		l2.mu.Lock()
		defer l2.mu.Unlock()
		if !slices.Equal(l2.sizes, []int{3}) {
			t.Fatalf("chunks %v; want one of 3", l2.sizes)
		}
		waitQueueGone(t, e, e.qk("waity"))
	})
}

// TestChunkWorkerMarks: one chunk of 6 whose handler acks task 0, fails
// task 1 (retried), fails task 2 with ErrPermanent (dead letter), and
// returns an error: tasks 3 to 5, unmarked, are retried with it. Redis
// holds exactly that: four tasks in :scheduled with their attempts and
// errors, one dead letter, none in flight, task 0 gone. Marks out of
// range, with a nil error, or after the handler returned are refused.
func TestChunkWorkerMarks(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		k := e.qk("marky")
		q := fleet.NewQueue[job](e.F, "marky", fleet.QueueOptions{BackoffBase: time.Hour, BackoffMax: time.Hour})
		ids := submitJobs(t, q, 6)
		l := newChunkLog()
		var kept *fleet.Chunk[job]
		var bad []error
		w := fleet.NewChunkWorker(e.F, fleet.WorkerOptions{Type: "marky", ID: "w1", Slots: 1, OnTaskEnd: l.end}, q,
			fleet.ChunkOptions{MinSize: 6, MaxSize: 6, MaxWait: time.Hour},
			fleet.ChunkFunc[wcfg, out, job](func(ctx context.Context, s *fleet.Slot[wcfg, out], c *fleet.Chunk[job]) error {
				l.chunk(c)
				kept = c
				bad = append(bad, c.Ack(6), c.Ack(-1), c.Fail(0, nil))
				pos := map[int]int{}
				for i, t := range c.Tasks {
					pos[t.Payload.N] = i
				}
				_ = c.Fail(pos[0], errors.New("replaced"))
				_ = c.Ack(pos[0]) // a later mark replaces the first
				_ = c.Fail(pos[1], errors.New("boom"))
				_ = c.Fail(pos[2], fmt.Errorf("bad forever: %w", fleet.ErrPermanent))
				return errors.New("chunk failed")
			}))
		startWorker(t, w)
		waitFor(t, 10*time.Second, func() bool { return l.ended() == 6 }, "ended %d of 6", later(func() any { return l.ended() }))
		for _, err := range bad {
			if !errors.Is(err, fleet.ErrInvalidArgument) {
				t.Errorf("a bad mark said %v; want ErrInvalidArgument", err)
			}
		}
		if err := kept.Ack(0); !errors.Is(err, fleet.ErrInvalidArgument) {
			t.Errorf("a mark after the handler returned said %v; want ErrInvalidArgument", err)
		}
		l.mu.Lock()
		if l.ends[ids[0]] != nil {
			t.Errorf("task 0 ended with %v; want an ack", l.ends[ids[0]])
		}
		for i, want := range map[int]string{1: "boom", 2: "bad forever", 3: "chunk failed", 4: "chunk failed", 5: "chunk failed"} {
			if err := l.ends[ids[i]]; err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("task %d ended with %v; want %q", i, err, want)
			}
		}
		l.mu.Unlock()
		sched := e.zscores(t, k.Scheduled)
		if len(sched) != 4 {
			t.Fatalf(":scheduled holds %d; want 4: %v", len(sched), sched)
		}
		byID := map[string]map[string]any{}
		for _, z := range sched {
			m := decodeMap(t, z.Member)
			byID[m["id"].(string)] = m
		}
		for i, want := range map[int]string{1: "boom", 3: "chunk failed", 4: "chunk failed", 5: "chunk failed"} {
			m := byID[ids[i]]
			if m == nil || m["attempts"] != float64(1) || m["error"] != want {
				t.Errorf("task %d in :scheduled: %v; want attempts 1, error %q", i, m, want)
			}
		}
		dead := e.lrange(t, k.Dead)
		if len(dead) != 1 || !strings.Contains(dead[0], ids[2]) || !strings.Contains(dead[0], "bad forever") {
			t.Fatalf(":dead = %v; want task 2's", dead)
		}
		if n := len(e.hgetall(t, k.Body)); n != 0 || len(e.zscores(t, k.Processing)) != 0 {
			t.Fatalf("%d tasks still in flight: %v", n, e.dump(t))
		}
		if s := w.Stats(); s.Done != 1 || s.Failed != 5 {
			t.Fatalf("stats %+v; want 1 done, 5 failed", s)
		}
	})
}

// TestChunkWorkerManyFleets: 2,000 tasks through chunk workers on three
// Fleets (two slots each, chunks of 20 to 50, MaxWait 20 ms): every task
// is handled and acked exactly once, none is lost, and the queue's keys
// are gone.
func TestChunkWorkerManyFleets(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		k := e.qk("many")
		const n = 2000
		fs := []*fleet.Fleet{e.F, openOn(t, tg, e.Prefix), openOn(t, tg, e.Prefix)}
		l := newChunkLog()
		var odd []error
		for i, f := range fs {
			q := fleet.NewQueue[job](f, "many", fleet.QueueOptions{})
			w := fleet.NewChunkWorker(f, fleet.WorkerOptions{Type: "many", ID: fmt.Sprint("w", i), Slots: 2,
				OnTaskEnd: func(id string, err error) {
					l.mu.Lock()
					defer l.mu.Unlock()
					if _, again := l.ends[id]; again || err != nil {
						odd = append(odd, fmt.Errorf("task %s: %v (ended before: %v)", id, err, again))
					}
					l.ends[id] = err
				}}, q,
				fleet.ChunkOptions{MinSize: 20, MaxSize: 50, MaxWait: 20 * time.Millisecond},
				fleet.ChunkFunc[wcfg, out, job](func(ctx context.Context, s *fleet.Slot[wcfg, out], c *fleet.Chunk[job]) error {
					l.chunk(c)
					return nil
				}))
			startWorker(t, w)
		}
		items := make([]job, n)
		for i := range items {
			items[i] = jobN(i)
		}
		var ids []string
		q := fleet.NewQueue[job](e.F, "many", fleet.QueueOptions{})
		for part := range slices.Chunk(items, 250) {
			got, err := q.SubmitMany(ctx(t), part)
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, got...)
		}
		waitFor(t, 60*time.Second, func() bool { return l.ended() == n }, "ended %d of %d", later(func() any { return l.ended() }), n)
		waitQueueGone(t, e, k)
		l.mu.Lock()
		defer l.mu.Unlock()
		if len(odd) > 0 {
			t.Fatalf("%d odd ends, the first: %v", len(odd), odd[0])
		}
		for _, id := range ids {
			if l.handled[id] != 1 {
				t.Fatalf("task %s handled %d times", id, l.handled[id])
			}
		}
		if len(l.handled) != n {
			t.Fatalf("%d tasks handled; want %d", len(l.handled), n)
		}
		if dead := e.lrange(t, k.Dead); len(dead) > 0 {
			t.Fatalf("%d dead letters", len(dead))
		}
		t.Logf("%d chunks", len(l.sizes))
	})
}

// TestChunkWorkerGroups: tasks in groups a and b with a limit of 2 per
// group and GlobalConcurrency 3: no more than 2 of a group, nor 3 in all,
// are ever in the handlers at once, though chunks may hold 10; every
// task is acked (a few after a retry), and every permit comes back: the
// queue's running set and the groups' counters are gone.
func TestChunkWorkerGroups(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		k := e.qk("grouped")
		q := fleet.NewQueue[job](e.F, "grouped", fleet.QueueOptions{GlobalConcurrency: 3,
			Groups: fleet.GroupLimits{Concurrency: 2}, BackoffBase: 10 * time.Millisecond, BackoffMax: 10 * time.Millisecond})
		const n = 120
		var ids []string
		for i := range n {
			id, err := q.SubmitWith(ctx(t), jobN(i), fleet.SubmitOptions{Group: []string{"a", "b"}[i%2]})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		var mu sync.Mutex
		now := map[string]int{}
		most := map[string]int{}
		tries := map[string]int{}
		l := newChunkLog()
		w := fleet.NewChunkWorker(e.F, fleet.WorkerOptions{Type: "grouped", ID: "w1", Slots: 3, OnTaskEnd: func(id string, err error) {
			if err == nil {
				l.end(id, nil)
			}
		}}, q,
			fleet.ChunkOptions{MinSize: 1, MaxSize: 10},
			fleet.ChunkFunc[wcfg, out, job](func(ctx context.Context, s *fleet.Slot[wcfg, out], c *fleet.Chunk[job]) error {
				mu.Lock()
				for _, t := range c.Tasks {
					now[t.Group()]++
					now[""]++
					most[t.Group()] = max(most[t.Group()], now[t.Group()])
					most[""] = max(most[""], now[""])
				}
				mu.Unlock()
				time.Sleep(2 * time.Millisecond)
				mu.Lock()
				for i, t := range c.Tasks {
					now[t.Group()]--
					now[""]--
					tries[t.ID]++
					if t.Payload.N%7 == 0 && tries[t.ID] == 1 {
						_ = c.Fail(i, errors.New("once"))
					}
				}
				mu.Unlock()
				return nil
			}))
		startWorker(t, w)
		waitFor(t, 30*time.Second, func() bool { return l.ended() == n }, "acked %d of %d", later(func() any { return l.ended() }), n)
		waitQueueGone(t, e, k)
		mu.Lock()
		defer mu.Unlock()
		if most["a"] > 2 || most["b"] > 2 || most[""] > 3 {
			t.Fatalf("at most at once: %v; want a, b <= 2 and all <= 3", most)
		}
		for _, id := range ids {
			if tries[id] < 1 {
				t.Fatalf("task %s never ran", id)
			}
		}
		waitFor(t, 5*time.Second, func() bool {
			for key := range e.dump(t) {
				if key == k.Running || strings.HasPrefix(key, k.GroupRun) {
					return false
				}
			}
			return true
		}, "permits left: %v", later(func() any { return e.dump(t) }))
		t.Logf("at most at once: %v", most)
	})
}

// TestChunkWorkerLease: a handler that runs three leases long: every
// task's lease is kept alive meanwhile, and all are acked. Then one task's
// lease is taken by another owner mid-chunk: its own ctx ends with
// ErrLeaseLost, its ack is refused (ErrLeaseLost), and the other tasks
// of the chunk are acked.
func TestChunkWorkerLease(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		k := e.qk("leased")
		q := fleet.NewQueue[job](e.F, "leased", fleet.QueueOptions{Lease: 500 * time.Millisecond})
		ids := submitJobs(t, q, 4)
		l := newChunkLog()
		steal := make(chan string, 1)
		stolen := make(chan struct{})
		var cause error
		w := fleet.NewChunkWorker(e.F, fleet.WorkerOptions{Type: "leased", ID: "w1", Slots: 1, LeaseExtend: 50 * time.Millisecond, OnTaskEnd: l.end}, q,
			fleet.ChunkOptions{MinSize: 4, MaxSize: 4, MaxWait: time.Hour},
			fleet.ChunkFunc[wcfg, out, job](func(ctx context.Context, s *fleet.Slot[wcfg, out], c *fleet.Chunk[job]) error {
				l.chunk(c)
				if len(l.sizes) == 1 {
					time.Sleep(1500 * time.Millisecond) // three leases
					return nil
				}
				steal <- c.Tasks[1].ID
				<-stolen
				select {
				case <-c.Context(1).Done():
					cause = context.Cause(c.Context(1))
				case <-time.After(5 * time.Second):
				}
				if c.Context(0).Err() != nil {
					cause = errors.New("task 0's ctx ended too")
				}
				return nil
			}))
		startWorker(t, w)
		waitFor(t, 10*time.Second, func() bool { return l.ended() == 4 }, "ended %d of 4", later(func() any { return l.ended() }))
		l.mu.Lock()
		for _, id := range ids {
			if l.ends[id] != nil {
				t.Errorf("task %s ended with %v after a long chunk", id, l.ends[id])
			}
		}
		l.mu.Unlock()
		ids2 := submitJobs(t, q, 4)
		victim := <-steal
		e.do(t, e.Raw.B().Hset().Key(k.Lease).FieldValue().FieldValue(victim, "someone-else").Build())
		close(stolen)
		waitFor(t, 10*time.Second, func() bool { return l.ended() == 8 }, "ended %d of 8", later(func() any { return l.ended() }))
		if !errors.Is(cause, fleet.ErrLeaseLost) {
			t.Fatalf("the stolen task's ctx ended with %v; want ErrLeaseLost", cause)
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		for _, id := range ids2 {
			err := l.ends[id]
			if id == victim {
				if !errors.Is(err, fleet.ErrLeaseLost) {
					t.Errorf("the stolen task ended with %v; want ErrLeaseLost", err)
				}
			} else if err != nil {
				t.Errorf("task %s ended with %v; want an ack", id, err)
			}
		}
		if got := e.zscores(t, k.Processing); len(got) != 1 || got[0].Member != victim {
			t.Fatalf(":processing = %v; want only the stolen task, its ack refused", got)
		}
	})
}

// TestChunkWorkerStop: a chunk whose handler waits for its ctx: Stop with
// a short deadline cancels it, and its tasks, unmarked, go back to the
// queue uncounted (attempts 0, in the pending list); a marked ack still
// applies.
func TestChunkWorkerStop(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		k := e.qk("stopper")
		q := fleet.NewQueue[job](e.F, "stopper", fleet.QueueOptions{})
		ids := submitJobs(t, q, 3)
		l := newChunkLog()
		started := make(chan struct{})
		w := fleet.NewChunkWorker(e.F, fleet.WorkerOptions{Type: "stopper", ID: "w1", Slots: 1, StopGrace: time.Second, OnTaskEnd: l.end}, q,
			fleet.ChunkOptions{MinSize: 3, MaxSize: 3, MaxWait: time.Hour},
			fleet.ChunkFunc[wcfg, out, job](func(ctx context.Context, s *fleet.Slot[wcfg, out], c *fleet.Chunk[job]) error {
				l.chunk(c)
				for i, t := range c.Tasks {
					if t.ID == ids[0] {
						_ = c.Ack(i)
					}
				}
				close(started)
				<-ctx.Done()
				return ctx.Err()
			}))
		if err := w.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		<-started
		sctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		_ = w.Stop(sctx)
		waitFor(t, 10*time.Second, func() bool { return l.ended() == 3 }, "ended %d of 3", later(func() any { return l.ended() }))
		pending := e.lrange(t, k.Pending)
		if len(pending) != 2 {
			t.Fatalf("pending %v; want tasks 1 and 2 back", pending)
		}
		for _, b := range pending {
			m := decodeMap(t, b)
			if m["id"] != ids[1] && m["id"] != ids[2] || m["attempts"] != nil && m["attempts"] != float64(0) {
				t.Fatalf("pending holds %v; want tasks 1 and 2, uncounted", m)
			}
		}
		if n := len(e.hgetall(t, k.Body)); n != 0 {
			t.Fatalf("%d tasks in flight after the stop", n)
		}
	})
}

// TestChunkWorkerBadOptions: each bad ChunkOptions is refused by Start
// with ErrInvalidOptions naming the field, and nothing is stored.
func TestChunkWorkerBadOptions(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		before := e.keys(t)
		q := fleet.NewQueue[job](e.F, "bad", fleet.QueueOptions{})
		h := fleet.ChunkFunc[wcfg, out, job](func(ctx context.Context, s *fleet.Slot[wcfg, out], c *fleet.Chunk[job]) error { return nil })
		for _, c := range []struct {
			opts  fleet.ChunkOptions
			field string
		}{
			{fleet.ChunkOptions{MinSize: 0, MaxSize: 10}, "MinSize"},
			{fleet.ChunkOptions{MinSize: -1, MaxSize: 10}, "MinSize"},
			{fleet.ChunkOptions{MinSize: 5, MaxSize: 4}, "MaxSize"},
			{fleet.ChunkOptions{MinSize: 1, MaxSize: fleet.MaxReserve + 1}, "MaxSize"},
			{fleet.ChunkOptions{MinSize: 1, MaxSize: 10, MaxWait: -time.Second}, "MaxWait"},
		} {
			w := fleet.NewChunkWorker(e.F, fleet.WorkerOptions{Type: "bad", ID: "w1"}, q, c.opts, h)
			err := w.Start(context.Background())
			if !errors.Is(err, fleet.ErrInvalidOptions) || !strings.Contains(err.Error(), "ChunkOptions."+c.field) {
				t.Errorf("%+v: Start said %v; want ErrInvalidOptions naming %s", c.opts, err, c.field)
			}
			if !errors.Is(w.Err(), fleet.ErrInvalidOptions) {
				t.Errorf("%+v: Err said %v", c.opts, w.Err())
			}
		}
		w := fleet.NewChunkWorker[wcfg, out, job](e.F, fleet.WorkerOptions{Type: "bad", ID: "w1"}, q, fleet.ChunkOptions{MinSize: 1, MaxSize: 1}, nil)
		if err := w.Start(context.Background()); !errors.Is(err, fleet.ErrInvalidArgument) {
			t.Errorf("no handler: Start said %v; want ErrInvalidArgument", err)
		}
		if after := e.keys(t); !slices.Equal(after, before) {
			t.Fatalf("keys changed: %v -> %v", before, after)
		}
	})
}

// TestChunkWorkerConnectionCut: the chunk worker's connection is cut
// again and again while its chunks run and their acks are in flight. A
// call cut off has an outcome nobody knows: the tasks its reserve took are
// handed back, and the acks it carried either applied or not (OnTaskEnd
// says ErrUnavailable); a task whose ack did not apply runs again after
// its lease. In the end every task was handled and acked, none is lost,
// none went to the dead letters, and the queue's keys are gone.
func TestChunkWorkerConnectionCut(t *testing.T) {
	t.Parallel()
	px := startProxied(t, fleet.Options{})
	p, direct, wf, e := px.P, px.Direct, px.Through, px.E
	k := e.qk("chunkcut")
	opts := fleet.QueueOptions{Lease: time.Second, MaxAttempts: 1000}
	const n = 960
	ids := submitJobs(t, fleet.NewQueue[job](direct, "chunkcut", opts), n)
	runSweeper(t, direct, 100*time.Millisecond)

	var mu sync.Mutex
	handled := map[string]int{}
	var odd []error
	done := 0
	w := fleet.NewChunkWorker(wf, fleet.WorkerOptions{Type: "chunkcut", ID: "w", Slots: 4,
		OnTaskEnd: func(id string, err error) {
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				done++
			case !errors.Is(err, fleet.ErrUnavailable) && !errors.Is(err, fleet.ErrLeaseLost):
				odd = append(odd, err)
			}
		}}, fleet.NewQueue[job](wf, "chunkcut", opts),
		fleet.ChunkOptions{MinSize: 10, MaxSize: 40, MaxWait: 10 * time.Millisecond},
		fleet.ChunkFunc[wcfg, out, job](func(ctx context.Context, _ *fleet.Slot[wcfg, out], c *fleet.Chunk[job]) error {
			mu.Lock()
			for _, tk := range c.Tasks {
				handled[tk.ID]++
			}
			mu.Unlock()
			select {
			case <-time.After(5 * time.Millisecond):
			case <-ctx.Done():
			}
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
