package fleet_test

import (
	"errors"
	"maps"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/internal/redistest"
)

// TestSubmitAfterExisting: SubmitOptions.After on tasks that exist
// already, across queues: a live tracked task (the dependent waits, and
// is released by its ack), a tracked task done (released at once, its
// result kept for the dependent), a plain task acked on a queue with
// Retention (its record stands for its end), a dead tracked task (refused
// under FailDependent with nothing written; released at once under
// IgnoreFailure), a task acked without a record (refused: its outcome is
// not known).
func TestSubmitAfterExisting(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		qa := fleet.NewQueue[node](e.F, "ae-a", fleet.QueueOptions{MaxAttempts: 1})
		qr := fleet.NewQueue[node](e.F, "ae-r", fleet.QueueOptions{Retention: time.Minute})
		qd := fleet.NewQueue[node](e.F, "ae-d", fleet.QueueOptions{})
		take := func(q *fleet.Queue[node]) *fleet.Task[node] {
			t.Helper()
			tasks, err := q.Reserve(c, 1, time.Second)
			if err != nil || len(tasks) != 1 {
				t.Fatalf("reserve: %v %v", tasks, err)
			}
			return tasks[0]
		}
		// A live tracked task.
		live, _ := qa.SubmitWith(c, node{N: 1}, fleet.SubmitOptions{Track: true})
		d1, err := qd.SubmitWith(c, node{}, fleet.SubmitOptions{After: fleet.DependOn(qa, live)})
		if err != nil {
			t.Fatal(err)
		}
		if rec, _ := qd.Lookup(c, d1); rec.Status != fleet.TaskWaiting {
			t.Fatalf("d1 %+v", rec)
		}
		tk := take(qa)
		_ = tk.SetResult("one")
		if err := tk.Ack(c); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 5*time.Second, func() bool { rec, _ := qd.Lookup(c, d1); return rec.Status == fleet.TaskPending }, "d1 released")
		// A tracked task done: released at once, the result kept.
		d2, err := qd.SubmitWith(c, node{}, fleet.SubmitOptions{After: fleet.DependOn(qa, live)})
		if err != nil {
			t.Fatal(err)
		}
		if rec, _ := qd.Lookup(c, d2); rec.Status != fleet.TaskPending {
			t.Fatalf("d2 %+v", rec)
		}
		// A plain task acked on a queue with Retention.
		plain, _ := qr.Submit(c, node{})
		if err := take(qr).Ack(c); err != nil {
			t.Fatal(err)
		}
		d3, err := qd.SubmitWith(c, node{}, fleet.SubmitOptions{After: fleet.DependOn(qr, plain)})
		if err != nil {
			t.Fatal(err)
		}
		if rec, _ := qd.Lookup(c, d3); rec.Status != fleet.TaskPending {
			t.Fatalf("d3 %+v", rec)
		}
		// Read the dependents' results as their handlers do.
		for _, want := range []struct {
			id     string
			result string
		}{{d1, `"one"`}, {d2, `"one"`}, {d3, "null"}} {
			tk := take(qd)
			deps, err := tk.Dependencies(c)
			if err != nil || len(deps) != 1 || deps[0].Status != fleet.TaskDone || string(deps[0].Result) != want.result {
				t.Fatalf("task %s: dependencies %+v %v", tk.ID, deps, err)
			}
			if err := tk.Ack(c); err != nil {
				t.Fatal(err)
			}
		}
		// A dead tracked task.
		dead, _ := qa.SubmitWith(c, node{}, fleet.SubmitOptions{Track: true})
		if err := take(qa).Nack(c, errors.New("broke")); err != nil {
			t.Fatal(err)
		}
		// A task acked with no record of its end: its outcome is unknown.
		if _, err := qd.Submit(c, node{}); err != nil {
			t.Fatal(err)
		}
		gt := take(qd)
		if err := gt.Ack(c); err != nil {
			t.Fatal(err)
		}
		before := e.dump(t)
		_, err = qd.SubmitWith(c, node{}, fleet.SubmitOptions{After: fleet.DependOn(qd, gt.ID)})
		if !errors.Is(err, fleet.ErrTaskNotFound) {
			t.Fatalf("after a task acked without a record: %v", err)
		}
		_, err = qd.SubmitWith(c, node{}, fleet.SubmitOptions{After: fleet.DependOn(qa, dead)})
		if !errors.Is(err, fleet.ErrDependencyFailed) {
			t.Fatalf("after a dead task: %v", err)
		}
		if after := e.dump(t); !maps.Equal(before, after) {
			t.Fatal("a refused submit changed Redis")
		}
		d5, err := qd.SubmitWith(c, node{}, fleet.SubmitOptions{After: fleet.Ignoring(fleet.DependOn(qa, dead)...)})
		if err != nil {
			t.Fatal(err)
		}
		tk = take(qd)
		deps, err := tk.Dependencies(c)
		if tk.ID != d5 || err != nil || len(deps) != 1 || deps[0].Status != fleet.TaskDead || deps[0].Error != "broke" {
			t.Fatalf("ignoring a dead task: %s %+v %v", tk.ID, deps, err)
		}
		_ = tk.Ack(c)
		noLeftovers(t, e)
	})
}
