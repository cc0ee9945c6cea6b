package fleet_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/internal/keys"
	"github.com/fleet-go/fleet/internal/redistest"
)

// permitsKey is the fleet-wide permits of sharded queue name
// (keys.Queue.Permits) in the test's layout.
func (e *env) permitsKey(name string) string {
	return keys.New(e.Prefix, e.Tg.Tagged).Queue(name).Permits
}

// zcard reads a zset's size raw.
func (e *env) zcard(t *testing.T, key string) int64 {
	t.Helper()
	n, err := e.Raw.Do(context.Background(), e.Raw.B().Zcard().Key(key).Build()).AsInt64()
	if err != nil {
		t.Fatalf("ZCARD %s: %v", key, err)
	}
	return n
}

// submitSpread submits n jobs in SubmitMany calls of 10, which go to the
// shards in turn (one call fills one shard).
func submitSpread(t *testing.T, q *fleet.Queue[job], n int) []string {
	t.Helper()
	var ids []string
	for i := 0; i < n; i += 10 {
		items := make([]job, min(10, n-i))
		for j := range items {
			items[j] = jobN(i + j)
		}
		got, err := q.SubmitMany(ctx(t), items)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, got...)
	}
	return ids
}

// TestQueueShardGlobalConcurrency: a queue of 4 shards with a fleet-wide
// bound of 3, 4 Fleets of 8 slots and consumers that vanish with tasks (a
// kill): never more than 3 run at once, every task runs to its end once,
// and every permit comes back (the key goes).
func TestQueueShardGlobalConcurrency(t *testing.T) {
	eachTagged(t, func(t *testing.T, tg redistest.Target) {
		e := open(t, tg)
		mk := func(f *fleet.Fleet) *fleet.Queue[job] {
			return fleet.NewQueue[job](f, "gshard", fleet.QueueOptions{Lease: 300 * time.Millisecond, Shards: 4, GlobalConcurrency: 3})
		}
		q := mk(e.F)
		ids := submitSpread(t, q, 300)
		for i := range 4 {
			if n := e.llen(t, e.shard("gshard", i).Pending); n == 0 {
				t.Fatalf("shard %d holds no task: the test would not cross the shards", i)
			}
		}
		spans := runVanishing(t, e, mk, ids)
		most := mostAtOnce(spans, "")
		if most > 3 || most < 2 {
			t.Errorf("%d ran at once, limit 3", most)
		}
		t.Logf("%s: %d runs of %d tasks, at most %d at once", tg.Name, len(spans), len(ids), most)
		if len(spans) != len(ids) {
			t.Errorf("%d runs of %d tasks: some ran twice", len(spans), len(ids))
		}
		pk := e.permitsKey("gshard")
		waitFor(t, 10*time.Second, func() bool { return !rawExists(t, e.Raw, pk) }, "permits left: %v", later(func() any { return e.dump(t)[pk] }))
		waitFor(t, 10*time.Second, func() bool { return len(e.shardData(t, "gshard", 4)) == 0 }, "shard data left: %v",
			later(func() any { return e.shardData(t, "gshard", 4) }))
	})
}

// TestQueueShardGlobalConcurrencyLease: a holder that vanishes (a kill)
// keeps its permit until its lease runs out, and no longer; an end gives
// its permit back at once, and wakes a reserve of another process that
// waits for one (a wake-up: the lease is far longer than the wait).
func TestQueueShardGlobalConcurrencyLease(t *testing.T) {
	eachTagged(t, func(t *testing.T, tg redistest.Target) {
		e := open(t, tg)
		pk := e.permitsKey("glease")
		q := fleet.NewQueue[job](e.F, "glease", fleet.QueueOptions{Lease: 700 * time.Millisecond, Shards: 4, GlobalConcurrency: 1})
		submitSpread(t, q, 40)
		held, err := q.Reserve(ctx(t), 4, 0)
		if err != nil || len(held) != 1 {
			t.Fatalf("reserve of 4 under a bound of 1: %d tasks, %v", len(held), err)
		}
		if n := e.zcard(t, pk); n != 1 {
			t.Fatalf("%d permits held, want 1", n)
		}
		if ts, err := q.Reserve(ctx(t), 1, 0); err != nil || len(ts) != 0 {
			t.Fatalf("a reserve with the bound reached took %d tasks, %v", len(ts), err)
		}
		// The holder vanishes: the next reserve gets its permit once its
		// lease runs out, not before.
		from := time.Now()
		next, err := q.Reserve(ctx(t), 1, 5*time.Second)
		waited := time.Since(from)
		if err != nil || len(next) != 1 {
			t.Fatalf("reserve after the vanished holder's lease: %d tasks, %v", len(next), err)
		}
		if left := time.Until(held[0].Deadline()); left > 0 {
			t.Fatalf("a permit came %v before the vanished holder's lease ran out (waited %v)", left, waited)
		}
		if n := e.zcard(t, pk); n != 1 {
			t.Fatalf("%d permits held, want 1", n)
		}
		// A reserve of another process waits; the ack wakes it long before
		// the lease (10 s) would.
		f2 := openOn(t, e.Tg, e.Prefix)
		q2 := fleet.NewQueue[job](f2, "glease", fleet.QueueOptions{Lease: 700 * time.Millisecond, Shards: 4, GlobalConcurrency: 1})
		got := make(chan time.Time, 1)
		go func() {
			ts, err := q2.Reserve(context.Background(), 1, 10*time.Second)
			if err == nil && len(ts) == 1 {
				got <- time.Now()
				_ = ts[0].Ack(context.Background())
			}
			close(got)
		}()
		time.Sleep(100 * time.Millisecond) // the waiter waits (its first try found the bound reached)
		acked := time.Now()
		if err := next[0].Ack(ctx(t)); err != nil {
			t.Fatal(err)
		}
		at, ok := <-got
		if !ok {
			t.Fatal("the waiting reserve got no task")
		}
		if d := at.Sub(acked); d > 700*time.Millisecond {
			t.Errorf("the waiting reserve took its task %v after the ack: no wake-up", d)
		}
		waitFor(t, 5*time.Second, func() bool { return e.zcard(t, pk) == 0 }, "permits left after the acks")
	})
}

// TestQueueShardGlobalConcurrencyBad: a negative bound is refused on a
// sharded queue too, naming the field, and nothing is stored.
func TestQueueShardGlobalConcurrencyBad(t *testing.T) {
	eachTagged(t, func(t *testing.T, tg redistest.Target) {
		e := open(t, tg)
		q := fleet.NewQueue[job](e.F, "gbad", fleet.QueueOptions{Shards: 4, GlobalConcurrency: -1})
		if _, err := q.Submit(ctx(t), jobN(1)); !errors.Is(err, fleet.ErrInvalidArgument) || !strings.Contains(err.Error(), "GlobalConcurrency") {
			t.Fatalf("GlobalConcurrency -1 on 4 shards: %v", err)
		}
		if d := e.shardData(t, "gbad", 4); len(d) != 0 || rawExists(t, e.Raw, e.permitsKey("gbad")) {
			t.Fatalf("stored: %v", d)
		}
	})
}

// TestQueueShardGlobalConcurrencyExtend: Extend pushes the task's permit
// with its lease, so the permit outlives the first lease; a release gives
// it back.
func TestQueueShardGlobalConcurrencyExtend(t *testing.T) {
	eachTagged(t, func(t *testing.T, tg redistest.Target) {
		e := open(t, tg)
		pk := e.permitsKey("gext")
		q := fleet.NewQueue[job](e.F, "gext", fleet.QueueOptions{Lease: 400 * time.Millisecond, Shards: 4, GlobalConcurrency: 1})
		submitSpread(t, q, 40)
		held := reserveAll(t, q, 1)
		if err := held[0].Extend(ctx(t), 5*time.Second); err != nil {
			t.Fatal(err)
		}
		first := held[0].Deadline()
		time.Sleep(time.Until(first.Add(-4300 * time.Millisecond))) // 300 ms past the first lease (400 ms)
		if ts, err := q.Reserve(ctx(t), 1, 0); err != nil || len(ts) != 0 {
			t.Fatalf("a reserve past the first lease took %d tasks (%v): the permit was not extended", len(ts), err)
		}
		if n := e.zcard(t, pk); n != 1 {
			t.Fatalf("%d permits held, want 1", n)
		}
		if err := held[0].Release(ctx(t)); err != nil {
			t.Fatal(err)
		}
		if rawExists(t, e.Raw, pk) {
			t.Fatalf("the permit outlived its task's release: %v", e.dump(t)[pk])
		}
		if ts, err := q.Reserve(ctx(t), 1, 0); err != nil || len(ts) != 1 {
			t.Fatalf("a reserve after the release took %d tasks, %v", len(ts), err)
		}
	})
}
