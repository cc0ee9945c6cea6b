package fleet_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/internal/redistest"
)

// TestChildrenAwaited: a parent starts two children on two other queues
// (other slots on a cluster) and waits for them, parked; the children's
// ends make it ready, its next run gets their results, and its steps run
// once. One child that fails fails the wait with ErrDependencyFailed, its
// results still told.
func TestChildrenAwaited(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		parents := fleet.NewQueue[job](e.F, "parents", fleet.QueueOptions{})
		kidsA := fleet.NewQueue[job](e.F, "kids-a", fleet.QueueOptions{})
		kidsB := fleet.NewQueue[job](e.F, "kids-b", fleet.QueueOptions{MaxAttempts: 1})
		var runs, starts atomic.Int32
		parked := make(chan struct{}, 4)
		type end struct {
			res []fleet.ChildResult
			err error
		}
		ended := make(chan end, 4)
		pw := fleet.NewBatchWorker(e.F, fleet.WorkerOptions{Type: "parent", ID: "p1", Slots: 2}, parents,
			fleet.BatchFunc[wcfg, out, job](func(ctx context.Context, s *fleet.Slot[wcfg, out], t *fleet.Task[job]) error {
				runs.Add(1)
				a, err := fleet.StartChild(ctx, t, "a", kidsA, jobN(t.Payload.N*10+1), fleet.SubmitOptions{})
				if err != nil {
					return err
				}
				b, err := fleet.StartChild(ctx, t, "b", kidsB, jobN(t.Payload.N*10+2), fleet.SubmitOptions{})
				if err != nil {
					return err
				}
				if _, err := fleet.Step(ctx, t, "started", func(context.Context) (int, error) { return int(starts.Add(1)), nil }); err != nil {
					return err
				}
				res, err := fleet.AwaitChildren(ctx, t, "both", time.Minute, a, b)
				if errors.Is(err, fleet.ErrSuspended) {
					select {
					case parked <- struct{}{}:
					default:
					}
					return err
				}
				ended <- end{res, err}
				if err != nil {
					return nil // the parent ignores a failed child
				}
				return nil
			}))
		kid := func(ctx context.Context, s *fleet.Slot[wcfg, out], t *fleet.Task[job]) error {
			if t.Payload.N%10 == 2 && t.Payload.N/10 == 2 {
				return errors.New("child b of parent 2 fails")
			}
			return t.SetResult(map[string]int{"n": t.Payload.N})
		}
		startWorker(t, pw)
		startWorker(t, fleet.NewBatchWorker(e.F, fleet.WorkerOptions{Type: "kid-a", ID: "a1", Slots: 2}, kidsA, fleet.BatchFunc[wcfg, out, job](kid)))
		startWorker(t, fleet.NewBatchWorker(e.F, fleet.WorkerOptions{Type: "kid-b", ID: "b1", Slots: 2}, kidsB, fleet.BatchFunc[wcfg, out, job](kid)))

		id1, err := parents.Submit(c, jobN(1))
		if err != nil {
			t.Fatal(err)
		}
		var got end
		stuck := func(id string) {
			rec, err := parents.Lookup(c, id)
			t.Fatalf("the parent did not resume after its children: %+v (%v); its steps: %q; runs %d", rec, err, e.stepFields(t, "parents", id), runs.Load())
		}
		select {
		case got = <-ended:
		case <-time.After(20 * time.Second):
			stuck(id1)
		}
		if got.err != nil || len(got.res) != 2 || got.res[0].Status != fleet.TaskDone || got.res[1].Status != fleet.TaskDone ||
			got.res[0].Queue != "kids-a" || got.res[1].Queue != "kids-b" {
			t.Fatalf("results: %+v, %v", got.res, got.err)
		}
		var r0 map[string]int
		if err := json.Unmarshal(got.res[0].Result, &r0); err != nil || r0["n"] != 11 {
			t.Fatalf("child a's result %s: %v", got.res[0].Result, err)
		}
		if starts.Load() != 1 {
			t.Fatalf("the step before the wait ran %d times", starts.Load())
		}
		// The children were submitted once each: their records say done.
		rec, err := kidsA.Lookup(c, got.res[0].ID)
		if err != nil || rec.Status != fleet.TaskDone {
			t.Fatalf("child a: %+v, %v", rec, err)
		}
		waitFor(t, 5*time.Second, func() bool {
			r, err := parents.Lookup(c, id1)
			return errors.Is(err, fleet.ErrTaskNotFound) || (err == nil && r.Status == fleet.TaskDone)
		}, "parent %s done", id1)
		waitFor(t, 5*time.Second, func() bool {
			n, err := e.compat().Exists(c, e.stepsKey("parents", id1)).Result()
			return err == nil && n == 0
		}, "steps of %s deleted", id1)

		// Parent 2: child b fails.
		id2, err := parents.Submit(c, jobN(2))
		if err != nil {
			t.Fatal(err)
		}
		select {
		case got = <-ended:
		case <-time.After(20 * time.Second):
			stuck(id2)
		}
		if !errors.Is(got.err, fleet.ErrDependencyFailed) || !errors.Is(got.err, fleet.ErrPermanent) || len(got.res) != 2 ||
			got.res[0].Status != fleet.TaskDone || got.res[1].Status != fleet.TaskDead || got.res[1].Error == "" {
			t.Fatalf("failed child: %+v, %v", got.res, got.err)
		}
	})
}

// TestChildBeforePark: a child that ends while its parent still runs
// (before the wait, and between the wait's record and the snooze) is not
// lost: the wait returns it, or the snooze makes the parent ready at once.
// StartChild twice in a run of a name, or a run that dies between the
// submit and the record, submits one child.
func TestChildBeforePark(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		parents := fleet.NewQueue[job](e.F, "par", fleet.QueueOptions{})
		kids := fleet.NewQueue[job](e.F, "kid", fleet.QueueOptions{})
		pid, err := parents.Submit(c, jobN(1))
		if err != nil {
			t.Fatal(err)
		}
		p := reserveAll(t, parents, 1)[0]
		ch, err := fleet.StartChild(c, p, "one", kids, jobN(7), fleet.SubmitOptions{})
		if err != nil {
			t.Fatal(err)
		}
		_, werr := fleet.AwaitChildren(c, p, "wait", time.Minute, ch)
		if !errors.Is(werr, fleet.ErrSuspended) {
			t.Fatalf("wait: %v", werr)
		}
		k := reserveAll(t, kids, 1)[0]
		if k.ID != ch.ID {
			t.Fatalf("child %s, want %s", k.ID, ch.ID)
		}
		if err := k.SetResult(7); err != nil {
			t.Fatal(err)
		}
		if err := k.Ack(c); err != nil {
			t.Fatal(err)
		}
		field := "\xffsig:\xffc:" + ch.ID
		waitFor(t, 10*time.Second, func() bool { return e.stepFields(t, "par", pid)[field] != "" }, "child's end passed on")
		if err := p.Suspend(c, werr); err != nil {
			t.Fatal(err)
		}
		if n, _ := e.compat().ZCard(c, e.qk("par").Scheduled).Result(); n != 0 {
			t.Fatalf("the parent parked with its child ended: %d scheduled", n)
		}
		p2 := reserveAll(t, parents, 1)[0]
		ch2, err := fleet.StartChild(c, p2, "one", kids, jobN(7), fleet.SubmitOptions{})
		if err != nil || ch2 != ch {
			t.Fatalf("memoized child: %+v, %v", ch2, err)
		}
		res, err := fleet.AwaitChildren(c, p2, "wait", time.Minute, ch)
		if err != nil || len(res) != 1 || string(res[0].Result) != "7" {
			t.Fatalf("results: %+v, %v", res, err)
		}
		f := e.stepFields(t, "par", pid)
		if f[field] != "\xffd" || f["\xffwait"] != "" || f["\xffpark"] != "" {
			t.Fatalf("after the wait: %q", f)
		}
		if err := p2.Ack(c); err != nil {
			t.Fatal(err)
		}

		// A run that died between the submit and the step's record: its
		// next run submits the same id, and nothing is added.
		qid, err := parents.Submit(c, jobN(2))
		if err != nil {
			t.Fatal(err)
		}
		a := reserveAll(t, parents, 1)[0]
		x, err := fleet.StartChild(c, a, "x", kids, jobN(8), fleet.SubmitOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.compat().HDel(c, e.stepsKey("par", qid), "x").Err(); err != nil { // as if never recorded
			t.Fatal(err)
		}
		if err := a.Release(c); err != nil {
			t.Fatal(err)
		}
		b := reserveAll(t, parents, 1)[0]
		y, err := fleet.StartChild(c, b, "x", kids, jobN(8), fleet.SubmitOptions{})
		if err != nil || y != x {
			t.Fatalf("child again: %+v, %v; want %+v", y, err, x)
		}
		if n, _ := e.compat().LLen(c, e.qk("kid").Pending).Result(); n != 1 {
			t.Fatalf("%d children pending, want 1", n)
		}
	})
}

// TestChildBadInput: bad children and options are refused, nothing
// submitted or recorded.
func TestChildBadInput(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		parents := fleet.NewQueue[job](e.F, "bp", fleet.QueueOptions{})
		kids := fleet.NewQueue[job](e.F, "bk", fleet.QueueOptions{})
		if _, err := parents.Submit(c, jobN(1)); err != nil {
			t.Fatal(err)
		}
		p := reserveAll(t, parents, 1)[0]
		before := e.dump(t)
		for i, err := range []error{
			func() error {
				_, err := fleet.StartChild(c, p, "k", kids, jobN(1), fleet.SubmitOptions{DedupKey: "d"})
				return err
			}(),
			func() error { _, err := fleet.StartChild(c, p, "", kids, jobN(1), fleet.SubmitOptions{}); return err }(),
			func() error {
				_, err := fleet.StartChild(c, p, "k", kids, jobN(1), fleet.SubmitOptions{ID: "mine"})
				return err
			}(),
			func() error {
				_, err := fleet.StartChild[job](c, p, "k", nil, jobN(1), fleet.SubmitOptions{})
				return err
			}(),
			func() error { _, err := fleet.AwaitChildren(c, p, "w", time.Minute); return err }(),
			func() error {
				_, err := fleet.AwaitChildren(c, p, "w", time.Minute, fleet.Child{Queue: "bk", ID: "x"}, fleet.Child{Queue: "bk", ID: "x"})
				return err
			}(),
			func() error {
				_, err := fleet.AwaitChildren(c, p, "w", 0, fleet.Child{Queue: "bk", ID: "x"})
				return err
			}(),
		} {
			if !errors.Is(err, fleet.ErrInvalidArgument) {
				t.Errorf("case %d: %v, want ErrInvalidArgument", i, err)
			}
		}
		if after := e.dump(t); fmt.Sprint(before) != fmt.Sprint(after) {
			t.Fatalf("bad input changed what is stored:\n%v\n%v", before, after)
		}
	})
}

// TestChildOfAckedParent: the end of a child whose parent was acked
// without waiting for it leaves nothing in the parent's queue.
func TestChildOfAckedParent(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		parents := fleet.NewQueue[job](e.F, "fire", fleet.QueueOptions{})
		kids := fleet.NewQueue[job](e.F, "forget", fleet.QueueOptions{})
		pid, err := parents.Submit(c, jobN(1))
		if err != nil {
			t.Fatal(err)
		}
		p := reserveAll(t, parents, 1)[0]
		ch, err := fleet.StartChild(c, p, "k", kids, jobN(2), fleet.SubmitOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Ack(c); err != nil {
			t.Fatal(err)
		}
		k := reserveAll(t, kids, 1)[0]
		if err := k.Ack(c); err != nil {
			t.Fatal(err)
		}
		// The child's end is passed on (its outbox entry goes), to no one.
		waitFor(t, 10*time.Second, func() bool {
			n, err := e.compat().Exists(c, e.qk("forget").Pending+":flow:"+ch.ID).Result()
			return err == nil && n == 0
		}, "child %s passed on", ch.ID)
		if n, _ := e.compat().Exists(c, e.stepsKey("fire", pid)).Result(); n != 0 {
			t.Fatalf("the acked parent's steps came back: %q", e.stepFields(t, "fire", pid))
		}
	})
}
