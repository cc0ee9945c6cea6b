package fleet_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/fleettest"
)

// TestSleepSurvivesRestart: a task sleeps; its worker stops, redis-server
// restarts (AOF), the wake time passes while no worker runs; a new
// worker resumes it after its wake time, with its step memoized, and its
// ack deletes its steps.
func TestSleepSurvivesRestart(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	srv, err := fleettest.StartServer(c, fleettest.Config{AppendOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	f, err := fleet.Open(c, fleet.Options{URL: srv.URL()})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	q := fleet.NewQueue[job](f, "sleepy", fleet.QueueOptions{})
	var before, after atomic.Int32
	var wake atomic.Int64 // unix ms
	resumed := make(chan time.Time, 1)
	handler := fleet.BatchFunc[wcfg, out, job](func(ctx context.Context, s *fleet.Slot[wcfg, out], t *fleet.Task[job]) error {
		if _, err := fleet.Step(ctx, t, "before", func(context.Context) (int, error) { return int(before.Add(1)), nil }); err != nil {
			return err
		}
		if err := fleet.Sleep(ctx, t, "nap", 1500*time.Millisecond); err != nil {
			var se *fleet.SleepError
			if errors.As(err, &se) {
				wake.Store(se.Until.UnixMilli())
			}
			return err
		}
		after.Add(1)
		resumed <- time.Now()
		return nil
	})
	w1 := fleet.NewBatchWorker(f, fleet.WorkerOptions{Type: "sleepy", ID: "w1", Slots: 1}, q, handler)
	if err := w1.Start(c); err != nil {
		t.Fatal(err)
	}
	id, err := q.Submit(c, jobN(1))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() bool {
		rec, err := q.Lookup(c, id)
		return err == nil && rec.Status == fleet.TaskScheduled && wake.Load() > 0
	}, "task %s asleep", id)
	if err := w1.Stop(c); err != nil {
		t.Fatal(err)
	}
	if err := srv.Restart(c); err != nil {
		t.Fatal(err)
	}
	// The wake time passes while no worker runs.
	time.Sleep(time.Until(time.UnixMilli(wake.Load())) + 100*time.Millisecond)
	var rec fleet.TaskRecord
	waitFor(t, 10*time.Second, func() bool {
		rec, err = q.Lookup(c, id)
		return err == nil
	}, "lookup after the restart: %v", err)
	if rec.Status != fleet.TaskScheduled || len(rec.Steps) != 2 || rec.Steps[1].Name != "nap" || rec.Steps[1].Wake.UnixMilli() != wake.Load() {
		t.Fatalf("after the restart: %+v", rec)
	}
	w2 := fleet.NewBatchWorker(f, fleet.WorkerOptions{Type: "sleepy", ID: "w2", Slots: 1}, q, handler)
	startWorker(t, w2)
	select {
	case at := <-resumed:
		if at.UnixMilli() < wake.Load() {
			t.Fatalf("resumed at %d, before its wake time %d", at.UnixMilli(), wake.Load())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the task did not resume")
	}
	if before.Load() != 1 || after.Load() != 1 {
		t.Fatalf("before ran %d times, after %d; want 1 and 1", before.Load(), after.Load())
	}
	// The server is this test's own: no steps key is left.
	var left []string
	waitFor(t, 10*time.Second, func() bool {
		left, err = f.Client().Do(c, f.Client().B().Keys().Pattern("*:steps:*").Build()).AsStrSlice()
		return err == nil && len(left) == 0
	}, "steps left after the ack: %v, %v", left, err)
}
