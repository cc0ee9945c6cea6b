package fleet_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/internal/redistest"
)

// Task.AfterAck's funcs run once, in order, when the task's ack took
// effect (Task.Ack, and a worker's ack after its handler returned nil),
// and never for a task that was nacked, released or whose lease was lost.
// Task.Queue and Task.Lease name the task's queue and its lease.
func TestAfterAck(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		q := fleet.NewQueue[job](e.F, "after", fleet.QueueOptions{Lease: 300 * time.Millisecond})
		for n := range 4 {
			if _, err := q.Submit(ctx(t), job{URL: "https://example.com", N: n}); err != nil {
				t.Fatal(err)
			}
		}
		ts := reserveAll(t, q, 4)
		var order []int
		var calls [4]atomic.Int32
		for i, tk := range ts {
			if tk.Queue() != "after" || tk.Lease() != 300*time.Millisecond {
				t.Fatalf("Queue %q, Lease %v", tk.Queue(), tk.Lease())
			}
			tk.AfterAck(func() { calls[i].Add(1); order = append(order, 1) })
			tk.AfterAck(func() { order = append(order, 2) })
			tk.AfterAck(nil) // ignored
		}
		if err := ts[0].Ack(ctx(t)); err != nil {
			t.Fatal(err)
		}
		if calls[0].Load() != 1 || len(order) != 2 || order[0] != 1 || order[1] != 2 {
			t.Fatalf("after an ack: %d calls, order %v", calls[0].Load(), order)
		}
		if err := ts[0].Ack(ctx(t)); !errors.Is(err, fleet.ErrLeaseLost) || calls[0].Load() != 1 {
			t.Fatalf("a second ack: %v, %d calls", err, calls[0].Load())
		}
		if err := ts[1].Nack(ctx(t), errors.New("no")); err != nil {
			t.Fatal(err)
		}
		if err := ts[2].Release(ctx(t)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(400 * time.Millisecond) // ts[3]'s lease runs out
		if _, err := e.F.Sweep(ctx(t), fleet.SweeperOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := ts[3].Ack(ctx(t)); !errors.Is(err, fleet.ErrLeaseLost) {
			t.Fatalf("an ack past the lease: %v", err)
		}
		for i := 1; i < 4; i++ {
			if calls[i].Load() != 0 {
				t.Errorf("task %d, not acked, ran its AfterAck %d times", i, calls[i].Load())
			}
		}

		// Through a worker: the handler's AfterAck runs after its ack.
		wq := fleet.NewQueue[job](e.F, "after-w", fleet.QueueOptions{})
		id, err := wq.Submit(ctx(t), job{URL: "https://example.com", N: 9})
		if err != nil {
			t.Fatal(err)
		}
		acked := make(chan string, 1)
		w := fleet.NewBatchWorker(e.F, fleet.WorkerOptions{Type: "after", Slots: 1}, wq,
			fleet.BatchFunc[struct{}, struct{}, job](func(ctx context.Context, _ *fleet.Slot[struct{}, struct{}], tk *fleet.Task[job]) error {
				tk.AfterAck(func() { acked <- tk.ID })
				return nil
			}))
		startWorker(t, w)
		select {
		case got := <-acked:
			if got != id {
				t.Fatalf("AfterAck of %s, want %s", got, id)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the worker's ack ran no AfterAck")
		}
	})
}
