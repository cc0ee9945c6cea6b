package fleet_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/fleettest"
	"github.com/fleet-go/fleet/internal/redistest"
)

// TestQueueWait: Wait in one Fleet returns when another Fleet acks the
// task (tracked, or on a queue with Retention), with its result; at once
// for a task that ended and is retained; with ErrTaskFailed for a task
// that went to the dead letters; with ErrTaskNotFound for an unknown one;
// ResultOf with Await decodes the result.
func TestQueueWait(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		other := openOn(t, tg, e.Prefix)
		q := fleet.NewQueue[node](e.F, "wt", fleet.QueueOptions{MaxAttempts: 1})
		oq := fleet.NewQueue[node](other, "wt", fleet.QueueOptions{MaxAttempts: 1})
		id, err := q.SubmitWith(c, node{N: 7}, fleet.SubmitOptions{Track: true})
		if err != nil {
			t.Fatal(err)
		}
		type res struct {
			n   int
			err error
		}
		got := make(chan res, 1)
		go func() {
			n, err := fleet.ResultOf[int](c, q, id, fleet.Await())
			got <- res{n, err}
		}()
		time.Sleep(50 * time.Millisecond)
		select {
		case r := <-got:
			t.Fatalf("Wait returned before the ack: %+v", r)
		default:
		}
		tasks, err := oq.Reserve(c, 1, time.Second)
		if err != nil || len(tasks) != 1 {
			t.Fatal(tasks, err)
		}
		if err := tasks[0].SetResult(42); err != nil {
			t.Fatal(err)
		}
		if err := tasks[0].Ack(c); err != nil {
			t.Fatal(err)
		}
		select {
		case r := <-got:
			if r.err != nil || r.n != 42 {
				t.Fatalf("ResultOf with Await: %+v", r)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Wait did not return after the ack")
		}
		// Ended and retained: at once.
		rec, err := q.Wait(c, id)
		if err != nil || rec.Status != fleet.TaskDone || string(rec.Result) != "42" {
			t.Fatalf("wait again: %+v %v", rec, err)
		}
		// Dead: ErrTaskFailed, with the error.
		id2, _ := q.SubmitWith(c, node{}, fleet.SubmitOptions{Track: true})
		tasks, _ = oq.Reserve(c, 1, time.Second)
		if len(tasks) != 1 {
			t.Fatal("no task")
		}
		if err := tasks[0].Nack(c, errors.New("boom")); err != nil {
			t.Fatal(err)
		}
		rec, err = q.Wait(c, id2)
		if !errors.Is(err, fleet.ErrTaskFailed) || rec.Status != fleet.TaskDead || rec.LastError != "boom" {
			t.Fatalf("dead: %+v %v", rec, err)
		}
		// A plain task on a queue whose acker retains records.
		rq := fleet.NewQueue[node](e.F, "wr", fleet.QueueOptions{Retention: time.Minute})
		orq := fleet.NewQueue[node](other, "wr", fleet.QueueOptions{Retention: time.Minute})
		id3, _ := rq.Submit(c, node{})
		done := make(chan error, 1)
		go func() { _, err := rq.Wait(c, id3); done <- err }()
		tasks2, _ := orq.Reserve(c, 1, time.Second)
		if len(tasks2) != 1 {
			t.Fatal("no task")
		}
		if err := tasks2[0].Ack(c); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Wait on a retained queue did not return")
		}
		if _, err := q.Wait(c, "0190aaaa-0000-7000-8000-000000000000"); !errors.Is(err, fleet.ErrTaskNotFound) {
			t.Fatalf("unknown: %v", err)
		}
		if _, err := q.Wait(c, ""); !errors.Is(err, fleet.ErrInvalidArgument) {
			t.Fatalf("empty id: %v", err)
		}
		cctx, cancel := context.WithTimeout(c, 50*time.Millisecond)
		id4, _ := q.SubmitWith(c, node{}, fleet.SubmitOptions{Track: true})
		if _, err := q.Wait(cctx, id4); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("ctx: %v", err)
		}
		cancel()
	})
}

// TestQueueWaitRestart: a wait survives a Redis restart: it looks again
// after the reconnect, and returns when the task is acked after it.
func TestQueueWaitRestart(t *testing.T) {
	s, err := fleettest.StartServer(ctx(t), fleettest.Config{AppendOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	f, err := fleet.Open(ctx(t), fleet.Options{URL: s.URL()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	c := ctx(t)
	q := fleet.NewQueue[node](f, "wrs", fleet.QueueOptions{})
	id, err := q.SubmitWith(c, node{}, fleet.SubmitOptions{Track: true})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := q.Wait(c, id); done <- err }()
	time.Sleep(50 * time.Millisecond)
	if err := s.Restart(c); err != nil {
		t.Fatal(err)
	}
	// Ack through a Fleet of its own, once the server is back.
	g, err := fleet.Open(c, fleet.Options{URL: s.URL()})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	gq := fleet.NewQueue[node](g, "wrs", fleet.QueueOptions{})
	tasks, err := gq.Reserve(c, 1, 5*time.Second)
	if err != nil || len(tasks) != 1 {
		t.Fatal(tasks, err)
	}
	if err := tasks[0].Ack(c); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Wait across the restart: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Wait did not return after the restart and the ack")
	}
}
