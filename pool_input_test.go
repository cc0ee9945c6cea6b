package fleet_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/internal/redistest"
)

func TestPoolFilters(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		p := cookiePool(e, "filters")
		for _, c := range []struct {
			f    []fleet.Filter
			want error
		}{
			{[]fleet.Filter{fleet.Eq("nope", "x")}, fleet.ErrUnknownField},
			{[]fleet.Filter{fleet.Eq("Site", "x")}, fleet.ErrUnknownField}, // JSON names only
			{[]fleet.Filter{fleet.Eq("site", 3)}, fleet.ErrFilterType},
			{[]fleet.Filter{fleet.Eq("fresh", "true")}, fleet.ErrFilterType},
			{[]fleet.Filter{fleet.Eq("score", 1.5)}, fleet.ErrFilterType},
			{[]fleet.Filter{fleet.Eq("site", "bad\xff")}, fleet.ErrFilterType},
			{[]fleet.Filter{fleet.Eq("score", 0)}, fleet.ErrFilterType}, // omitempty drops it
			{[]fleet.Filter{fleet.Eq("notes", []string{"a"})}, fleet.ErrFilterType},
			{[]fleet.Filter{fleet.Eq("site", nil)}, fleet.ErrFilterType},
		} {
			q := p.Where(c.f...)
			if !errors.Is(q.Err(), c.want) {
				t.Fatalf("Where(%v).Err() = %v, want %v", c.f, q.Err(), c.want)
			}
			if _, err := q.Claim(ctx(t), fleet.ClaimOptions{Hold: time.Second}); !errors.Is(err, c.want) {
				t.Fatalf("Claim: %v", err)
			}
			if _, err := q.List(ctx(t)); !errors.Is(err, c.want) {
				t.Fatalf("List: %v", err)
			}
		}
		// 2 sites x fresh x 3 scores x 2 ratios, 2 items each.
		type key struct {
			site  string
			fresh bool
			score int
			ratio float64
		}
		count := make(map[key]int)
		for _, site := range []string{"x", "y"} {
			for _, fresh := range []bool{true, false} {
				for score := 1; score <= 3; score++ {
					for _, ratio := range []float64{0.1, 1e-7} {
						for range 2 {
							tags := cookieTags{Site: site, Fresh: fresh, Score: score, Ratio: ratio}
							if _, err := p.Put(ctx(t), cookie{Site: site}, tags, 0); err != nil {
								t.Fatal(err)
							}
							count[key{site, fresh, score, ratio}]++
						}
					}
				}
			}
		}
		q := p.Where(fleet.Eq("site", "x"), fleet.Eq("fresh", true), fleet.Eq("score", int64(2)), fleet.Eq("ratio", 0.1))
		var got []*fleet.Claim[cookie, cookieTags]
		for {
			cl, err := q.Claim(ctx(t), fleet.ClaimOptions{Hold: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			if cl == nil {
				break
			}
			tg := cl.Item.Tags
			if tg.Site != "x" || !tg.Fresh || tg.Score != 2 || tg.Ratio != 0.1 {
				t.Fatalf("claimed %+v", tg)
			}
			got = append(got, cl)
		}
		if len(got) != 2 {
			t.Fatalf("claimed %d, want 2", len(got))
		}
		listed, err := p.Where(fleet.Eq("ratio", 1e-7), fleet.Eq("site", "y")).List(ctx(t))
		if err != nil || len(listed) != 12 {
			t.Fatalf("List = %d items, %v; want 12", len(listed), err)
		}
		// An exponent-form float matches in the script as in Go.
		if cl, err := p.Where(fleet.Eq("ratio", 1e-7), fleet.Eq("score", 3)).Claim(ctx(t), fleet.ClaimOptions{Hold: time.Minute}); err != nil || cl == nil || cl.Item.Tags.Ratio != 1e-7 {
			t.Fatalf("Claim ratio=1e-7 = %+v, %v", cl, err)
		} else if err := cl.Release(ctx(t)); err != nil {
			t.Fatal(err)
		}
		// MarkBad removes the item for every reader.
		bad := got[0].Item.ID
		if err := got[0].MarkBad(ctx(t), "clearance rejected"); err != nil {
			t.Fatal(err)
		}
		other := fleet.NewPool[cookie, cookieTags](openOn(t, tg, e.Prefix), "filters", fleet.PoolOptions{})
		if _, ok, err := other.Get(ctx(t), bad); ok || err != nil {
			t.Fatalf("Get after MarkBad = %v, %v", ok, err)
		}
		all, _ := other.List(ctx(t))
		if len(all) != 47 || slices.ContainsFunc(all, func(it fleet.Item[cookie, cookieTags]) bool { return it.ID == bad }) {
			t.Fatalf("List after MarkBad: %d items", len(all))
		}
		if _, ok := e.get(t, e.poolKey("filters", ":claim:"+bad)); ok {
			t.Fatal("claim key left after MarkBad")
		}
		if slices.Contains(e.smembers(t, e.idxKey("filters", "t:site:sx")), bad) {
			t.Fatal("index entry left after MarkBad")
		}
		if err := got[0].Release(ctx(t)); !errors.Is(err, fleet.ErrLeaseLost) {
			t.Fatalf("Release after MarkBad: %v", err)
		}
		// Do always releases.
		ok, err := p.Where(fleet.Eq("site", "y")).Do(ctx(t), fleet.ClaimOptions{Hold: time.Minute},
			func(ctx context.Context, c *fleet.Claim[cookie, cookieTags]) error {
				if _, held := e.get(t, e.poolKey("filters", ":claim:"+c.Item.ID)); !held {
					t.Error("no claim key inside Do")
				}
				bad = c.Item.ID
				return errors.New("boom")
			})
		if !ok || err == nil || err.Error() != "boom" {
			t.Fatalf("Do = %v, %v", ok, err)
		}
		if _, held := e.get(t, e.poolKey("filters", ":claim:"+bad)); held {
			t.Fatal("Do left its claim")
		}
	})
}

func TestPoolBadInput(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		if err := fleet.NewPool[cookie, string](e.F, "p", fleet.PoolOptions{}).Err(); !errors.Is(err, fleet.ErrInvalidArgument) {
			t.Fatalf("string tags: %v", err)
		}
		if _, err := fleet.NewPool[cookie, *cookieTags](e.F, "p", fleet.PoolOptions{}).Put(c, cookie{}, nil, 0); !errors.Is(err, fleet.ErrInvalidArgument) {
			t.Fatalf("pointer tags: %v", err)
		}
		for _, name := range []string{"", "a{b}", "a:b", "a b"} {
			if err := fleet.NewPool[cookie, cookieTags](e.F, name, fleet.PoolOptions{}).Err(); !errors.Is(err, fleet.ErrInvalidName) {
				t.Fatalf("name %q: %v", name, err)
			}
		}
		if err := fleet.NewPool[cookie, cookieTags](e.F, "p", fleet.PoolOptions{PruneBatch: -1}).Err(); !errors.Is(err, fleet.ErrInvalidOptions) {
			t.Fatalf("negative option: %v", err)
		}
		anyp := fleet.NewPool[any, cookieTags](e.F, "p", fleet.PoolOptions{MaxPayloadBytes: 100})
		if _, err := anyp.Put(c, func() {}, cookieTags{}, 0); !errors.Is(err, fleet.ErrInvalidArgument) {
			t.Fatalf("func payload: %v", err)
		}
		if _, err := anyp.Put(c, string(make([]byte, 200)), cookieTags{}, 0); !errors.Is(err, fleet.ErrPayloadTooLarge) {
			t.Fatalf("large payload: %v", err)
		}
		p := cookiePool(e, "p")
		if _, err := p.Put(c, cookie{}, cookieTags{}, -time.Second); !errors.Is(err, fleet.ErrInvalidArgument) {
			t.Fatalf("negative ttl: %v", err)
		}
		for _, o := range []fleet.ClaimOptions{{}, {Hold: -time.Second}, {Hold: time.Second, Wait: -1}} {
			if _, err := p.Claim(c, o); !errors.Is(err, fleet.ErrInvalidArgument) {
				t.Fatalf("Claim(%+v): %v", o, err)
			}
		}
		if _, _, err := p.Get(c, "a b"); !errors.Is(err, fleet.ErrInvalidName) {
			t.Fatalf("Get bad id: %v", err)
		}
		cancelled, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := p.Put(cancelled, cookie{}, cookieTags{}, 0); !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled Put: %v", err)
		}
		if _, err := p.Claim(cancelled, fleet.ClaimOptions{Hold: time.Second}); !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled Claim: %v", err)
		}
		if keys := e.keys(t); len(keys) != 0 {
			t.Fatalf("bad input left keys: %v", keys)
		}
		// Entries written by something else that are not valid items.
		hash := e.poolKey("p", "")
		b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
		bad := map[string]string{
			"notjson":  `not json`,
			"lacks-x":  `{"p":"` + b64(`{}`) + `","t":{"site":"x"}}`,
			"bad-b64":  `{"p":"!!","t":{"site":"x"},"x":null}`,
			"not-tags": `{"p":"` + b64(`{}`) + `","t":"x","x":null}`,
			"wrong-p":  `{"p":"` + b64(`"a string, not a cookie"`) + `","t":{"site":"x"},"x":null}`,
		}
		for id, v := range bad {
			e.do(t, e.Raw.B().Hset().Key(hash).FieldValue().FieldValue(id, v).Build())
		}
		good, err := p.Put(c, cookie{Site: "x"}, cookieTags{Site: "x"}, 0)
		if err != nil {
			t.Fatal(err)
		}
		items, err := p.List(c)
		var be *fleet.BadItemsError
		if !errors.Is(err, fleet.ErrBadItem) || !errors.As(err, &be) || len(be.IDs) != len(bad) {
			t.Fatalf("List error = %v", err)
		}
		if len(items) != 1 || items[0].ID != good {
			t.Fatalf("List items = %+v", items)
		}
		if _, _, err := p.Get(c, "notjson"); !errors.Is(err, fleet.ErrBadItem) {
			t.Fatalf("Get bad: %v", err)
		}
		// Claims hand out the good item only, then none.
		q := p.Where(fleet.Eq("site", "x"))
		first, err := q.Claim(c, fleet.ClaimOptions{Hold: time.Minute})
		if err != nil || first == nil || first.Item.ID != good {
			t.Fatalf("Claim = %+v, %v", first, err)
		}
		if cl, err := q.Claim(c, fleet.ClaimOptions{Hold: time.Minute}); cl != nil || err != nil {
			t.Fatalf("Claim among bad entries = %+v, %v; want none", cl, err)
		}
		for id, v := range bad {
			if got, _ := e.hget(t, hash, id); got != v {
				t.Fatalf("bad entry %s changed to %q", id, got)
			}
		}
		// A key of the wrong type.
		wrong := fleet.NewPool[cookie, cookieTags](e.F, "wrong", fleet.PoolOptions{})
		e.do(t, e.Raw.B().Set().Key(e.poolKey("wrong", "")).Value("text").Build())
		if _, err := wrong.Put(c, cookie{}, cookieTags{}, 0); !errors.Is(err, fleet.ErrWrongType) {
			t.Fatalf("Put on a string: %v", err)
		}
		if _, err := wrong.Claim(c, fleet.ClaimOptions{Hold: time.Second}); !errors.Is(err, fleet.ErrWrongType) {
			t.Fatalf("Claim on a string: %v", err)
		}
		if _, err := wrong.List(c); !errors.Is(err, fleet.ErrWrongType) {
			t.Fatalf("List on a string: %v", err)
		}
		if s, _ := e.get(t, e.poolKey("wrong", "")); s != "text" {
			t.Fatalf("string changed to %q", s)
		}
	})
}

func TestPoolInterop(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		p := cookiePool(e, "interop")
		// fleet's item: x is the server's clock plus ttl, in seconds.
		id, err := p.Put(c, cookie{Site: "x"}, cookieTags{Site: "x"}, 1500*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := e.hget(t, e.poolKey("interop", ""), id)
		m := regexp.MustCompile(`^\{"p":"eyJjb29raWVzIjpudWxsLCJ1c2VyX2FnZW50IjoiIiwic2l0ZSI6IngifQ==","t":\{"site":"x","fresh":false,"ratio":0\},"x":(\d+(\.\d{1,3})?)\}$`).FindStringSubmatch(raw)
		if m == nil {
			t.Fatalf("stored %s", raw)
		}
		x, _ := strconv.ParseFloat(m[1], 64)
		if d := time.Until(time.UnixMilli(int64(x * 1000))); d < time.Second || d > 2*time.Second {
			t.Fatalf("x = %s is %v from now, want ~1.5s", m[1], d)
		}
		// Items written by another client in the documented format only,
		// with no index entries: one with an expiry in float seconds.
		hash := e.poolKey("interop", "")
		payload := base64.StdEncoding.EncodeToString([]byte(`{"cookies":{"a":"b"},"user_agent":"py","site":"z"}`))
		exp := fmt.Sprintf("%.3f", float64(time.Now().Add(time.Hour).UnixMilli())/1000)
		e.do(t, e.Raw.B().Hset().Key(hash).FieldValue().
			FieldValue("py-1", `{"p": "`+payload+`", "t": {"site": "z", "fresh": true}, "x": `+exp+`}`).Build())
		// A put indexes what the index lacks.
		if _, err := p.Put(c, cookie{}, cookieTags{Site: "w"}, 0); err != nil {
			t.Fatal(err)
		}
		if got := e.smembers(t, e.idxKey("interop", "t:site:sz")); !slices.Equal(got, []string{"py-1"}) {
			t.Fatalf("site=z index after a put: %v", got)
		}
		// py-2 stays unindexed until a claim that finds none looks for it.
		e.do(t, e.Raw.B().Hset().Key(hash).FieldValue().
			FieldValue("py-2", `{"p":"`+payload+`","t":{"site":"z","fresh":true,"extra":[1]},"x":null}`).Build())
		items, err := p.Where(fleet.Eq("site", "z")).List(c)
		if err != nil || len(items) != 2 {
			t.Fatalf("List = %+v, %v", items, err)
		}
		// A claim finds them although no put ran since.
		var claimed []string
		for range 2 {
			cl, err := p.Where(fleet.Eq("site", "z"), fleet.Eq("fresh", true)).Claim(c, fleet.ClaimOptions{Hold: time.Minute})
			if err != nil || cl == nil {
				t.Fatalf("Claim of a foreign item = %+v, %v", cl, err)
			}
			if cl.Item.Payload.UserAgent != "py" || cl.Item.Payload.Cookies["a"] != "b" {
				t.Fatalf("payload %+v", cl.Item.Payload)
			}
			claimed = append(claimed, cl.Item.ID)
			if s, _ := e.get(t, e.poolKey("interop", ":claim:"+cl.Item.ID)); s != "1" {
				t.Fatalf("claim key %q", s)
			}
		}
		slices.Sort(claimed)
		if !slices.Equal(claimed, []string{"py-1", "py-2"}) {
			t.Fatalf("claimed %v", claimed)
		}
		// A foreign client claims the fleet item its own way: fleet skips it.
		e.do(t, e.Raw.B().Set().Key(e.poolKey("interop", ":claim:"+id)).Value("1").ExSeconds(60).Build())
		if cl, err := p.Where(fleet.Eq("site", "x")).Claim(c, fleet.ClaimOptions{Hold: time.Second}); cl != nil || err != nil {
			t.Fatalf("Claim of a foreign-claimed item = %+v, %v", cl, err)
		}
	})
}

func TestPoolSync(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		p := cookiePool(e, "rebuild")
		ids := putN(t, p, 600, 3, time.Hour)
		before := map[string][]string{}
		var derived []string
		for _, k := range e.keys(t) {
			// fleet:pools, the pool registry, is another slot's key on a cluster.
			if k != e.poolKey("rebuild", "") && k != e.idxKey("rebuild", "sig") && k != e.Prefix+"fleet:pools" && k != e.idxKey("rebuild", "fields") {
				derived = append(derived, k)
				if k != e.idxKey("rebuild", "exp") {
					before[k] = e.smembers(t, k)
				}
			}
		}
		// Lose every derived key, and make one index entry stale.
		e.do(t, e.Raw.B().Del().Key(derived...).Build())
		e.do(t, e.Raw.B().Sadd().Key(e.idxKey("rebuild", "t:site:s0")).Member(ids[1]).Build())
		e.do(t, e.Raw.B().Sadd().Key(e.idxKey("rebuild", "tags")).Member(e.idxKey("rebuild", "t:site:s0")).Build())
		if err := p.Sync(c); err != nil {
			t.Fatal(err)
		}
		for k, want := range before {
			if got := e.smembers(t, k); !slices.Equal(got, want) {
				t.Fatalf("%s rebuilt with %d members, want %d", k, len(got), len(want))
			}
		}
		if n, _ := e.Raw.Do(c, e.Raw.B().Zcard().Key(e.idxKey("rebuild", "exp")).Build()).AsInt64(); n != 600 {
			t.Fatalf("exp index %d", n)
		}
	})
}

func TestPoolWaitingClaim(t *testing.T) {
	for _, cache := range []bool{true, false} {
		t.Run(fmt.Sprintf("cache=%v", cache), func(t *testing.T) {
			redistest.Each(t, func(t *testing.T, tg redistest.Target) {
				t.Parallel()
				e := open(t, tg, func(o *fleet.Options) { o.DisableCache = !cache })
				// Polls every 30 s at most: only a wake-up explains a fast return.
				opts := fleet.PoolOptions{PollInterval: 30 * time.Second}
				waiter := fleet.NewPool[cookie, cookieTags](e.F, "wait", opts)
				// With caching, the putter is another client: the server's
				// invalidation wakes the waiter. Without, it is this process.
				pf := e.F
				if cache {
					pf = openOn(t, tg, e.Prefix)
				}
				putter := fleet.NewPool[cookie, cookieTags](pf, "wait", opts)
				type result struct {
					cl  *fleet.Claim[cookie, cookieTags]
					err error
					at  time.Time
				}
				claim := func() chan result {
					ch := make(chan result, 1)
					go func() {
						cl, err := waiter.Where(fleet.Eq("site", "x")).Claim(ctx(t), fleet.ClaimOptions{Hold: time.Minute, Wait: 20 * time.Second})
						ch <- result{cl, err, time.Now()}
					}()
					return ch
				}
				// Woken by a put.
				ch := claim()
				time.Sleep(300 * time.Millisecond)
				if _, err := putter.Put(ctx(t), cookie{}, cookieTags{Site: "y"}, 0); err != nil { // not a match
					t.Fatal(err)
				}
				// Long enough that a backoff (without caching) sleeps ~1 s now.
				time.Sleep(1500 * time.Millisecond)
				put := time.Now()
				if _, err := putter.Put(ctx(t), cookie{}, cookieTags{Site: "x"}, 0); err != nil {
					t.Fatal(err)
				}
				r := <-ch
				if r.err != nil || r.cl == nil {
					t.Fatalf("waiting Claim = %v, %v", r.cl, r.err)
				}
				if d := r.at.Sub(put); d > 300*time.Millisecond {
					t.Fatalf("woken %v after the put", d)
				}
				// Woken by a release (by the other client).
				held, err := putter.Where(fleet.Eq("site", "x")).Claim(ctx(t), fleet.ClaimOptions{Hold: time.Minute})
				if err != nil || held != nil {
					t.Fatalf("the putter's Claim = %v, %v; want none (the waiter holds it)", held, err)
				}
				ch = claim()
				time.Sleep(1500 * time.Millisecond)
				rel := time.Now()
				if err := r.cl.Release(ctx(t)); err != nil {
					t.Fatal(err)
				}
				r2 := <-ch
				if r2.err != nil || r2.cl == nil {
					t.Fatalf("waiting Claim = %v, %v", r2.cl, r2.err)
				}
				if d := r2.at.Sub(rel); d > 300*time.Millisecond {
					t.Fatalf("woken %v after the release", d)
				}
				// The wait runs out: none, no error.
				start := time.Now()
				cl, err := waiter.Where(fleet.Eq("site", "x")).Claim(ctx(t), fleet.ClaimOptions{Hold: time.Second, Wait: 200 * time.Millisecond})
				if cl != nil || err != nil || time.Since(start) < 200*time.Millisecond {
					t.Fatalf("Claim after the wait = %v, %v in %v", cl, err, time.Since(start))
				}
			})
		})
	}
}
