package fleet_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/internal/redistest"
)

// limitKey is the limiter's key in the target's layout.
func (e *env) limitKey(name string) string {
	return e.key("fleet:limit:"+name, "fleet:limit:{"+name+"}")
}

// tat reads the stored theoretical arrival time (server µs).
func (e *env) tat(t *testing.T, name string) (int64, bool) {
	t.Helper()
	s, ok := e.get(t, e.limitKey(name))
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatalf("limiter key holds %q, not µs", s)
	}
	return n, true
}

// A burst goes at once, then Allow says no with the server's retry-after;
// the key holds the arrival time that many intervals past now, and expires
// when the limiter is full again.
func TestLimiterAllow(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		// One token per 10 s: nothing comes back while the test looks.
		l := e.F.Limiter("example.org", fleet.LimitOptions{Rate: 6, Per: time.Minute, Burst: 3})
		const iv = 10 * time.Second
		before := e.serverNow(t)
		for i := range 3 {
			r, err := l.Allow(c, 1)
			if err != nil {
				t.Fatal(err)
			}
			if !r.Allowed || r.Remaining != 2-i || r.RetryAfter != 0 {
				t.Fatalf("allow %d: %+v", i, r)
			}
			if want := time.Duration(i+1) * iv; r.ResetAfter > want || r.ResetAfter < want-iv {
				t.Fatalf("allow %d: reset after %v, want about %v", i, r.ResetAfter, want)
			}
		}
		r, err := l.Allow(c, 1)
		if err != nil {
			t.Fatal(err)
		}
		if r.Allowed || r.Remaining != 0 || r.RetryAfter <= 0 || r.RetryAfter > iv {
			t.Fatalf("past the burst: %+v, want denied, retry within %v", r, iv)
		}
		tat, ok := e.tat(t, "example.org")
		after := e.serverNow(t)
		// Three tokens of 10 s each past the first call's now.
		if lo, hi := before.Add(3*iv).UnixMicro(), after.Add(3*iv).UnixMicro(); !ok || tat < lo || tat > hi {
			t.Fatalf("arrival time %d, want in [%d, %d]", tat, lo, hi)
		}
		if ms, _ := e.do(t, e.Raw.B().Pttl().Key(e.limitKey("example.org")).Build()).AsInt64(); ms <= 2*iv.Milliseconds() || ms > 3*iv.Milliseconds() {
			t.Fatalf("limiter key TTL %d ms, want (%d, %d]", ms, 2*iv.Milliseconds(), 3*iv.Milliseconds())
		}
		// n tokens are all or nothing: 2 come back 2 intervals after the
		// first of the burst.
		r, err = l.Allow(c, 2)
		if err != nil || r.Allowed || r.RetryAfter <= iv || r.RetryAfter > 2*iv {
			t.Fatalf("allow 2 = %+v, %v; want denied, retry in (%v, %v]", r, err, iv, 2*iv)
		}
		if got, _ := e.tat(t, "example.org"); got != tat {
			t.Fatalf("a denied allow moved the arrival time %d -> %d", tat, got)
		}
		// Idle, a limiter vanishes.
		fast := e.F.Limiter("fast", fleet.LimitOptions{Rate: 10, Burst: 3})
		for range 3 {
			if r, err := fast.Allow(c, 1); err != nil || !r.Allowed {
				t.Fatalf("fast allow = %+v, %v", r, err)
			}
		}
		waitFor(t, 5*time.Second, func() bool { _, ok := e.get(t, e.limitKey("fast")); return !ok }, "fast limiter key left")
		r, err = fast.Allow(c, 3)
		if err != nil || !r.Allowed || r.Remaining != 0 {
			t.Fatalf("full again: allow 3 = %+v, %v", r, err)
		}
	})
}

// Wait sleeps until the tokens are there: 5 waits of a 20/s limiter with
// no burst span at least 4 intervals of the server's clock. A Wait whose
// ctx ends returns ctx's error and takes nothing.
func TestLimiterWait(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		l := e.F.Limiter("paced", fleet.LimitOptions{Rate: 20})
		start := e.serverNow(t)
		for range 5 {
			if err := l.Wait(c, 1); err != nil {
				t.Fatal(err)
			}
		}
		// The fifth token was due at the server's start + 4 x 50 ms or
		// later, and the last Wait returned no sooner.
		if got := e.serverNow(t); got.Before(start.Add(200 * time.Millisecond)) {
			t.Fatalf("5 tokens within %v: faster than 20/s", got.Sub(start))
		}

		slow := e.F.Limiter("slow", fleet.LimitOptions{Rate: 1, Per: time.Hour})
		if err := slow.Wait(c, 1); err != nil {
			t.Fatal(err)
		}
		held, _ := e.tat(t, "slow")
		wctx, cancel := context.WithTimeout(c, 50*time.Millisecond)
		err := slow.Wait(wctx, 1)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Wait past ctx = %v, want DeadlineExceeded", err)
		}
		if got, _ := e.tat(t, "slow"); got != held {
			t.Fatalf("a Wait that gave up moved the arrival time %d -> %d", held, got)
		}
	})
}

// Bad input is refused with ErrInvalidArgument naming the field, and
// nothing is stored.
func TestLimiterBadInput(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		cases := []struct {
			name  string
			opts  fleet.LimitOptions
			n     int
			field string
		}{
			{"a", fleet.LimitOptions{Rate: 0}, 1, "Rate"},
			{"a", fleet.LimitOptions{Rate: -5}, 1, "Rate"},
			{"a", fleet.LimitOptions{Rate: 5, Burst: -1}, 1, "Burst"},
			{"a", fleet.LimitOptions{Rate: 5, Per: -time.Second}, 1, "Per"},
			{"a", fleet.LimitOptions{Rate: 3_000_000}, 1, "Rate"},
			{"a", fleet.LimitOptions{Rate: 5, Burst: 3}, 4, "n"},
			{"a", fleet.LimitOptions{Rate: 5}, 0, "n"},
			{"a", fleet.LimitOptions{Rate: 5}, -1, "n"},
			{"a b", fleet.LimitOptions{Rate: 5}, 1, "name"},
			{"a{b}", fleet.LimitOptions{Rate: 5}, 1, "name"},
			{"", fleet.LimitOptions{Rate: 5}, 1, "name"},
		}
		for _, tc := range cases {
			l := e.F.Limiter(tc.name, tc.opts)
			_, err := l.Allow(c, tc.n)
			werr := l.Wait(c, tc.n)
			for _, err := range []error{err, werr} {
				if !errors.Is(err, fleet.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.field) {
					t.Errorf("Limiter(%q, %+v) n=%d: %v, want ErrInvalidArgument naming %s", tc.name, tc.opts, tc.n, err, tc.field)
				}
				if tc.field == "name" && !errors.Is(err, fleet.ErrInvalidName) {
					t.Errorf("Limiter(%q): %v, want ErrInvalidName too", tc.name, err)
				}
			}
		}
		if got := e.keys(t); len(got) != 0 {
			t.Fatalf("bad input stored %v", got)
		}
	})
}

// A limiter key of another type, or a string that is no arrival time, is
// refused with ErrWrongType, and left as it was.
func TestLimiterWrongType(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		e.do(t, e.Raw.B().Hset().Key(e.limitKey("h")).FieldValue().FieldValue("f", "v").Build())
		e.do(t, e.Raw.B().Set().Key(e.limitKey("s")).Value("not-a-time").Build())
		for _, name := range []string{"h", "s"} {
			l := e.F.Limiter(name, fleet.LimitOptions{Rate: 5})
			if _, err := l.Allow(c, 1); !errors.Is(err, fleet.ErrWrongType) {
				t.Errorf("Allow on %s: %v, want ErrWrongType", name, err)
			}
			if err := l.Wait(c, 1); !errors.Is(err, fleet.ErrWrongType) {
				t.Errorf("Wait on %s: %v, want ErrWrongType", name, err)
			}
		}
		if v, err := e.do(t, e.Raw.B().Hgetall().Key(e.limitKey("h")).Build()).AsStrMap(); err != nil || len(v) != 1 || v["f"] != "v" {
			t.Fatalf("hash now %v (%v)", v, err)
		}
		if v, _ := e.get(t, e.limitKey("s")); v != "not-a-time" {
			t.Fatalf("string now %q", v)
		}
		for _, k := range []string{e.limitKey("h"), e.limitKey("s")} {
			if ttl, _ := e.do(t, e.Raw.B().Pttl().Key(k).Build()).AsInt64(); ttl != -1 {
				t.Fatalf("%s got a TTL of %d ms", k, ttl)
			}
		}
	})
}

// 20 goroutines in 4 Fleets take mixed n from one 100/s limiter with a
// burst of 10 for 3 s, half with Allow and half with Wait: over the
// window, measured on the server's clock, they get 100 per second plus the
// burst, within 2%, and never more.
func TestLimiterFleetwide(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		e := open(t, tg)
		fleets := []*fleet.Fleet{e.F}
		for range 3 {
			fleets = append(fleets, openOn(t, tg, e.Prefix))
		}
		opts := fleet.LimitOptions{Rate: 100, Per: time.Second, Burst: 10}
		c := ctx(t)
		var admitted, calls atomic.Int64
		var wg sync.WaitGroup
		stop := make(chan struct{})
		start := make(chan struct{})
		for g := range 20 {
			l := fleets[g%4].Limiter("hammered", opts)
			wg.Go(func() {
				<-start
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					n := 1 + (g+i)%3 // 1, 2 and 3 tokens, mixed
					if g%2 == 1 {
						// Half of them wait their turn.
						if err := l.Wait(c, n); err != nil {
							t.Error(err)
							return
						}
						calls.Add(1)
						admitted.Add(int64(n))
						continue
					}
					r, err := l.Allow(c, n)
					calls.Add(1)
					if err != nil {
						t.Error(err)
						return
					}
					if r.Allowed {
						admitted.Add(int64(n))
						continue
					}
					// Come back within the retry-after (and soon: the
					// waiters book far ahead), so that some caller is
					// always there when tokens are.
					time.Sleep(rand.N(min(r.RetryAfter, 20*time.Millisecond) + time.Microsecond))
				}
			})
		}
		// The limit bounds what went between the last look at the server's
		// clock before the start and the first after every call returned;
		// the callers demanded tokens all along between the first look
		// after the start and the stop, so at least that much (within 2%)
		// must have gone. Both windows are about 3 s.
		outerFrom := e.serverNow(t)
		close(start)
		innerFrom := e.serverNow(t)
		time.Sleep(3 * time.Second)
		innerTo := e.serverNow(t)
		close(stop)
		wg.Wait()
		outer, inner := e.serverNow(t).Sub(outerFrom), innerTo.Sub(innerFrom)
		most, least := 10+100*outer.Seconds(), 10+100*inner.Seconds()
		got := float64(admitted.Load())
		t.Logf("%s: admitted %v: at most %.1f (over %v), at least %.1f - 2%% (over %v); %d calls", tg.Name, got, most, outer, least, inner, calls.Load())
		if got > most+1 {
			t.Fatalf("admitted %v over %v: more than the limit %.1f", got, outer, most)
		}
		if got < least*0.98 {
			t.Fatalf("admitted %v while callers demanded for %v: more than 2%% below %.1f", got, inner, least)
		}
	})
}
