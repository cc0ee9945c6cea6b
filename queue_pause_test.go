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

// TestQueuePause: paused, a running worker reserves nothing and a worker
// started later (another Fleet: the flag is in Redis) neither, while
// submits are accepted; Stats and Overview say so; resumed, both take the
// tasks.
func TestQueuePause(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		qk := e.qk("pq")
		q := fleet.NewQueue[job](e.F, "pq", fleet.QueueOptions{})
		handler := fleet.BatchFunc[wcfg, out, job](func(ctx context.Context, s *fleet.Slot[wcfg, out], tk *fleet.Task[job]) error { return nil })
		w1 := fleet.NewBatchWorker(e.F, fleet.WorkerOptions{Type: "pq", ID: "w1", Slots: 2}, q, handler)
		startWorker(t, w1)
		if _, err := q.Submit(c, job{URL: "https://example.com/0"}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 5*time.Second, func() bool { return w1.Stats().Done == 1 }, "first task not done")
		if err := e.F.Queue("pq").Pause(c); err != nil {
			t.Fatal(err)
		}
		if got, _ := e.get(t, qk.Pending+":paused"); got != "1" {
			t.Fatalf("paused key %q", got)
		}
		f2 := openOn(t, tg, e.Prefix)
		q2 := fleet.NewQueue[job](f2, "pq", fleet.QueueOptions{})
		w2 := fleet.NewBatchWorker(f2, fleet.WorkerOptions{Type: "pq", ID: "w2", Slots: 2}, q2, handler)
		startWorker(t, w2)
		for i := range 5 {
			if _, err := q2.Submit(c, job{URL: "https://example.com/", N: i}); err != nil {
				t.Fatalf("submit while paused: %v", err)
			}
		}
		// Both workers were woken by the pushes and looked at the flag;
		// give them time to (wrongly) take something.
		time.Sleep(300 * time.Millisecond)
		st, err := q.Stats(c)
		if err != nil || counted(t, st) != (fleet.QueueStats{Pending: 5, Paused: true}) {
			t.Fatalf("stats while paused %+v %v", st, err)
		}
		if w1.Stats().Done != 1 || w2.Stats().Done != 0 {
			t.Fatalf("done while paused: %d, %d", w1.Stats().Done, w2.Stats().Done)
		}
		ov, err := e.F.Overview(c)
		if err != nil || len(ov.Queues) != 1 || !ov.Queues[0].Paused || ov.Queues[0].Pending != 5 {
			t.Fatalf("overview %+v %v", ov, err)
		}
		if p, err := q2.Paused(c); err != nil || !p {
			t.Fatalf("Paused %v %v", p, err)
		}
		if err := q2.Resume(c); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 5*time.Second, func() bool { return w1.Stats().Done+w2.Stats().Done == 6 }, "tasks not done after resume")
		if _, ok := e.get(t, qk.Pending+":paused"); ok {
			t.Fatal("paused key left")
		}
		if st, _ := q.Stats(c); st.Paused {
			t.Fatal("stats still paused")
		}
	})
}

// TestQueuePauseBadInput: an unknown queue or a bad name is refused,
// nothing written.
func TestQueuePauseBadInput(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		q := fleet.NewQueue[job](e.F, "known", fleet.QueueOptions{})
		if _, err := q.Submit(c, job{URL: "https://example.com/"}); err != nil {
			t.Fatal(err)
		}
		before := e.dump(t)
		for _, tc := range []struct {
			err  error
			want error
			text string
		}{
			{e.F.Queue("nosuch").Pause(c), fleet.ErrQueueNotFound, `"nosuch"`},
			{e.F.Queue("nosuch").Resume(c), fleet.ErrQueueNotFound, `"nosuch"`},
			{e.F.Queue("a:b").Pause(c), fleet.ErrInvalidName, `"a:b"`},
		} {
			if !errors.Is(tc.err, tc.want) || !strings.Contains(tc.err.Error(), tc.text) {
				t.Errorf("%v, want %v naming %s", tc.err, tc.want, tc.text)
			}
		}
		if after := e.dump(t); !maps.Equal(before, after) {
			t.Fatalf("changed:\n%v\n%v", before, after)
		}
		// A queue another process registered is known here too.
		if err := openOn(t, tg, e.Prefix).Queue("known").Pause(c); err != nil {
			t.Fatal(err)
		}
	})
}

// TestQueuePauseCostsNothing: a worker that is never paused reads the flag
// once (through the client-side cache), not once per reserve.
func TestQueuePauseCostsNothing(t *testing.T) {
	s, f := ownServer(t, fleet.Options{})
	c := ctx(t)
	q := fleet.NewQueue[job](f, "cost", fleet.QueueOptions{})
	w := fleet.NewBatchWorker(f, fleet.WorkerOptions{Type: "cost", ID: "w1", Slots: 4}, q,
		fleet.BatchFunc[wcfg, out, job](func(ctx context.Context, s *fleet.Slot[wcfg, out], tk *fleet.Task[job]) error { return nil }))
	startWorker(t, w)
	before := ownCalls(t, s)["get"]
	for i := range 200 {
		if _, err := q.Submit(c, job{URL: "https://example.com/", N: i % 1000}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 20*time.Second, func() bool { return w.Stats().Done == 200 }, "done %d", later(func() any { return w.Stats().Done }))
	if gets := ownCalls(t, s)["get"] - before; gets > 2 {
		t.Fatalf("%d GETs for 200 tasks", gets)
	}
}
