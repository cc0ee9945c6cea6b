package fleet_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/internal/redistest"
)

// other is another client of the documented schema: it writes the pool
// hash and claim keys only, never fleet's indexes.
type other struct {
	t    *testing.T
	e    *env
	pool string
}

func (o other) hash() string { return o.e.poolKey(o.pool, "") }

// put writes item id with tags, the documented way (HSET).
func (o other) put(id, site string) {
	p := base64.StdEncoding.EncodeToString([]byte(`{"cookies":{"a":"b"},"user_agent":"py","site":"` + site + `"}`))
	o.e.do(o.t, o.e.Raw.B().Hset().Key(o.hash()).FieldValue().FieldValue(id, `{"p": "`+p+`", "t": {"site": "`+site+`", "fresh": true}, "x": null}`).Build())
}

// putMany writes many items of one site, pipelined.
func (o other) putMany(ids []string, site string) {
	p := base64.StdEncoding.EncodeToString([]byte(`{"cookies":{"a":"b"},"user_agent":"py","site":"` + site + `"}`))
	var cmds rueidis.Commands
	for _, id := range ids {
		cmds = append(cmds, o.e.Raw.B().Hset().Key(o.hash()).FieldValue().FieldValue(id, `{"p": "`+p+`", "t": {"site": "`+site+`"}, "x": null}`).Build())
	}
	for _, r := range o.e.Raw.DoMulti(context.Background(), cmds...) {
		if err := r.Error(); err != nil {
			o.t.Fatal(err)
		}
	}
}

// claim takes item id the documented way: SET claim key NX with a TTL.
func (o other) claim(id string) {
	ok, err := o.e.Raw.Do(context.Background(), o.e.Raw.B().Set().Key(o.e.poolKey(o.pool, ":claim:"+id)).Value("1").Nx().PxMilliseconds(60000).Build()).ToString()
	if err != nil || ok != "OK" {
		o.t.Fatalf("other client's claim of %s: %q %v", id, ok, err)
	}
}

// markBad removes item id it claimed, the documented way.
func (o other) markBad(id string) {
	o.e.do(o.t, o.e.Raw.B().Hdel().Key(o.hash()).Field(id).Build())
	o.e.do(o.t, o.e.Raw.B().Del().Key(o.e.poolKey(o.pool, ":claim:"+id)).Build())
}

// release ends its claim of item id early.
func (o other) release(id string) {
	o.e.do(o.t, o.e.Raw.B().Del().Key(o.e.poolKey(o.pool, ":claim:"+id)).Build())
}

// claimAll claims with q (Wait 0) until it says none, and returns the ids.
func claimAll(t *testing.T, q *fleet.Query[cookie, cookieTags]) []string {
	t.Helper()
	var ids []string
	for {
		cl, err := q.Claim(ctx(t), fleet.ClaimOptions{Hold: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if cl == nil {
			slices.Sort(ids)
			return ids
		}
		ids = append(ids, cl.Item.ID)
	}
}

func listIDs(t *testing.T, q *fleet.Query[cookie, cookieTags]) []string {
	t.Helper()
	items, err := q.List(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, it := range items {
		ids = append(ids, it.ID)
	}
	slices.Sort(ids)
	return ids
}

func seq(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%05d", prefix, i)
	}
	slices.Sort(out)
	return out
}

// TestPoolForeignItemsFound: 6,000 items of site y and one of site z
// written by another client, with no index entries: the first claim of
// site z finds its item (the old claim indexed about 1,000 entries and then
// said none), List lists them all, and a claim that then finds none has
// indexed every item first.
func TestPoolForeignItemsFound(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		o := other{t, e, "foreign"}
		p := cookiePool(e, "foreign")
		ys := seq("py-", 6000)
		o.putMany(ys, "y")
		o.put("py-z", "z")
		cl, err := p.Where(fleet.Eq("site", "z")).Claim(ctx(t), fleet.ClaimOptions{Hold: time.Minute})
		if err != nil || cl == nil || cl.Item.ID != "py-z" {
			t.Fatalf("Claim site=z = %v, %v; want py-z", cl, err)
		}
		if got := listIDs(t, p.Where(fleet.Eq("site", "y"))); !slices.Equal(got, ys) {
			t.Fatalf("List found %d of 6000", len(got))
		}
		// The claim stopped checking once it found py-z; the next one that
		// finds none checks the whole hash first.
		if got := claimAll(t, p.Where(fleet.Eq("site", "z"))); len(got) != 0 {
			t.Fatalf("claimed %v more", got)
		}
		if got := e.smembers(t, e.idxKey("foreign", "free")); !slices.Equal(got, ys) {
			t.Fatalf("free set holds %d of 6000", len(got))
		}
	})
}

// TestPoolForeignMarkBadAndPut: another client claims an item its own way,
// marks it bad (HDEL, DEL claim) and puts a new one: the pool's size is
// unchanged, and the new item is claimed and listed all the same.
func TestPoolForeignMarkBadAndPut(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		o := other{t, e, "markbad"}
		p := cookiePool(e, "markbad")
		o.put("py-1", "y")
		// fleet finds the other client's item, and gives it back.
		cl, err := p.Where(fleet.Eq("site", "y")).Claim(ctx(t), fleet.ClaimOptions{Hold: time.Minute})
		if err != nil || cl == nil || cl.Item.ID != "py-1" {
			t.Fatalf("Claim = %v, %v", cl, err)
		}
		if err := cl.Release(ctx(t)); err != nil {
			t.Fatal(err)
		}
		// The other client takes it, marks it bad, and puts another.
		o.claim("py-1")
		o.markBad("py-1")
		o.put("py-2", "z")
		if got := listIDs(t, p.Where(fleet.Eq("site", "z"))); !slices.Equal(got, []string{"py-2"}) {
			t.Fatalf("List site=z = %v", got)
		}
		if got := claimAll(t, p.Where(fleet.Eq("site", "z"))); !slices.Equal(got, []string{"py-2"}) {
			t.Fatalf("claimed %v, want py-2", got)
		}
		if got := claimAll(t, p.Where(fleet.Eq("site", "y"))); len(got) != 0 {
			t.Fatalf("claimed the bad item: %v", got)
		}
		// The bad item left the indexes.
		if m := e.smembers(t, e.idxKey("markbad", "all")); !slices.Equal(m, []string{"py-2"}) {
			t.Fatalf("all-set %v", m)
		}
		// The sign of another writer lasts 24 hours from the last one seen.
		ttl, _ := e.Raw.Do(ctx(t), e.Raw.B().Pttl().Key(e.idxKey("markbad", "foreign")).Build()).AsInt64()
		if ttl < int64(23*time.Hour/time.Millisecond) || ttl > int64(24*time.Hour/time.Millisecond) {
			t.Fatalf("foreign marker PTTL %d ms", ttl)
		}
	})
}

// TestPoolForeignCleanup: the documented manual clean-up (DEL the pool
// hash and its claim keys) under a pool with claims, then new items from
// the other client and from fleet: every new item is claimed and listed,
// and the leftover index entries go.
func TestPoolForeignCleanup(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		o := other{t, e, "cleanup"}
		p := cookiePool(e, "cleanup")
		old := putN(t, p, 50, 2, 0)
		for range 20 {
			if cl, err := p.Claim(ctx(t), fleet.ClaimOptions{Hold: time.Hour}); err != nil || cl == nil {
				t.Fatalf("Claim = %v, %v", cl, err)
			}
		}
		// redis-cli del fleet:pool:<name>; --scan ... :claim:* | xargs del
		del := []string{o.hash()}
		for _, id := range old {
			del = append(del, e.poolKey("cleanup", ":claim:"+id))
		}
		for _, k := range del {
			e.do(t, e.Raw.B().Del().Key(k).Build())
		}
		for _, id := range seq("py-", 3) {
			o.put(id, "s0")
		}
		mine, err := p.Put(ctx(t), cookie{}, cookieTags{Site: "s0"}, 0)
		if err != nil {
			t.Fatal(err)
		}
		want := append(seq("py-", 3), mine)
		slices.Sort(want)
		if got := listIDs(t, p.Where()); !slices.Equal(got, want) {
			t.Fatalf("List = %v, want %v", got, want)
		}
		if got := claimAll(t, p.Where(fleet.Eq("site", "s0"))); !slices.Equal(got, want) {
			t.Fatalf("claimed %v, want %v", got, want)
		}
		// No index entry of the old items is left in the item set.
		if m := e.smembers(t, e.idxKey("cleanup", "all")); !slices.Equal(m, want) {
			t.Fatalf("all-set has %d entries, want %d", len(m), len(want))
		}
	})
}

// TestPoolSweepReconciles: what a claim cannot see cheaply in a pool that
// only fleet wrote so far, the sweeper's reconcile finds: another client
// deletes an item and adds one (the size is unchanged), and releases early
// an item it had claimed.
func TestPoolSweepReconciles(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		o := other{t, e, "sweep"}
		p := cookiePool(e, "sweep")
		a, err := p.Put(ctx(t), cookie{}, cookieTags{Site: "a"}, 0)
		if err != nil {
			t.Fatal(err)
		}
		b, err := p.Put(ctx(t), cookie{}, cookieTags{Site: "b"}, 0)
		if err != nil {
			t.Fatal(err)
		}
		// fleet claims b; an operator ends the claim by deleting its claim
		// key (the documented clean-up); the other client deletes a and
		// puts c. The hash's size is unchanged.
		if cl, err := p.Where(fleet.Eq("site", "b")).Claim(ctx(t), fleet.ClaimOptions{Hold: time.Hour}); err != nil || cl == nil {
			t.Fatalf("Claim = %v, %v", cl, err)
		}
		o.release(b)
		e.do(t, e.Raw.B().Hdel().Key(o.hash()).Field(a).Build())
		o.put("py-c", "c")
		if _, _, _, _, err := fleet.SweepPools(ctx(t), e.F, 1<<20); err != nil {
			t.Fatal(err)
		}
		if got := claimAll(t, p.Where(fleet.Eq("site", "b"))); !slices.Equal(got, []string{b}) {
			t.Fatalf("after a sweep, claimed %v of site b", got)
		}
		if got := claimAll(t, p.Where(fleet.Eq("site", "c"))); !slices.Equal(got, []string{"py-c"}) {
			t.Fatalf("after a sweep, claimed %v of site c", got)
		}
		want := []string{b, "py-c"}
		slices.Sort(want)
		if m := e.smembers(t, e.idxKey("sweep", "all")); !slices.Equal(m, want) {
			t.Fatalf("all-set %v, want %v", m, want)
		}
		// A pass ends with its position removed; a small budget resumes.
		if _, ok := e.get(t, e.idxKey("sweep", "sweep")); ok {
			t.Fatal("sweep position left after a whole pass")
		}
		putN(t, p, 300, 3, 0)
		pools, _, _, cycles, err := fleet.SweepPools(ctx(t), e.F, 100)
		if err != nil || pools != 1 || cycles != 0 {
			t.Fatalf("small sweep: %d pools, %d passes, %v", pools, cycles, err)
		}
		if s, ok := e.get(t, e.idxKey("sweep", "sweep")); !ok || !strings.HasPrefix(s, "h:") {
			t.Fatalf("sweep position %q", s)
		}
		ttl, _ := e.Raw.Do(ctx(t), e.Raw.B().Pttl().Key(e.idxKey("sweep", "sweep")).Build()).AsInt64()
		if ttl <= 0 || ttl > int64(time.Hour/time.Millisecond) {
			t.Fatalf("sweep position PTTL %d", ttl)
		}
	})
}

// TestPoolClaimAbandonOrder: pool_abandon.lua either way round. Before the
// claim script: it leaves a tombstone, and the late script takes nothing.
// After: it frees the item the script took.
func TestPoolClaimAbandonOrder(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		p := cookiePool(e, "abandon")
		id, err := p.Put(ctx(t), cookie{}, cookieTags{Site: "x"}, 0)
		if err != nil {
			t.Fatal(err)
		}
		if n, err := fleet.AbandonScript(ctx(t), p, "tok1", time.Minute); n != 0 || err != nil {
			t.Fatalf("abandon first = %d, %v", n, err)
		}
		if got, tomb, err := fleet.ClaimScript(ctx(t), p, "tok1", time.Minute); got != "" || !tomb || err != nil {
			t.Fatalf("late claim = %q, %v, %v; want a tombstone", got, tomb, err)
		}
		if _, ok := e.get(t, e.poolKey("abandon", ":claim:"+id)); ok {
			t.Fatal("the late claim took the item")
		}
		got, tomb, err := fleet.ClaimScript(ctx(t), p, "tok2", time.Minute)
		if got != id || tomb || err != nil {
			t.Fatalf("claim = %q, %v, %v", got, tomb, err)
		}
		if n, err := fleet.AbandonScript(ctx(t), p, "tok2", time.Minute); n != 1 || err != nil {
			t.Fatalf("abandon after = %d, %v", n, err)
		}
		for _, k := range []string{e.poolKey("abandon", ":claim:"+id), e.idxKey("abandon", "own:"+id), e.idxKey("abandon", "held")} {
			if _, ok := e.get(t, k); ok {
				t.Fatalf("%s left after the abandon", k)
			}
		}
		for _, tok := range []string{"tok1", "tok2"} {
			if v, _ := e.get(t, e.idxKey("abandon", "tok:"+tok)); v != "~" {
				t.Fatalf("token %s = %q, want the tombstone", tok, v)
			}
		}
		if cl, err := p.Claim(ctx(t), fleet.ClaimOptions{Hold: time.Second}); err != nil || cl == nil || cl.Item.ID != id {
			t.Fatalf("Claim after = %v, %v", cl, err)
		}
	})
}

// commandCalls sums INFO commandstats calls on a server of the test's own,
// but for INFO and CONFIG (the measuring itself).
func clientCommandCalls(t *testing.T, c rueidis.Client) int64 {
	t.Helper()
	n := int64(0)
	for name, v := range serverCalls(t, c) {
		if name != "info" && !strings.HasPrefix(name, "config") {
			n += v
		}
	}
	return n
}

// TestPoolClaimAllThenNone claims every item of a 10,000-item pool, then
// claims again: "none", in a bounded number of Redis commands (the old
// claim read every claimed item: over 10,000).
func TestPoolClaimAllThenNone(t *testing.T) {
	for _, layout := range []fleet.Layout{fleet.LayoutCompat, fleet.LayoutTagged} {
		t.Run(string(layout), func(t *testing.T) {
			t.Parallel()
			s, f := ownServer(t, fleet.Options{Layout: layout})
			e := &env{F: f, Tg: redistest.Target{Name: "own", URL: s.URL(), Tagged: layout == fleet.LayoutTagged}}
			e.Raw = redistest.Client(t, e.Tg)
			p := cookiePool(e, "full")
			const n = 10000
			putN(t, p, n, 10, 0)
			var mu sync.Mutex
			seen := map[string]bool{}
			var failed atomic.Value
			var wg sync.WaitGroup
			var next atomic.Int64
			for range 16 {
				wg.Go(func() {
					for next.Add(1) <= n {
						cl, err := p.Claim(ctx(t), fleet.ClaimOptions{Hold: time.Hour})
						if err != nil || cl == nil {
							failed.Store(fmt.Errorf("Claim %d = %v, %v", next.Load(), cl, err))
							return
						}
						mu.Lock()
						seen[cl.Item.ID] = true
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			if err, _ := failed.Load().(error); err != nil {
				t.Fatal(err)
			}
			if len(seen) != n {
				t.Fatalf("%d distinct items claimed", len(seen))
			}
			for _, q := range []*fleet.Query[cookie, cookieTags]{p.Where(), p.Where(fleet.Eq("site", "s3")), p.Where(fleet.Eq("ratio", 0.0))} {
				e.do(t, e.Raw.B().ConfigResetstat().Build())
				before := clientCommandCalls(t, e.Raw)
				cl, err := q.Claim(ctx(t), fleet.ClaimOptions{Hold: time.Minute})
				if cl != nil || err != nil {
					t.Fatalf("Claim on a fully claimed pool = %v, %v", cl, err)
				}
				if calls := clientCommandCalls(t, e.Raw) - before; calls > 30 {
					t.Fatalf("a claim that found none ran %d Redis commands", calls)
				} else {
					t.Logf("none in %d commands", calls)
				}
			}
		})
	}
}

// TestPoolUnmarkedFieldKeys: 3,000 items with a unique value of a numeric
// tag field that is not marked fleet:"index" make no per-value keys; a
// filter on that field still finds its item (a bounded scan).
func TestPoolUnmarkedFieldKeys(t *testing.T) {
	type tags struct {
		Site string `json:"site" fleet:"index"`
		Seq  int    `json:"seq"`
	}
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		p := fleet.NewPool[string, tags](e.F, "unmarked", fleet.PoolOptions{})
		var wg sync.WaitGroup
		for w := range 16 {
			wg.Go(func() {
				for i := w; i < 3000; i += 16 {
					if _, err := p.Put(ctx(t), "v", tags{Site: "s" + strconv.Itoa(i%2), Seq: i}, 0); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		want := []string{
			e.poolKey("unmarked", ""), e.idxKey("unmarked", "all"), e.idxKey("unmarked", "fields"),
			e.idxKey("unmarked", "free"), e.idxKey("unmarked", "sig"), e.idxKey("unmarked", "t:site:ss0"),
			e.idxKey("unmarked", "t:site:ss1"), e.idxKey("unmarked", "tags"), e.Prefix + "fleet:pools",
		}
		slices.Sort(want)
		if got := e.keys(t); !slices.Equal(got, want) {
			t.Fatalf("%d keys: %v", len(got), got)
		}
		cl, err := p.Where(fleet.Eq("seq", 2999)).Claim(ctx(t), fleet.ClaimOptions{Hold: time.Minute})
		if err != nil || cl == nil || cl.Item.Tags.Seq != 2999 {
			t.Fatalf("Claim seq=2999 = %v, %v", cl, err)
		}
		cl, err = p.Where(fleet.Eq("site", "s0"), fleet.Eq("seq", 1234)).Claim(ctx(t), fleet.ClaimOptions{Hold: time.Minute})
		if err != nil || cl == nil || cl.Item.Tags.Seq != 1234 {
			t.Fatalf("Claim site=s0 seq=1234 = %v, %v", cl, err)
		}
		if cl, err := p.Where(fleet.Eq("site", "s1"), fleet.Eq("seq", 1234)).Claim(ctx(t), fleet.ClaimOptions{Hold: time.Minute}); cl != nil || err != nil {
			t.Fatalf("Claim site=s1 seq=1234 = %v, %v; want none", cl, err)
		}
		if cl, err := p.Where(fleet.Eq("seq", 2999)).Claim(ctx(t), fleet.ClaimOptions{Hold: time.Minute}); cl != nil || err != nil {
			t.Fatalf("second Claim seq=2999 = %v, %v; want none", cl, err)
		}
	})
}
