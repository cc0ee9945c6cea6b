package fleet_test

import (
	"context"
	"errors"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/internal/redistest"
)

// cbLog counts a batch's callbacks' runs, with the status each read.
type cbLog struct {
	mu   sync.Mutex
	runs map[string][]fleet.FlowStatus // payload's N as text -> statuses seen
}

// TestBatch: tasks in two queues, added in two calls while the batch is
// open; closed; OnSuccess and OnComplete each run once, and OnComplete
// reads the exact counts. A batch with a failed task drops OnSuccess and
// runs OnComplete with the failure counted. The status counts (total,
// pending, succeeded, failed, cancelled) are exact at each point. An add
// after Close and a second Close are refused, and change nothing.
func TestBatch(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		qa := fleet.NewQueue[node](e.F, "ba-a", fleet.QueueOptions{})
		qb := fleet.NewQueue[node](e.F, "ba-b", fleet.QueueOptions{})
		cbq := fleet.NewQueue[node](e.F, "ba-cb", fleet.QueueOptions{})
		log := newRunLog()
		gate := make(chan struct{})
		failingWorker(t, e.F, qa, log)
		flowWorker(t, e.F, qb, log, func(ctx context.Context, tk *fleet.Task[node]) (int, error) {
			<-gate
			return tk.Payload.N, nil
		})
		cbs := &cbLog{runs: map[string][]fleet.FlowStatus{}}
		flowWorker(t, e.F, cbq, log, func(ctx context.Context, tk *fleet.Task[node]) (int, error) {
			st, ok, err := tk.BatchStatus(ctx)
			if err != nil || !ok {
				return 0, errors.Join(err, errors.New("no batch status"))
			}
			cbs.mu.Lock()
			key := map[int]string{1: "success", 2: "complete"}[tk.Payload.N] + ":" + st.ID
			cbs.runs[key] = append(cbs.runs[key], st)
			cbs.mu.Unlock()
			return 0, nil
		})
		seen := func(kind, id string) []fleet.FlowStatus {
			cbs.mu.Lock()
			defer cbs.mu.Unlock()
			return cbs.runs[kind+":"+id]
		}

		b, err := e.F.NewBatch(c, fleet.BatchOptions{
			OnSuccess:  fleet.NewCallback(cbq, node{N: 1}, fleet.SubmitOptions{}),
			OnComplete: fleet.NewCallback(cbq, node{N: 2}, fleet.SubmitOptions{}),
		})
		if err != nil {
			t.Fatalf("NewBatch: %v", err)
		}
		if _, err := fleet.BatchAdd(c, b, qa, []node{{N: 1}, {N: 2}}, fleet.SubmitOptions{}); err != nil {
			t.Fatalf("add: %v", err)
		}
		ids, err := fleet.BatchAdd(c, b, qb, []node{{N: 3}, {N: 4}, {N: 5}}, fleet.SubmitOptions{})
		if err != nil || len(ids) != 3 {
			t.Fatalf("add: %v %v", ids, err)
		}
		waitFor(t, 10*time.Second, func() bool {
			st, _ := b.Status(c)
			return st == fleet.FlowStatus{ID: b.ID(), State: fleet.FlowOpen, Total: 5, Pending: 3, Succeeded: 2}
		}, "status before the gate")
		close(gate)
		waitFor(t, 10*time.Second, func() bool {
			st, _ := b.Status(c)
			return st == fleet.FlowStatus{ID: b.ID(), State: fleet.FlowOpen, Total: 5, Succeeded: 5}
		}, "status after the tasks")
		time.Sleep(50 * time.Millisecond)
		if len(seen("success", b.ID()))+len(seen("complete", b.ID())) != 0 {
			t.Fatal("a callback ran before Close")
		}
		if err := b.Close(c); err != nil {
			t.Fatalf("Close: %v", err)
		}
		waitFor(t, 10*time.Second, func() bool {
			return len(seen("success", b.ID())) == 1 && len(seen("complete", b.ID())) == 1
		}, "callbacks")
		want := fleet.FlowStatus{ID: b.ID(), State: fleet.FlowDone, Total: 5, Succeeded: 5}
		if got := seen("complete", b.ID())[0]; got != want {
			t.Fatalf("OnComplete read %+v, want %+v", got, want)
		}
		noLeftovers(t, e) // the callbacks' ends passed on: Redis is still
		before := e.dump(t)
		if _, err := fleet.BatchAdd(c, b, qa, []node{{N: 9}}, fleet.SubmitOptions{}); !errors.Is(err, fleet.ErrBatchClosed) {
			t.Fatalf("add after Close: %v", err)
		}
		if err := b.Close(c); !errors.Is(err, fleet.ErrBatchClosed) {
			t.Fatalf("second Close: %v", err)
		}
		if after := e.dump(t); !maps.Equal(before, after) {
			t.Fatalf("a refused add or Close changed Redis")
		}
		if err := e.F.Batch("0190aaaa-0000-7000-8000-000000000000").Close(c); !errors.Is(err, fleet.ErrFlowNotFound) {
			t.Fatalf("close of no batch: %v", err)
		}

		// A failed task: OnSuccess is dropped, OnComplete counts it.
		b2, err := e.F.NewBatch(c, fleet.BatchOptions{
			OnSuccess:  fleet.NewCallback(cbq, node{N: 1}, fleet.SubmitOptions{}),
			OnComplete: fleet.NewCallback(cbq, node{N: 2}, fleet.SubmitOptions{}),
		})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fleet.BatchAdd(c, b2, qa, []node{{N: 1}, {Fail: true}}, fleet.SubmitOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := b2.Close(c); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 10*time.Second, func() bool { return len(seen("complete", b2.ID())) == 1 }, "OnComplete")
		if got := seen("complete", b2.ID())[0]; got != (fleet.FlowStatus{ID: b2.ID(), State: fleet.FlowDone, Total: 2, Succeeded: 1, Failed: 1}) {
			t.Fatalf("OnComplete read %+v", got)
		}
		time.Sleep(100 * time.Millisecond)
		if n := len(seen("success", b2.ID())); n != 0 {
			t.Fatalf("OnSuccess ran %d times after a failure", n)
		}
		// An empty batch closed: both callbacks run at once.
		b3, err := e.F.NewBatch(c, fleet.BatchOptions{OnSuccess: fleet.NewCallback(cbq, node{N: 1}, fleet.SubmitOptions{})})
		if err != nil {
			t.Fatal(err)
		}
		if err := b3.Close(c); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 10*time.Second, func() bool { return len(seen("success", b3.ID())) == 1 }, "OnSuccess of an empty batch")
		noLeftovers(t, e)
	})
}
