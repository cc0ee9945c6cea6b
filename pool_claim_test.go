package fleet_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/internal/redistest"
)

// putN puts n items concurrently; item i has site "s<i%sites>".
func putN(t *testing.T, p *fleet.Pool[cookie, cookieTags], n, sites int, ttl time.Duration) []string {
	t.Helper()
	ids := make([]string, n)
	var wg sync.WaitGroup
	var failed atomic.Value
	for w := range 16 {
		wg.Go(func() {
			for i := w; i < n; i += 16 {
				id, err := p.Put(ctx(t), cookie{Site: fmt.Sprint(i)}, cookieTags{Site: fmt.Sprintf("s%d", i%sites), Fresh: i%2 == 0}, ttl)
				if err != nil {
					failed.Store(err)
					return
				}
				ids[i] = id
			}
		})
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		t.Fatal(err)
	}
	return ids
}

func TestPoolConcurrentClaimersNeverShare(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		p := cookiePool(e, "shared")
		putN(t, p, 1000, 10, 0)
		var mu sync.Mutex
		held := make(map[string]int) // item id -> holder
		var claims, overlaps atomic.Int64
		var wg sync.WaitGroup
		for w := range 50 {
			wg.Go(func() {
				q := p.Where(fleet.Eq("site", fmt.Sprintf("s%d", w%10)))
				for range 20 {
					cl, err := q.Claim(ctx(t), fleet.ClaimOptions{Hold: 30 * time.Second})
					if err != nil || cl == nil {
						t.Errorf("claimer %d: Claim = %v, %v", w, cl, err)
						return
					}
					claims.Add(1)
					id := cl.Item.ID
					mu.Lock()
					if h, ok := held[id]; ok {
						overlaps.Add(1)
						t.Errorf("item %s held by %d and %d at once", id, h, w)
					}
					held[id] = w
					mu.Unlock()
					if cl.Item.Tags.Site != fmt.Sprintf("s%d", w%10) {
						t.Errorf("claimer %d got site %q", w, cl.Item.Tags.Site)
					}
					mu.Lock()
					delete(held, id)
					mu.Unlock()
					if err := cl.Release(ctx(t)); err != nil {
						t.Errorf("Release: %v", err)
					}
				}
			})
		}
		wg.Wait()
		if claims.Load() != 1000 || overlaps.Load() != 0 {
			t.Fatalf("%d claims, %d overlaps; want 1000, 0", claims.Load(), overlaps.Load())
		}
		// Every claim ended: no claim or owner key is left.
		for _, k := range e.keys(t) {
			if strings.Contains(k, ":claim:") || strings.Contains(k, ":own:") {
				t.Fatalf("claim left behind: %s", k)
			}
		}
	})
}

func TestPoolVanishedClaimer(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		p := cookiePool(e, "leases")
		id, err := p.Put(ctx(t), cookie{Site: "x"}, cookieTags{Site: "x"}, 0)
		if err != nil {
			t.Fatal(err)
		}
		const hold = 2 * time.Second
		start := time.Now()
		old, err := p.Claim(ctx(t), fleet.ClaimOptions{Hold: hold})
		if err != nil || old == nil {
			t.Fatalf("Claim = %v, %v", old, err)
		}
		// The holder vanishes: no release. Before hold, nobody else gets it.
		time.Sleep(hold / 10)
		if cl, err := p.Claim(ctx(t), fleet.ClaimOptions{Hold: hold}); cl != nil || err != nil {
			t.Fatalf("Claim %v after the first (hold %v) = %v, %v; want none", time.Since(start), hold, cl, err)
		}
		time.Sleep(hold - time.Since(start) + 50*time.Millisecond)
		cl, err := p.Claim(ctx(t), fleet.ClaimOptions{Hold: time.Minute})
		if err != nil || cl == nil || cl.Item.ID != id {
			t.Fatalf("Claim after hold = %v, %v; want the item", cl, err)
		}
		// The stale holder can neither release, extend nor mark bad the new claim.
		if err := old.Release(ctx(t)); !errors.Is(err, fleet.ErrLeaseLost) {
			t.Fatalf("stale Release: %v", err)
		}
		if err := old.Extend(ctx(t), time.Hour); !errors.Is(err, fleet.ErrLeaseLost) {
			t.Fatalf("stale Extend: %v", err)
		}
		if err := old.MarkBad(ctx(t), "stale"); !errors.Is(err, fleet.ErrLeaseLost) {
			t.Fatalf("stale MarkBad: %v", err)
		}
		if s, _ := e.get(t, e.poolKey("leases", ":claim:"+id)); s != "1" {
			t.Fatalf("claim key = %q", s)
		}
		if s, _ := e.get(t, e.idxKey("leases", "own:"+id)); s != cl.Token() {
			t.Fatalf("owner = %q, want the new claim's token", s)
		}
		if _, ok, _ := p.Get(ctx(t), id); !ok {
			t.Fatal("stale MarkBad removed the item")
		}
		// The holder's Extend pushes the lease.
		if err := cl.Extend(ctx(t), time.Hour); err != nil {
			t.Fatal(err)
		}
		ttl, _ := e.Raw.Do(ctx(t), e.Raw.B().Pttl().Key(e.poolKey("leases", ":claim:"+id)).Build()).AsInt64()
		if ttl < int64(59*time.Minute/time.Millisecond) {
			t.Fatalf("claim PTTL %d ms after Extend(1h)", ttl)
		}
		if err := cl.Extend(ctx(t), 0); !errors.Is(err, fleet.ErrInvalidArgument) {
			t.Fatalf("Extend(0): %v", err)
		}
		if err := cl.Release(ctx(t)); err != nil {
			t.Fatal(err)
		}
	})
}

func TestPoolExpiry(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		p := cookiePool(e, "expiring")
		short, err := p.Put(ctx(t), cookie{Site: "x"}, cookieTags{Site: "x"}, 300*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		keep, err := p.Put(ctx(t), cookie{Site: "y"}, cookieTags{Site: "y"}, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if it, ok, err := p.Get(ctx(t), short); !ok || err != nil || it.ExpiresAt.IsZero() {
			t.Fatalf("Get before expiry = %+v, %v, %v", it, ok, err)
		}
		time.Sleep(400 * time.Millisecond)
		if _, ok := e.hget(t, e.poolKey("expiring", ""), short); !ok {
			t.Fatal("expired item gone before any put, list or claim")
		}
		items, err := p.List(ctx(t))
		if err != nil || len(items) != 1 || items[0].ID != keep {
			t.Fatalf("List = %+v, %v; want only %s", items, err, keep)
		}
		// List pruned it, as the documented pool does on every list.
		if _, ok := e.hget(t, e.poolKey("expiring", ""), short); ok {
			t.Fatal("List left the expired item in the hash")
		}
		if _, ok, err := p.Get(ctx(t), short); ok || err != nil {
			t.Fatalf("Get of an expired item = %v, %v", ok, err)
		}
		if n, _ := p.Size(ctx(t)); n != 1 {
			t.Fatalf("Size = %d, want 1", n)
		}
		if cl, err := p.Where(fleet.Eq("site", "x")).Claim(ctx(t), fleet.ClaimOptions{Hold: time.Second}); cl != nil || err != nil {
			t.Fatalf("Claim of an expired item = %v, %v", cl, err)
		}
		if s := e.smembers(t, e.idxKey("expiring", "all")); len(s) != 1 || s[0] != keep {
			t.Fatalf("all-set = %v", s)
		}
	})
}

func TestPoolPutPrunesBoundedly(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		p := fleet.NewPool[cookie, cookieTags](e.F, "prune", fleet.PoolOptions{PruneBatch: 40})
		hlen := func() int64 {
			n, _ := e.Raw.Do(ctx(t), e.Raw.B().Hlen().Key(e.poolKey("prune", "")).Build()).AsInt64()
			return n
		}
		// A TTL well past the puts' time on a loaded machine: no put prunes
		// another's item before all 100 are in.
		const ttl = 2 * time.Second
		putN(t, p, 100, 5, ttl)
		if n := hlen(); n != 100 {
			t.Fatalf("%d items after the puts, want 100", n)
		}
		time.Sleep(ttl + 100*time.Millisecond)    // every item has expired
		for i, want := range []int64{61, 22, 3} { // each put adds one, prunes at most 40
			if _, err := p.Put(ctx(t), cookie{}, cookieTags{Site: "fresh"}, 0); err != nil {
				t.Fatal(err)
			}
			if got := hlen(); got != want {
				t.Fatalf("after put %d: %d items, want %d", i+1, got, want)
			}
		}
		// Only the three fresh items remain, and the indexes say so.
		if n, _ := e.Raw.Do(ctx(t), e.Raw.B().Zcard().Key(e.idxKey("prune", "exp")).Build()).AsInt64(); n != 0 {
			t.Fatalf("exp index holds %d", n)
		}
		if got := e.smembers(t, e.idxKey("prune", "tags")); len(got) != 2 { // site:sfresh, fresh:F
			t.Fatalf("tag registry %v", got)
		}
	})
}
