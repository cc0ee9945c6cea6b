package fleet_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/fleettest"
	"github.com/fleet-go/fleet/internal/redistest"
)

// runRecord is what a test handler records of one run.
type runRecord struct {
	start, end time.Time
	cause      error
}

// A worker whose connection freezes (Redis unreachable from it alone)
// cannot extend its lease: its handler's ctx ends, with ErrLeaseLost,
// before the lease it can prove runs out, so before another process's
// sweeper can hand the task to a second worker. The task never runs on two
// workers at once.
func TestWorkerLeaseDeadlineOnFrozenConnection(t *testing.T) {
	for _, layout := range []fleet.Layout{fleet.LayoutCompat, fleet.LayoutTagged} {
		t.Run(string(layout), func(t *testing.T) {
			t.Parallel()
			s, fb := ownServer(t, fleet.Options{Layout: layout})
			p, err := fleettest.StartProxy(s.Addr)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(p.Close)
			fa, err := fleet.Open(ctx(t), fleet.Options{URL: p.URL(), Layout: layout})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = fa.Close() })
			t.Cleanup(p.Thaw) // before fa closes: let it end its task

			opts := fleet.QueueOptions{Lease: time.Second}
			qa := fleet.NewQueue[job](fa, "frozen", opts)
			qb := fleet.NewQueue[job](fb, "frozen", opts)
			var mu sync.Mutex
			runs := map[string]*runRecord{}
			handler := func(who string) fleet.BatchFunc[wcfg, out, job] {
				return func(ctx context.Context, _ *fleet.Slot[wcfg, out], _ *fleet.Task[job]) error {
					r := &runRecord{start: time.Now()}
					mu.Lock()
					runs[who] = r
					mu.Unlock()
					if who == "b" {
						return nil
					}
					<-ctx.Done()
					mu.Lock()
					r.end, r.cause = time.Now(), context.Cause(ctx)
					mu.Unlock()
					return ctx.Err()
				}
			}
			wa := fleet.NewBatchWorker(fa, fleet.WorkerOptions{Type: "frozen", ID: "a", Slots: 1, StopGrace: 200 * time.Millisecond}, qa, handler("a"))
			startWorker(t, wa)
			if _, err := qb.Submit(ctx(t), jobN(1)); err != nil {
				t.Fatal(err)
			}
			got := func(who string) *runRecord {
				mu.Lock()
				defer mu.Unlock()
				if r := runs[who]; r != nil {
					c := *r
					return &c
				}
				return nil
			}
			waitFor(t, 5*time.Second, func() bool { return got("a") != nil }, "worker a never started the task")
			p.Freeze()
			frozeAt := time.Now()

			// Another process sweeps and works the queue.
			wb := fleet.NewBatchWorker(fb, fleet.WorkerOptions{Type: "frozen", ID: "b", Slots: 1}, qb, handler("b"))
			startWorker(t, wb)
			sctx, cancel := context.WithCancel(context.Background())
			swept := make(chan struct{})
			go func() {
				defer close(swept)
				_ = fb.RunSweeper(sctx, fleet.SweeperOptions{Interval: 20 * time.Millisecond})
			}()
			t.Cleanup(func() { cancel(); <-swept })

			waitFor(t, 10*time.Second, func() bool { return got("b") != nil }, "worker b never got the task after a's lease")
			a, b := got("a"), got("b")
			if a.end.IsZero() {
				t.Fatalf("worker a's handler still runs %v after the freeze, while b runs the same task", time.Since(frozeAt))
			}
			if !errors.Is(a.cause, fleet.ErrLeaseLost) {
				t.Fatalf("a's cause = %v, want ErrLeaseLost", a.cause)
			}
			if !a.end.Before(b.start) {
				t.Fatalf("runs overlap: a ended %v after b started", a.end.Sub(b.start))
			}
			if d := a.end.Sub(frozeAt); d > time.Second {
				t.Fatalf("a's handler ended %v after the freeze, past its 1 s lease", d)
			}
		})
	}
}

// Fleet.Close stops the workers first: a handler that finishes within the
// grace is acked; one that does not is released uncounted.
func TestFleetCloseStopsWorkersFirst(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		for _, finish := range []bool{true, false} {
			e := open(t, tg)
			k := e.qk("closing")
			q := fleet.NewQueue[job](e.F, "closing", fleet.QueueOptions{})
			started := make(chan struct{})
			ended := make(chan error, 1)
			w := fleet.NewBatchWorker(e.F, fleet.WorkerOptions{Type: "closing", ID: "w", Slots: 1, StopGrace: 300 * time.Millisecond,
				OnTaskEnd: func(_ string, err error) { ended <- err }}, q,
				fleet.BatchFunc[wcfg, out, job](func(ctx context.Context, _ *fleet.Slot[wcfg, out], _ *fleet.Task[job]) error {
					close(started)
					if finish {
						time.Sleep(100 * time.Millisecond) // within the grace
						return nil
					}
					<-ctx.Done()
					return ctx.Err()
				}))
			if err := w.Start(ctx(t)); err != nil {
				t.Fatal(err)
			}
			id, err := q.Submit(ctx(t), jobN(1))
			if err != nil {
				t.Fatal(err)
			}
			<-started
			if err := e.F.Close(); err != nil {
				t.Fatal(err)
			}
			select {
			case <-w.Stopped():
			default:
				t.Fatal("Close returned before the worker stopped")
			}
			err = <-ended
			if finish {
				if err != nil {
					t.Fatalf("OnTaskEnd = %v, want the ack to succeed", err)
				}
				for _, key := range []string{k.Pending, k.Processing, k.Body, k.Lease} {
					if n, _ := e.Raw.Do(context.Background(), e.Raw.B().Exists().Key(key).Build()).AsInt64(); n != 0 {
						t.Fatalf("%s left after the acked task", key)
					}
				}
				continue
			}
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("OnTaskEnd = %v, want the cancellation", err)
			}
			pending := e.lrange(t, k.Pending)
			if len(pending) != 1 || !strings.Contains(pending[0], id) || !strings.Contains(pending[0], `"attempts":0`) {
				t.Fatalf("pending %v, want the task back uncounted", pending)
			}
		}
	})
}

// Cancelling Start's ctx (Ctrl-C through signal.NotifyContext) stops the
// worker gracefully: the running handler's ctx stays alive, it finishes,
// and its task is acked.
func TestWorkerStartCtxIsGraceful(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		q := fleet.NewQueue[job](e.F, "sig", fleet.QueueOptions{})
		started := make(chan struct{})
		var handlerErr error
		ended := make(chan error, 1)
		w := fleet.NewBatchWorker(e.F, fleet.WorkerOptions{Type: "sig", ID: "w", Slots: 1, StopGrace: 5 * time.Second,
			OnTaskEnd: func(_ string, err error) { ended <- err }}, q,
			fleet.BatchFunc[wcfg, out, job](func(ctx context.Context, _ *fleet.Slot[wcfg, out], _ *fleet.Task[job]) error {
				close(started)
				time.Sleep(300 * time.Millisecond)
				handlerErr = ctx.Err()
				return nil
			}))
		sig, cancel := context.WithCancel(context.Background())
		defer cancel()
		if err := w.Start(sig); err != nil {
			t.Fatal(err)
		}
		if _, err := q.Submit(ctx(t), jobN(1)); err != nil {
			t.Fatal(err)
		}
		<-started
		cancel()
		if err := <-ended; err != nil {
			t.Fatalf("OnTaskEnd = %v, want the task acked", err)
		}
		<-w.Stopped()
		if handlerErr != nil {
			t.Fatalf("the handler's ctx ended on the signal: %v", handlerErr)
		}
		if st, err := q.Stats(ctx(t)); err != nil || st != (fleet.QueueStats{}) {
			t.Fatalf("Stats = %+v, %v", st, err)
		}
	})
}

// A handler that hangs is cancelled at TaskTimeout with cause
// ErrTaskTimeout, and its task is nacked: an attempt counts.
func TestWorkerTaskTimeout(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		k := e.qk("hung")
		q := fleet.NewQueue[job](e.F, "hung", fleet.QueueOptions{MaxAttempts: 1})
		causes := make(chan error, 1)
		w := fleet.NewBatchWorker(e.F, fleet.WorkerOptions{Type: "hung", ID: "w", Slots: 1, TaskTimeout: 200 * time.Millisecond}, q,
			fleet.BatchFunc[wcfg, out, job](func(ctx context.Context, _ *fleet.Slot[wcfg, out], _ *fleet.Task[job]) error {
				<-ctx.Done()
				causes <- context.Cause(ctx)
				return ctx.Err()
			}))
		startWorker(t, w)
		if _, err := q.Submit(ctx(t), jobN(1)); err != nil {
			t.Fatal(err)
		}
		if c := <-causes; !errors.Is(c, fleet.ErrTaskTimeout) {
			t.Fatalf("cause = %v, want ErrTaskTimeout", c)
		}
		waitFor(t, 5*time.Second, func() bool { return len(e.lrange(t, k.Dead)) == 1 }, "the timed-out task was not nacked")
		d := decodeMap(t, e.lrange(t, k.Dead)[0])
		if d["attempts"] != 1.0 || !strings.Contains(d["error"].(string), "timed out after 200ms") {
			t.Fatalf("dead letter %v", d)
		}

		bad := fleet.NewBatchWorker(e.F, fleet.WorkerOptions{Type: "hung", ID: "x", Slots: 1, TaskTimeout: -time.Second}, q,
			fleet.BatchFunc[wcfg, out, job](func(context.Context, *fleet.Slot[wcfg, out], *fleet.Task[job]) error { return nil }))
		if err := bad.Start(ctx(t)); !errors.Is(err, fleet.ErrInvalidArgument) {
			t.Fatalf("TaskTimeout -1s: Start = %v", err)
		}
	})
}

// A worker registers again from its heartbeat when Redis lost its keys (a
// restart without persistence), with the config and gen it runs.
func TestWorkerReregistersAfterDataLoss(t *testing.T) {
	t.Parallel()
	s, f := ownServer(t, fleet.Options{Layout: fleet.LayoutCompat})
	raw := redistest.Client(t, redistest.Target{URL: s.URL()})
	e := &env{F: f, Raw: raw, Tg: redistest.Target{URL: s.URL()}}
	k := e.wk("scraper", "w1")
	w := fleet.NewLoopWorker(f, fleet.WorkerOptions{Type: "scraper", ID: "w1", Slots: 1, Heartbeat: 50 * time.Millisecond}, idleLoop())
	startWorker(t, w)
	if _, err := f.UpdateConfig(ctx(t), "scraper", "w1", []byte(`{"rate":7}`)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, func() bool { return w.Gen() == 1 }, "gen 1 not applied")
	if err := s.Restart(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if n, _ := raw.Do(context.Background(), raw.B().Dbsize().Build()).AsInt64(); n > 2 {
		t.Logf("keys right after the restart: %d", n)
	}
	waitFor(t, 10*time.Second, func() bool {
		gen, _ := e.get(t, k.Gen)
		cfg, _ := e.get(t, k.Config)
		_, hw := e.get(t, k.Hardware)
		return gen == "1" && cfg == `{"rate":7}` && hw
	}, "the worker did not register again with its config and gen")
	waitFor(t, 5*time.Second, func() bool {
		ws, err := f.Workers(ctx(t), fleet.WorkersFilter{Type: "scraper", ActiveWithin: time.Minute})
		return err == nil && len(ws) == 1 && ws[0].ID == "w1"
	}, "Workers does not list the worker again")
	all, _ := raw.Do(context.Background(), raw.B().Smembers().Key(k.All).Build()).AsStrSlice()
	if len(all) != 1 || all[0] != "scraper|w1" {
		t.Fatalf("wkrs:all %v", all)
	}
}

// last_seen comes from the server's clock, whatever the worker's clock
// says; the stats frame's ts is the worker's own.
func TestWorkerLastSeenServerClock(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		fast := 2 * time.Hour
		fleet.SetClock(e.F, func() time.Time { return time.Now().Add(fast) })
		k := e.wk("clocky", "w1")
		w := fleet.NewLoopWorker(e.F, fleet.WorkerOptions{Type: "clocky", ID: "w1", Slots: 1, Heartbeat: 50 * time.Millisecond}, idleLoop())
		startWorker(t, w)
		waitFor(t, 5*time.Second, func() bool { _, ok := e.get(t, k.Stats); return ok }, "no heartbeat")
		seen, err := e.Raw.Do(context.Background(), e.Raw.B().Hget().Key(k.State).Field("last_seen").Build()).ToString()
		if err != nil {
			t.Fatal(err)
		}
		sec, _ := strconv.ParseInt(seen, 10, 64)
		near(t, "last_seen", float64(sec), e.serverNow(t), 3*time.Second)
		ws, err := e.F.Workers(ctx(t), fleet.WorkersFilter{Type: "clocky", ActiveWithin: 10 * time.Second})
		if err != nil || len(ws) != 1 {
			t.Fatalf("Workers(ActiveWithin 10s) = %v, %v", ws, err)
		}
		stats, _ := e.get(t, k.Stats)
		ts, _ := decodeMap(t, stats)["ts"].(float64)
		near(t, "stats ts", ts, time.Now().Add(fast), 3*time.Second)
	})
}

// A reserve whose reply comes back after the lease ran out (replies held
// back by the network) never starts the handler: the task goes back
// uncounted, and runs later with a lease it can prove.
func TestWorkerNeverStartsPastLease(t *testing.T) {
	t.Parallel()
	px := startProxied(t, fleet.Options{DisableCache: true})
	p, direct, wf, e, raw := px.P, px.Direct, px.Through, px.E, px.Raw
	t.Cleanup(p.Thaw)
	k := e.qk("late")
	opts := fleet.QueueOptions{Lease: time.Second}
	var mu sync.Mutex
	var late []time.Duration
	runs := 0
	w := fleet.NewBatchWorker(wf, fleet.WorkerOptions{Type: "late", ID: "w", Slots: 1}, fleet.NewQueue[job](wf, "late", opts),
		fleet.BatchFunc[wcfg, out, job](func(ctx context.Context, _ *fleet.Slot[wcfg, out], tk *fleet.Task[job]) error {
			mu.Lock()
			defer mu.Unlock()
			runs++
			if left := time.Until(tk.Deadline()); left <= 0 {
				late = append(late, -left) // called at all past the lease
			}
			return nil
		}))
	startWorker(t, w)
	// Without caching the idle worker polls, its backoff growing to 1 s:
	// let it grow, so that the poll in flight when the replies are held is
	// (almost surely) one sent after the submit.
	time.Sleep(1500 * time.Millisecond)
	p.HoldReplies()
	if _, err := fleet.NewQueue[job](direct, "late", opts).Submit(ctx(t), jobN(1)); err != nil {
		t.Fatal(err)
	}
	// The worker's reserve ran: the task is in flight, its reply held back.
	waitFor(t, 10*time.Second, func() bool { return len(e.zscores(t, k.Processing)) == 1 }, "the reserve never ran")
	time.Sleep(1200 * time.Millisecond) // past the 1 s lease
	p.Thaw()
	waitFor(t, 10*time.Second, func() bool {
		n, _ := raw.Do(context.Background(), raw.B().Exists().Key(k.Pending, k.Processing, k.Body).Build()).AsInt64()
		mu.Lock()
		defer mu.Unlock()
		return n == 0 && runs >= 1
	}, "the task was never run and acked")
	mu.Lock()
	defer mu.Unlock()
	if len(late) > 0 {
		t.Fatalf("handlers began past their lease: %v", late)
	}
}

// TestWorkerIdleWakeAfterCut: an idle batch worker sleeps on the
// invalidation that its last take armed (its ConfigPoll is an hour, so no
// poll wakes it). Cutting its connections ends the server's tracking with
// them; rueidis says so (a nil invalidation, which wakes every waiter), and
// the fetcher takes again on new connections, which arms again: a task
// that another process submits after each cut is still picked up, and the
// queue holds nothing after the last.
func TestWorkerIdleWakeAfterCut(t *testing.T) {
	t.Parallel()
	px := startProxied(t, fleet.Options{Layout: fleet.LayoutCompat})
	q := fleet.NewQueue[job](px.Through, "cutwake", fleet.QueueOptions{})
	qd := fleet.NewQueue[job](px.Direct, "cutwake", fleet.QueueOptions{})
	// A task counts once its ack is done (OnTaskEnd comes after it), so
	// that no cut falls on an ack in flight.
	var mu sync.Mutex
	done := 0
	w := fleet.NewBatchWorker(px.Through, fleet.WorkerOptions{Type: "cw", ID: "w1", Slots: 4, ConfigPoll: time.Hour,
		OnTaskEnd: func(_ string, err error) {
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				done++
			}
		}}, q,
		fleet.BatchFunc[wcfg, out, job](func(context.Context, *fleet.Slot[wcfg, out], *fleet.Task[job]) error { return nil }))
	startWorker(t, w)
	handled := func() int { mu.Lock(); defer mu.Unlock(); return done }
	const n = 4
	for i := range n {
		if _, err := qd.Submit(ctx(t), jobN(i)); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 10*time.Second, func() bool { return handled() == i+1 }, "task %d not picked up and acked (%d were) after %d cuts", i, later(func() any { return handled() }), i)
		px.P.Cut()
	}
	waitQueueGone(t, px.E, px.E.qk("cutwake"))
	if got := handled(); got != n {
		t.Fatalf("%d tasks acked, want %d", got, n)
	}
}
