package fleet_test

import (
	"context"
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/internal/redistest"
)

type step struct {
	Done int `json:"done"`
	Of   int `json:"of"`
}

// TestTaskProgress: a handler's progress values reach a watcher of another
// Fleet live, in order; Lookup shows the last while the task runs; an
// over-size value is refused and changes nothing; a handle whose lease is
// not the task's any more stores nothing; the value goes with the task's
// end.
func TestTaskProgress(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		q := fleet.NewQueue[node](e.F, "pg", fleet.QueueOptions{})
		other := openOn(t, tg, e.Prefix)
		oq := fleet.NewQueue[node](other, "pg", fleet.QueueOptions{})
		sub, err := oq.WatchProgress(c, fleet.SubscribeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		id, err := q.Submit(c, node{N: 1})
		if err != nil {
			t.Fatal(err)
		}
		tasks, err := q.Reserve(c, 1, time.Second)
		if err != nil || len(tasks) != 1 {
			t.Fatal(tasks, err)
		}
		tk := tasks[0]
		for i := 1; i <= 2; i++ {
			if err := tk.Progress(c, step{Done: i, Of: 2}); err != nil {
				t.Fatal(err)
			}
		}
		for i := 1; i <= 2; i++ {
			select {
			case ev := <-sub.C():
				if ev.Queue != "pg" || ev.ID != id || string(ev.Progress) != `{"done":`+string(rune('0'+i))+`,"of":2}` {
					t.Fatalf("event %d: %+v", i, ev)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("event %d not received", i)
			}
		}
		rec, err := oq.Lookup(c, id)
		if err != nil || rec.Status != fleet.TaskActive || string(rec.Progress) != `{"done":2,"of":2}` {
			t.Fatalf("lookup %+v %v", rec, err)
		}
		before := e.dump(t)
		err = tk.Progress(c, strings.Repeat("x", fleet.MaxProgressBytes))
		if !errors.Is(err, fleet.ErrInvalidArgument) {
			t.Fatalf("over-size: %v", err)
		}
		if err := tk.Progress(c, func() {}); !errors.Is(err, fleet.ErrInvalidArgument) {
			t.Fatalf("not JSON: %v", err)
		}
		stale := fleet.StaleTask(tk, "someone-else.1")
		if err := stale.Progress(c, step{Done: 9}); !errors.Is(err, fleet.ErrLeaseLost) {
			t.Fatalf("a handle not holding the lease: %v", err)
		}
		if after := e.dump(t); !maps.Equal(before, after) {
			t.Fatal("a refused progress value changed Redis")
		}
		if err := tk.Ack(c); err != nil {
			t.Fatal(err)
		}
		noLeftovers(t, e) // the value went with the ack
	})
}

// TestProgressInWorker: a batch worker's handler reports progress through
// the task and through a middleware's TaskInfo; the sweeper drops a value
// whose task's lease ran out.
func TestProgressInWorker(t *testing.T) {
	e := open(t, redistest.Targets(t)[0])
	c := ctx(t)
	q := fleet.NewQueue[node](e.F, "pgw", fleet.QueueOptions{Lease: 300 * time.Millisecond})
	seen := make(chan string, 4)
	mw := func(next fleet.Handler) fleet.Handler {
		return func(ctx context.Context, ti fleet.TaskInfo) error {
			if err := ti.Progress(ctx, "started"); err != nil {
				return err
			}
			return next(ctx, ti)
		}
	}
	w := fleet.NewBatchWorker(e.F, fleet.WorkerOptions{Type: "pgw", ID: "w1", Slots: 1, Middleware: []fleet.Middleware{mw}}, q,
		fleet.BatchFunc[wcfg, out, node](func(ctx context.Context, s *fleet.Slot[wcfg, out], tk *fleet.Task[node]) error {
			rec, _ := q.Lookup(ctx, tk.ID)
			seen <- string(rec.Progress)
			return tk.Progress(ctx, step{Done: 1, Of: 1})
		}))
	startWorker(t, w)
	id, _ := q.Submit(c, node{})
	if got := <-seen; got != `"started"` {
		t.Fatalf("the middleware's progress: %q", got)
	}
	if _, err := q.Wait(c, id); !errors.Is(err, fleet.ErrTaskNotFound) {
		// Not tracked, no Retention: the end is not recorded.
		t.Logf("wait: %v", err)
	}
	waitFor(t, 5*time.Second, func() bool { return len(flowLeftovers(t, e)) == 0 }, "progress left after the ack")

	// A value left by a holder whose lease ran out goes at the next sweep.
	id2, _ := q.SubmitWith(c, node{}, fleet.SubmitOptions{NotBefore: time.Now().Add(time.Hour)})
	_ = id2
	q2 := fleet.NewQueue[node](e.F, "pgl", fleet.QueueOptions{Lease: 200 * time.Millisecond})
	if _, err := q2.Submit(c, node{}); err != nil {
		t.Fatal(err)
	}
	tasks, err := q2.Reserve(c, 1, time.Second)
	if err != nil || len(tasks) != 1 {
		t.Fatal(err)
	}
	if err := tasks[0].Progress(c, 1); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	sweepUntil(t, e.F, 10*time.Second, func() bool {
		for _, k := range flowLeftovers(t, e) {
			if strings.Contains(k, "pgl") {
				return false
			}
		}
		return true
	}, "the progress value dropped")
}
