package fleet_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/internal/redistest"
)

// A client that follows only the documented schema re-queues an expired
// reservation (ZREM from :processing, RPUSH of the body) and reserves it
// again (LPOP, ZADD with its own deadline, HSET of the body), without
// knowing the lease hash. The late fleet holder's Ack, Nack, Extend,
// Release and DeadLetter all get ErrLeaseLost and change nothing.
func TestQueueOwnerCheckHoldsAgainstForeignRequeue(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		k := e.qk("foreign")
		q := fleet.NewQueue[job](e.F, "foreign", fleet.QueueOptions{Lease: 5 * time.Second})
		id, err := q.Submit(ctx(t), jobN(1))
		if err != nil {
			t.Fatal(err)
		}
		got, err := q.Reserve(ctx(t), 1, 0)
		if err != nil || len(got) != 1 {
			t.Fatal(got, err)
		}
		late := got[0]
		body := late.Body()

		lost := func(when string) {
			t.Helper()
			before := e.dump(t)
			for name, call := range map[string]func() error{
				"ack":     func() error { return late.Ack(ctx(t)) },
				"nack":    func() error { return late.Nack(ctx(t), errors.New("x")) },
				"bury":    func() error { return late.DeadLetter(ctx(t), errors.New("x")) },
				"extend":  func() error { return late.Extend(ctx(t), time.Minute) },
				"release": func() error { return late.Release(ctx(t)) },
			} {
				if err := call(); !errors.Is(err, fleet.ErrLeaseLost) {
					t.Fatalf("%s: %s = %v, want ErrLeaseLost", when, name, err)
				}
			}
			if after := e.dump(t); !maps.Equal(before, after) {
				t.Fatalf("%s: a refused call changed Redis:\nbefore %v\n after %v", when, before, after)
			}
		}

		// The documented sweeper re-queues it.
		e.do(t, e.Raw.B().Zrem().Key(k.Processing).Member(id).Build())
		e.do(t, e.Raw.B().Rpush().Key(k.Pending).Element(body).Build())
		lost("after a foreign re-queue")

		// A documented reserver takes it again, with a deadline of its own.
		e.do(t, e.Raw.B().Lpop().Key(k.Pending).Build())
		deadline := float64(e.serverNow(t).Add(30*time.Second).UnixMilli()) / 1000
		e.do(t, e.Raw.B().Zadd().Key(k.Processing).ScoreMember().ScoreMember(deadline, id).Build())
		e.do(t, e.Raw.B().Hset().Key(k.Body).FieldValue().FieldValue(id, body).Build())
		lost("after a foreign re-reserve")
		if zs := e.zscores(t, k.Processing); len(zs) != 1 || zs[0].Member != id {
			t.Fatalf("the foreign reservation is gone: %v", zs)
		}
	})
}

// Every process applies the policy stored with the queue, whatever its own
// options: a sweeper of a process that never opened the queue buries by
// the stored MaxAttempts, and the queue opened last wins.
func TestQueueStoredPolicy(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		k := e.qk("pol")
		qa := fleet.NewQueue[job](e.F, "pol", fleet.QueueOptions{MaxAttempts: 1, Lease: 100 * time.Millisecond,
			BackoffBase: time.Millisecond, BackoffMax: time.Millisecond})
		if _, err := qa.Submit(ctx(t), jobN(1)); err != nil {
			t.Fatal(err)
		}
		if p, ok, err := qa.Policy(ctx(t)); err != nil || !ok || p.MaxAttempts != 1 {
			t.Fatalf("Policy = %+v %v %v", p, ok, err)
		}
		reserveAll(t, qa, 1)

		// A sweeper in a process with no handle of the queue, and default
		// options (10 attempts), buries the expired task by the stored 1.
		other := openOn(t, tg, e.Prefix)
		var st fleet.SweepStats
		waitFor(t, 10*time.Second, func() bool {
			s, err := other.Sweep(ctx(t), fleet.SweeperOptions{})
			st.DeadLettered += s.DeadLettered
			st.Requeued += s.Requeued
			return err == nil && s.DeadLettered+s.Requeued > 0
		}, "the expired reservation was never swept")
		if st.DeadLettered != 1 || st.Requeued != 0 {
			t.Fatalf("sweep = %+v, want the task buried by the stored policy", st)
		}
		if dead := e.lrange(t, k.Dead); len(dead) != 1 || !strings.Contains(dead[0], "lease ran out on the last attempt") {
			t.Fatalf("dead %v", dead)
		}

		// A process that opens the queue later with other options wins, in
		// every process: qa's own nack now retries.
		qb := fleet.NewQueue[job](other, "pol", fleet.QueueOptions{MaxAttempts: 3, BackoffBase: time.Millisecond, BackoffMax: time.Millisecond})
		if _, err := qb.Submit(ctx(t), jobN(2)); err != nil {
			t.Fatal(err)
		}
		if p, _, _ := qa.Policy(ctx(t)); p.MaxAttempts != 3 {
			t.Fatalf("stored policy %+v after the later open", p)
		}
		got := reserveAll(t, qa, 1)
		if err := got[0].Nack(ctx(t), errors.New("flaky")); err != nil {
			t.Fatal(err)
		}
		if n := len(e.zscores(t, k.Scheduled)); n != 1 {
			t.Fatalf("scheduled %d, want the retry the stored policy allows", n)
		}
		if n := len(e.lrange(t, k.Dead)); n != 1 {
			t.Fatalf("dead %d, want only the first task", n)
		}

		// qa keeps writing its registration, but only where no policy is
		// stored: it does not take the policy back.
		time.Sleep(1100 * time.Millisecond) // qa registers at most once a second
		if _, err := qa.Submit(ctx(t), jobN(3)); err != nil {
			t.Fatal(err)
		}
		if p, _, _ := qa.Policy(ctx(t)); p.MaxAttempts != 3 {
			t.Fatalf("stored policy %+v after an older handle's submit", p)
		}
		// Lost policy: the next registration stores it again.
		e.do(t, e.Raw.B().Del().Key(k.Policy).Build())
		time.Sleep(1100 * time.Millisecond)
		if _, err := qa.Submit(ctx(t), jobN(4)); err != nil {
			t.Fatal(err)
		}
		if p, ok, _ := qa.Policy(ctx(t)); !ok || p.MaxAttempts != 1 {
			t.Fatalf("stored policy %+v %v after it was lost", p, ok)
		}
	})
}

// RequeueDead gives a dead task its dedup key back, so the key protects it
// again; when another live task holds the key, the dead letter stays and
// RequeueDead says who holds it.
func TestQueueRequeueDeadDedup(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		k := e.qk("dd")
		q := fleet.NewQueue[job](e.F, "dd", fleet.QueueOptions{MaxAttempts: 1})
		kill := func(want string) {
			t.Helper()
			got, err := q.Reserve(ctx(t), 1, 0)
			if err != nil || len(got) != 1 || got[0].ID != want {
				t.Fatal(got, err)
			}
			if err := got[0].Nack(ctx(t), errors.New("boom")); err != nil {
				t.Fatal(err)
			}
		}
		id1, err := q.SubmitWith(ctx(t), jobN(1), fleet.SubmitOptions{DedupKey: "order-7"})
		if err != nil {
			t.Fatal(err)
		}
		kill(id1)
		if m := e.hgetall(t, k.Dedup); len(m) != 0 {
			t.Fatalf("dedup after death %v", m)
		}
		if err := q.RequeueDead(ctx(t), id1); err != nil {
			t.Fatal(err)
		}
		if m := e.hgetall(t, k.Dedup); m["order-7"] != id1 || len(m) != 1 {
			t.Fatalf("dedup after requeue %v", m)
		}
		if again, err := q.SubmitWith(ctx(t), jobN(2), fleet.SubmitOptions{DedupKey: "order-7"}); err != nil || again != id1 {
			t.Fatalf("SubmitWith after requeue = %q, %v; want the requeued %q", again, err, id1)
		}
		if n := len(e.lrange(t, k.Pending)); n != 1 {
			t.Fatalf("pending %d, want 1", n)
		}

		// Dead again; a new task takes the key; the dead one must stay dead.
		kill(id1)
		id2, err := q.SubmitWith(ctx(t), jobN(3), fleet.SubmitOptions{DedupKey: "order-7"})
		if err != nil || id2 == id1 {
			t.Fatal(id2, err)
		}
		before := e.dump(t)
		err = q.RequeueDead(ctx(t), id1)
		if !errors.Is(err, fleet.ErrDuplicate) || !strings.Contains(err.Error(), id2) {
			t.Fatalf("RequeueDead with the key held = %v, want ErrDuplicate naming %s", err, id2)
		}
		if n, err := q.RequeueAllDead(ctx(t)); err != nil || n != 0 {
			t.Fatalf("RequeueAllDead = %d, %v", n, err)
		}
		if after := e.dump(t); !maps.Equal(before, after) {
			t.Fatalf("a refused requeue changed Redis:\nbefore %v\n after %v", before, after)
		}
	})
}

// dead_at comes from the server's clock: a worker whose clock runs 2 h
// fast still dates its dead letters right.
func TestQueueDeadAtServerClock(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		fleet.SetClock(e.F, func() time.Time { return time.Now().Add(2 * time.Hour) })
		k := e.qk("clock")
		q := fleet.NewQueue[job](e.F, "clock", fleet.QueueOptions{Lease: 100 * time.Millisecond, MaxAttempts: 1})
		for range 2 {
			if _, err := q.Submit(ctx(t), jobN(1)); err != nil {
				t.Fatal(err)
			}
		}
		got := reserveAll(t, q, 2)
		if err := got[0].DeadLetter(ctx(t), errors.New("bad")); err != nil {
			t.Fatal(err)
		}
		// The other one's lease runs out: the sweeper buries it.
		waitFor(t, 10*time.Second, func() bool {
			s, _ := e.F.Sweep(ctx(t), fleet.SweeperOptions{})
			return len(e.lrange(t, k.Dead)) == 2 || s.Requeued > 0
		}, "not swept")
		now := e.serverNow(t)
		dead := e.lrange(t, k.Dead)
		if len(dead) != 2 {
			t.Fatalf("dead %v", dead)
		}
		for _, d := range dead {
			m := decodeMap(t, d)
			at, _ := m["dead_at"].(float64)
			near(t, "dead_at", at, now, 5*time.Second)
			if !strings.HasSuffix(d, fmt.Sprintf(`"dead_at":%.3f}`, at)) {
				t.Fatalf("dead_at not in the seconds format: %s", d)
			}
		}
	})
}

// A Reserve whose ctx ends while its script waits on a paused server takes
// nothing for good: once the server answers again the task is back on the
// queue, uncounted, and nothing is held under the orphaned tokens.
func TestQueueReserveCtxEndsInFlight(t *testing.T) {
	for _, layout := range []fleet.Layout{fleet.LayoutCompat, fleet.LayoutTagged} {
		t.Run(string(layout), func(t *testing.T) {
			t.Parallel()
			s, f := ownServer(t, fleet.Options{Layout: layout})
			raw := redistest.Client(t, redistest.Target{URL: s.URL()})
			e := &env{F: f, Raw: raw, Tg: redistest.Target{URL: s.URL(), Tagged: layout == fleet.LayoutTagged}}
			k := e.qk("inflight")
			q := fleet.NewQueue[job](f, "inflight", fleet.QueueOptions{Lease: 3 * time.Second, MaxAttempts: 1})
			id, err := q.Submit(ctx(t), jobN(1))
			if err != nil {
				t.Fatal(err)
			}
			// Hold every client's commands for 800 ms.
			e.do(t, raw.B().ClientPause().Timeout(800).All().Build())
			short, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			got, err := q.Reserve(short, 1, 0)
			cancel()
			if !errors.Is(err, context.DeadlineExceeded) || len(got) != 0 {
				t.Fatalf("Reserve on a paused server = %v, %v", got, err)
			}
			waitFor(t, 5*time.Second, func() bool {
				l, _ := raw.Do(context.Background(), raw.B().Llen().Key(k.Pending).Build()).AsInt64()
				return l == 1
			}, "the task did not come back after the server answered again")
			if n := len(e.zscores(t, k.Processing)); n != 0 {
				t.Fatalf("processing holds %d", n)
			}
			if m := e.hgetall(t, k.Lease); len(m) != 0 {
				t.Fatalf("lease entries left %v", m)
			}
			if m := e.hgetall(t, k.Body); len(m) != 0 {
				t.Fatalf("bodies left %v", m)
			}
			// Uncounted: with MaxAttempts 1 it still runs once.
			got, err = q.Reserve(ctx(t), 1, 0)
			if err != nil || len(got) != 1 || got[0].ID != id || got[0].Attempts != 0 {
				t.Fatalf("Reserve after = %v, %v", got, err)
			}
			if err := got[0].Ack(ctx(t)); err != nil {
				t.Fatal(err)
			}
			// What is left is the registry, the policy, and, if the abandon
			// ran before the reserve, the call's tombstone, which expires.
			keys := redistest.Keys(t, raw, "")
			keys = slices.DeleteFunc(keys, func(s string) bool { return s == "fleet:meta" })
			if len(keys) == 3 && strings.HasPrefix(keys[0], k.Call) {
				if ttl, _ := raw.Do(context.Background(), raw.B().Pttl().Key(keys[0]).Build()).AsInt64(); ttl <= 0 {
					t.Fatalf("tombstone %s has no TTL (%d)", keys[0], ttl)
				}
				keys = keys[1:]
			}
			if !slices.Equal(keys, []string{k.Policy, k.Registry}) {
				t.Fatalf("keys left %v", keys)
			}
		})
	}
}

// A Reserve whose reply comes back after its lease (less the margin) ran
// out on this process's clock returns no task: another consumer may get
// the task any moment. The task goes back to the queue uncounted, and
// nothing stays held under the late call's tokens.
func TestQueueReserveLateReply(t *testing.T) {
	px := startProxied(t, fleet.Options{})
	const lease = time.Second
	opts := fleet.QueueOptions{Lease: lease, MaxAttempts: 1}
	direct := fleet.NewQueue[job](px.Direct, "late", opts)
	through := fleet.NewQueue[job](px.Through, "late", opts)
	k := px.E.qk("late")
	if got, err := through.Reserve(ctx(t), 1, 0); err != nil || len(got) != 0 {
		t.Fatalf("the first Reserve (which stores the policy) = %v, %v", got, err)
	}
	id, err := direct.Submit(ctx(t), jobN(1))
	if err != nil {
		t.Fatal(err)
	}
	px.P.HoldReplies()
	start := time.Now()
	type result struct {
		tasks []*fleet.Task[job]
		err   error
	}
	done := make(chan result, 1)
	go func() {
		tasks, err := through.Reserve(ctx(t), 1, 0)
		done <- result{tasks, err}
	}()
	// The script ran (the task is reserved on the server); its reply waits
	// in the proxy until the lease is over on this process's clock.
	waitFor(t, 10*time.Second, func() bool { return len(px.E.zscores(t, k.Processing)) == 1 }, "the reserve never ran")
	waitFor(t, 10*time.Second, func() bool { return time.Since(start) > lease }, "")
	px.P.Thaw()
	r := <-done
	if r.err != nil || len(r.tasks) != 0 {
		t.Fatalf("a Reserve whose reply came after its lease = %v, %v; want no task", r.tasks, r.err)
	}
	waitFor(t, 10*time.Second, func() bool { return px.E.llen(t, k.Pending) == 1 }, "the task did not come back: %v", later(func() any { return px.E.dump(t) }))
	if n := len(px.E.zscores(t, k.Processing)); n != 0 {
		t.Fatalf("processing holds %d", n)
	}
	if m := px.E.hgetall(t, k.Lease); len(m) != 0 {
		t.Fatalf("lease entries left %v", m)
	}
	// Uncounted: with MaxAttempts 1 it still runs once.
	got, err := direct.Reserve(ctx(t), 1, 0)
	if err != nil || len(got) != 1 || got[0].ID != id || got[0].Attempts != 0 {
		t.Fatalf("Reserve after = %v, %v", got, err)
	}
	if err := got[0].Ack(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if dead := px.E.lrange(t, k.Dead); len(dead) != 0 {
		t.Fatalf("dead letters %v", dead)
	}
}
