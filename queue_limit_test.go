package fleet_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/fleettest"
	"github.com/fleet-go/fleet/internal/redistest"
)

// A queue limited to 50/s drains 500 tasks, with 8 slots over 2 Fleets, in
// 10 s, every task run once and no attempt counted. Never faster than the
// rate (9 s at least from the first task to the last); the upper bound
// (12.5 s) only catches a limiter that sleeps far too long: a burst of 1
// banks no tokens, so a loaded machine's late wake-ups add up (11.1 s was
// seen once beside a benchmark).
func TestLimitedQueueDrain(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		f2 := openOn(t, tg, e.Prefix)
		c := ctx(t)
		const total = 500
		qs := make([]*fleet.Queue[job], 2)
		for i, f := range []*fleet.Fleet{e.F, f2} {
			qs[i] = fleet.NewQueue[job](f, "limited", fleet.QueueOptions{RateLimit: f.Limiter("limited", fleet.LimitOptions{Rate: 50})})
		}
		payloads := make([]job, total)
		for i := range payloads {
			payloads[i] = jobN(i)
		}
		if _, err := qs[0].SubmitMany(c, payloads); err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		runs := map[string]int{}
		var first, last time.Time
		var counted atomic.Int64
		handle := fleet.BatchFunc[wcfg, out, job](func(ctx context.Context, s *fleet.Slot[wcfg, out], tk *fleet.Task[job]) error {
			now := time.Now()
			mu.Lock()
			runs[tk.ID]++
			if first.IsZero() {
				first = now
			}
			last = now
			mu.Unlock()
			if tk.Attempts != 0 {
				counted.Add(1)
			}
			return nil
		})
		start := time.Now()
		var ws []*fleet.Worker
		for i, f := range []*fleet.Fleet{e.F, f2} {
			w := fleet.NewBatchWorker(f, fleet.WorkerOptions{Type: "limited", ID: []string{"a", "b"}[i], Slots: 4}, qs[i], handle)
			startWorker(t, w)
			ws = append(ws, w)
		}
		done := func() int64 { return ws[0].Stats().Done + ws[1].Stats().Done }
		waitFor(t, 30*time.Second, func() bool { return done() == total }, "done %d of %d", later(func() any { return done() }), total)
		took := time.Since(start)
		mu.Lock()
		span := last.Sub(first)
		mu.Unlock()
		t.Logf("%s: drained in %v, first to last task %v", tg.Name, took, span)
		// The 500th token comes 499 intervals of 20 ms after the first.
		if span < 9*time.Second || took > 12500*time.Millisecond {
			t.Fatalf("drained in %v (first to last %v), want 10 s: at least 9 s, at most 12.5 s", took, span)
		}
		if len(runs) != total {
			t.Fatalf("%d tasks ran, want %d", len(runs), total)
		}
		for id, n := range runs {
			if n != 1 {
				t.Fatalf("task %s ran %d times", id, n)
			}
		}
		if counted.Load() != 0 {
			t.Fatalf("%d runs had attempts counted", counted.Load())
		}
		qk := e.qk("limited")
		for _, k := range []string{qk.Pending, qk.Processing, qk.Body, qk.Scheduled, qk.Dead} {
			if n, _ := e.do(t, e.Raw.B().Exists().Key(k).Build()).AsInt64(); n != 0 {
				t.Fatalf("%s left behind", k)
			}
		}
	})
}

// A limited Reserve takes no more tasks than the limiter has tokens, and
// waits within its wait for the next; a reserve that finds the queue empty
// gives its tokens back, so the limiter is left as it was.
func TestLimitedQueueReserve(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		lim := e.F.Limiter("lq", fleet.LimitOptions{Rate: 1, Per: 2 * time.Second, Burst: 2})
		q := fleet.NewQueue[job](e.F, "lq", fleet.QueueOptions{RateLimit: lim})
		// An empty queue costs no token: the limiter key is gone again.
		tasks, err := q.Reserve(c, 2, 0)
		if err != nil || len(tasks) != 0 {
			t.Fatalf("reserve of an empty queue = %v, %v", tasks, err)
		}
		if _, ok := e.get(t, e.limitKey("lq")); ok {
			t.Fatal("an empty reserve kept a token")
		}
		for i := range 5 {
			if _, err := q.Submit(c, jobN(i)); err != nil {
				t.Fatal(err)
			}
		}
		before := e.serverNow(t)
		tasks, err = q.Reserve(c, 5, 0)
		if err != nil || len(tasks) != 2 {
			t.Fatalf("reserve 5 with a burst of 2 = %d tasks, %v", len(tasks), err)
		}
		tasks, err = q.Reserve(c, 5, 0)
		if err != nil || len(tasks) != 0 {
			t.Fatalf("reserve with no token = %d tasks, %v", len(tasks), err)
		}
		tasks, err = q.Reserve(c, 1, 10*time.Second)
		if err != nil || len(tasks) != 1 {
			t.Fatalf("reserve with a wait = %d tasks, %v", len(tasks), err)
		}
		// The third token comes one interval (2 s) after the burst went, on
		// the server's clock: the reserve returned no sooner.
		if got := e.serverNow(t); got.Before(before.Add(2 * time.Second)) {
			t.Fatalf("a third task %v after the burst: faster than 1 per 2 s", got.Sub(before))
		}
		if n, _ := e.do(t, e.Raw.B().Llen().Key(e.qk("lq").Pending).Build()).AsInt64(); n != 2 {
			t.Fatalf("%d tasks pending, want 2", n)
		}
	})
}

// A handler that returns RateLimited puts its task back in :scheduled, its
// body unchanged (no attempt counted), due after the retry-after on the
// server's clock; it then runs again and is acked. Snooze does the same
// for Reserve's callers, and refuses a lease that is gone.
func TestRateLimitedHandler(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		qk := e.qk("rl")
		q := fleet.NewQueue[job](e.F, "rl", fleet.QueueOptions{})
		var runs atomic.Int64
		var attempts []int
		var mu sync.Mutex
		const after = 1500 * time.Millisecond
		w := fleet.NewBatchWorker(e.F, fleet.WorkerOptions{Type: "rl", ID: "w", Slots: 1}, q,
			fleet.BatchFunc[wcfg, out, job](func(ctx context.Context, s *fleet.Slot[wcfg, out], tk *fleet.Task[job]) error {
				mu.Lock()
				attempts = append(attempts, tk.Attempts)
				mu.Unlock()
				if runs.Add(1) == 1 {
					return fmt.Errorf("upstream said 429: %w", fleet.RateLimited(after))
				}
				return nil
			}))
		if _, err := q.Submit(c, jobN(7)); err != nil {
			t.Fatal(err)
		}
		body := e.lrange(t, qk.Pending)[0]
		t0 := e.serverNow(t)
		startWorker(t, w)
		var sched []rueidis.ZScore
		waitFor(t, 5*time.Second, func() bool { sched = e.zscores(t, qk.Scheduled); return len(sched) == 1 }, "the task never went to :scheduled")
		t1 := e.serverNow(t)
		if sched[0].Member != body {
			t.Fatalf("scheduled body %q, want it unchanged: %q", sched[0].Member, body)
		}
		// Due after the retry-after, from when the handler ran (server clock).
		if at := time.UnixMilli(int64(sched[0].Score * 1000)); at.Before(t0.Add(after).Truncate(time.Millisecond)) || at.After(t1.Add(after)) {
			t.Fatalf("ready at %v, want within [%v, %v]", at, t0.Add(after), t1.Add(after))
		}
		// The worker is woken when the task is due, well before its idle
		// poll (DefaultConfigPoll, 5 s) would find it.
		waitFor(t, after+3*time.Second, func() bool { return w.Stats().Done == 1 }, "the task did not run again within 3 s of being due")
		mu.Lock()
		if len(attempts) != 2 || attempts[0] != 0 || attempts[1] != 0 {
			t.Fatalf("runs saw attempts %v, want [0 0]", attempts)
		}
		mu.Unlock()
		if st := w.Stats(); st.Failed != 0 {
			t.Fatalf("a rate-limited run counted as failed: %+v", st)
		}
		for _, k := range []string{qk.Pending, qk.Processing, qk.Scheduled, qk.Dead} {
			if n, _ := e.do(t, e.Raw.B().Exists().Key(k).Build()).AsInt64(); n != 0 {
				t.Fatalf("%s left behind", k)
			}
		}

		// Snooze, for Reserve's callers.
		q2 := fleet.NewQueue[job](e.F, "rl2", fleet.QueueOptions{})
		if _, err := q2.Submit(c, jobN(8)); err != nil {
			t.Fatal(err)
		}
		tasks, err := q2.Reserve(c, 1, 0)
		if err != nil || len(tasks) != 1 {
			t.Fatalf("reserve = %v, %v", tasks, err)
		}
		if err := tasks[0].Snooze(c, time.Hour); err != nil {
			t.Fatal(err)
		}
		if sched := e.zscores(t, e.qk("rl2").Scheduled); len(sched) != 1 || !strings.Contains(sched[0].Member, `"attempts":0`) {
			t.Fatalf("scheduled %v", sched)
		}
		if err := tasks[0].Snooze(c, time.Hour); !errors.Is(err, fleet.ErrLeaseLost) {
			t.Fatalf("second snooze = %v, want ErrLeaseLost", err)
		}
		if sched := e.zscores(t, e.qk("rl2").Scheduled); len(sched) != 1 {
			t.Fatalf("a refused snooze changed :scheduled: %v", sched)
		}
		if !errors.Is(fleet.RateLimited(time.Second), fleet.ErrRateLimited) {
			t.Fatal("RateLimited is not ErrRateLimited")
		}
	})
}

// A rate limit that cannot work is refused with ErrInvalidArgument naming
// it, and nothing is stored.
func TestLimitedQueueBadInput(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		other := openOn(t, tg, e.Prefix)
		c := ctx(t)
		for _, lim := range []*fleet.Limiter{
			other.Limiter("x", fleet.LimitOptions{Rate: 5}),
			e.F.Limiter("x", fleet.LimitOptions{Rate: 0}),
			e.F.Limiter("x y", fleet.LimitOptions{Rate: 5}),
		} {
			q := fleet.NewQueue[job](e.F, "bad", fleet.QueueOptions{RateLimit: lim})
			if _, err := q.Submit(c, jobN(1)); !errors.Is(err, fleet.ErrInvalidArgument) || !strings.Contains(err.Error(), "RateLimit") {
				t.Errorf("submit with limiter %q (%v) = %v, want ErrInvalidArgument naming RateLimit", lim.Name(), lim.Err(), err)
			}
			if _, err := q.Reserve(c, 1, 0); !errors.Is(err, fleet.ErrInvalidArgument) {
				t.Errorf("reserve = %v", err)
			}
		}
		if got := e.keys(t); len(got) != 0 {
			t.Fatalf("bad input stored %v", got)
		}
	})
}

// A worker on a limited queue sleeps until the limiter has a token: over
// 2 s of a 5/s limit with a backlog, it runs about 10 tasks and makes a
// few scripts' worth of calls per task, not a spin's thousands.
func TestLimitedQueueNoSpin(t *testing.T) {
	s, f := ownServer(t, fleet.Options{})
	c := ctx(t)
	q := fleet.NewQueue[job](f, "slow", fleet.QueueOptions{RateLimit: f.Limiter("slow", fleet.LimitOptions{Rate: 5})})
	payloads := make([]job, 100)
	for i := range payloads {
		payloads[i] = jobN(i)
	}
	if _, err := q.SubmitMany(c, payloads); err != nil {
		t.Fatal(err)
	}
	w := fleet.NewBatchWorker(f, fleet.WorkerOptions{Type: "slow", ID: "w", Slots: 4}, q,
		fleet.BatchFunc[wcfg, out, job](func(ctx context.Context, s *fleet.Slot[wcfg, out], tk *fleet.Task[job]) error { return nil }))
	startWorker(t, w)
	waitFor(t, 5*time.Second, func() bool { return w.Stats().Done >= 1 }, "no task done")
	before := ownCalls(t, s)
	d0 := w.Stats().Done
	t0 := serverClock(t, s)
	time.Sleep(2 * time.Second)
	after := ownCalls(t, s)
	done := w.Stats().Done - d0
	span := serverClock(t, s).Sub(t0)
	calls := after["evalsha"] + after["eval"] - before["evalsha"] - before["eval"]
	t.Logf("%d tasks, %d scripts in %v", done, calls, span)
	// At most a token per 200 ms (plus the one a task in hand had, and one
	// booked); at least half the rate, on a loaded machine.
	if float64(done) > 5*span.Seconds()+2 || float64(done) < 5*span.Seconds()/2 {
		t.Fatalf("%d tasks done in %v of a 5/s limit", done, span)
	}
	if calls > 6*done+10 {
		t.Fatalf("%d scripts for %d tasks: the worker spins", calls, done)
	}
}

// serverClock reads the clock of a server of the test's own (TIME).
func serverClock(t *testing.T, s *fleettest.Server) time.Time {
	t.Helper()
	out, err := s.Cli(context.Background(), "TIME")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(out)
	if len(f) != 2 {
		t.Fatalf("TIME: %q", out)
	}
	sec, _ := strconv.ParseInt(f[0], 10, 64)
	usec, _ := strconv.ParseInt(f[1], 10, 64)
	return time.Unix(sec, usec*1000)
}
