package fleet_test

// Faults for the durable waits (signal.go, children.go): a worker cut off
// from Redis while its task's signal comes, a redis-server restart while
// tasks wait for a signal and for their children, a parent whose worker
// died while its children (on other slots) ran, and a Signal whose ctx
// ends while its script is in flight.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/fleettest"
	"github.com/fleet-go/fleet/internal/redistest"
)

// waitingHandler is a handler that does a step, waits for the signal "go"
// and records what each run got: parked runs, the values its waits
// returned, and the step's fn runs.
type waitingHandler struct {
	mu     sync.Mutex
	runs   map[string]int
	parked map[string]int
	got    map[string][]string
	steps  atomic.Int32
}

func newWaitingHandler() *waitingHandler {
	return &waitingHandler{runs: map[string]int{}, parked: map[string]int{}, got: map[string][]string{}}
}

func (h *waitingHandler) handle(ctx context.Context, _ *fleet.Slot[wcfg, out], t *fleet.Task[job]) error {
	h.mu.Lock()
	h.runs[t.ID]++
	h.mu.Unlock()
	if _, err := fleet.Step(ctx, t, "before", func(context.Context) (int, error) { return int(h.steps.Add(1)), nil }); err != nil {
		return err
	}
	v, err := fleet.WaitSignal[string](ctx, t, "go", time.Hour)
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case errors.Is(err, fleet.ErrSuspended):
		h.parked[t.ID]++
	case err == nil:
		h.got[t.ID] = append(h.got[t.ID], v)
	}
	return err
}

func (h *waitingHandler) snapshot(id string) (runs, parked int, got []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.runs[id], h.parked[id], append([]string(nil), h.got[id]...)
}

// TestSignalWhileWorkerCutOff: a task waits for its signal, parked; its
// worker is cut off from Redis (every connection cut through its proxy,
// new ones refused) and the signal is sent meanwhile from another Fleet:
// the task is made ready, and nobody runs it while the worker is cut off.
// Once the worker is back it resumes the task, whose wait returns the
// value once; the task ends, and the signal cannot be sent again. Single
// node only: no proxy can sit in front of a cluster (it redirects clients
// past it).
func TestSignalWhileWorkerCutOff(t *testing.T) {
	redistest.EachSingle(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		p, err := fleettest.StartProxy(strings.TrimPrefix(tg.URL, "redis://"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		cut := openOn(t, redistest.Target{Name: "proxied", URL: p.URL(), Tagged: tg.Tagged}, e.Prefix)
		q := fleet.NewQueue[job](e.F, "cutsig", fleet.QueueOptions{})
		k := e.qk("cutsig")
		h := newWaitingHandler()
		w := fleet.NewBatchWorker(cut, fleet.WorkerOptions{Type: "cutsig", ID: "w", Slots: 1},
			fleet.NewQueue[job](cut, "cutsig", fleet.QueueOptions{}), fleet.BatchFunc[wcfg, out, job](h.handle))
		startWorker(t, w)
		id, err := q.Submit(c, jobN(1))
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, 10*time.Second, func() bool {
			rec, err := q.Lookup(c, id)
			return err == nil && rec.Status == fleet.TaskScheduled && len(rec.Steps) == 2 && rec.Steps[1].State == fleet.StepWaiting
		}, "task %s parked", id)

		// Cut off: connections closed, new ones refused.
		p.Refuse(true)
		p.Cut()
		accepts := p.Accepts()
		if err := q.Signal(c, id, "go", "while cut off"); err != nil {
			t.Fatal(err)
		}
		f := e.stepFields(t, "cutsig", id)
		if f["\xffsig:go"] != `"while cut off"` || f["\xffpark"] != "" || f["\xffwait"] != `["go"]` {
			t.Fatalf("steps after the signal: %q", f)
		}
		if got := e.lrange(t, k.Pending); len(got) != 1 {
			t.Fatalf("pending %q, want the woken task", got)
		}
		// Nobody takes it while its worker is cut off.
		time.Sleep(500 * time.Millisecond)
		if runs, _, got := h.snapshot(id); runs != 1 || len(got) != 0 {
			t.Fatalf("while cut off: %d runs, got %q; want 1 run, nothing", runs, got)
		}
		if got := e.lrange(t, k.Pending); len(got) != 1 {
			t.Fatalf("pending %q while the worker is cut off, want the task", got)
		}

		p.Refuse(false)
		waitFor(t, 20*time.Second, func() bool {
			_, _, got := h.snapshot(id)
			return len(got) > 0
		}, "the task did not resume once its worker was back")
		waitFor(t, 10*time.Second, func() bool {
			_, err := q.Lookup(c, id)
			return errors.Is(err, fleet.ErrTaskNotFound)
		}, "task %s acked", id)
		runs, parked, got := h.snapshot(id)
		if runs != 2 || parked != 1 || len(got) != 1 || got[0] != "while cut off" || h.steps.Load() != 1 {
			t.Fatalf("runs %d, parked %d, got %q, step runs %d; want 2, 1, the value once, 1", runs, parked, got, h.steps.Load())
		}
		if p.Accepts() == accepts {
			t.Fatal("the worker never came back through the proxy")
		}
		if n, _ := e.compat().Exists(c, e.stepsKey("cutsig", id)).Result(); n != 0 {
			t.Fatal("the ack left the steps")
		}
		if err := q.Signal(c, id, "go", "again"); !errors.Is(err, fleet.ErrTaskNotFound) {
			t.Fatalf("a signal to the ended task: %v, want ErrTaskNotFound", err)
		}
	})
}

// TestSignalToFrozenRun: a task's worker is blackholed (its connections
// frozen through its proxy) while it runs the task, before its wait; the
// signal sent meanwhile is kept (the task is still leased). The lease runs
// out, the sweeper re-queues the task, and another worker's run takes the
// signal at once, without parking: the value is delivered once, the step
// before the wait ran once, and the frozen worker, thawed, ends nothing.
func TestSignalToFrozenRun(t *testing.T) {
	for _, layout := range []fleet.Layout{fleet.LayoutCompat, fleet.LayoutTagged} {
		t.Run(string(layout), func(t *testing.T) {
			t.Parallel()
			c := ctx(t)
			s, fb := ownServer(t, fleet.Options{Layout: layout})
			tg := redistest.Target{Name: "own", URL: s.URL(), Tagged: layout == fleet.LayoutTagged}
			e := &env{F: fb, Tg: tg, Raw: redistest.Client(t, tg)}
			p, err := fleettest.StartProxy(s.Addr)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(p.Close)
			fa := openOn(t, redistest.Target{Name: "proxied", URL: p.URL(), Tagged: tg.Tagged}, "")
			t.Cleanup(p.Thaw) // before fa closes
			opts := fleet.QueueOptions{Lease: time.Second}
			qb := fleet.NewQueue[job](fb, "frozensig", opts)
			var mu sync.Mutex
			var started, ended []string
			var steps atomic.Int32
			got := map[string][]string{}
			parked := 0
			var aCause error
			handler := func(who string) fleet.BatchFunc[wcfg, out, job] {
				return func(ctx context.Context, _ *fleet.Slot[wcfg, out], t *fleet.Task[job]) error {
					mu.Lock()
					started = append(started, who)
					mu.Unlock()
					defer func() {
						mu.Lock()
						ended = append(ended, who)
						if who == "a" {
							aCause = context.Cause(ctx)
						}
						mu.Unlock()
					}()
					if _, err := fleet.Step(ctx, t, "before", func(context.Context) (int, error) { return int(steps.Add(1)), nil }); err != nil {
						return err
					}
					if who == "a" {
						<-ctx.Done() // frozen before its wait: its lease cannot be proven
						return ctx.Err()
					}
					v, err := fleet.WaitSignal[string](ctx, t, "go", time.Hour)
					mu.Lock()
					defer mu.Unlock()
					if errors.Is(err, fleet.ErrSuspended) {
						parked++
					} else if err == nil {
						got[who] = append(got[who], v)
					}
					return err
				}
			}
			startWorker(t, fleet.NewBatchWorker(fa, fleet.WorkerOptions{Type: "frozensig", ID: "a", Slots: 1, StopGrace: 200 * time.Millisecond},
				fleet.NewQueue[job](fa, "frozensig", opts), handler("a")))
			id, err := qb.Submit(c, jobN(1))
			if err != nil {
				t.Fatal(err)
			}
			waitFor(t, 10*time.Second, func() bool { return e.stepFields(t, "frozensig", id)["before"] != "" }, "worker a never recorded the step")
			p.Freeze()
			if err := qb.Signal(c, id, "go", "while frozen"); err != nil {
				t.Fatal(err)
			}
			if f := e.stepFields(t, "frozensig", id); f["\xffsig:go"] != `"while frozen"` || f["\xffpark"] != "" || len(f) != 2 {
				t.Fatalf("the signal to a running task: %q", f)
			}
			startWorker(t, fleet.NewBatchWorker(fb, fleet.WorkerOptions{Type: "frozensig", ID: "b", Slots: 1}, qb, handler("b")))
			runSweeper(t, fb, 50*time.Millisecond)
			waitFor(t, 15*time.Second, func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(got["b"]) > 0
			}, "worker b never took the signal after a's lease ran out")
			waitFor(t, 10*time.Second, func() bool {
				_, err := qb.Lookup(c, id)
				return errors.Is(err, fleet.ErrTaskNotFound)
			}, "task %s acked", id)
			p.Thaw()
			waitFor(t, 10*time.Second, func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(ended) == 2
			}, "both runs ended")
			mu.Lock()
			defer mu.Unlock()
			if len(got) != 1 || len(got["b"]) != 1 || got["b"][0] != "while frozen" || parked != 0 || steps.Load() != 1 {
				t.Fatalf("got %q, parked %d, step runs %d; want b's wait to take the value once, no park, the step once", got, parked, steps.Load())
			}
			if started[0] != "a" || ended[0] != "a" || !errors.Is(aCause, fleet.ErrLeaseLost) {
				t.Fatalf("runs started %v, ended %v; a's cause %v: want a's run to end (lease lost) before b's", started, ended, aCause)
			}
			if n, _ := e.compat().Exists(c, e.stepsKey("frozensig", id)).Result(); n != 0 {
				t.Fatal("the ack left the steps")
			}
		})
	}
}

// TestWaitsSurviveRestart: a task waits for a signal and a parent waits
// for its child (on another queue), both parked, when redis-server
// restarts (AOF) under their running workers. Their steps hashes come
// back field for field; the signal sent after the restart wakes the task,
// and the child's end (its worker started after the restart) wakes the
// parent, each run once more with its steps memoized.
func TestWaitsSurviveRestart(t *testing.T) {
	for _, layout := range []fleet.Layout{fleet.LayoutCompat, fleet.LayoutTagged} {
		t.Run(string(layout), func(t *testing.T) {
			t.Parallel()
			c := ctx(t)
			srv, err := fleettest.StartServer(c, fleettest.Config{AppendOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(srv.Stop)
			tg := redistest.Target{Name: "own", URL: srv.URL(), Tagged: layout == fleet.LayoutTagged}
			e := &env{Tg: tg, Raw: redistest.Client(t, tg), Prefix: ""}
			e.F = openOn(t, tg, "")
			waiters := fleet.NewQueue[job](e.F, "waiters", fleet.QueueOptions{})
			parents := fleet.NewQueue[job](e.F, "parents", fleet.QueueOptions{})
			kids := fleet.NewQueue[job](e.F, "kids", fleet.QueueOptions{})
			h := newWaitingHandler()
			startWorker(t, fleet.NewBatchWorker(e.F, fleet.WorkerOptions{Type: "waiter", ID: "w", Slots: 1}, waiters, fleet.BatchFunc[wcfg, out, job](h.handle)))
			var parentRuns, childStarts atomic.Int32
			results := make(chan []fleet.ChildResult, 2)
			startWorker(t, fleet.NewBatchWorker(e.F, fleet.WorkerOptions{Type: "parent", ID: "p", Slots: 1}, parents,
				fleet.BatchFunc[wcfg, out, job](func(ctx context.Context, _ *fleet.Slot[wcfg, out], t *fleet.Task[job]) error {
					parentRuns.Add(1)
					ch, err := fleet.StartChild(ctx, t, "kid", kids, jobN(7), fleet.SubmitOptions{})
					if err != nil {
						return err
					}
					if _, err := fleet.Step(ctx, t, "started", func(context.Context) (int, error) { return int(childStarts.Add(1)), nil }); err != nil {
						return err
					}
					res, err := fleet.AwaitChildren(ctx, t, "all", time.Hour, ch)
					if err != nil {
						return err
					}
					results <- res
					return nil
				})))
			wid, err := waiters.Submit(c, jobN(1))
			if err != nil {
				t.Fatal(err)
			}
			pid, err := parents.Submit(c, jobN(2))
			if err != nil {
				t.Fatal(err)
			}
			parked := func(name, id string) map[string]string {
				var f map[string]string
				waitFor(t, 10*time.Second, func() bool {
					f = e.stepFields(t, name, id)
					return f["\xffpark"] != "" && f["\xffwait"] != ""
				}, "task %s of %s parked: %q", id, name, later(func() any { return f }))
				sched, err := e.compat().ZRange(c, e.qk(name).Scheduled, 0, -1).Result()
				if err != nil || len(sched) != 1 || sched[0] != f["\xffpark"] {
					t.Fatalf("%s scheduled %q (%v), want the parked body %q", name, sched, err, f["\xffpark"])
				}
				return f
			}
			wf := parked("waiters", wid)
			if len(wf) != 4 || wf["\xffwait"] != `["go"]` || stepOf(t, wf, "go")["s"] != "wait" || stepOf(t, wf, "before")["s"] != "done" {
				t.Fatalf("the waiting task's steps: %q", wf)
			}
			pf := parked("parents", pid)
			var kidRec struct {
				R fleet.Child `json:"r"`
			}
			if err := json.Unmarshal([]byte(pf["kid"]), &kidRec); err != nil {
				t.Fatalf("the child's step %q: %v", pf["kid"], err)
			}
			child := kidRec.R
			if len(pf) != 5 || stepOf(t, pf, "all")["s"] != "wait" || child.Queue != "kids" || pf["\xffwait"] != "[\"\xffc:"+child.ID+"\"]" {
				t.Fatalf("the parent's steps: %q (child %+v)", pf, child)
			}

			if err := srv.Restart(c); err != nil {
				t.Fatal(err)
			}
			// The same fields, byte for byte, and the bodies still parked.
			var after map[string]string
			waitFor(t, 10*time.Second, func() bool {
				raw, err := e.compat().HGetAll(c, e.stepsKey("waiters", wid)).Result()
				after = raw
				return err == nil
			}, "read after the restart")
			if !maps.Equal(after, wf) {
				t.Fatalf("the waiting task's steps after the restart:\n%q\nwant\n%q", after, wf)
			}
			if after := e.stepFields(t, "parents", pid); !maps.Equal(after, pf) {
				t.Fatalf("the parent's steps after the restart:\n%q\nwant\n%q", after, pf)
			}
			for _, name := range []string{"waiters", "parents"} {
				if n, _ := e.compat().ZCard(c, e.qk(name).Scheduled).Result(); n != 1 {
					t.Fatalf("%s: %d scheduled after the restart, want the parked task", name, n)
				}
			}

			// The signal wakes the task.
			waitFor(t, 10*time.Second, func() bool { return waiters.Signal(c, wid, "go", "after the restart") == nil }, "signal after the restart")
			waitFor(t, 10*time.Second, func() bool {
				_, _, got := h.snapshot(wid)
				return len(got) > 0
			}, "the waiting task did not resume")
			// The child's end wakes the parent.
			var kidRuns atomic.Int32
			startWorker(t, fleet.NewBatchWorker(e.F, fleet.WorkerOptions{Type: "kid", ID: "k", Slots: 1}, kids,
				fleet.BatchFunc[wcfg, out, job](func(ctx context.Context, _ *fleet.Slot[wcfg, out], t *fleet.Task[job]) error {
					kidRuns.Add(1)
					return t.SetResult(t.Payload.N)
				})))
			var res []fleet.ChildResult
			select {
			case res = <-results:
			case <-time.After(20 * time.Second):
				t.Fatalf("the parent did not resume after its child ended; its steps: %q", e.stepFields(t, "parents", pid))
			}
			if len(res) != 1 || res[0].ID != child.ID || res[0].Status != fleet.TaskDone || string(res[0].Result) != "7" {
				t.Fatalf("results %+v", res)
			}
			runs, nParked, got := h.snapshot(wid)
			if runs != 2 || nParked != 1 || len(got) != 1 || got[0] != "after the restart" || h.steps.Load() != 1 {
				t.Fatalf("waiting task: runs %d, parked %d, got %q, step runs %d", runs, nParked, got, h.steps.Load())
			}
			if parentRuns.Load() != 2 || childStarts.Load() != 1 || kidRuns.Load() != 1 {
				t.Fatalf("parent runs %d, its step %d, child runs %d; want 2, 1, 1", parentRuns.Load(), childStarts.Load(), kidRuns.Load())
			}
			for _, k := range []string{e.stepsKey("waiters", wid), e.stepsKey("parents", pid)} {
				waitFor(t, 10*time.Second, func() bool {
					n, err := e.compat().Exists(c, k).Result()
					return err == nil && n == 0
				}, "steps %s deleted", k)
			}
		})
	}
}

// TestChildrenParentWorkerDies: a parent (a Reserve holder with a short
// lease) starts two children on two other queues (other slots on a
// cluster) and records its wait, then dies: no park, no ack. The
// children run and end while its lease runs out; the sweeper re-queues
// it, and a worker runs it again: its children come back memoized (none
// submitted again), its wait returns their results at once, and each
// child ran once.
func TestChildrenParentWorkerDies(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		lease := 500 * time.Millisecond
		parents := fleet.NewQueue[job](e.F, "orphans", fleet.QueueOptions{Lease: lease})
		kidsA := fleet.NewQueue[job](e.F, "okids-a", fleet.QueueOptions{})
		kidsB := fleet.NewQueue[job](e.F, "okids-b", fleet.QueueOptions{})
		var mu sync.Mutex
		kidRuns := map[string]int{}
		kid := fleet.BatchFunc[wcfg, out, job](func(ctx context.Context, _ *fleet.Slot[wcfg, out], t *fleet.Task[job]) error {
			mu.Lock()
			kidRuns[t.ID]++
			mu.Unlock()
			return t.SetResult(t.Payload.N)
		})
		pid, err := parents.Submit(c, jobN(1))
		if err != nil {
			t.Fatal(err)
		}
		p := reserveAll(t, parents, 1)[0]
		a, err := fleet.StartChild(c, p, "a", kidsA, jobN(11), fleet.SubmitOptions{})
		if err != nil {
			t.Fatal(err)
		}
		b, err := fleet.StartChild(c, p, "b", kidsB, jobN(12), fleet.SubmitOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fleet.AwaitChildren(c, p, "both", time.Hour, a, b); !errors.Is(err, fleet.ErrSuspended) {
			t.Fatalf("wait: %v", err)
		}
		// The parent's holder dies here. The children run and end.
		startWorker(t, fleet.NewBatchWorker(e.F, fleet.WorkerOptions{Type: "okid-a", ID: "ka", Slots: 1}, kidsA, kid))
		startWorker(t, fleet.NewBatchWorker(e.F, fleet.WorkerOptions{Type: "okid-b", ID: "kb", Slots: 1}, kidsB, kid))
		for _, ch := range []fleet.Child{a, b} {
			field := "\xffsig:\xffc:" + ch.ID
			waitFor(t, 10*time.Second, func() bool { return e.stepFields(t, "orphans", pid)[field] != "" }, "child %s's end passed on", ch.ID)
		}
		// Nothing parked: the dead holder never suspended; the task is
		// still leased.
		if n, _ := e.compat().ZCard(c, e.qk("orphans").Processing).Result(); n != 1 {
			t.Fatalf("%d in processing, want the dead holder's lease", n)
		}
		// Its lease runs out; the sweeper re-queues it; a worker finishes it.
		runSweeper(t, e.F, 50*time.Millisecond)
		var parentRuns atomic.Int32
		results := make(chan []fleet.ChildResult, 2)
		startWorker(t, fleet.NewBatchWorker(e.F, fleet.WorkerOptions{Type: "orphans", ID: "p2", Slots: 1}, parents,
			fleet.BatchFunc[wcfg, out, job](func(ctx context.Context, _ *fleet.Slot[wcfg, out], t *fleet.Task[job]) error {
				parentRuns.Add(1)
				a2, err := fleet.StartChild(ctx, t, "a", kidsA, jobN(11), fleet.SubmitOptions{})
				if err != nil {
					return err
				}
				b2, err := fleet.StartChild(ctx, t, "b", kidsB, jobN(12), fleet.SubmitOptions{})
				if err != nil {
					return err
				}
				res, err := fleet.AwaitChildren(ctx, t, "both", time.Hour, a2, b2)
				if err != nil {
					return err
				}
				results <- res
				return nil
			})))
		var res []fleet.ChildResult
		select {
		case res = <-results:
		case <-time.After(20 * time.Second):
			t.Fatalf("the parent was stranded; its steps: %q", e.stepFields(t, "orphans", pid))
		}
		if len(res) != 2 || res[0].ID != a.ID || res[1].ID != b.ID || string(res[0].Result) != "11" || string(res[1].Result) != "12" ||
			res[0].Status != fleet.TaskDone || res[1].Status != fleet.TaskDone {
			t.Fatalf("results %+v", res)
		}
		waitFor(t, 10*time.Second, func() bool {
			_, err := parents.Lookup(c, pid)
			return errors.Is(err, fleet.ErrTaskNotFound)
		}, "parent %s acked", pid)
		mu.Lock()
		defer mu.Unlock()
		if len(kidRuns) != 2 || kidRuns[a.ID] != 1 || kidRuns[b.ID] != 1 {
			t.Fatalf("child runs %v, want each of %s and %s once", kidRuns, a.ID, b.ID)
		}
		if parentRuns.Load() != 1 {
			t.Fatalf("the parent ran %d times after its holder died, want 1", parentRuns.Load())
		}
		for _, q := range []string{"okids-a", "okids-b"} {
			if n, _ := e.compat().LLen(c, e.qk(q).Pending).Result(); n != 0 {
				t.Fatalf("%s: %d children pending: one was submitted again", q, n)
			}
		}
	})
}

// TestSignalCtxEndsInFlight: a Signal whose ctx ends while its script is
// in flight either applied (a retry says ErrSignalSent) or did not (a
// retry applies): the signal is stored once and its wait returns it once,
// and a parked task is made ready once. First with ctxs that end at
// random within the call (every target), then, on the single node behind
// a proxy, the two outcomes for sure: the script ran and its reply was
// held back, or it never reached the server.
func TestSignalCtxEndsInFlight(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		q := fleet.NewQueue[job](e.F, "inflight", fleet.QueueOptions{})
		k := e.qk("inflight")
		const n = 30
		ids := submitJobs(t, q, n)
		// Half of them wait, parked; the others stay pending (the signal is
		// kept for their wait).
		for range n / 2 {
			r := reserveAll(t, q, 1)[0]
			_, err := fleet.WaitSignal[string](c, r, "go", time.Hour)
			if !errors.Is(err, fleet.ErrSuspended) {
				t.Fatalf("wait: %v", err)
			}
			if err := r.Suspend(c, err); err != nil {
				t.Fatal(err)
			}
		}
		applied, cutApplied, cutNot := 0, 0, 0
		for i, id := range ids {
			v := fmt.Sprintf("v%d", i)
			sctx, cancel := context.WithTimeout(c, time.Duration(i%10)*150*time.Microsecond)
			first := q.Signal(sctx, id, "go", v)
			cancel()
			var retry error
			for {
				retry = q.Signal(c, id, "go", v)
				if !errors.Is(retry, fleet.ErrUnavailable) {
					break
				}
			}
			switch {
			case first == nil:
				applied++
				if !errors.Is(retry, fleet.ErrSignalSent) {
					t.Fatalf("task %s: the first signal applied, the retry said %v, want ErrSignalSent", id, retry)
				}
			case errors.Is(first, context.DeadlineExceeded) || errors.Is(first, fleet.ErrUnavailable):
				switch {
				case retry == nil:
					cutNot++
				case errors.Is(retry, fleet.ErrSignalSent):
					cutApplied++
				default:
					t.Fatalf("task %s: the retry after a signal cut short said %v", id, retry)
				}
			default:
				t.Fatalf("task %s: signal: %v", id, first)
			}
			if got := e.stepFields(t, "inflight", id)["\xffsig:go"]; got != `"`+v+`"` {
				t.Fatalf("task %s: signal stored %q, want %q", id, got, v)
			}
		}
		t.Logf("%d signals applied at once; cut short by their ctx: %d applied (the retry said ErrSignalSent), %d not (the retry applied)", applied, cutApplied, cutNot)
		// Every task is ready once: none left parked, none twice.
		waitFor(t, 5*time.Second, func() bool {
			n2, _ := e.compat().ZCard(c, k.Scheduled).Result()
			return n2 == 0
		}, "parked tasks left after their signals")
		if got := e.lrange(t, k.Pending); len(got) != n {
			t.Fatalf("%d pending, want %d (each once)", len(got), n)
		}
		seen := map[string]bool{}
		for _, r := range reserveAll(t, q, n) {
			if seen[r.ID] {
				t.Fatalf("task %s reserved twice", r.ID)
			}
			seen[r.ID] = true
			v, err := fleet.WaitSignal[string](c, r, "go", time.Hour)
			i := indexOf(ids, r.ID)
			if err != nil || v != fmt.Sprintf("v%d", i) {
				t.Fatalf("task %s: wait %q, %v", r.ID, v, err)
			}
			if err := r.Ack(c); err != nil {
				t.Fatal(err)
			}
		}

	})
}

// TestSignalInFlightOutcomes: the two outcomes of a Signal whose ctx ends
// in flight, made for sure on a server of the test's own behind a proxy:
// its script ran while the server paused writes past the ctx (CLIENT
// PAUSE WRITE: the EVALSHA waits on the server, then runs), so a retry
// says ErrSignalSent; or its call never got past the proxy's held replies,
// so a retry applies. Either way the wait returns the
// value once, and a parked task is made ready once.
func TestSignalInFlightOutcomes(t *testing.T) {
	for _, layout := range []fleet.Layout{fleet.LayoutCompat, fleet.LayoutTagged} {
		t.Run(string(layout), func(t *testing.T) {
			t.Parallel()
			c := ctx(t)
			s, direct := ownServer(t, fleet.Options{Layout: layout})
			tg := redistest.Target{Name: "own", URL: s.URL(), Tagged: layout == fleet.LayoutTagged}
			e := &env{F: direct, Tg: tg, Raw: redistest.Client(t, tg)}
			p, err := fleettest.StartProxy(s.Addr)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(p.Close)
			pf := openOn(t, redistest.Target{Name: "proxied", URL: p.URL(), Tagged: tg.Tagged}, "")
			q := fleet.NewQueue[job](direct, "inflight", fleet.QueueOptions{})
			pq := fleet.NewQueue[job](pf, "inflight", fleet.QueueOptions{})
			if err := pq.Signal(c, "no-such-task", "go", 1); !errors.Is(err, fleet.ErrTaskNotFound) {
				t.Fatalf("warm-up signal: %v", err)
			}
			two := submitJobs(t, q, 2)
			// Both parked, waiting.
			for range 2 {
				r := reserveAll(t, q, 1)[0]
				_, werr := fleet.WaitSignal[string](c, r, "go", time.Hour)
				if err := r.Suspend(c, werr); err != nil {
					t.Fatal(err)
				}
			}

			// Applied after its ctx ended: its EVALSHA waits on the server,
			// which pauses writes, until the ctx ended; then writes resume.
			if err := e.Raw.Do(c, e.Raw.B().ClientPause().Timeout(30000).Write().Build()).Error(); err != nil {
				t.Fatal(err)
			}
			sctx, cancel := context.WithCancel(c)
			signalled := make(chan error, 1)
			go func() { signalled <- pq.Signal(sctx, two[0], "go", "paused") }()
			waitFor(t, 10*time.Second, func() bool { return blockedClients(t, e) > 0 }, "the signal's script never reached the paused server")
			cancel()
			if err := <-signalled; err == nil {
				t.Fatal("a signal held by the paused server came back")
			}
			if f := e.stepFields(t, "inflight", two[0]); f["\xffsig:go"] != "" {
				t.Fatalf("a signal applied while the server paused writes: %q", f)
			}
			if err := e.Raw.Do(c, e.Raw.B().ClientUnpause().Build()).Error(); err != nil {
				t.Fatal(err)
			}
			waitFor(t, 5*time.Second, func() bool { return e.stepFields(t, "inflight", two[0])["\xffsig:go"] == `"paused"` },
				"the signal in flight applied once writes resumed: %q", later(func() any { return e.stepFields(t, "inflight", two[0]) }))
			if err := pq.Signal(c, two[0], "go", "paused"); !errors.Is(err, fleet.ErrSignalSent) {
				t.Fatalf("the retry of an applied signal: %v, want ErrSignalSent", err)
			}

			// Never applied: its call held in the proxy (both ways), then
			// cut before it reached the server.
			p.Freeze()
			sctx, cancel = context.WithTimeout(c, 150*time.Millisecond)
			err = pq.Signal(sctx, two[1], "go", "held")
			cancel()
			if err == nil {
				t.Fatal("a signal whose replies were held came back")
			}
			p.Cut()
			p.Thaw()
			time.Sleep(100 * time.Millisecond) // nothing left in flight to apply late
			if f := e.stepFields(t, "inflight", two[1]); f["\xffsig:go"] != "" || f["\xffpark"] == "" {
				t.Fatalf("a signal that did not reach its script changed the steps: %q", f)
			}
			if err := pq.Signal(c, two[1], "go", "held"); err != nil {
				t.Fatalf("the retry of a signal that did not apply: %v", err)
			}

			// Each woken once, each wait returns its value once.
			if got := e.lrange(t, e.qk("inflight").Pending); len(got) != 2 {
				t.Fatalf("pending %d, want the two woken tasks once each", len(got))
			}
			if n, _ := e.compat().ZCard(c, e.qk("inflight").Scheduled).Result(); n != 0 {
				t.Fatalf("%d still parked", n)
			}
			for _, r := range reserveAll(t, q, 2) {
				want := map[string]string{two[0]: "paused", two[1]: "held"}[r.ID]
				if v, err := fleet.WaitSignal[string](c, r, "go", time.Hour); err != nil || v != want {
					t.Fatalf("task %s: wait %q, %v; want %q", r.ID, v, err, want)
				}
				if err := r.Ack(c); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// blockedClients reads INFO clients' blocked_clients (a client whose
// command waits out a CLIENT PAUSE counts).
func blockedClients(t *testing.T, e *env) int {
	t.Helper()
	info, err := e.Raw.Do(context.Background(), e.Raw.B().Info().Section("clients").Build()).ToString()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "blocked_clients:"); ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				t.Fatalf("blocked_clients %q", v)
			}
			return n
		}
	}
	t.Fatal("no blocked_clients in INFO clients")
	return 0
}

func indexOf(list []string, s string) int {
	for i, x := range list {
		if x == s {
			return i
		}
	}
	return -1
}
