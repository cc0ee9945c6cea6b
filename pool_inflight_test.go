package fleet_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/internal/redistest"
)

// TestPoolClaimGivenUpInFlight: a Claim whose ctx ends while its script
// waits on a paused server returns ctx's error; when the server answers
// again, the script runs late and takes the item under a token nobody
// holds, and the background abandon frees it within about a second: no
// claim or owner key left, the item free and claimable, only the token's
// tombstone stays (with a TTL).
func TestPoolClaimGivenUpInFlight(t *testing.T) {
	for _, layout := range []fleet.Layout{fleet.LayoutCompat, fleet.LayoutTagged} {
		t.Run(string(layout), func(t *testing.T) {
			t.Parallel()
			c := ctx(t)
			s, f := ownServer(t, fleet.Options{Layout: layout})
			e := &env{F: f, Tg: redistest.Target{Name: "own", URL: s.URL(), Tagged: layout == fleet.LayoutTagged}}
			e.Raw = redistest.Client(t, e.Tg)
			p := cookiePool(e, "inflight")
			id, err := p.Put(c, cookie{Site: "x"}, cookieTags{Site: "x"}, 0)
			if err != nil {
				t.Fatal(err)
			}
			const hold = time.Minute
			// Scripts wait while the server is paused for writes.
			if _, err := s.Cli(c, "client", "pause", "700", "write"); err != nil {
				t.Fatal(err)
			}
			paused := time.Now()
			short, cancel := context.WithTimeout(c, 100*time.Millisecond)
			cl, err := p.Claim(short, fleet.ClaimOptions{Hold: hold})
			cancel()
			if cl != nil || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Claim with a 100 ms ctx on a paused server = %v, %v; want ctx's error", cl, err)
			}
			if time.Since(paused) > 600*time.Millisecond {
				t.Fatalf("Claim returned %v after the pause began: the test could not keep the script in flight", time.Since(paused))
			}
			// Within about a second of the server answering again (700 ms),
			// nothing is held: exactly these keys, the item in the free set.
			want := []string{
				e.poolKey("inflight", ""),
				e.idxKey("inflight", "all"),
				e.idxKey("inflight", "fields"),
				e.idxKey("inflight", "free"),
				e.idxKey("inflight", "sig"),
				e.idxKey("inflight", "t:fresh:F"),
				e.idxKey("inflight", "t:site:sx"),
				e.idxKey("inflight", "tags"),
				"fleet:meta", "fleet:pools",
			}
			slices.Sort(want)
			var got []string
			var tomb string
			for deadline := paused.Add(700*time.Millisecond + 1500*time.Millisecond); ; {
				got, tomb = nil, ""
				for _, k := range redistest.Keys(t, e.Raw, "") {
					if strings.Contains(k, ":tok:") {
						tomb = k
						continue
					}
					got = append(got, k)
				}
				if slices.Equal(got, want) && tomb != "" {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%v after the pause began, keys\n%v\nwant\n%v (and one token key, got %q)", time.Since(paused), got, want, tomb)
				}
				time.Sleep(20 * time.Millisecond)
			}
			t.Logf("freed %v after the pause began", time.Since(paused))
			if free := e.smembers(t, e.idxKey("inflight", "free")); !slices.Equal(free, []string{id}) {
				t.Fatalf("free set %v", free)
			}
			if v, _ := e.get(t, tomb); v != "~" {
				t.Fatalf("token key %s = %q, want the tombstone", tomb, v)
			}
			pttl, _ := e.Raw.Do(c, e.Raw.B().Pttl().Key(tomb).Build()).AsInt64()
			if pttl <= 0 || pttl > int64((hold+time.Minute)/time.Millisecond) {
				t.Fatalf("tombstone PTTL %d ms", pttl)
			}
			// The item is claimable at once.
			cl, err = p.Claim(c, fleet.ClaimOptions{Hold: time.Second})
			if err != nil || cl == nil || cl.Item.ID != id {
				t.Fatalf("Claim after the abandon = %v, %v", cl, err)
			}
		})
	}
}

// scriptCalls counts EVAL and EVALSHA calls since the last CONFIG
// RESETSTAT, on a server of the test's own.
func scriptCalls(t *testing.T, c rueidis.Client) int64 {
	t.Helper()
	calls := serverCalls(t, c)
	return calls["evalsha"] + calls["eval"]
}

// TestPoolWaitersWokenOnePerChange: ten claims wait (eight for any item,
// two for site y) when another process puts one item of site x: one
// waiter looks (a site-y waiter that the wake-up reached first hands it on
// to an unfiltered one), not all ten. Counted in claim scripts run.
func TestPoolWaitersWokenOnePerChange(t *testing.T) {
	c := ctx(t)
	s, f := ownServer(t, fleet.Options{})
	tg := redistest.Target{Name: "own", URL: s.URL()}
	raw := redistest.Client(t, tg)
	f2 := openOn(t, tg, "")
	opts := fleet.PoolOptions{PollInterval: 30 * time.Second} // only wake-ups explain a look
	p := fleet.NewPool[cookie, cookieTags](f, "wake", opts)
	p2 := fleet.NewPool[cookie, cookieTags](f2, "wake", opts)
	// Load every script once, and leave the pool empty.
	if _, err := p2.Put(c, cookie{}, cookieTags{Site: "x"}, 0); err != nil {
		t.Fatal(err)
	}
	cl, err := p.Claim(c, fleet.ClaimOptions{Hold: time.Minute})
	if err != nil || cl == nil {
		t.Fatalf("Claim = %v, %v", cl, err)
	}
	if err := cl.MarkBad(c, "warm-up"); err != nil {
		t.Fatal(err)
	}
	reset := func() {
		if err := raw.Do(c, raw.B().ConfigResetstat().Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	reset()
	wctx, cancel := context.WithCancel(c)
	defer cancel()
	type result struct {
		cl  *fleet.Claim[cookie, cookieTags]
		err error
	}
	results := make(chan result, 10)
	for i := range 10 {
		q := p.Where()
		if i%5 == 0 {
			q = p.Where(fleet.Eq("site", "y"))
		}
		go func() {
			cl, err := q.Claim(wctx, fleet.ClaimOptions{Hold: time.Minute, Wait: 30 * time.Second})
			results <- result{cl, err}
		}()
	}
	// Each waiter looks twice (the claim, then the wait's first look)
	// before it sleeps.
	for deadline := time.Now().Add(10 * time.Second); scriptCalls(t, raw) < 20; {
		if time.Now().After(deadline) {
			t.Fatalf("waiters looked %d times, want 20", scriptCalls(t, raw))
		}
		time.Sleep(10 * time.Millisecond)
	}
	reset()
	if _, err := p2.Put(c, cookie{}, cookieTags{Site: "x"}, 0); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-results:
		if r.err != nil || r.cl == nil || r.cl.Item.Tags.Site != "x" {
			t.Fatalf("woken Claim = %v, %v", r.cl, r.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no waiter claimed the put item")
	}
	time.Sleep(500 * time.Millisecond) // a window for any other waiter to look
	// The put; the first look (and its hand-on); the hash's invalidation
	// wakes one more waiter, which may hand on once too.
	if n := scriptCalls(t, raw); n > 5 {
		t.Fatalf("one put made %d scripts run, want <= 5", n)
	}
	cancel()
	for range 9 {
		if r := <-results; r.cl != nil || !errors.Is(r.err, context.Canceled) {
			t.Fatalf("waiter after cancel = %v, %v", r.cl, r.err)
		}
	}
}
