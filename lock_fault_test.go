package fleet_test

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/fleettest"
	"github.com/fleet-go/fleet/internal/redistest"
)

// Lock tests under partial failure (issue 9 cases 2 and 10) and the lock's
// Redis cost and key lifetimes (issue 10), each on a server of its own where
// it pauses the server, holds replies back or counts commands.

// An uncontended acquire+release costs at most 6 Redis commands (EVALSHA,
// SET, INCRBY; EVALSHA, GET, DEL), where it cost 10 (TYPE checks, GET and
// TIME and SET on the fence).
func TestLockPairCommands(t *testing.T) {
	s, f, _ := lockServer(t)
	c := ctx(t)
	lk := f.Lock("cost")
	pair := func() {
		l, err := lk.Acquire(c, fleet.LockOptions{Hold: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(c); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 { // load the scripts, seed the fence
		pair()
	}
	const n = 100
	before := commandCalls(t, s)
	for range n {
		pair()
	}
	per := float64(commandCalls(t, s)-before) / n
	t.Logf("%.2f commands per acquire+release", per)
	if per > 6 {
		t.Fatalf("%.2f commands per acquire+release, want at most 6", per)
	}
}

// The fence key expires (24 h after it was seeded, or the seeding hold if
// longer), and a fence handed out after it expired or was deleted, or after
// an older fleet wrote it, is still larger than every earlier one.
func TestLockFenceLifetime(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		lk := e.F.Lock("fenced")
		fence := e.key("fleet:fence:fenced", "fleet:fence:{fenced}")
		var last int64
		take := func(what string) {
			t.Helper()
			l, err := lk.Acquire(c, fleet.LockOptions{Hold: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			if l.Fence() <= last {
				t.Fatalf("%s: fence %d after %d", what, l.Fence(), last)
			}
			if v, _ := e.get(t, fence); v != strconv.FormatInt(l.Fence(), 10) {
				t.Fatalf("%s: fence key %q, lease fence %d", what, v, l.Fence())
			}
			last = l.Fence()
			if err := l.Release(c); err != nil {
				t.Fatal(err)
			}
		}
		take("first")
		ttl := time.Duration(rawPTTL(t, e.Raw, fence)) * time.Millisecond
		if ttl <= 24*time.Hour-time.Minute || ttl > 24*time.Hour {
			t.Fatalf("fence TTL %v, want about 24h", ttl)
		}
		for i := range 5 {
			take("take " + strconv.Itoa(i))
		}
		if ttl2 := time.Duration(rawPTTL(t, e.Raw, fence)) * time.Millisecond; ttl2 > ttl || ttl2 < ttl-time.Minute {
			t.Fatalf("fence TTL moved from %v to %v", ttl, ttl2)
		}
		e.do(t, e.Raw.B().Del().Key(fence).Build())
		take("after DEL")
		e.do(t, e.Raw.B().Pexpire().Key(fence).Milliseconds(1).Build())
		waitFor(t, 5*time.Second, func() bool { _, ok := e.get(t, fence); return !ok }, "fence key did not expire")
		take("after expiry")
		// An older fleet's fence (µs of the server clock, no TTL) goes on
		// rising, and gets a TTL.
		e.do(t, e.Raw.B().Set().Key(fence).Value(strconv.FormatInt(time.Now().Add(time.Hour).UnixMicro(), 10)).Build())
		last = rawInt(t, e.Raw, fence)
		take("after an older fleet's fence")
		if ttl := rawPTTL(t, e.Raw, fence); ttl <= 0 {
			t.Fatalf("re-seeded fence TTL %d", ttl)
		}
		// A hold above 24 h keeps the fence that long.
		e.do(t, e.Raw.B().Del().Key(fence).Build())
		l, err := lk.Acquire(c, fleet.LockOptions{Hold: 30 * time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		if l.Fence() <= last {
			t.Fatalf("fence %d after %d", l.Fence(), last)
		}
		if ttl := time.Duration(rawPTTL(t, e.Raw, fence)) * time.Millisecond; ttl <= 30*time.Hour-time.Minute {
			t.Fatalf("fence TTL %v for a 30h hold", ttl)
		}
		if err := l.Release(c); err != nil {
			t.Fatal(err)
		}
	})
}

// dump reads every key under the prefix with its type, value and whether it
// has a TTL, to compare before and after a refused call.
func lockDump(t *testing.T, e *env) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, k := range e.keys(t) {
		typ, _ := e.Raw.Do(context.Background(), e.Raw.B().Type().Key(k).Build()).ToString()
		d, _ := e.Raw.Do(context.Background(), e.Raw.B().Dump().Key(k).Build()).ToString()
		ttl, _ := e.Raw.Do(context.Background(), e.Raw.B().Pttl().Key(k).Build()).AsInt64()
		out[k] = typ + "|" + d + "|" + strconv.FormatBool(ttl >= 0)
	}
	return out
}

// A lock or fence key of the wrong type (or a fence that is not an
// integer) is refused with ErrWrongType by every call, changing nothing.
func TestLockWrongTypesChangeNothing(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		lock := e.key("fleet:lock:wt", "fleet:lock:{wt}")
		fence := e.key("fleet:fence:wt", "fleet:fence:{wt}")
		cases := []struct {
			name    string
			arrange func()
		}{
			{"lock list", func() { e.do(t, e.Raw.B().Rpush().Key(lock).Element("x").Build()) }},
			{"lock hash", func() { e.do(t, e.Raw.B().Hset().Key(lock).FieldValue().FieldValue("a", "b").Build()) }},
			{"fence list", func() { e.do(t, e.Raw.B().Rpush().Key(fence).Element("x").Build()) }},
			{"fence text", func() { e.do(t, e.Raw.B().Set().Key(fence).Value("not a number").Build()) }},
			{"fence zset", func() { e.do(t, e.Raw.B().Zadd().Key(fence).ScoreMember().ScoreMember(1, "x").Build()) }},
		}
		for _, cs := range cases {
			e.do(t, e.Raw.B().Del().Key(lock, fence).Build())
			cs.arrange()
			before := lockDump(t, e)
			if _, err := e.F.Lock("wt").Acquire(c, fleet.LockOptions{Hold: time.Minute}); !errors.Is(err, fleet.ErrWrongType) {
				t.Errorf("%s: Acquire = %v, want ErrWrongType", cs.name, err)
			}
			if err := e.F.Lock("wt").Do(c, fleet.LockOptions{Hold: time.Minute, Wait: time.Second}, func(context.Context, *fleet.Lease) error {
				t.Errorf("%s: Do ran fn", cs.name)
				return nil
			}); !errors.Is(err, fleet.ErrWrongType) {
				t.Errorf("%s: Do = %v, want ErrWrongType", cs.name, err)
			}
			if after := lockDump(t, e); !maps.Equal(before, after) {
				t.Errorf("%s: keys changed:\n before %v\n after  %v", cs.name, before, after)
			}
		}
		// Release and Extend refuse a wrong-typed lock key too.
		e.do(t, e.Raw.B().Del().Key(lock, fence).Build())
		l, err := e.F.Lock("wt").Acquire(c, fleet.LockOptions{Hold: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		e.do(t, e.Raw.B().Del().Key(lock).Build())
		e.do(t, e.Raw.B().Rpush().Key(lock).Element("x").Build())
		before := lockDump(t, e)
		if err := l.Extend(c, time.Minute); !errors.Is(err, fleet.ErrWrongType) {
			t.Errorf("Extend = %v, want ErrWrongType", err)
		}
		if err := l.Release(c); !errors.Is(err, fleet.ErrWrongType) {
			t.Errorf("Release = %v, want ErrWrongType", err)
		}
		if after := lockDump(t, e); !maps.Equal(before, after) {
			t.Errorf("keys changed:\n before %v\n after  %v", before, after)
		}
	})
}

// An Acquire whose ctx ends while its script waits on a paused server
// returns ctx's error at once, and once the server answers again nothing
// is held under the orphaned token: the script ran and the abandon freed the
// lock, or the abandon ran first and its tombstone made the script give the
// lock up. The tombstone then expires, and the lock is taken as usual.
func TestLockAcquireInFlightLeavesNothing(t *testing.T) {
	s, f, raw := lockServer(t)
	c := ctx(t)
	lk := f.Lock("paused")
	const hold = 3 * time.Second
	warm, err := lk.Acquire(c, fleet.LockOptions{Hold: hold}) // scripts loaded, fence seeded
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.Release(c); err != nil {
		t.Fatal(err)
	}
	f0 := rawInt(t, raw, "fleet:fence:paused")
	if f0%2 != 0 {
		t.Fatalf("fence %d is odd (tombstones pending) before the test", f0)
	}
	acquirePaused(t, s, raw, func(ctx context.Context) error {
		_, err := lk.Acquire(ctx, fleet.LockOptions{Hold: hold})
		return err
	})
	resumed := time.Now()
	// Both the late script (fence +2) and the abandon (fence made odd) ran:
	// in either order the fence is f0+3.
	waitFor(t, 1500*time.Millisecond, func() bool { return rawInt(t, raw, "fleet:fence:paused") == f0+3 },
		"fence %d, want %d: the late script and the abandon did not both run within 1.5 s of the server's return", rawInt(t, raw, "fleet:fence:paused"), f0+3)
	t.Logf("settled %v after the server answered again", time.Since(resumed))
	if v, ok := rawGet(t, raw, "fleet:lock:paused"); ok {
		t.Fatalf("the lock is held by %q, under the orphaned token", v)
	}
	if got := allKeys(t, raw); !slices.Equal(got, []string{"fleet:fence:paused", "fleet:locktomb:paused"}) {
		t.Fatalf("keys %v", got)
	}
	tomb, err := raw.Do(c, raw.B().Zrange().Key("fleet:locktomb:paused").Min("0").Max("-1").Build()).AsStrSlice()
	if err != nil || len(tomb) != 1 {
		t.Fatalf("tombstone members %v (%v), want the orphaned token", tomb, err)
	}
	if ttl := time.Duration(rawPTTL(t, raw, "fleet:locktomb:paused")) * time.Millisecond; ttl <= 0 || ttl > hold+fleet.LockTombMargin {
		t.Fatalf("tombstone TTL %v, want (0, %v]", ttl, hold+fleet.LockTombMargin)
	}
	// The lock is free for everyone else at once.
	l, err := lk.Acquire(c, fleet.LockOptions{Hold: hold})
	if err != nil {
		t.Fatal(err)
	}
	if l.Token() == tomb[0] || l.Fence() <= f0+3 {
		t.Fatalf("lease token %q fence %d, after the orphan %q and fence %d", l.Token(), l.Fence(), tomb[0], f0+3)
	}
	if err := l.Release(c); err != nil {
		t.Fatal(err)
	}
	// The tombstone expires, and the next acquire makes the fence even.
	waitFor(t, hold+fleet.LockTombMargin+2*time.Second, func() bool { return !rawExists(t, raw, "fleet:locktomb:paused") && len(allKeys(t, raw)) == 1 },
		"tombstone still there: keys %v", allKeys(t, raw))
	l, err = lk.Acquire(c, fleet.LockOptions{Hold: hold})
	if err != nil {
		t.Fatal(err)
	}
	if l.Fence()%2 != 0 || rawInt(t, raw, "fleet:fence:paused") != l.Fence() {
		t.Fatalf("fence %d (key %d) after the tombstone expired, want even", l.Fence(), rawInt(t, raw, "fleet:fence:paused"))
	}
	if err := l.Release(c); err != nil {
		t.Fatal(err)
	}
}

// The tombstone stops a late acquire script whichever runs first, on every
// target: abandon first, then the script (it takes nothing); script first,
// then the abandon (it frees the lock).
func TestLockTombstoneStopsLateAcquire(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		lk := e.F.Lock("late")
		lock := e.key("fleet:lock:late", "fleet:lock:{late}")
		fence := e.key("fleet:fence:late", "fleet:fence:{late}")
		tomb := e.key("fleet:locktomb:late", "fleet:locktomb:{late}")
		const hold = 100 * time.Millisecond
		// Abandon first (no fence yet), then the late script.
		if n, err := fleet.AbandonLockNow(c, lk, "orphan-1", hold); err != nil || n != 0 {
			t.Fatalf("abandon = %d, %v", n, err)
		}
		if got := e.keys(t); !slices.Equal(got, []string{tomb}) {
			t.Fatalf("keys after the abandon %v", got)
		}
		if l, err := fleet.TryLockAs(c, lk, "orphan-1", 10*time.Second); err != nil || l != nil {
			t.Fatalf("late script = %v, %v; want nothing taken", l, err)
		}
		if v, ok := e.get(t, lock); ok {
			t.Fatalf("the late script took the lock: %q", v)
		}
		// The fence was seeded by the late script, and stays odd: a
		// tombstone is pending.
		if f := rawInt(t, e.Raw, fence); f%2 != 1 {
			t.Fatalf("fence %d, want odd", f)
		}
		// The script first, then the abandon.
		l, err := fleet.TryLockAs(c, lk, "orphan-2", 10*time.Second)
		if err != nil || l == nil {
			t.Fatalf("script = %v, %v", l, err)
		}
		if n, err := fleet.AbandonLockNow(c, lk, "orphan-2", hold); err != nil || n != 1 {
			t.Fatalf("abandon = %d, %v; want the lock freed", n, err)
		}
		if v, ok := e.get(t, lock); ok {
			t.Fatalf("the abandon left the lock to %q", v)
		}
		// A retry of that script (say, resent after a broken connection)
		// takes nothing either.
		if l, err := fleet.TryLockAs(c, lk, "orphan-2", 10*time.Second); err != nil || l != nil {
			t.Fatalf("resent script = %v, %v; want nothing taken", l, err)
		}
		members, _ := e.Raw.Do(c, e.Raw.B().Zrange().Key(tomb).Min("0").Max("-1").Build()).AsStrSlice()
		if !slices.Equal(members, []string{"orphan-1", "orphan-2"}) {
			t.Fatalf("tombstones %v", members)
		}
		// Others take the lock as usual, and once the tombstones expired
		// the fence is even again.
		live, err := lk.Acquire(c, fleet.LockOptions{Hold: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if err := live.Release(c); err != nil {
			t.Fatal(err)
		}
		waitFor(t, hold+fleet.LockTombMargin+2*time.Second, func() bool { return !rawExists(t, e.Raw, tomb) }, "tombstones did not expire")
		next, err := lk.Acquire(c, fleet.LockOptions{Hold: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if next.Fence() <= live.Fence() || next.Fence()%2 != 0 {
			t.Fatalf("fence %d after %d, want larger and even", next.Fence(), live.Fence())
		}
		if err := next.Release(c); err != nil {
			t.Fatal(err)
		}
		if got := e.keys(t); !slices.Equal(got, []string{fence}) {
			t.Fatalf("keys at the end %v", got)
		}
	})
}

// With KeepAlive, a holder whose connection freezes has its function's ctx
// ended (cause ErrLeaseLost) on a timer at the lease deadline, before another
// process is granted the lock; the frozen extensions, delivered late, do not
// touch the new holder's lock.
func TestLockKeepAliveFrozenConnection(t *testing.T) {
	s, other, raw := lockServer(t)
	p, err := fleettest.StartProxy(s.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	f := openURL(t, p.URL())
	c := ctx(t)
	const hold = 1500 * time.Millisecond
	entered := make(chan struct{})
	type ended struct {
		at    time.Time
		cause error
	}
	fnEnd := make(chan ended, 1)
	doErr := make(chan error, 1)
	go func() {
		doErr <- f.Lock("frozen").Do(c, fleet.LockOptions{Hold: hold, KeepAlive: true}, func(ctx context.Context, l *fleet.Lease) error {
			close(entered)
			<-ctx.Done()
			fnEnd <- ended{time.Now(), context.Cause(ctx)}
			return nil
		})
	}()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("Do never ran fn")
	}
	// Let a few extensions succeed, then freeze.
	waitFor(t, 5*time.Second, func() bool { return rawPTTL(t, raw, "fleet:lock:frozen") > 0 }, "no lock")
	p.Freeze()
	got := make(chan *fleet.Lease, 1)
	go func() {
		l, err := other.Lock("frozen").Acquire(c, fleet.LockOptions{Hold: 10 * time.Second, Wait: 20 * time.Second})
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	var fe ended
	select {
	case fe = <-fnEnd:
	case <-time.After(10 * time.Second):
		t.Fatal("fn's ctx did not end while its connection was frozen")
	}
	if !errors.Is(fe.cause, fleet.ErrLeaseLost) {
		t.Fatalf("fn's ctx cause %v, want ErrLeaseLost", fe.cause)
	}
	l := <-got
	if l == nil {
		t.FailNow()
	}
	// The winning acquire was sent at Deadline - Hold: fn had stopped before.
	sent := l.Deadline().Add(-10 * time.Second)
	if !fe.at.Before(sent) {
		t.Fatalf("fn's ctx ended %v after the other process's winning acquire was sent", fe.at.Sub(sent))
	}
	t.Logf("fn ended %v before the other process's winning acquire was sent", sent.Sub(fe.at))
	p.Thaw()
	select {
	case err := <-doErr:
		if !errors.Is(err, fleet.ErrLeaseLost) {
			t.Fatalf("Do = %v, want ErrLeaseLost", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Do did not return after the thaw")
	}
	// Everything the frozen holder sent has landed once its Fleet closed.
	f.Close()
	if v, _ := rawGet(t, raw, "fleet:lock:frozen"); v != l.Token() {
		t.Fatalf("lock key %q, want the new holder's %q", v, l.Token())
	}
	if ttl := rawPTTL(t, raw, "fleet:lock:frozen"); ttl > 10000 || ttl < 5000 {
		t.Fatalf("the new holder's TTL is %d ms: a late extension touched it", ttl)
	}
}

// Without KeepAlive, fn's ctx ends at the lease deadline (less the margin)
// with cause ErrLeaseLost, and Do says ErrLeaseLost.
func TestLockDoEndsAtDeadline(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		const hold = 400 * time.Millisecond
		start := time.Now()
		var deadline time.Time
		var cause error
		var at time.Time
		err := e.F.Lock("short").Do(c, fleet.LockOptions{Hold: hold}, func(ctx context.Context, l *fleet.Lease) error {
			deadline = l.Deadline()
			select {
			case <-ctx.Done():
				at, cause = time.Now(), context.Cause(ctx)
			case <-time.After(10 * time.Second):
			}
			return nil
		})
		if !errors.Is(err, fleet.ErrLeaseLost) || !errors.Is(cause, fleet.ErrLeaseLost) {
			t.Fatalf("Do = %v, fn's cause %v; want ErrLeaseLost", err, cause)
		}
		// The ctx ends on a timer at the deadline less the margin (hold/10):
		// never before it. How late fn sees it is the scheduler's business
		// (a loaded machine wakes a goroutine tens of ms late), so lateness
		// only has to stay well under a hold.
		if early := deadline.Add(-hold / 10).Sub(at); early > 5*time.Millisecond {
			t.Fatalf("fn's ctx ended %v before the deadline less the margin", early)
		}
		if late := at.Sub(deadline); late > time.Second {
			t.Fatalf("fn's ctx ended %v after start, %v after the deadline", at.Sub(start), late)
		}
		waitFor(t, 5*time.Second, func() bool { return len(e.keys(t)) == 1 }, "keys %v, want the fence alone", later(func() any { return e.keys(t) }))
	})
}

// Deadline is Hold after the acquire was sent, moves with each successful
// Extend (from its send time), and is past once Extend finds the lease lost.
func TestLockDeadline(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		lk := e.F.Lock("dl")
		before := time.Now()
		l, err := lk.Acquire(c, fleet.LockOptions{Hold: 2 * time.Second})
		after := time.Now()
		if err != nil {
			t.Fatal(err)
		}
		if d := l.Deadline(); d.Before(before.Add(2*time.Second)) || d.After(after.Add(2*time.Second)) {
			t.Fatalf("deadline %v not within [%v, %v] after start", d.Sub(before), 2*time.Second, after.Sub(before)+2*time.Second)
		}
		before = time.Now()
		if err := l.Extend(c, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		after = time.Now()
		if d := l.Deadline(); d.Before(before.Add(10*time.Second)) || d.After(after.Add(10*time.Second)) {
			t.Fatalf("deadline after Extend %v", d.Sub(before))
		}
		e.do(t, e.Raw.B().Set().Key(e.key("fleet:lock:dl", "fleet:lock:{dl}")).Value("thief").Build())
		if err := l.Extend(c, 10*time.Second); !errors.Is(err, fleet.ErrLeaseLost) {
			t.Fatalf("Extend = %v, want ErrLeaseLost", err)
		}
		if d := l.Deadline(); d.After(time.Now()) {
			t.Fatalf("deadline %v ahead after the lease was found lost", time.Until(d))
		}
	})
}
