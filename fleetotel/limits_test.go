package fleetotel_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/fleetotel"
)

// TestLimitsMetrics: each round trip to a limiter is counted by outcome
// (allowed, delayed, denied), each semaphore acquire timed by outcome;
// names only with LimitNames. A rate-limited queue's reserves count too.
func TestLimitsMetrics(t *testing.T) {
	each(t, func(t *testing.T, tg target) {
		p := prefix(t)
		k := newKit(t, fleetotel.Options{LimitNames: true})
		f := open(t, tg, p, k.tel.Observer())
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		lim := f.Limiter("site", fleet.LimitOptions{Rate: 1, Per: time.Hour, Burst: 2})
		for i, want := range []bool{true, true, false} {
			r, err := lim.Allow(ctx, 1)
			if err != nil || r.Allowed != want {
				t.Fatalf("allow %d: %+v %v", i, r, err)
			}
		}
		short, stop := context.WithTimeout(ctx, 50*time.Millisecond)
		if err := lim.Wait(short, 1); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("wait: %v", err) // booked an hour ahead, then given up
		}
		stop()
		sem := f.Semaphore("acct", 1)
		if _, err := sem.Acquire(ctx, fleet.SemaphoreOptions{Hold: time.Minute}); err != nil {
			t.Fatal(err)
		}
		if _, err := sem.Acquire(ctx, fleet.SemaphoreOptions{Hold: time.Minute, Wait: 20 * time.Millisecond}); !errors.Is(err, fleet.ErrNotObtained) {
			t.Fatalf("second acquire: %v", err)
		}
		// A queue limited to 1 an hour with a burst of 1: the first reserve
		// takes the token, the second is told to wait.
		qlim := f.Limiter("q", fleet.LimitOptions{Rate: 1, Per: time.Hour})
		q := fleet.NewQueue[page](f, "limited", fleet.QueueOptions{RateLimit: qlim})
		if _, err := q.SubmitMany(ctx, []page{{URL: "a"}, {URL: "b"}}); err != nil {
			t.Fatal(err)
		}
		if ts, err := q.Reserve(ctx, 1, 0); err != nil || len(ts) != 1 {
			t.Fatalf("reserve: %d %v", len(ts), err)
		}
		if ts, err := q.Reserve(ctx, 1, 0); err != nil || len(ts) != 0 {
			t.Fatalf("limited reserve: %d %v", len(ts), err)
		}
		got := k.metricsOf(t)
		for name, want := range map[string][]string{
			"fleet.limiter.decisions": {
				"fleet.limiter.name=q,fleet.limiter.outcome=allowed: 1",
				"fleet.limiter.name=q,fleet.limiter.outcome=delayed: 1",
				"fleet.limiter.name=site,fleet.limiter.outcome=allowed: 2",
				"fleet.limiter.name=site,fleet.limiter.outcome=delayed: 1",
				"fleet.limiter.name=site,fleet.limiter.outcome=denied: 1"},
			"fleet.semaphore.wait.duration": {
				"fleet.semaphore.name=acct,fleet.semaphore.outcome=not_obtained: 1",
				"fleet.semaphore.name=acct,fleet.semaphore.outcome=obtained: 1"},
		} {
			m, ok := got[name]
			if !ok {
				t.Fatalf("no metric %s", name)
			}
			if g := points(t, m); !slices.Equal(g, want) {
				t.Fatalf("%s:\n got %q\nwant %q", name, g, want)
			}
		}
		if u := got["fleet.limiter.decisions"].Unit; u != "{decision}" {
			t.Fatalf("unit %q", u)
		}
		if u := got["fleet.semaphore.wait.duration"].Unit; u != "s" {
			t.Fatalf("unit %q", u)
		}

		// Without LimitNames: outcomes only.
		k2 := newKit(t, fleetotel.Options{})
		f2 := open(t, tg, prefix(t), k2.tel.Observer())
		if _, err := f2.Limiter("other", fleet.LimitOptions{Rate: 10}).Allow(ctx, 1); err != nil {
			t.Fatal(err)
		}
		if _, err := f2.Semaphore("other", 1).Acquire(ctx, fleet.SemaphoreOptions{Hold: time.Minute}); err != nil {
			t.Fatal(err)
		}
		got = k2.metricsOf(t)
		if g := points(t, got["fleet.limiter.decisions"]); !slices.Equal(g, []string{"fleet.limiter.outcome=allowed: 1"}) {
			t.Fatalf("decisions %q", g)
		}
		if g := points(t, got["fleet.semaphore.wait.duration"]); !slices.Equal(g, []string{"fleet.semaphore.outcome=obtained: 1"}) {
			t.Fatalf("semaphore waits %q", g)
		}
	})
}
