package fleet_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/internal/redistest"
)

// fill submits n tasks to q with N = tag.
func fill(t *testing.T, q *fleet.Queue[job], n, tag int) {
	t.Helper()
	batch := make([]job, 0, 500)
	for i := 0; i < n; i++ {
		batch = append(batch, job{URL: "https://example.com/", N: tag})
		if len(batch) == cap(batch) || i == n-1 {
			if _, err := q.SubmitMany(ctx(t), batch); err != nil {
				t.Fatal(err)
			}
			batch = batch[:0]
		}
	}
}

// TestPriorityWeighted: over 3,000 tasks from three full queues weighted
// 6:3:1, each queue's share is within 5% of its weight's.
func TestPriorityWeighted(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		names := []string{"critical", "default", "low"}
		weights := []int{6, 3, 1}
		var wqs []fleet.WeightedQueue[job]
		for i, n := range names {
			q := fleet.NewQueue[job](e.F, n, fleet.QueueOptions{})
			fill(t, q, 3000, i)
			wqs = append(wqs, fleet.WeightedQueue[job]{Queue: q, Weight: weights[i]})
		}
		var handled atomic.Int64
		var counts [3]atomic.Int64
		w := fleet.NewPriorityWorker(e.F, fleet.WorkerOptions{Type: "prio", ID: "w1", Slots: 4}, fleet.PriorityWeighted, wqs,
			fleet.BatchFunc[wcfg, out, job](func(ctx context.Context, s *fleet.Slot[wcfg, out], tk *fleet.Task[job]) error {
				if handled.Add(1) <= 3000 {
					counts[tk.Payload.N].Add(1)
				}
				return nil
			}))
		startWorker(t, w)
		waitFor(t, 2*time.Minute, func() bool { return handled.Load() >= 3000 }, "handled %d", later(func() any { return handled.Load() }))
		for i, wt := range weights {
			want := 3000 * float64(wt) / 10
			if got := float64(counts[i].Load()); got < want*0.95 || got > want*1.05 {
				t.Errorf("%s: %v tasks of 3000, want %v ±5%%", names[i], got, want)
			}
		}
		t.Logf("shares %d %d %d", counts[0].Load(), counts[1].Load(), counts[2].Load())
	})
}

// TestPriorityStrict: the higher queue is drained before the lower one gets
// a task; a paused higher queue lets the lower one run, and its tasks come
// first again once it is resumed.
func TestPriorityStrict(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		urgent := fleet.NewQueue[job](e.F, "urgent", fleet.QueueOptions{})
		normal := fleet.NewQueue[job](e.F, "normal", fleet.QueueOptions{})
		fill(t, normal, 30, 0)
		fill(t, urgent, 20, 1)
		var mu sync.Mutex
		var order []int
		gate := make(chan struct{})
		w := fleet.NewPriorityWorker(e.F, fleet.WorkerOptions{Type: "strict", ID: "w1", Slots: 1}, fleet.PriorityStrict,
			[]fleet.WeightedQueue[job]{{Queue: normal, Weight: 1}, {Queue: urgent, Weight: 10}},
			fleet.BatchFunc[wcfg, out, job](func(ctx context.Context, s *fleet.Slot[wcfg, out], tk *fleet.Task[job]) error {
				mu.Lock()
				order = append(order, tk.Payload.N)
				n := len(order)
				mu.Unlock()
				if n == 25 {
					<-gate // hold the slot while the test pauses urgent
				}
				return nil
			}))
		startWorker(t, w)
		waitFor(t, 20*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(order) == 25 }, "25 not handled")
		if err := urgent.Pause(c); err != nil {
			t.Fatal(err)
		}
		fill(t, urgent, 5, 2)
		close(gate)
		waitFor(t, 20*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(order) == 50 }, "normal not drained while urgent paused")
		if err := urgent.Resume(c); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 20*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(order) == 55 }, "urgent not resumed")
		mu.Lock()
		defer mu.Unlock()
		for i, n := range order {
			want := 0
			switch {
			case i < 20:
				want = 1
			case i >= 50:
				want = 2
			}
			if n != want {
				t.Fatalf("task %d was of %d, want %d: order %v", i, n, want, order)
			}
		}
	})
}

// TestPriorityBadInput: each bad argument is kept and returned by Start.
func TestPriorityBadInput(t *testing.T) {
	e := open(t, redistest.Targets(t)[0])
	q := fleet.NewQueue[job](e.F, "pb", fleet.QueueOptions{})
	h := fleet.BatchFunc[wcfg, out, job](func(ctx context.Context, s *fleet.Slot[wcfg, out], tk *fleet.Task[job]) error { return nil })
	opts := fleet.WorkerOptions{Type: "pb", ID: "w", Slots: 1}
	for _, tc := range []struct {
		mode fleet.PriorityMode
		qs   []fleet.WeightedQueue[job]
		text string
	}{
		{fleet.PriorityWeighted, nil, "at least one queue"},
		{"fair", []fleet.WeightedQueue[job]{{q, 1}}, `"fair"`},
		{fleet.PriorityWeighted, []fleet.WeightedQueue[job]{{q, 0}}, "weight 0"},
		{fleet.PriorityWeighted, []fleet.WeightedQueue[job]{{q, 1}, {q, 2}}, "twice"},
		{fleet.PriorityStrict, []fleet.WeightedQueue[job]{{q, 1}, {nil, 2}}, "nil"},
	} {
		w := fleet.NewPriorityWorker(e.F, opts, tc.mode, tc.qs, h)
		err := w.Start(ctx(t))
		if !errors.Is(err, fleet.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.text) {
			t.Errorf("%s: %v", tc.text, err)
		}
	}
	if ks := e.keys(t); len(ks) != 0 {
		t.Fatalf("refused workers wrote %v", ks)
	}
}

// TestPriorityRateLimited: a rate-limited queue under a priority worker
// runs at its limit, not at the config poll: the fetcher sleeps until the
// limiter's next token instead of taking the queue for empty, and the
// other queue keeps running meanwhile.
func TestPriorityRateLimited(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		var decisions atomic.Int64
		e := open(t, tg, func(o *fleet.Options) {
			o.Observer = &fleet.Observer{Limited: func(context.Context, fleet.LimitEvent) { decisions.Add(1) }}
		})
		lim := e.F.Limiter("prio-limited", fleet.LimitOptions{Rate: 20})
		limited := fleet.NewQueue[job](e.F, "limited", fleet.QueueOptions{RateLimit: lim})
		free := fleet.NewQueue[job](e.F, "free", fleet.QueueOptions{})
		fill(t, limited, 10, 0)
		fill(t, free, 10, 1)
		var counts [2]atomic.Int64
		w := fleet.NewPriorityWorker(e.F, fleet.WorkerOptions{Type: "prio", ID: "w1", Slots: 2, ConfigPoll: time.Hour}, fleet.PriorityStrict,
			[]fleet.WeightedQueue[job]{{Queue: limited, Weight: 2}, {Queue: free, Weight: 1}},
			fleet.BatchFunc[wcfg, out, job](func(ctx context.Context, s *fleet.Slot[wcfg, out], tk *fleet.Task[job]) error {
				counts[tk.Payload.N].Add(1)
				return nil
			}))
		startWorker(t, w)
		// 10 tokens at 20/s come within about half a second; the config
		// poll (an hour) would take far longer than the 20 s allowed.
		waitFor(t, 20*time.Second, func() bool { return counts[0].Load() == 10 && counts[1].Load() == 10 },
			"handled %d limited, %d free", counts[0].Load(), counts[1].Load())
		// Each task takes a token in one decision; a fetcher that spun on
		// the limited queue would ask thousands of times.
		if n := decisions.Load(); n > 40 {
			t.Fatalf("%d limiter decisions for 10 tasks: the fetcher spins", n)
		}
	})
}
