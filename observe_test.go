package fleet_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/internal/redistest"
)

// recorder is an Observer that writes down every event.
type recorder struct {
	mu     sync.Mutex
	events []string
	trace  map[string]string // what Submit returns
}

func (r *recorder) note(format string, args ...any) {
	r.mu.Lock()
	r.events = append(r.events, fmt.Sprintf(format, args...))
	r.mu.Unlock()
}

func (r *recorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.events
	r.events = nil
	return out
}

func (r *recorder) observer() *fleet.Observer {
	return &fleet.Observer{
		Submit: func(_ context.Context, e fleet.SubmitEvent) (map[string]string, func(int, error)) {
			r.note("submit %s %v dedup=%q later=%v", e.Queue, e.IDs, e.DedupKey, !e.NotBefore.IsZero())
			return r.trace, func(n int, err error) { r.note("submitted %s %d %v", e.Queue, n, err) }
		},
		TaskEnded: func(_ context.Context, e fleet.TaskEndEvent) {
			r.note("end %s %s %s", e.Queue, e.ID, e.Outcome)
		},
		LockWaited: func(_ context.Context, e fleet.LockWaitEvent) {
			r.note("lock %s obtained=%v notobtained=%v waited=%v", e.Lock, e.Obtained, errors.Is(e.Err, fleet.ErrNotObtained), waited(e.Obtained, e.Wait))
		},
		ClaimWaited: func(_ context.Context, e fleet.ClaimWaitEvent) {
			r.note("claim %s claimed=%v err=%v waited=%v", e.Pool, e.Claimed, e.Err, waited(e.Claimed, e.Wait))
		},
		Swept: func(_ context.Context, e fleet.SweepEvent) {
			r.note("swept %s requeued=%d dead=%d moved=%d trimmed=%d", e.Queue, e.Requeued, e.DeadLettered, e.Moved, e.Trimmed)
		},
	}
}

// TestObserverSwept: a sweep that finds expired leases tells Swept once per
// queue with what it did; a sweep that does nothing tells nothing.
func TestObserverSwept(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		r := &recorder{}
		e := open(t, tg, func(o *fleet.Options) { o.Observer = r.observer() })
		c := ctx(t)
		qo := fleet.QueueOptions{MaxAttempts: 2, Lease: 200 * time.Millisecond}
		q := fleet.NewQueue[job](e.F, "swept", qo)
		if _, err := q.SubmitMany(c, []job{jobN(1), jobN(2), jobN(3)}); err != nil {
			t.Fatal(err)
		}
		tasks := reserveAll(t, q, 2)
		time.Sleep(time.Until(tasks[1].Deadline()) + 50*time.Millisecond)
		r.take()
		waitFor(t, 10*time.Second, func() bool {
			st, err := e.F.Sweep(c, fleet.SweeperOptions{Queue: qo})
			if err != nil {
				t.Fatal(err)
			}
			return st.Requeued == 2
		}, "the sweep never re-queued the 2 expired leases")
		ev := r.take()
		if !slices.Equal(ev, []string{"swept swept requeued=2 dead=0 moved=0 trimmed=0"}) {
			t.Fatalf("events %q", ev)
		}
		if _, err := e.F.Sweep(c, fleet.SweeperOptions{Queue: qo}); err != nil {
			t.Fatal(err)
		}
		if ev := r.take(); len(ev) != 0 {
			t.Fatalf("a sweep that did nothing told %q", ev)
		}
	})
}

// waited spells a wait as "ok": above zero, and for one that got nothing,
// at least the 60 ms it was allowed.
func waited(got bool, d time.Duration) string {
	if d > 0 && (got || d >= 60*time.Millisecond) {
		return "ok"
	}
	return d.String()
}

// TestObserverQueue: each submit is told once with its ids, its trace
// context goes into each body as "trace", its outcome comes back; acks,
// retries and dead letters are told with their task's id.
func TestObserverQueue(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		r := &recorder{trace: map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}
		e := open(t, tg, func(o *fleet.Options) { o.Observer = r.observer() })
		qk := e.qk("obs")
		c := ctx(t)
		q := fleet.NewQueue[job](e.F, "obs", fleet.QueueOptions{MaxAttempts: 2, BackoffBase: time.Millisecond, BackoffMax: time.Millisecond})
		id1, err := q.Submit(c, jobN(1))
		if err != nil {
			t.Fatal(err)
		}
		ids, err := q.SubmitMany(c, []job{jobN(2), jobN(3)})
		if err != nil {
			t.Fatal(err)
		}
		id4, err := q.SubmitWith(c, jobN(4), fleet.SubmitOptions{DedupKey: "d"})
		if err != nil {
			t.Fatal(err)
		}
		if got, err := q.SubmitWith(c, jobN(5), fleet.SubmitOptions{DedupKey: "d"}); err != nil || got != id4 {
			t.Fatalf("dup submit %q %v", got, err)
		}
		ev := r.take()
		want := []string{
			fmt.Sprintf("submit obs [%s] dedup=\"\" later=false", id1), "submitted obs 1 <nil>",
			fmt.Sprintf("submit obs %v dedup=\"\" later=false", ids), "submitted obs 2 <nil>",
			fmt.Sprintf("submit obs [%s] dedup=\"d\" later=false", id4), "submitted obs 1 <nil>",
		}
		if !slices.Equal(ev[:6], want) || len(ev) != 8 || ev[7] != "submitted obs 0 <nil>" {
			t.Fatalf("events\n got %q\nwant %q + a duplicate", ev, want)
		}
		bodies := e.lrange(t, qk.Pending)
		wantBodies := []string{
			`{"id":"` + id1 + `","payload":{"url":"https://example.com/1","n":1},"attempts":0,"trace":{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}`,
			`{"id":"` + ids[0] + `","payload":{"url":"https://example.com/2","n":2},"attempts":0,"trace":{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}`,
			`{"id":"` + ids[1] + `","payload":{"url":"https://example.com/3","n":3},"attempts":0,"trace":{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}`,
			`{"id":"` + id4 + `","payload":{"url":"https://example.com/4","n":4},"attempts":0,"dedup":"d","trace":{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}`,
		}
		if !slices.Equal(bodies, wantBodies) {
			t.Fatalf("bodies\n got %q\nwant %q", bodies, wantBodies)
		}

		tasks, err := q.Reserve(c, 4, 0)
		if err != nil || len(tasks) != 4 {
			t.Fatalf("reserve %d %v", len(tasks), err)
		}
		if err := tasks[0].Ack(c); err != nil {
			t.Fatal(err)
		}
		if err := tasks[1].Nack(c, errors.New("again")); err != nil {
			t.Fatal(err)
		}
		if err := tasks[2].DeadLetter(c, errors.New("never")); err != nil {
			t.Fatal(err)
		}
		if err := tasks[0].Ack(c); !errors.Is(err, fleet.ErrLeaseLost) {
			t.Fatalf("second ack: %v", err) // not told: nothing ended
		}
		// The retried task's last attempt goes to the dead letters.
		var again []*fleet.Task[job]
		waitFor(t, 5*time.Second, func() bool {
			again, err = q.Reserve(c, 1, 0)
			return err != nil || len(again) == 1
		}, "the retry never came back")
		if err != nil || again[0].ID != ids[0] {
			t.Fatalf("retry %v", err)
		}
		if again[0].Attempts != 1 {
			t.Fatalf("attempts %d", again[0].Attempts)
		}
		if err := again[0].Nack(c, errors.New("again")); err != nil {
			t.Fatal(err)
		}
		if err := tasks[3].Ack(c); err != nil {
			t.Fatal(err)
		}
		ev = r.take()
		want = []string{
			"end obs " + id1 + " processed",
			"end obs " + ids[0] + " retried",
			"end obs " + ids[1] + " dead_lettered",
			"end obs " + ids[0] + " dead_lettered",
			"end obs " + id4 + " processed",
		}
		if !slices.Equal(ev, want) {
			t.Fatalf("events\n got %q\nwant %q", ev, want)
		}
	})
}

// TestObserverNoTraceField: without an Observer, or with one that returns
// no trace context, a body has no "trace" field.
func TestObserverNoTraceField(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		for i, obs := range []*fleet.Observer{nil, (&recorder{}).observer(), {}} {
			e := open(t, tg, func(o *fleet.Options) { o.Observer = obs })
			q := fleet.NewQueue[job](e.F, "plain", fleet.QueueOptions{})
			c := ctx(t)
			id, err := q.Submit(c, jobN(1))
			if err != nil {
				t.Fatal(err)
			}
			uid, err := q.SubmitWith(c, jobN(2), fleet.SubmitOptions{DedupKey: "k", UniqueFor: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			got := e.lrange(t, e.qk("plain").Pending)
			want := []string{
				`{"id":"` + id + `","payload":{"url":"https://example.com/1","n":1},"attempts":0}`,
				`{"id":"` + uid + `","payload":{"url":"https://example.com/2","n":2},"attempts":0,"dedup":"k","unique_ms":60000}`,
			}
			if !slices.Equal(got, want) {
				t.Fatalf("observer %d: bodies\n got %q\nwant %q", i, got, want)
			}
		}
	})
}

// TestObserverTraceTolerant: a worker runs a task whose "trace" is missing
// or ill-formed as any other, its middleware seeing no trace; a well-formed
// one reaches TaskInfo.Trace.
func TestObserverTraceTolerant(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		qk := e.qk("tol")
		q := fleet.NewQueue[job](e.F, "tol", fleet.QueueOptions{MaxAttempts: 1})
		c := ctx(t)
		traces := map[string]string{
			"a": ``,
			"b": `,"trace":"00-x"`,
			"c": `,"trace":{"traceparent":1}`,
			"d": `,"trace":null`,
			"e": `,"trace":[1,2]`,
			"f": `,"trace":{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01","tracestate":"k=v"}`,
		}
		for _, id := range []string{"a", "b", "c", "d", "e", "f"} {
			body := `{"id":"` + id + `","payload":{"url":"https://example.com/","n":1},"attempts":0` + traces[id] + `}`
			if err := e.Raw.Do(c, e.Raw.B().Rpush().Key(qk.Pending).Element(body).Build()).Error(); err != nil {
				t.Fatal(err)
			}
		}
		var mu sync.Mutex
		seen := map[string]map[string]string{}
		capture := func(next fleet.Handler) fleet.Handler {
			return func(ctx context.Context, ti fleet.TaskInfo) error {
				mu.Lock()
				seen[ti.ID] = ti.Trace
				mu.Unlock()
				return next(ctx, ti)
			}
		}
		w := fleet.NewBatchWorker(e.F, fleet.WorkerOptions{Type: "tol", ID: "w1", Slots: 1, Middleware: []fleet.Middleware{capture}}, q,
			fleet.BatchFunc[wcfg, out, job](func(ctx context.Context, s *fleet.Slot[wcfg, out], tk *fleet.Task[job]) error {
				// The handler sees what the middleware saw.
				mu.Lock()
				defer mu.Unlock()
				if tc := tk.TraceContext(); fmt.Sprint(tc) != fmt.Sprint(seen[tk.ID]) {
					return fmt.Errorf("%w: TraceContext %v, TaskInfo.Trace %v", fleet.ErrPermanent, tc, seen[tk.ID])
				}
				return nil
			}))
		startWorker(t, w)
		waitFor(t, 10*time.Second, func() bool { return w.Stats().Done == 6 }, "not all done: %+v", later(func() any { return w.Stats() }))
		mu.Lock()
		defer mu.Unlock()
		if len(seen) != 6 {
			t.Fatalf("seen %v", seen)
		}
		for _, id := range []string{"a", "b", "c", "d", "e"} {
			if seen[id] != nil {
				t.Fatalf("task %s: trace %v", id, seen[id])
			}
		}
		if f := seen["f"]; len(f) != 2 || f["traceparent"] != "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01" || f["tracestate"] != "k=v" {
			t.Fatalf("task f: trace %v", f)
		}
		if n := len(e.lrange(t, qk.Dead)); n != 0 {
			t.Fatalf("%d dead", n)
		}
	})
}

// TestObserverWaits: lock acquires and pool claims are told with their
// outcome and how long they took.
func TestObserverWaits(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		r := &recorder{}
		e := open(t, tg, func(o *fleet.Options) { o.Observer = r.observer() })
		c := ctx(t)
		lk := e.F.Lock("obs-lock")
		lease, err := lk.Acquire(c, fleet.LockOptions{Hold: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := lk.Acquire(c, fleet.LockOptions{Hold: 10 * time.Second, Wait: 60 * time.Millisecond}); !errors.Is(err, fleet.ErrNotObtained) {
			t.Fatalf("second acquire: %v", err)
		}
		if err := lease.Release(c); err != nil {
			t.Fatal(err)
		}
		pool := fleet.NewPool[string, CfCookieTags](e.F, "obs-pool", fleet.PoolOptions{})
		if _, err := pool.Put(c, "x", CfCookieTags{Site: "s"}, time.Minute); err != nil {
			t.Fatal(err)
		}
		cl, err := pool.Claim(c, fleet.ClaimOptions{Hold: time.Minute})
		if err != nil || cl == nil {
			t.Fatalf("claim %v %v", cl, err)
		}
		if none, err := pool.Claim(c, fleet.ClaimOptions{Hold: time.Minute, Wait: 60 * time.Millisecond}); none != nil || err != nil {
			t.Fatalf("second claim %v %v", none, err)
		}
		want := []string{
			"lock obs-lock obtained=true notobtained=false waited=ok",
			"lock obs-lock obtained=false notobtained=true waited=ok",
			"claim obs-pool claimed=true err=<nil> waited=ok",
			"claim obs-pool claimed=false err=<nil> waited=ok",
		}
		if ev := r.take(); !slices.Equal(ev, want) {
			t.Fatalf("events\n got %q\nwant %q", ev, want)
		}
	})
}

// TestQueueNames: the registry's queues, sorted.
func TestQueueNames(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		for _, n := range []string{"b", "a"} {
			if _, err := fleet.NewQueue[job](e.F, n, fleet.QueueOptions{}).Submit(c, jobN(1)); err != nil {
				t.Fatal(err)
			}
		}
		names, err := e.F.QueueNames(c)
		if err != nil || !slices.Equal(names, []string{"a", "b"}) {
			t.Fatalf("names %q %v", names, err)
		}
	})
}
