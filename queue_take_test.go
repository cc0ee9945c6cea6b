package fleet_test

import (
	"context"
	"errors"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/internal/redistest"
)

// TestQueueAckAndTake: a worker slot that finishes a task while the queue
// has more acks it and takes the next in one call. The ack is checked by
// its token as a plain Ack is; a lost lease changes nothing; and when the
// take fails on a wrong-type key after the ack, the call says the ack was
// done, with the error, and the key is untouched.
func TestQueueAckAndTake(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		q := fastQueue(e.F, "take", time.Minute)
		k := e.qk("take")
		var ids []string
		for i := range 3 {
			id, err := q.Submit(ctx(t), jobN(i))
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		first, err := q.Reserve(ctx(t), 1, 0)
		if err != nil || len(first) != 1 || first[0].ID != ids[0] {
			t.Fatalf("reserve = %v, %v", first, err)
		}
		acked, next, err := fleet.AckAndTake(ctx(t), q, first[0], 1)
		if err != nil || acked != 1 || len(next) != 1 || next[0].ID != ids[1] {
			t.Fatalf("ack and take = %d, %v, %v", acked, next, err)
		}
		if got := e.zmembers(t, k.Processing); !slices.Equal(got, []string{ids[1]}) {
			t.Fatalf(":processing = %v, want only %s", got, ids[1])
		}
		if got := e.hkeys(t, k.Lease); len(got) != 2 || !slices.Contains(got, ids[1]) {
			t.Fatalf(":processing:lease fields = %q, want the entry of %s and its call's record", got, ids[1])
		}

		// The first task again: its lease is gone, so nothing changes, and
		// the take still runs (the queue holds one more).
		before := e.dump(t)
		acked, more, err := fleet.AckAndTake(ctx(t), q, first[0], 1)
		if err != nil || acked != 0 || len(more) != 1 || more[0].ID != ids[2] {
			t.Fatalf("stale ack and take = %d, %v, %v", acked, more, err)
		}
		if err := more[0].Release(ctx(t)); err != nil {
			t.Fatal(err)
		}
		if got := e.dump(t); !maps.Equal(got, before) {
			t.Fatalf("a stale ack changed Redis:\n got %v\nwant %v", got, before)
		}

		// A wrong-type queue key: the ack is done, the take refused.
		e.do(t, e.Raw.B().Del().Key(k.Pending).Build())
		e.do(t, e.Raw.B().Set().Key(k.Pending).Value("not a list").Build())
		acked, none, err := fleet.AckAndTake(ctx(t), q, next[0], 1)
		if !errors.Is(err, fleet.ErrWrongType) || acked != 1 || len(none) != 0 {
			t.Fatalf("ack and take on a string = %d, %v, %v; want acked 1 and ErrWrongType", acked, none, err)
		}
		if v, _ := e.get(t, k.Pending); v != "not a list" {
			t.Fatalf("the string was changed to %q", v)
		}
		if got := e.zmembers(t, k.Processing); len(got) != 0 {
			t.Fatalf(":processing = %v after the ack", got)
		}
	})
}

// TestQueueScheduledLook: back-to-back reserves look at :scheduled at most
// about every 100 ms, yet a task scheduled by this process is seen by the
// next reserve, and one scheduled by another process is picked up by a
// waiting Reserve.
func TestQueueScheduledLook(t *testing.T) {
	srv, f := ownServer(t, fleet.Options{})
	q := fleet.NewQueue[job](f, "look", fleet.QueueOptions{})
	if _, err := q.Reserve(ctx(t), 1, 0); err != nil {
		t.Fatal(err)
	}
	start := ownCalls(t, srv)["zrange"]
	t0 := time.Now()
	for range 50 {
		if ts, err := q.Reserve(ctx(t), 1, 0); err != nil || len(ts) != 0 {
			t.Fatal(ts, err)
		}
	}
	elapsed := time.Since(t0)
	looks := ownCalls(t, srv)["zrange"] - start
	if max := int64(elapsed/(100*time.Millisecond)) + 1; looks > max {
		t.Fatalf("50 reserves in %v looked at :scheduled %d times, want at most %d", elapsed, looks, max)
	}

	// This process schedules: the next reserve looks.
	id, err := q.SubmitWith(ctx(t), jobN(1), fleet.SubmitOptions{NotBefore: time.Now().Add(20 * time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(30 * time.Millisecond)
	ts, err := q.Reserve(ctx(t), 1, 0)
	if err != nil || len(ts) != 1 || ts[0].ID != id {
		t.Fatalf("reserve after the local task fell due = %v, %v", ts, err)
	}
	if err := ts[0].Ack(ctx(t)); err != nil {
		t.Fatal(err)
	}

	// Another process schedules: a waiting Reserve gets it.
	other, err := fleet.Open(ctx(t), fleet.Options{URL: srv.URL()})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	for range 3 { // the last look saw nothing scheduled
		if _, err := q.Reserve(ctx(t), 1, 0); err != nil {
			t.Fatal(err)
		}
	}
	id, err = fleet.NewQueue[job](other, "look", fleet.QueueOptions{}).SubmitWith(ctx(t), jobN(2),
		fleet.SubmitOptions{NotBefore: time.Now().Add(50 * time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx(t), 10*time.Second)
	defer cancel()
	ts, err = q.Reserve(wctx, 1, 5*time.Second)
	if err != nil || len(ts) != 1 || ts[0].ID != id || ts[0].Attempts != 0 {
		t.Fatalf("waiting reserve = %v, %v; want %s", ts, err, id)
	}
}

// zmembers returns the members of the zset key, lowest score first.
func (e *env) zmembers(t *testing.T, key string) []string {
	t.Helper()
	v, err := e.Raw.Do(context.Background(), e.Raw.B().Zrange().Key(key).Min("0").Max("-1").Build()).AsStrSlice()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// hkeys returns the fields of the hash key.
func (e *env) hkeys(t *testing.T, key string) []string {
	t.Helper()
	v, err := e.Raw.Do(context.Background(), e.Raw.B().Hkeys().Key(key).Build()).AsStrSlice()
	if err != nil {
		t.Fatal(err)
	}
	return v
}
