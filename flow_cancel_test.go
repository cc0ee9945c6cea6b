package fleet_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/internal/redistest"
)

// TestFlowCancel: cancel of a running flow cancels every task of it that
// has not ended: the running one (its handler's ctx ends with ErrCanceled,
// and it goes to the dead letters as cancelled), the pending one (off its
// queue), the waiting ones (never run); the flow counts them, and is done.
// A second cancel says the flow finished; an unknown id is not found.
func TestFlowCancel(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		qa := fleet.NewQueue[node](e.F, "fx-a", fleet.QueueOptions{})
		qb := fleet.NewQueue[node](e.F, "fx-b", fleet.QueueOptions{})
		started := make(chan string, 4)
		causes := make(chan error, 4)
		log := newRunLog()
		w := fleet.NewBatchWorker(e.F, fleet.WorkerOptions{Type: "fx", ID: "w1", Slots: 1}, qa,
			fleet.BatchFunc[wcfg, out, node](func(ctx context.Context, s *fleet.Slot[wcfg, out], tk *fleet.Task[node]) error {
				log.start(tk.ID)
				started <- tk.ID
				<-ctx.Done()
				causes <- context.Cause(ctx)
				return context.Cause(ctx)
			}))
		startWorker(t, w)
		flowWorker(t, e.F, qb, log, func(ctx context.Context, tk *fleet.Task[node]) (int, error) { return 0, nil })

		fl := fleet.NewFlow(e.F, fleet.FlowOptions{})
		run := fleet.AddStep(fl, qa, node{N: 1}, fleet.SubmitOptions{})  // runs until cancelled
		pend := fleet.AddStep(fl, qa, node{N: 2}, fleet.SubmitOptions{}) // waits on its queue: one slot
		b := fleet.AddStep(fl, qb, node{}, fleet.SubmitOptions{After: fleet.Ignoring(fleet.Steps(run)...)})
		join := fleet.AddStep(fl, qb, node{}, fleet.SubmitOptions{After: fleet.Ignoring(fleet.Steps(b, pend)...)})
		if err := fl.Submit(c); err != nil {
			t.Fatal(err)
		}
		first := <-started
		if err := e.F.CancelFlow(c, fl.ID()); err != nil {
			t.Fatalf("CancelFlow: %v", err)
		}
		if cause := <-causes; !errors.Is(cause, fleet.ErrCanceled) {
			t.Fatalf("the running task's cause %v", cause)
		}
		want := fleet.FlowStatus{ID: fl.ID(), State: fleet.FlowDone, Total: 4, Canceled: 4}
		var st fleet.FlowStatus
		waitFor(t, 10*time.Second, func() bool { st, _ = e.F.FlowStatus(c, fl.ID()); return st == want }, "status")
		if st != want {
			t.Fatalf("status %+v", st)
		}
		for _, s := range []*fleet.FlowStep{pend, b, join} {
			if n := log.runs(s.ID()); n != 0 {
				t.Errorf("task %s ran after the cancel", s.ID())
			}
			rec, err := qb.Wait(c, s.ID())
			if s == pend {
				rec, err = qa.Wait(c, s.ID())
			}
			if !errors.Is(err, fleet.ErrCanceled) || rec.Status != fleet.TaskCanceled {
				t.Errorf("task %s: %+v %v", s.ID(), rec, err)
			}
		}
		rec, err := qa.Wait(c, first)
		if !errors.Is(err, fleet.ErrCanceled) || rec.Status != fleet.TaskCanceled {
			t.Errorf("the running task: %+v %v", rec, err)
		}
		if dead, _ := qa.DeadLetters(c, 0, 10); len(dead) != 1 || !strings.HasPrefix(dead[0].Error, fleet.ErrCanceled.Error()) {
			t.Errorf("dead letters %+v", dead)
		}
		if err := e.F.CancelFlow(c, fl.ID()); !errors.Is(err, fleet.ErrFlowFinished) {
			t.Errorf("second cancel: %v", err)
		}
		if err := e.F.CancelFlow(c, "0190aaaa-0000-7000-8000-000000000000"); !errors.Is(err, fleet.ErrFlowNotFound) {
			t.Errorf("unknown flow: %v", err)
		}
		noLeftovers(t, e)
	})
}

// TestQueueCancelTracked: Queue.Cancel of a tracked task that waits for
// its dependencies cancels it, and its dependents under FailDependent are
// dead-lettered (a cancelled dependency dead-letters its dependents).
func TestQueueCancelTracked(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		q := fleet.NewQueue[node](e.F, "qct", fleet.QueueOptions{})
		root, err := q.SubmitWith(c, node{}, fleet.SubmitOptions{Track: true, NotBefore: time.Now().Add(time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		mid, err := q.SubmitWith(c, node{}, fleet.SubmitOptions{After: fleet.DependOn(q, root)})
		if err != nil {
			t.Fatal(err)
		}
		leaf, err := q.SubmitWith(c, node{}, fleet.SubmitOptions{After: fleet.DependOn(q, mid)})
		if err != nil {
			t.Fatal(err)
		}
		if rec, err := q.Lookup(c, mid); err != nil || rec.Status != fleet.TaskWaiting || len(rec.Dependencies) != 1 || rec.Dependencies[0].ID != root {
			t.Fatalf("mid %+v %v", rec, err)
		}
		if err := q.Cancel(c, mid); err != nil {
			t.Fatalf("Cancel: %v", err)
		}
		rec, err := q.Wait(c, leaf)
		if !errors.Is(err, fleet.ErrTaskFailed) || !strings.Contains(rec.LastError, fleet.ErrDependencyFailed.Error()) {
			t.Fatalf("leaf %+v %v", rec, err)
		}
		if err := q.Cancel(c, mid); !errors.Is(err, fleet.ErrTaskFinished) {
			t.Fatalf("second cancel: %v", err)
		}
		// The root (scheduled) is cancelled too: it had no dependents left.
		if err := q.Cancel(c, root); err != nil {
			t.Fatal(err)
		}
		if _, err := q.Wait(c, root); !errors.Is(err, fleet.ErrCanceled) {
			t.Fatalf("root: %v", err)
		}
		noLeftovers(t, e)
	})
}
