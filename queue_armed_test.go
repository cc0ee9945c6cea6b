package fleet

import (
	"context"
	"testing"
	"time"

	"github.com/fleet-go/fleet/internal/engine"
	"github.com/fleet-go/fleet/internal/redistest"
)

// TestArmedTake: a take that asks to arm (the batch worker's fetcher does)
// reads the pending list's length after its take in the same round trip,
// and that read arms the invalidation: a task that another process pushes
// afterwards wakes this process's listener, with no cached read of its
// own. The length it reports is what the take left. A queue that has had
// groups is not armed by the take (its caller reads the signal too), nor
// is a Fleet without client-side caching. On each target (on the cluster
// the read goes to the queue's node, on the take's connection).
func TestArmedTake(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		testArmedTake(t, tg)
	})
}

func testArmedTake(t *testing.T, tg redistest.Target) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	prefix := redistest.Prefix(t, tg)
	f, other := openArm(t, tg, prefix, false), openArm(t, tg, prefix, false)
	q, qo := NewQueue[int](f, "armed", QueueOptions{}), NewQueue[int](other, "armed", QueueOptions{})
	arm := engine.Req{N: 2, WantLeft: true, Arm: true, Owner: "w|1"}

	// The server loads the script at the first take (NOSCRIPT, then EVAL):
	// that take is unarmed (see SCRIPT FLUSH below).
	if res, err := q.e.Reserve(ctx, engine.Req{N: 1}); err != nil || len(res.Tasks) != 0 {
		t.Fatalf("take of an empty queue = %d tasks, %v", len(res.Tasks), err)
	}
	if _, err := qo.SubmitMany(ctx, []int{1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	res, err := q.e.Reserve(ctx, arm)
	if err != nil || len(res.Tasks) != 2 || !res.Armed || res.Pending != 1 || res.Drained {
		t.Fatalf("take of 2 of 3 = %d tasks, armed %v, pending %d, drained %v, %v; want 2, armed, 1 left", len(res.Tasks), res.Armed, res.Pending, res.Drained, err)
	}
	res, err = q.e.Reserve(ctx, arm)
	if err != nil || len(res.Tasks) != 1 || !res.Armed || res.Pending != 0 || !res.Drained {
		t.Fatalf("take of the last = %d tasks, armed %v, pending %d, drained %v, %v; want 1, armed, none left", len(res.Tasks), res.Armed, res.Pending, res.Drained, err)
	}
	// The wake-up, on a queue that this Fleet never read before (an
	// invalidation of the list above, left over from the first take's arm,
	// may still be on its way; the fetcher drops such a one, dropWake): the
	// take of the empty queue arms it, and only the push wakes it.
	// Its first take loads the script where its slot lives (a cluster
	// node of its own, maybe).
	wq, wo := NewQueue[int](f, "armedwake", QueueOptions{}), NewQueue[int](other, "armedwake", QueueOptions{})
	if _, err := wq.e.Reserve(ctx, engine.Req{N: 1}); err != nil {
		t.Fatal(err)
	}
	if res, err := wq.e.Reserve(ctx, arm); err != nil || len(res.Tasks) != 0 || !res.Armed || res.Pending != 0 || !res.Drained {
		t.Fatalf("take of an empty queue = %d tasks, armed %v, pending %d, drained %v, %v; want none, armed, drained", len(res.Tasks), res.Armed, res.Pending, res.Drained, err)
	}
	wake, stop := wq.e.ListenPending(ctx)
	defer stop()
	select { // nothing changed since the take armed it
	case <-wake:
		t.Fatal("a wake-up before any push")
	default:
	}
	if _, err := wo.Submit(ctx, 4); err != nil {
		t.Fatal(err)
	}
	select {
	case <-wake:
	case <-time.After(10 * time.Second):
		t.Fatal("the push of another process did not wake the armed listener in 10 s")
	}
	if l, err := q.e.ArmedPending(ctx, engine.Reserved{Armed: true, Pending: 0}, false); err != nil || l != 0 {
		t.Fatalf("ArmedPending after an armed take of a queue without groups = %d, %v; want 0", l, err)
	}

	// A queue that has had groups: the take does not arm.
	g, gOther := NewQueue[int](f, "grouped", QueueOptions{}), NewQueue[int](other, "grouped", QueueOptions{})
	if _, err := gOther.SubmitWith(ctx, 1, SubmitOptions{Group: "a"}); err != nil {
		t.Fatal(err)
	}
	if res, err := g.e.Reserve(ctx, arm); err != nil || len(res.Tasks) != 1 {
		t.Fatalf("grouped take = %d tasks, %v", len(res.Tasks), err)
	}
	if res, err := g.e.Reserve(ctx, arm); err != nil || res.Armed {
		t.Fatalf("grouped take: armed %v, %v; want unarmed", res.Armed, err)
	}

	// Without client-side caching nothing is armed.
	nc := NewQueue[int](openArm(t, tg, prefix, true), "armed", QueueOptions{})
	if _, err := qo.Submit(ctx, 5); err != nil {
		t.Fatal(err)
	}
	if res, err := nc.e.Reserve(ctx, arm); err != nil || len(res.Tasks) != 1 || res.Armed {
		t.Fatalf("take without caching = %d tasks, armed %v, %v; want 1, unarmed", len(res.Tasks), res.Armed, err)
	}
}

// TestArmedTakeNoScript: after SCRIPT FLUSH an armed take loads the script
// again (NOSCRIPT, then EVAL) and takes, unarmed: its caller arms with a
// cached read.
func TestArmedTakeNoScript(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, open := ownServer(t)
	f := open(Options{})
	q := NewQueue[int](f, "armed", QueueOptions{})
	arm := engine.Req{N: 1, WantLeft: true, Arm: true}
	for i, flush := range []bool{false, false, true} {
		if flush {
			if err := f.client.Do(ctx, f.client.B().ScriptFlush().Build()).Error(); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := q.Submit(ctx, i); err != nil {
			t.Fatal(err)
		}
		res, err := q.e.Reserve(ctx, arm)
		// The first take loads the script; the second finds it.
		if want := i == 1; err != nil || len(res.Tasks) != 1 || res.Armed != want {
			t.Fatalf("take %d (flushed before: %v) = %d tasks, armed %v, %v; want 1, armed %v", i, flush, len(res.Tasks), res.Armed, err, want)
		}
	}
}

// openArm opens a Fleet on tg under prefix, with client-side caching off
// when noCache.
func openArm(t *testing.T, tg redistest.Target, prefix string, noCache bool) *Fleet {
	t.Helper()
	opts := Options{URL: tg.URL, Prefix: prefix, Layout: LayoutCompat, DisableCache: noCache}
	if tg.Tagged {
		opts.Layout = LayoutTagged
	}
	f, err := Open(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	return f
}

// TestArmedTakeCtxEnds: an armed take whose ctx ends while its replies are
// held back returns ctx's error, and what its script took goes back to the
// head of the queue, uncounted, once the replies flow (abandonReserve, as
// for any take): nothing stays reserved.
func TestArmedTakeCtxEnds(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, p, through, direct := groupServer(t)
	q := NewQueue[int](through, "armedctx", QueueOptions{Lease: time.Minute})
	qd := NewQueue[int](direct, "armedctx", QueueOptions{Lease: time.Minute})
	if res, err := q.e.Reserve(ctx, engine.Req{N: 1}); err != nil || len(res.Tasks) != 0 {
		t.Fatalf("take of an empty queue = %d tasks, %v", len(res.Tasks), err) // loads the script
	}
	if _, err := qd.Submit(ctx, 7); err != nil {
		t.Fatal(err)
	}
	p.HoldReplies()
	short, stop := context.WithTimeout(ctx, 300*time.Millisecond)
	defer stop()
	res, err := q.e.Reserve(short, engine.Req{N: 1, WantLeft: true, Arm: true, Owner: "w|1"})
	if err == nil || len(res.Tasks) != 0 {
		t.Fatalf("armed take with its replies held = %d tasks, %v; want ctx's error", len(res.Tasks), err)
	}
	p.Thaw()
	waitUntil(t, func() bool {
		st, err := qd.Stats(ctx)
		return err == nil && st.Pending == 1 && st.InFlight == 0
	})
	tasks, err := qd.Reserve(ctx, 1, 0)
	if err != nil || len(tasks) != 1 || tasks[0].Attempts != 0 || tasks[0].Payload != 7 {
		t.Fatalf("the task handed back = %+v, %v; want it whole, no attempt counted", tasks, err)
	}
}
