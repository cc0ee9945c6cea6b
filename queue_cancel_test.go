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

// TestQueueCancelWaiting: a pending or a scheduled task is removed, its
// dedup key freed; the others stay as they were.
func TestQueueCancelWaiting(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		qk := e.qk("cx")
		q := fleet.NewQueue[job](e.F, "cx", fleet.QueueOptions{})
		keep, _ := q.Submit(c, job{URL: "https://example.com/keep"})
		gone, err := q.SubmitWith(c, job{URL: "https://example.com/gone"}, fleet.SubmitOptions{DedupKey: "k1"})
		if err != nil {
			t.Fatal(err)
		}
		later, _ := q.SubmitWith(c, job{URL: "https://example.com/later"}, fleet.SubmitOptions{NotBefore: time.Now().Add(time.Hour), DedupKey: "k2"})
		stays, _ := q.SubmitWith(c, job{URL: "https://example.com/stays"}, fleet.SubmitOptions{NotBefore: time.Now().Add(time.Hour)})
		if err := q.Cancel(c, gone); err != nil {
			t.Fatal(err)
		}
		if err := q.Cancel(c, later); err != nil {
			t.Fatal(err)
		}
		if p := e.lrange(t, qk.Pending); len(p) != 1 || !strings.Contains(p[0], keep) {
			t.Fatalf("pending %q", p)
		}
		if s := e.zscores(t, qk.Scheduled); len(s) != 1 || !strings.Contains(s[0].Member, stays) {
			t.Fatalf("scheduled %v", s)
		}
		if d, ok := e.get(t, qk.Dedup); ok || d != "" {
			t.Fatalf("dedup %q", d)
		}
		if got := e.hgetall(t, qk.Dedup); len(got) != 0 {
			t.Fatalf("dedup keys left: %v", got)
		}
		// The key is free: a new submit with it makes a new task.
		if id, err := q.SubmitWith(c, job{URL: "https://example.com/again"}, fleet.SubmitOptions{DedupKey: "k1"}); err != nil || id == gone {
			t.Fatalf("resubmit %s %v", id, err)
		}
	})
}

// TestQueueCancelRunning: a running task's handler gets its ctx cancelled
// with cause ErrCanceled; the task ends in the dead letters, not retried.
func TestQueueCancelRunning(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		qk := e.qk("cr")
		q := fleet.NewQueue[job](e.F, "cr", fleet.QueueOptions{MaxAttempts: 5, BackoffBase: time.Millisecond, BackoffMax: time.Millisecond})
		started := make(chan string, 1)
		causes := make(chan error, 1)
		ends := make(chan error, 1)
		w := fleet.NewBatchWorker(e.F, fleet.WorkerOptions{Type: "cr", ID: "w1", Slots: 2, OnTaskEnd: func(_ string, err error) { ends <- err }}, q,
			fleet.BatchFunc[wcfg, out, job](func(ctx context.Context, s *fleet.Slot[wcfg, out], tk *fleet.Task[job]) error {
				started <- tk.ID
				<-ctx.Done()
				causes <- context.Cause(ctx)
				return ctx.Err()
			}))
		startWorker(t, w)
		// Another Fleet cancels: the cancel reaches the worker through Redis.
		other := fleet.NewQueue[job](openOn(t, tg, e.Prefix), "cr", fleet.QueueOptions{})
		id, _ := q.Submit(c, job{URL: "https://example.com/long"})
		if got := <-started; got != id {
			t.Fatalf("started %s", got)
		}
		if err := other.Cancel(c, id); err != nil {
			t.Fatal(err)
		}
		if cause := <-causes; !errors.Is(cause, fleet.ErrCanceled) {
			t.Fatalf("cause %v", cause)
		}
		if end := <-ends; !errors.Is(end, fleet.ErrCanceled) {
			t.Fatalf("end %v", end)
		}
		dead := e.lrange(t, qk.Dead)
		if len(dead) != 1 || !strings.Contains(dead[0], id) || !strings.Contains(dead[0], `"error":"fleet: task canceled: context canceled"`) || !strings.Contains(dead[0], `"attempts":1`) {
			t.Fatalf("dead %q", dead)
		}
		for _, k := range []string{qk.Pending, qk.Scheduled, qk.Processing, qk.Body} {
			if n := e.do(t, e.Raw.B().Exists().Key(k).Build()); mustInt(t, n) != 0 {
				t.Fatalf("%s left", k)
			}
		}
		// The dead task cannot be cancelled again.
		if err := q.Cancel(c, id); !errors.Is(err, fleet.ErrTaskFinished) {
			t.Fatalf("second cancel: %v", err)
		}
	})
}

func mustInt(t *testing.T, r interface{ AsInt64() (int64, error) }) int64 {
	t.Helper()
	n, err := r.AsInt64()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestQueueCancelBadInput: an unknown id, a finished task, an empty id:
// each a clear error, nothing changed.
func TestQueueCancelBadInput(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		q := fleet.NewQueue[job](e.F, "cb", fleet.QueueOptions{})
		done, _ := q.Submit(c, job{URL: "https://example.com/done"})
		dead, _ := q.Submit(c, job{URL: "https://example.com/dead"})
		ts, err := q.Reserve(c, 2, 0)
		if err != nil || len(ts) != 2 || ts[0].ID != done || ts[1].ID != dead {
			t.Fatalf("reserve %v %v", ts, err)
		}
		if err := ts[0].Ack(c); err != nil {
			t.Fatal(err)
		}
		if err := ts[1].DeadLetter(c, errors.New("broken")); err != nil {
			t.Fatal(err)
		}
		if _, err := q.Submit(c, job{URL: "https://example.com/waits"}); err != nil {
			t.Fatal(err)
		}
		before := e.dump(t)
		for _, tc := range []struct {
			id   string
			want error
		}{{"no-such-id", fleet.ErrTaskNotFound}, {"", fleet.ErrInvalidArgument}, {done, fleet.ErrTaskNotFound}, {dead, fleet.ErrTaskFinished}} {
			if err := q.Cancel(c, tc.id); !errors.Is(err, tc.want) || (tc.id != "" && !strings.Contains(err.Error(), tc.id)) {
				t.Errorf("cancel %q: %v, want %v naming the id", tc.id, err, tc.want)
			}
		}
		if after := e.dump(t); !maps.Equal(before, after) {
			t.Fatalf("changed:\n%v\n%v", before, after)
		}
	})
}
