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

// sweepUntil sweeps with f until cond holds (or d passes).
func sweepUntil(t *testing.T, f *fleet.Fleet, d time.Duration, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v of sweeps", what, d)
		}
		if _, err := f.Sweep(context.Background(), fleet.SweeperOptions{}); err != nil {
			t.Logf("sweep: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// chain3 adds a chain a -> b -> c over qa, qb, qc to fl.
func chain3(fl *fleet.Flow, qa, qb, qc *fleet.Queue[node]) (a, b, c *fleet.FlowStep) {
	a = fleet.AddStep(fl, qa, node{N: 1}, fleet.SubmitOptions{})
	b = fleet.AddStep(fl, qb, node{N: 2, Kids: []string{a.ID()}}, fleet.SubmitOptions{After: fleet.Steps(a)})
	c = fleet.AddStep(fl, qc, node{N: 3, Kids: []string{b.ID()}}, fleet.SubmitOptions{After: fleet.Steps(b)})
	return a, b, c
}

// TestFlowCrashBeforeCommit: a submit whose process died after it put its
// records (before the commit) leaves nothing that runs: the sweeper drops
// the records once the grace passed, and nothing of the flow is left but
// its own record (in state new, which expires within the hour).
func TestFlowCrashBeforeCommit(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		fleet.SetFlowTimings(e.F, 50*time.Millisecond, 200*time.Millisecond)
		qa := fleet.NewQueue[node](e.F, "fc-a", fleet.QueueOptions{})
		qb := fleet.NewQueue[node](e.F, "fc-b", fleet.QueueOptions{})
		for _, step := range []int{2, 3} {
			fl := fleet.NewFlow(e.F, fleet.FlowOptions{})
			chain3(fl, qa, qb, qb)
			if err := fleet.SubmitFlowUntil(c, fl, step); err != nil {
				t.Fatal(err)
			}
			if len(flowLeftovers(t, e)) == 0 {
				t.Fatal("the records were not put")
			}
			sweepUntil(t, e.F, 10*time.Second, func() bool { return len(flowLeftovers(t, e)) == 0 }, "the records dropped")
			if st, err := qa.Stats(c); err != nil || st.Pending+st.InFlight+st.Waiting != 0 {
				t.Fatalf("stats %+v %v", st, err)
			}
			fk := e.key("fleet:flow:"+fl.ID(), "fleet:flow:{"+fl.ID()+"}")
			if d := ttlOf(t, e, fk); d <= 0 || d > time.Hour {
				t.Fatalf("the flow's record: ttl %v, want (0, 1h]", d)
			}
			if _, err := e.F.FlowStatus(c, fl.ID()); !errors.Is(err, fleet.ErrFlowNotFound) {
				t.Fatalf("status of a flow never committed: %v", err)
			}
		}
	})
}

// TestFlowCrashAfterCommit: a submit whose process died right after the
// commit (before marking its records) is rolled forward by the sweeper:
// the flow runs to its end, each task once.
func TestFlowCrashAfterCommit(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		fleet.SetFlowTimings(e.F, 50*time.Millisecond, 200*time.Millisecond)
		qa := fleet.NewQueue[node](e.F, "fk-a", fleet.QueueOptions{})
		qb := fleet.NewQueue[node](e.F, "fk-b", fleet.QueueOptions{})
		log := newRunLog()
		flowWorker(t, e.F, qa, log, func(ctx context.Context, tk *fleet.Task[node]) (int, error) { return tk.Payload.N, nil })
		flowWorker(t, e.F, qb, log, sumKids(qb))
		fl := fleet.NewFlow(e.F, fleet.FlowOptions{})
		a := fleet.AddStep(fl, qa, node{N: 1}, fleet.SubmitOptions{})
		b := fleet.AddStep(fl, qb, node{N: 2}, fleet.SubmitOptions{After: fleet.Steps(a)})
		cc := fleet.AddStep(fl, qb, node{N: 3, Kids: []string{b.ID()}}, fleet.SubmitOptions{After: fleet.Steps(b)})
		if err := fleet.SubmitFlowUntil(c, fl, 4); err != nil {
			t.Fatal(err)
		}
		if rec, err := qa.Lookup(c, a.ID()); err != nil || rec.Status != fleet.TaskWaiting {
			t.Fatalf("the leaf before the sweep: %+v %v", rec, err)
		}
		done := make(chan error, 1)
		go func() { _, err := qb.Wait(c, cc.ID()); done <- err }()
		sweepUntil(t, e.F, 10*time.Second, func() bool { return len(done) == 1 }, "the flow ran")
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		for _, s := range []*fleet.FlowStep{a, b, cc} {
			if n := log.runs(s.ID()); n != 1 {
				t.Errorf("task %s ran %d times", s.ID(), n)
			}
		}
		noLeftovers(t, e)
	})
}

// TestFlowEndsLeftInOutbox: a process that acks tracked tasks and dies
// before it passes their ends on (its driver stopped) strands nothing: a
// sweeper of another process passes them on, and the flow runs to its
// end, each task once.
func TestFlowEndsLeftInOutbox(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		dead := openOn(t, tg, e.Prefix) // the process that acks and "dies"
		fleet.StopFlowDriver(dead)
		sweeper := openOn(t, tg, e.Prefix)
		fleet.SetFlowTimings(sweeper, 20*time.Millisecond, time.Minute)
		qa := fleet.NewQueue[node](dead, "fo-a", fleet.QueueOptions{})
		qb := fleet.NewQueue[node](dead, "fo-b", fleet.QueueOptions{})
		fleet.NewQueue[node](sweeper, "fo-a", fleet.QueueOptions{})
		fleet.NewQueue[node](sweeper, "fo-b", fleet.QueueOptions{})
		sub := fleet.NewQueue[node](e.F, "fo-b", fleet.QueueOptions{})
		log := newRunLog()
		flowWorker(t, dead, qa, log, func(ctx context.Context, tk *fleet.Task[node]) (int, error) { return 1, nil })
		flowWorker(t, dead, qb, log, func(ctx context.Context, tk *fleet.Task[node]) (int, error) { return 2, nil })
		fl := fleet.NewFlow(e.F, fleet.FlowOptions{})
		a, b, cc := chain3(fl, fleet.NewQueue[node](e.F, "fo-a", fleet.QueueOptions{}), sub, sub)
		if err := fl.Submit(c); err != nil {
			t.Fatal(err)
		}
		var end atomic.Bool
		go func() {
			if _, err := sub.Wait(c, cc.ID()); err == nil {
				end.Store(true)
			}
		}()
		// Without a sweep, b never leaves its wait: a's end is in a's outbox.
		waitFor(t, 10*time.Second, func() bool { return log.runs(a.ID()) == 1 }, "a ran")
		time.Sleep(100 * time.Millisecond)
		if rec, err := sub.Lookup(c, b.ID()); err != nil || rec.Status != fleet.TaskWaiting {
			t.Fatalf("b before the sweep: %+v %v", rec, err)
		}
		sweepUntil(t, sweeper, 20*time.Second, end.Load, "the flow ran")
		for _, s := range []*fleet.FlowStep{a, b, cc} {
			if n := log.runs(s.ID()); n != 1 {
				t.Errorf("task %s ran %d times", s.ID(), n)
			}
		}
		sweepUntil(t, sweeper, 10*time.Second, func() bool { return len(flowLeftovers(t, e)) == 0 }, "no flow keys left")
		st, err := e.F.FlowStatus(c, fl.ID())
		if err != nil || st.State != fleet.FlowDone || st.Succeeded != 3 {
			t.Fatalf("status %+v %v", st, err)
		}
	})
}

// TestFlowSubmitRepliesHeld: a submit whose replies are held back ends
// with its ctx mid-way; whatever it wrote is either a whole flow (it runs
// to its end) or nothing (dropped): after the sweeps, nothing is left.
func TestFlowSubmitRepliesHeld(t *testing.T) {
	p := startProxied(t, fleet.Options{Layout: fleet.LayoutCompat})
	e := p.E
	fleet.SetFlowTimings(p.Direct, 20*time.Millisecond, 300*time.Millisecond)
	qa := fleet.NewQueue[node](p.Direct, "fh-a", fleet.QueueOptions{})
	qb := fleet.NewQueue[node](p.Direct, "fh-b", fleet.QueueOptions{})
	log := newRunLog()
	flowWorker(t, p.Direct, qa, log, func(ctx context.Context, tk *fleet.Task[node]) (int, error) { return 1, nil })
	flowWorker(t, p.Direct, qb, log, func(ctx context.Context, tk *fleet.Task[node]) (int, error) { return 2, nil })
	ta := fleet.NewQueue[node](p.Through, "fh-a", fleet.QueueOptions{})
	tb := fleet.NewQueue[node](p.Through, "fh-b", fleet.QueueOptions{})
	for i, hold := range []time.Duration{0, 2 * time.Millisecond, 5 * time.Millisecond, 20 * time.Millisecond} {
		fl := fleet.NewFlow(p.Through, fleet.FlowOptions{})
		_, _, last := chain3(fl, ta, tb, tb)
		p.P.HoldReplies()
		sctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond+hold)
		err := fl.Submit(sctx)
		cancel()
		p.P.Thaw()
		t.Logf("submit %d: %v", i, err)
		sweepUntil(t, p.Direct, 20*time.Second, func() bool {
			return len(flowLeftovers(t, e)) == 0
		}, "no flow keys left")
		if n := log.runs(last.ID()); n > 1 {
			t.Fatalf("the join ran %d times", n)
		}
	}
}

// TestFlowAbortTellsOutsideDependents: a task that waits for a task of a
// submit that never commits is not stranded: when the sweeper aborts the
// submit, the task it waited for ends as cancelled, and the waiting task
// (under FailDependent) goes to the dead letters.
func TestFlowAbortTellsOutsideDependents(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		fleet.SetFlowTimings(e.F, 20*time.Millisecond, 200*time.Millisecond)
		qa := fleet.NewQueue[node](e.F, "fa-a", fleet.QueueOptions{})
		qb := fleet.NewQueue[node](e.F, "fa-b", fleet.QueueOptions{})
		fl := fleet.NewFlow(e.F, fleet.FlowOptions{})
		a := fleet.AddStep(fl, qa, node{}, fleet.SubmitOptions{})
		if err := fleet.SubmitFlowUntil(c, fl, 2); err != nil { // put, never committed
			t.Fatal(err)
		}
		x, err := qb.SubmitWith(c, node{}, fleet.SubmitOptions{After: fleet.DependOn(qa, a.ID())})
		if err != nil {
			t.Fatalf("after a task of a submit under way: %v", err)
		}
		var rec fleet.TaskRecord
		sweepUntil(t, e.F, 10*time.Second, func() bool {
			rec, _ = qb.Lookup(c, x)
			return rec.Status == fleet.TaskDead
		}, "the waiting task failed")
		if !strings.Contains(rec.LastError, fleet.ErrDependencyFailed.Error()) || !strings.Contains(rec.LastError, "submit was aborted") {
			t.Fatalf("its error: %q", rec.LastError)
		}
		sweepUntil(t, e.F, 10*time.Second, func() bool { return len(flowLeftovers(t, e)) == 0 }, "no flow keys left")
	})
}
