package fleet_test

import (
	"errors"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/internal/redistest"
)

// TestSignalWakesSequentialGroup: a task of a sequential group
// (GroupLimits.Concurrency 1) that waits for a signal is parked like any
// other, and its signal makes it ready at once (Signal's doc: "A task
// parked waiting for it is made ready at once").
//
// FAILS at 7bf5bed: queue_end.lua's snooze of a sequential group's task
// (the 'p' park included) puts its body back at the head of the group's
// list with the group's permit held until the snooze is due, the wait's
// timeout, and sets no "\xffpark": Signal finds it pending, keeps the
// signal and wakes nothing, so the task (and its whole group) waits out
// the timeout (an hour here) before its wait returns the value.
func TestSignalWakesSequentialGroup(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		q := fleet.NewQueue[job](e.F, "seqsig", fleet.QueueOptions{Groups: fleet.GroupLimits{Concurrency: 1}})
		id, err := q.SubmitWith(c, jobN(1), fleet.SubmitOptions{Group: "g"})
		if err != nil {
			t.Fatal(err)
		}
		a := reserveAll(t, q, 1)[0]
		_, werr := fleet.WaitSignal[string](c, a, "go", time.Hour)
		if !errors.Is(werr, fleet.ErrSuspended) {
			t.Fatalf("wait: %v", werr)
		}
		if err := a.Suspend(c, werr); err != nil {
			t.Fatal(err)
		}
		f := e.stepFields(t, "seqsig", id)
		if err := q.Signal(c, id, "go", "now"); err != nil {
			t.Fatal(err)
		}
		ts, err := q.Reserve(c, 1, 3*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if len(ts) != 1 {
			t.Fatalf("the signal did not make the waiting task of a sequential group ready (its steps when parked: %q; now: %q)",
				f, e.stepFields(t, "seqsig", id))
		}
		if v, err := fleet.WaitSignal[string](c, ts[0], "go", time.Hour); err != nil || v != "now" {
			t.Fatalf("resumed wait: %q, %v", v, err)
		}
	})
}

// TestChildEndWakesSequentialGroup: the same for a parent of a sequential
// group waiting for its child (AwaitChildren): the child's end must make
// it ready at once.
//
// FAILS at 7bf5bed, for the same cause: the parent is not parked (no
// "\xffpark"), so the child's end (queue_signal.lua 'child') is kept and
// wakes nothing until the wait's timeout.
func TestChildEndWakesSequentialGroup(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		parents := fleet.NewQueue[job](e.F, "seqpar", fleet.QueueOptions{Groups: fleet.GroupLimits{Concurrency: 1}})
		kids := fleet.NewQueue[job](e.F, "seqkid", fleet.QueueOptions{})
		pid, err := parents.SubmitWith(c, jobN(1), fleet.SubmitOptions{Group: "g"})
		if err != nil {
			t.Fatal(err)
		}
		p := reserveAll(t, parents, 1)[0]
		ch, err := fleet.StartChild(c, p, "kid", kids, jobN(2), fleet.SubmitOptions{})
		if err != nil {
			t.Fatal(err)
		}
		_, werr := fleet.AwaitChildren(c, p, "wait", time.Hour, ch)
		if !errors.Is(werr, fleet.ErrSuspended) {
			t.Fatalf("wait: %v", werr)
		}
		if err := p.Suspend(c, werr); err != nil {
			t.Fatal(err)
		}
		k := reserveAll(t, kids, 1)[0]
		if err := k.Ack(c); err != nil {
			t.Fatal(err)
		}
		field := "\xffsig:\xffc:" + ch.ID
		waitFor(t, 10*time.Second, func() bool { return e.stepFields(t, "seqpar", pid)[field] != "" }, "the child's end passed on")
		ts, err := parents.Reserve(c, 1, 3*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if len(ts) != 1 {
			t.Fatalf("the child's end did not make its parent of a sequential group ready; its steps: %q", e.stepFields(t, "seqpar", pid))
		}
		if again, err := fleet.StartChild(c, ts[0], "kid", kids, jobN(2), fleet.SubmitOptions{}); err != nil || again != ch {
			t.Fatalf("the resumed run's child: %+v, %v", again, err)
		}
		if res, err := fleet.AwaitChildren(c, ts[0], "wait", time.Hour, ch); err != nil || len(res) != 1 || res[0].Status != fleet.TaskDone {
			t.Fatalf("resumed wait: %+v, %v", res, err)
		}
	})
}
