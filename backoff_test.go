package fleet_test

import (
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/internal/redistest"
)

// nackAt nacks task with cause and returns the server's time just before
// and the retry's ready time (its score in :scheduled, which must hold it
// alone).
func nackAt(t *testing.T, e *env, k qkeys, task *fleet.Task[job], cause error) (before time.Time, ready float64) {
	t.Helper()
	before = e.serverNow(t)
	if err := task.Nack(ctx(t), cause); err != nil {
		t.Fatal(err)
	}
	zs := e.zscores(t, k.Scheduled)
	if len(zs) != 1 {
		t.Fatalf("scheduled %v, want the one retry", zs)
	}
	return before, zs[0].Score
}

// within fails unless the ready time (unix s) is in [from+lo, from+hi].
func readyWithin(t *testing.T, what string, ready float64, from time.Time, lo, hi time.Duration) {
	t.Helper()
	got := time.UnixMilli(int64(ready * 1000))
	if got.Before(from.Add(lo)) || got.After(from.Add(hi)) {
		t.Fatalf("%s: ready at %v, %v after the nack; want in [%v, %v]", what, got, got.Sub(from), lo, hi)
	}
}

// retryOnce makes the one scheduled retry due at once (as a later clock
// would) and reserves it.
func retryOnce(t *testing.T, e *env, k qkeys, q *fleet.Queue[job]) *fleet.Task[job] {
	t.Helper()
	zs := e.zscores(t, k.Scheduled)
	if len(zs) != 1 {
		t.Fatalf("scheduled %v", zs)
	}
	e.do(t, e.Raw.B().Zadd().Key(k.Scheduled).ScoreMember().ScoreMember(1, zs[0].Member).Build())
	return reserveAll(t, q, 1)[0]
}

// TestBackoffKinds: each kind of QueueOptions.Backoff gives its delays,
// retry after retry, as the scheduled time in Redis says; the stored
// policy names the kind, and a queue that declares none stores what it
// stored before.
func TestBackoffKinds(t *testing.T) {
	const slack = 300 * time.Millisecond // the nack's round trip
	cases := []struct {
		spec   string
		policy string // the stored policy's backoff fields
		want   []time.Duration
		jitter bool // exponential: between half and all of want
	}{
		{"fixed:2s", `"backoff_base_ms":2000,"backoff_max_ms":2000,"backoff":"fixed"`, []time.Duration{2 * time.Second, 2 * time.Second, 2 * time.Second}, false},
		{"linear:1s:3s", `"backoff_base_ms":1000,"backoff_max_ms":3000,"backoff":"linear"`, []time.Duration{time.Second, 2 * time.Second, 3 * time.Second, 3 * time.Second}, false},
		{"exponential:1s:4s", `"backoff_base_ms":1000,"backoff_max_ms":4000,"backoff":"exponential"`, []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 4 * time.Second}, true},
		{"", `"backoff_base_ms":1000,"backoff_max_ms":600000`, []time.Duration{time.Second, 2 * time.Second, 4 * time.Second}, true},
	}
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		for i, c := range cases {
			name := fmt.Sprintf("kind%d", i)
			k := e.qk(name)
			var b fleet.Backoff
			if c.spec != "" {
				var err error
				if b, err = fleet.ParseBackoff(c.spec); err != nil {
					t.Fatal(err)
				}
			}
			q := fleet.NewQueue[job](e.F, name, fleet.QueueOptions{Backoff: b})
			if _, err := q.Submit(ctx(t), jobN(i)); err != nil {
				t.Fatal(err)
			}
			want := `string:{"max_attempts":10,` + c.policy + `,"dead_max":10000,"dead_max_age_ms":604800000}`
			if got := e.dump(t)[k.Policy]; got != want {
				t.Fatalf("%s: policy %s, want %s", c.spec, got, want)
			}
			task := reserveAll(t, q, 1)[0]
			for n, d := range c.want {
				if n > 0 {
					task = retryOnce(t, e, k, q)
				}
				before, ready := nackAt(t, e, k, task, errors.New("boom"))
				lo := d
				if c.jitter {
					lo = d / 2
				}
				readyWithin(t, fmt.Sprintf("%q retry %d", c.spec, n+1), ready, before, lo-10*time.Millisecond, d+slack)
			}
		}
	})
}

// expireAndSweep waits until the one reservation of k is past its
// deadline on the server's clock, sweeps it with f, and returns the
// server's time just before the sweep that re-queued it.
func expireAndSweep(t *testing.T, e *env, k qkeys, f *fleet.Fleet) time.Time {
	t.Helper()
	zs := e.zscores(t, k.Processing)
	if len(zs) != 1 {
		t.Fatalf("processing %v", zs)
	}
	deadline := time.UnixMilli(int64(zs[0].Score * 1000))
	waitFor(t, 10*time.Second, func() bool { return e.serverNow(t).After(deadline) }, "the lease never ran out")
	var before time.Time
	waitFor(t, 10*time.Second, func() bool {
		before = e.serverNow(t)
		st, err := f.Sweep(ctx(t), fleet.SweeperOptions{})
		return err == nil && st.Requeued == 1
	}, "the expired reservation was never re-queued")
	return before
}

// TestBackoffStoredSweeper: the stored policy is what a sweeper in
// another Fleet applies to a lease that ran out, though that Fleet never
// declared the queue: the retry is scheduled by the stored kind. A
// Backoff.Func stays in its process: there its nacks and its sweeper call
// it, and a sweeper elsewhere falls back to the stored kind, base and max.
func TestBackoffStoredSweeper(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		other := openOn(t, tg, e.Prefix) // never declares the queues
		const lease = 300 * time.Millisecond

		k := e.qk("lin")
		b, err := fleet.ParseBackoff("linear:3s:1m")
		if err != nil {
			t.Fatal(err)
		}
		q := fleet.NewQueue[job](e.F, "lin", fleet.QueueOptions{Lease: lease, Backoff: b})
		id, err := q.Submit(ctx(t), jobN(1))
		if err != nil {
			t.Fatal(err)
		}
		reserveAll(t, q, 1)
		at := expireAndSweep(t, e, k, other)
		zs := e.zscores(t, k.Scheduled)
		if len(zs) != 1 || !strings.Contains(zs[0].Member, `"attempts":1`) || !strings.Contains(zs[0].Member, `"error":"lease ran out"`) ||
			!strings.Contains(zs[0].Member, id) {
			t.Fatalf("scheduled %v", zs)
		}
		readyWithin(t, "linear, swept elsewhere", zs[0].Score, at, 3*time.Second-10*time.Millisecond, 3*time.Second+300*time.Millisecond)
		if got := e.dump(t)[k.Pending]; got != "" {
			t.Fatalf("pending %q: the retry went back at once", got)
		}
		// Its second expiry waits two steps.
		task := retryOnce(t, e, k, q)
		if task.Attempts != 1 {
			t.Fatalf("attempts %d", task.Attempts)
		}
		at = expireAndSweep(t, e, k, other)
		zs = e.zscores(t, k.Scheduled)
		if len(zs) != 1 {
			t.Fatalf("scheduled %v", zs)
		}
		readyWithin(t, "linear, second expiry", zs[0].Score, at, 6*time.Second-10*time.Millisecond, 6*time.Second+300*time.Millisecond)

		// A func: this process's nacks and sweeper call it (2 s); the other
		// Fleet's sweeper applies the stored fixed 20 s.
		k = e.qk("fn")
		var calls []string
		fq := fleet.NewQueue[job](e.F, "fn", fleet.QueueOptions{Lease: lease, Backoff: fleet.Backoff{Kind: fleet.BackoffFixed, Base: 20 * time.Second,
			Func: func(attempt int, err error) time.Duration {
				calls = append(calls, fmt.Sprintf("%d %v %v", attempt, err, errors.Is(err, fleet.ErrLeaseLost)))
				return 2 * time.Second
			}}})
		if _, err := fq.Submit(ctx(t), jobN(2)); err != nil {
			t.Fatal(err)
		}
		if p, ok, err := fq.Policy(ctx(t)); err != nil || !ok || p.Backoff != fleet.BackoffFixed || p.BackoffBaseMS != 20000 || p.BackoffMaxMS != 20000 {
			t.Fatalf("Policy %+v %v %v", p, ok, err)
		}
		task = reserveAll(t, fq, 1)[0]
		before, ready := nackAt(t, e, k, task, errors.New("boom"))
		readyWithin(t, "func, nacked", ready, before, 2*time.Second-10*time.Millisecond, 2*time.Second+300*time.Millisecond)
		retryOnce(t, e, k, fq)
		at = expireAndSweep(t, e, k, e.F)
		readyWithin(t, "func, swept here", e.zscores(t, k.Scheduled)[0].Score, at, 2*time.Second-10*time.Millisecond, 2*time.Second+300*time.Millisecond)
		retryOnce(t, e, k, fq)
		at = expireAndSweep(t, e, k, other)
		readyWithin(t, "func, swept elsewhere", e.zscores(t, k.Scheduled)[0].Score, at, 20*time.Second-10*time.Millisecond, 20*time.Second+300*time.Millisecond)
		wantCalls := []string{"1 boom false", "2 fleet: lease lost: lease ran out true"}
		if fmt.Sprint(calls) != fmt.Sprint(wantCalls) {
			t.Fatalf("Func calls %q, want %q", calls, wantCalls)
		}

		// A queue that declares no Backoff puts an expired task back at once.
		k = e.qk("plain")
		pq := fleet.NewQueue[job](e.F, "plain", fleet.QueueOptions{Lease: lease})
		if _, err := pq.Submit(ctx(t), jobN(3)); err != nil {
			t.Fatal(err)
		}
		reserveAll(t, pq, 1)
		expireAndSweep(t, e, k, other)
		if got := e.dump(t); got[k.Scheduled] != "" || !strings.HasPrefix(got[k.Pending], "list:") {
			t.Fatalf("after the sweep: scheduled %q, pending %q", got[k.Scheduled], got[k.Pending])
		}
	})
}

// TestRetryAfter: a handler's RetryAfter schedules the retry at its delay
// (±10%), whatever the backoff, and counts the attempt; on the last
// attempt the task goes to the dead letters as any failure does. The
// error unwraps to the cause.
func TestRetryAfter(t *testing.T) {
	cause := errors.New("upstream 503")
	err := fleet.RetryAfter(5*time.Second, cause)
	var ra *fleet.RetryAfterError
	if !errors.As(err, &ra) || ra.After != 5*time.Second || !errors.Is(err, cause) || err.Error() != "upstream 503 (retry after 5s)" {
		t.Fatalf("RetryAfter = %v (%#v)", err, ra)
	}
	if wrapped := fmt.Errorf("fetch: %w", err); !errors.As(wrapped, &ra) {
		t.Fatal("errors.As does not see through a wrap")
	}
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		k := e.qk("ra")
		q := fleet.NewQueue[job](e.F, "ra", fleet.QueueOptions{MaxAttempts: 2, BackoffBase: time.Hour, BackoffMax: time.Hour})
		id, err := q.Submit(ctx(t), jobN(1))
		if err != nil {
			t.Fatal(err)
		}
		task := reserveAll(t, q, 1)[0]
		before, ready := nackAt(t, e, k, task, fmt.Errorf("wrapped: %w", fleet.RetryAfter(5*time.Second, cause)))
		readyWithin(t, "RetryAfter 5s", ready, before, 4500*time.Millisecond, 5500*time.Millisecond)
		zs := e.zscores(t, k.Scheduled)
		if want := `{"attempts":1,"error":"wrapped: upstream 503 (retry after 5s)","id":"` + id + `","payload":{"url":"https://example.com/1","n":1}}`; zs[0].Member != want {
			t.Fatalf("retry %s, want %s", zs[0].Member, want)
		}
		task = retryOnce(t, e, k, q)
		if err := task.Nack(ctx(t), fleet.RetryAfter(time.Second, cause)); err != nil {
			t.Fatal(err)
		}
		got := e.dump(t)
		if got[k.Scheduled] != "" || !strings.Contains(got[k.Dead], `"attempts":2,"error":"upstream 503 (retry after 1s)"`) {
			t.Fatalf("after the last attempt: scheduled %q, dead %q", got[k.Scheduled], got[k.Dead])
		}
	})
}

// TestTaskBackoff: a task's own Backoff travels in its body, goes before
// the queue's for a nack, and schedules its retry when its lease runs out
// on a queue that declares none, swept by another Fleet.
func TestTaskBackoff(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		other := openOn(t, tg, e.Prefix)
		k := e.qk("own")
		q := fleet.NewQueue[job](e.F, "own", fleet.QueueOptions{Lease: 300 * time.Millisecond, BackoffBase: time.Hour, BackoffMax: time.Hour})
		b, err := fleet.ParseBackoff("fixed:7s")
		if err != nil {
			t.Fatal(err)
		}
		id, err := q.SubmitWith(ctx(t), jobN(1), fleet.SubmitOptions{Backoff: b})
		if err != nil {
			t.Fatal(err)
		}
		want := `list:{"id":"` + id + `","payload":{"url":"https://example.com/1","n":1},"attempts":0,"backoff":"fixed:7s"}`
		if got := e.dump(t)[k.Pending]; got != want {
			t.Fatalf("pending %s, want %s", got, want)
		}
		task := reserveAll(t, q, 1)[0]
		before, ready := nackAt(t, e, k, task, errors.New("boom"))
		readyWithin(t, "own fixed 7s", ready, before, 7*time.Second-10*time.Millisecond, 7*time.Second+300*time.Millisecond)
		retryOnce(t, e, k, q)
		at := expireAndSweep(t, e, k, other)
		zs := e.zscores(t, k.Scheduled)
		if len(zs) != 1 || !strings.Contains(zs[0].Member, `"attempts":2`) || !strings.Contains(zs[0].Member, `"backoff":"fixed:7s"`) {
			t.Fatalf("scheduled %v", zs)
		}
		readyWithin(t, "own fixed 7s, swept", zs[0].Score, at, 7*time.Second-10*time.Millisecond, 7*time.Second+300*time.Millisecond)

		// Left out, its Base and Max are the queue's.
		k = e.qk("own2")
		q2 := fleet.NewQueue[job](e.F, "own2", fleet.QueueOptions{BackoffBase: 2 * time.Second, BackoffMax: time.Hour})
		id, err = q2.SubmitWith(ctx(t), jobN(2), fleet.SubmitOptions{Backoff: fleet.Backoff{Kind: fleet.BackoffLinear}})
		if err != nil {
			t.Fatal(err)
		}
		if got := e.dump(t)[k.Pending]; !strings.Contains(got, id) || !strings.Contains(got, `"backoff":"linear"`) {
			t.Fatalf("pending %s", got)
		}
		task = reserveAll(t, q2, 1)[0]
		before, ready = nackAt(t, e, k, task, errors.New("boom"))
		readyWithin(t, "own linear, the queue's base", ready, before, 2*time.Second-10*time.Millisecond, 2*time.Second+300*time.Millisecond)
	})
}

// TestBackoffBadInput: a Backoff that does not parse or check is an error
// that names the part or field, and nothing is stored.
func TestBackoffBadInput(t *testing.T) {
	for _, s := range []string{"", "exp:1s", "fixed", "fixed:0s", "fixed:1s:2s", "fixed:-1s", "linear:1x", "linear:5s:1s",
		"exponential:1s:2s:3s", "exponential:500us", "linear:0s:1m"} {
		if b, err := fleet.ParseBackoff(s); !errors.Is(err, fleet.ErrInvalidArgument) || !strings.Contains(err.Error(), fmt.Sprintf("%q", s)) {
			t.Errorf("ParseBackoff(%q) = %+v, %v; want ErrInvalidArgument naming it", s, b, err)
		}
	}
	for s, want := range map[string]fleet.Backoff{
		"exponential:1s:10m": {Kind: fleet.BackoffExponential, Base: time.Second, Max: 10 * time.Minute},
		"fixed:30s":          {Kind: fleet.BackoffFixed, Base: 30 * time.Second},
		"linear:5s:1m":       {Kind: fleet.BackoffLinear, Base: 5 * time.Second, Max: time.Minute},
		"linear::1m":         {Kind: fleet.BackoffLinear, Max: time.Minute},
		"exponential":        {Kind: fleet.BackoffExponential},
	} {
		b, err := fleet.ParseBackoff(s)
		if err != nil || b.Kind != want.Kind || b.Base != want.Base || b.Max != want.Max {
			t.Errorf("ParseBackoff(%q) = %+v, %v; want %+v", s, b, err, want)
		}
		if again, err := fleet.ParseBackoff(b.String()); err != nil || again.Kind != b.Kind || again.Base != b.Base || again.Max != b.Max {
			t.Errorf("ParseBackoff(%q.String() = %q) = %+v, %v", s, b.String(), again, err)
		}
	}
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		for _, c := range []struct {
			o     fleet.QueueOptions
			is    error
			field string
		}{
			{fleet.QueueOptions{Backoff: fleet.Backoff{Kind: "random"}}, fleet.ErrInvalidOptions, "QueueOptions.Backoff.Kind"},
			{fleet.QueueOptions{Backoff: fleet.Backoff{Base: -time.Second}}, fleet.ErrInvalidArgument, "QueueOptions.Backoff.Base"},
			{fleet.QueueOptions{Backoff: fleet.Backoff{Kind: fleet.BackoffLinear, Max: -time.Second}}, fleet.ErrInvalidArgument, "QueueOptions.Backoff.Max"},
			{fleet.QueueOptions{Backoff: fleet.Backoff{Kind: fleet.BackoffFixed}}, fleet.ErrInvalidArgument, "QueueOptions.Backoff.Base"},
			{fleet.QueueOptions{Backoff: fleet.Backoff{Kind: fleet.BackoffLinear, Base: time.Minute, Max: time.Second}}, fleet.ErrInvalidArgument, "QueueOptions.Backoff.Max"},
			{fleet.QueueOptions{Backoff: fleet.Backoff{Base: time.Microsecond}}, fleet.ErrInvalidArgument, "QueueOptions.Backoff.Base"},
			{fleet.QueueOptions{BackoffBase: time.Second, Backoff: fleet.Backoff{Base: 2 * time.Second}}, fleet.ErrInvalidOptions, "BackoffBase"},
			{fleet.QueueOptions{BackoffMax: time.Minute, Backoff: fleet.Backoff{Max: time.Hour}}, fleet.ErrInvalidOptions, "BackoffMax"},
		} {
			q := fleet.NewQueue[job](e.F, "bad", c.o)
			_, err := q.Submit(ctx(t), jobN(1))
			if !errors.Is(q.Err(), c.is) || !errors.Is(err, c.is) || !strings.Contains(err.Error(), c.field) {
				t.Errorf("%+v: Err %v, Submit %v; want %v naming %s", c.o.Backoff, q.Err(), err, c.is, c.field)
			}
		}
		q := fleet.NewQueue[job](e.F, "badtask", fleet.QueueOptions{})
		for _, c := range []struct {
			b     fleet.Backoff
			field string
		}{
			{fleet.Backoff{Func: func(int, error) time.Duration { return 0 }}, "SubmitOptions.Backoff.Func"},
			{fleet.Backoff{Kind: fleet.BackoffFixed, Base: -time.Second}, "SubmitOptions.Backoff.Base"},
			{fleet.Backoff{Kind: "soon"}, "SubmitOptions.Backoff.Kind"},
		} {
			if _, err := q.SubmitWith(ctx(t), jobN(1), fleet.SubmitOptions{Backoff: c.b}); err == nil || !strings.Contains(err.Error(), c.field) ||
				!(errors.Is(err, fleet.ErrInvalidArgument) || errors.Is(err, fleet.ErrInvalidOptions)) {
				t.Errorf("SubmitWith Backoff %+v: %v; want an error naming %s", c.b, err, c.field)
			}
		}
		if got := e.dump(t); !maps.Equal(got, map[string]string{}) {
			t.Fatalf("left in Redis: %v", got)
		}
	})
}
