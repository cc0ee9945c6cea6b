package fleet_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/internal/redistest"
)

// semKey is the semaphore's key in the target's layout.
func (e *env) semKey(name string) string {
	return e.key("fleet:sem:"+name, "fleet:sem:{"+name+"}")
}

// semTokens lists the tokens held in the semaphore's key, sorted.
func (e *env) semTokens(t *testing.T, name string) []string {
	t.Helper()
	var got []string
	for _, z := range e.zscores(t, e.semKey(name)) {
		got = append(got, z.Member)
	}
	slices.Sort(got)
	return got
}

// Permits are taken up to the limit, each stored as its token with its
// lease's end (server clock); the key lives as long as its last lease.
// Release and Extend check the token; the key goes with its last permit.
func TestSemaphoreAcquireRelease(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		s := e.F.Semaphore("acct:1", 2)
		const hold = 10 * time.Second
		before := e.serverNow(t)
		a, err := s.Acquire(c, fleet.SemaphoreOptions{Hold: hold})
		if err != nil {
			t.Fatal(err)
		}
		b, err := s.Acquire(c, fleet.SemaphoreOptions{Hold: hold})
		if err != nil {
			t.Fatal(err)
		}
		after := e.serverNow(t)
		if _, err := s.Acquire(c, fleet.SemaphoreOptions{Hold: hold}); !errors.Is(err, fleet.ErrNotObtained) {
			t.Fatalf("third acquire of 2 = %v, want ErrNotObtained", err)
		}
		want := []string{a.Token(), b.Token()}
		slices.Sort(want)
		if got := e.semTokens(t, "acct:1"); !slices.Equal(got, want) {
			t.Fatalf("tokens %v, want %v", got, want)
		}
		for _, z := range e.zscores(t, e.semKey("acct:1")) {
			end := time.UnixMilli(int64(z.Score))
			// Rounded up to the ms: never sooner than hold after the script ran.
			if end.Before(before.Add(hold)) || end.After(after.Add(hold+time.Millisecond)) {
				t.Fatalf("lease of %s ends %v, want hold after the acquire, in [%v, %v]", z.Member, end, before.Add(hold), after.Add(hold))
			}
		}
		// The lease's end is rounded up to the ms.
		if ttl, _ := e.do(t, e.Raw.B().Pttl().Key(e.semKey("acct:1")).Build()).AsInt64(); ttl <= 0 || ttl > hold.Milliseconds()+1 {
			t.Fatalf("key TTL %d ms, want (0, %d]", ttl, hold.Milliseconds()+1)
		}
		if left := time.Until(a.Deadline()); left <= 0 || left > hold {
			t.Fatalf("deadline %v away, want (0, %v]", left, hold)
		}
		if a.Fence() != 0 {
			t.Fatalf("a permit has fence %d", a.Fence())
		}
		// Extend moves the lease's end on the server and the Deadline.
		if err := a.Extend(c, 2*hold); err != nil {
			t.Fatal(err)
		}
		if left := time.Until(a.Deadline()); left <= hold {
			t.Fatalf("extended deadline %v away, want past %v", left, hold)
		}
		if ttl, _ := e.do(t, e.Raw.B().Pttl().Key(e.semKey("acct:1")).Build()).AsInt64(); ttl <= hold.Milliseconds() {
			t.Fatalf("key TTL %d ms after the extend, want past %v", ttl, hold)
		}
		if err := a.Release(c); err != nil {
			t.Fatal(err)
		}
		if got := e.semTokens(t, "acct:1"); !slices.Equal(got, []string{b.Token()}) {
			t.Fatalf("tokens %v after a release, want only %s", got, b.Token())
		}
		// A released lease is not held: Release and Extend change nothing.
		if err := a.Release(c); !errors.Is(err, fleet.ErrLeaseLost) {
			t.Fatalf("second release = %v, want ErrLeaseLost", err)
		}
		if err := a.Extend(c, hold); !errors.Is(err, fleet.ErrLeaseLost) {
			t.Fatalf("extend after release = %v, want ErrLeaseLost", err)
		}
		if got := e.semTokens(t, "acct:1"); !slices.Equal(got, []string{b.Token()}) {
			t.Fatalf("tokens %v, want only %s", got, b.Token())
		}
		if err := b.Release(c); err != nil {
			t.Fatal(err)
		}
		if got := e.keys(t); len(got) != 0 {
			t.Fatalf("keys %v after every permit came back", got)
		}
	})
}

// A waiter of another Fleet takes the permit when the holder releases it,
// and a crashed holder's permit comes back after its hold, on the server's
// clock: the key's last member and the key go with it.
func TestSemaphoreWaitAndExpiry(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		for _, cache := range []bool{true, false} {
			t.Run("cache="+strconv.FormatBool(cache), func(t *testing.T) {
				t.Parallel()
				semaphoreWaitAndExpiry(t, tg, cache)
			})
		}
	})
}

func semaphoreWaitAndExpiry(t *testing.T, tg redistest.Target, cache bool) {
	{
		mod := func(o *fleet.Options) { o.DisableCache = !cache }
		e := open(t, tg, mod)
		other := openOn(t, tg, e.Prefix, mod)
		c := ctx(t)
		s := e.F.Semaphore("session", 1)
		held, err := s.Acquire(c, fleet.SemaphoreOptions{Hold: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan *fleet.Lease, 1)
		go func() {
			l, err := other.Semaphore("session", 1).Acquire(c, fleet.SemaphoreOptions{Hold: 3 * time.Second, Wait: 30 * time.Second})
			if err != nil {
				t.Error(err)
			}
			got <- l
		}()
		// Release only once the waiter waits on the server: its try failed.
		time.Sleep(50 * time.Millisecond)
		released := time.Now()
		if err := held.Release(c); err != nil {
			t.Fatal(err)
		}
		l := <-got
		if l == nil {
			return
		}
		t.Logf("%s cache=%v: handed over %v after the release", tg.Name, cache, time.Since(released))
		if toks := e.semTokens(t, "session"); !slices.Equal(toks, []string{l.Token()}) {
			t.Fatalf("tokens %v, want the waiter's %s", toks, l.Token())
		}
		// The waiter never releases: its permit comes back after its hold.
		start := time.Now()
		n, err := s.Acquire(c, fleet.SemaphoreOptions{Hold: time.Second, Wait: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if time.Now().Before(l.Deadline()) {
			t.Fatalf("a permit came back %v after its acquire, before the holder's deadline", time.Since(start))
		}
		if toks := e.semTokens(t, "session"); !slices.Equal(toks, []string{n.Token()}) {
			t.Fatalf("tokens %v, want only the new holder's %s", toks, n.Token())
		}
		// Abandoned too: the key expires with its last lease.
		waitFor(t, 5*time.Second, func() bool { return len(e.keys(t)) == 0 }, "keys left: %v", later(func() any { return e.keys(t) }))
		if err := n.Release(c); !errors.Is(err, fleet.ErrLeaseLost) {
			t.Fatalf("release after expiry = %v, want ErrLeaseLost", err)
		}
	}
}

// Bad input is refused with ErrInvalidArgument naming the field, and
// nothing is stored; keys of another type give ErrWrongType, unchanged.
func TestSemaphoreBadInput(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		cases := []struct {
			name  string
			limit int
			opts  fleet.SemaphoreOptions
			field string
		}{
			{"s", 0, fleet.SemaphoreOptions{Hold: time.Second}, "limit"},
			{"s", -3, fleet.SemaphoreOptions{Hold: time.Second}, "limit"},
			{"s", 1, fleet.SemaphoreOptions{}, "hold"},
			{"s", 1, fleet.SemaphoreOptions{Hold: -time.Second}, "hold"},
			{"s", 1, fleet.SemaphoreOptions{Hold: time.Second, Wait: -1}, "wait"},
			{"a b", 1, fleet.SemaphoreOptions{Hold: time.Second}, "name"},
			{"a}", 1, fleet.SemaphoreOptions{Hold: time.Second}, "name"},
			{"", 1, fleet.SemaphoreOptions{Hold: time.Second}, "name"},
		}
		for _, tc := range cases {
			_, err := e.F.Semaphore(tc.name, tc.limit).Acquire(c, tc.opts)
			if !errors.Is(err, fleet.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("Semaphore(%q, %d).Acquire(%+v) = %v, want ErrInvalidArgument naming %s", tc.name, tc.limit, tc.opts, err, tc.field)
			}
		}
		if got := e.keys(t); len(got) != 0 {
			t.Fatalf("bad input stored %v", got)
		}
		// A lease that Extend is asked to give a bad hold changes nothing.
		l, err := e.F.Semaphore("s", 1).Acquire(c, fleet.SemaphoreOptions{Hold: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		before := e.zscores(t, e.semKey("s"))
		if err := l.Extend(c, 0); !errors.Is(err, fleet.ErrInvalidArgument) || !strings.Contains(err.Error(), "hold") {
			t.Fatalf("Extend(0) = %v", err)
		}
		if after := e.zscores(t, e.semKey("s")); !slices.Equal(after, before) {
			t.Fatalf("a refused extend changed %v to %v", before, after)
		}
		if err := l.Release(c); err != nil {
			t.Fatal(err)
		}

		e.do(t, e.Raw.B().Set().Key(e.semKey("str")).Value("x").Build())
		if _, err := e.F.Semaphore("str", 1).Acquire(c, fleet.SemaphoreOptions{Hold: time.Second}); !errors.Is(err, fleet.ErrWrongType) {
			t.Fatalf("acquire on a string = %v, want ErrWrongType", err)
		}
		if v, _ := e.get(t, e.semKey("str")); v != "x" {
			t.Fatalf("string now %q", v)
		}
		if ttl, _ := e.do(t, e.Raw.B().Pttl().Key(e.semKey("str")).Build()).AsInt64(); ttl != -1 {
			t.Fatalf("string got a TTL of %d ms", ttl)
		}
	})
}

// holding is one lease as the test saw it: from the acquire's return until
// the release was sent or, for an abandoned holder, its Deadline. Each
// interval lies within the time the server counted the permit held.
type holding struct{ from, to time.Time }

// maxOverlap returns the most intervals that hold at one instant.
func maxOverlap(hs []holding) int {
	type edge struct {
		at time.Time
		d  int
	}
	var es []edge
	for _, h := range hs {
		es = append(es, edge{h.from, 1}, edge{h.to, -1})
	}
	slices.SortFunc(es, func(a, b edge) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.d - b.d // an end before a start at the same instant
	})
	n, most := 0, 0
	for _, e := range es {
		n += e.d
		most = max(most, n)
	}
	return most
}

// 30 goroutines in 3 Fleets share a limit of 3; a fifth of the holders
// vanish without releasing (as a SIGKILLed process would). The limit is
// never exceeded, and every abandoned permit comes back after its hold.
func TestSemaphoreFleetwide(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		e := open(t, tg)
		fleets := []*fleet.Fleet{e.F, openOn(t, tg, e.Prefix), openOn(t, tg, e.Prefix)}
		c := ctx(t)
		const hold = 300 * time.Millisecond
		var mu sync.Mutex
		var hs []holding
		abandoned := 0
		end := time.Now().Add(3 * time.Second)
		var wg sync.WaitGroup
		for g := range 30 {
			s := fleets[g%3].Semaphore("acct:42", 3)
			wg.Go(func() {
				for time.Now().Before(end) {
					l, err := s.Acquire(c, fleet.SemaphoreOptions{Hold: hold, Wait: 10 * time.Second})
					if err != nil {
						t.Error(err)
						return
					}
					from := time.Now()
					time.Sleep(rand.N(20 * time.Millisecond))
					if rand.N(5) == 0 {
						mu.Lock()
						hs = append(hs, holding{from, l.Deadline()})
						abandoned++
						mu.Unlock()
						continue // never released
					}
					to := time.Now()
					if err := l.Release(c); errors.Is(err, fleet.ErrLeaseLost) {
						// Only a holder starved past its hold (a loaded
						// machine) may find its permit gone, and then only
						// once the release landed after the lease's end.
						if !time.Now().After(l.Deadline()) {
							t.Errorf("release before the deadline %v: %v", l.Deadline(), err)
							return
						}
						to = l.Deadline()
					} else if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					hs = append(hs, holding{from, to})
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		t.Logf("%s: %d leases, %d abandoned", tg.Name, len(hs), abandoned)
		if most := maxOverlap(hs); most > 3 {
			t.Fatalf("%d permits held at once, limit 3", most)
		}
		if abandoned == 0 || len(hs) < 30 {
			t.Fatalf("%d leases, %d abandoned: too few to say anything", len(hs), abandoned)
		}
		// Every permit comes back: the key goes with its last lease, and
		// then 3 permits are there at once.
		waitFor(t, hold+5*time.Second, func() bool { return len(e.keys(t)) == 0 }, "keys left: %v", later(func() any { return e.keys(t) }))
		s := e.F.Semaphore("acct:42", 3)
		for i := range 3 {
			if _, err := s.Acquire(c, fleet.SemaphoreOptions{Hold: time.Minute}); err != nil {
				t.Fatalf("permit %d: %v", i, err)
			}
		}
		if _, err := s.Acquire(c, fleet.SemaphoreOptions{Hold: time.Minute}); !errors.Is(err, fleet.ErrNotObtained) {
			t.Fatalf("a fourth permit: %v", err)
		}
	})
}

// An Acquire whose ctx ends while its script waits on a paused server
// returns ctx's error at once, and nothing stays held under the orphaned
// token: the abandon frees the permit, or its tombstone makes the late
// script take nothing. The tombstone then expires.
func TestSemaphoreAcquireInFlightLeavesNothing(t *testing.T) {
	s, f, raw := lockServer(t)
	c := ctx(t)
	sem := f.Semaphore("paused", 2)
	const hold = 2 * time.Second
	warm, err := sem.Acquire(c, fleet.SemaphoreOptions{Hold: hold}) // scripts loaded
	if err != nil {
		t.Fatal(err)
	}
	if err := warm.Release(c); err != nil {
		t.Fatal(err)
	}
	acquirePaused(t, s, raw, func(ctx context.Context) error {
		_, err := sem.Acquire(ctx, fleet.SemaphoreOptions{Hold: hold})
		return err
	})
	// The abandon leaves its tombstone, and the late script (if it ran
	// first) was undone: no permit is held.
	waitFor(t, 5*time.Second, func() bool { return rawExists(t, raw, "fleet:semtomb:paused") }, "no tombstone")
	if rawExists(t, raw, "fleet:sem:paused") {
		t.Fatalf("a permit is held under the orphaned token: keys %v", allKeys(t, raw))
	}
	tomb, err := raw.Do(c, raw.B().Zrange().Key("fleet:semtomb:paused").Min("0").Max("-1").Build()).AsStrSlice()
	if err != nil || len(tomb) != 1 {
		t.Fatalf("tombstone members %v (%v), want the orphaned token", tomb, err)
	}
	if ttl := time.Duration(rawPTTL(t, raw, "fleet:semtomb:paused")) * time.Millisecond; ttl <= 0 || ttl > hold+fleet.LockTombMargin {
		t.Fatalf("tombstone TTL %v, want (0, %v]", ttl, hold+fleet.LockTombMargin)
	}
	// A late script of the orphaned token takes nothing.
	if l, err := fleet.TrySemaphoreAs(c, sem, tomb[0], hold); err != nil || l != nil {
		t.Fatalf("late acquire of the orphan = %v, %v; want nothing", l, err)
	}
	if rawExists(t, raw, "fleet:sem:paused") {
		t.Fatal("the orphan's late script took a permit")
	}
	// Both permits are there for everyone else; the tombstone expires.
	for range 2 {
		l, err := sem.Acquire(c, fleet.SemaphoreOptions{Hold: hold})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Release(c)
	}
	waitFor(t, hold+fleet.LockTombMargin+2*time.Second, func() bool { return !rawExists(t, raw, "fleet:semtomb:paused") },
		"tombstone still there: keys %v", allKeys(t, raw))
}
