package fleet_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/internal/redistest"
)

// cookie and cookieTags are the CfCookie pool of fleet's own design.
type cookie struct {
	Cookies   map[string]string `json:"cookies"`
	UserAgent string            `json:"user_agent"`
	Site      string            `json:"site"`
}

type cookieTags struct {
	Site  string   `json:"site" fleet:"index"`
	Fresh bool     `json:"fresh" fleet:"index"`
	Score int      `json:"score,omitempty"`
	Ratio float64  `json:"ratio"`
	Notes []string `json:"notes,omitempty"`
}

func cookiePool(e *env, name string) *fleet.Pool[cookie, cookieTags] {
	return fleet.NewPool[cookie, cookieTags](e.F, name, fleet.PoolOptions{})
}

// poolKey spells a documented pool key: suffix follows fleet:pool:<name>.
func (e *env) poolKey(name, suffix string) string {
	return e.key("fleet:pool:"+name+suffix, "fleet:pool:{"+name+"}"+suffix)
}

// idxKey spells a derived key: suffix follows fleet:pidx:<name>:.
func (e *env) idxKey(name, suffix string) string {
	return e.key("fleet:pidx:"+name+":"+suffix, "fleet:pidx:{"+name+"}:"+suffix)
}

func (e *env) hget(t *testing.T, key, field string) (string, bool) {
	t.Helper()
	s, err := e.Raw.Do(context.Background(), e.Raw.B().Hget().Key(key).Field(field).Build()).ToString()
	if err != nil {
		return "", false
	}
	return s, true
}

func (e *env) smembers(t *testing.T, key string) []string {
	t.Helper()
	m, err := e.Raw.Do(context.Background(), e.Raw.B().Smembers().Key(key).Build()).AsStrSlice()
	if err != nil {
		t.Fatalf("smembers %s: %v", key, err)
	}
	slices.Sort(m)
	return m
}

func TestPoolPutClaimRelease(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		p := cookiePool(e, "cf-cookies")
		c := cookie{Cookies: map[string]string{"cf_clearance": "abc"}, UserAgent: "ua", Site: "x"}
		id, err := p.Put(ctx(t), c, cookieTags{Site: "x", Fresh: true}, 0)
		if err != nil {
			t.Fatal(err)
		}
		// The stored item, byte for byte.
		pj, _ := json.Marshal(c)
		want := `{"p":"` + base64.StdEncoding.EncodeToString(pj) + `","t":{"site":"x","fresh":true,"ratio":0},"x":null}`
		if got, _ := e.hget(t, e.poolKey("cf-cookies", ""), id); got != want {
			t.Fatalf("stored\n%s\nwant\n%s", got, want)
		}
		cl, err := p.Where(fleet.Eq("site", "x"), fleet.Eq("fresh", true)).Claim(ctx(t), fleet.ClaimOptions{Hold: 20 * time.Second})
		if err != nil || cl == nil {
			t.Fatalf("Claim = %v, %v; keys %v", cl, err, e.keys(t))
		}
		if cl.Item.ID != id || cl.Item.Payload.Cookies["cf_clearance"] != "abc" || cl.Item.Tags.Site != "x" || !cl.Item.Tags.Fresh {
			t.Fatalf("claimed %+v", cl.Item)
		}
		if s, _ := e.get(t, e.poolKey("cf-cookies", ":claim:"+id)); s != "1" {
			t.Fatalf("claim key = %q, want 1", s)
		}
		if s, _ := e.get(t, e.idxKey("cf-cookies", "own:"+id)); s != cl.Token() {
			t.Fatalf("owner key = %q, want the token", s)
		}
		// The token key names the item, for an abandon, for hold + 1 min.
		if s, _ := e.get(t, e.idxKey("cf-cookies", "tok:"+cl.Token())); s != id {
			t.Fatalf("token key = %q, want the item id", s)
		}
		if ttl, _ := e.Raw.Do(ctx(t), e.Raw.B().Pttl().Key(e.idxKey("cf-cookies", "tok:"+cl.Token())).Build()).AsInt64(); ttl < 79000 || ttl > 80000 {
			t.Fatalf("token key PTTL %d ms, want hold (20 s) + 1 min", ttl)
		}
		// The second claimer sees none.
		if again, err := p.Claim(ctx(t), fleet.ClaimOptions{Hold: time.Second}); again != nil || err != nil {
			t.Fatalf("second Claim = %v, %v; want none", again, err)
		}
		// The claimed item left the free set and its tag sets (they are
		// gone, empty) for the held zset; ratio is not marked fleet:"index",
		// so it has no tag set at all.
		wantKeys := []string{
			e.poolKey("cf-cookies", ""),
			e.poolKey("cf-cookies", ":claim:"+id),
			e.idxKey("cf-cookies", "all"),
			e.idxKey("cf-cookies", "fields"),
			e.idxKey("cf-cookies", "held"),
			e.idxKey("cf-cookies", "own:"+id),
			e.idxKey("cf-cookies", "sig"),
			e.idxKey("cf-cookies", "tags"),
			e.idxKey("cf-cookies", "tok:"+cl.Token()),
			e.Prefix + "fleet:pools", // the pool registry (Put adds the name)
		}
		slices.Sort(wantKeys)
		if got := e.keys(t); !slices.Equal(got, wantKeys) {
			t.Fatalf("keys\n%v\nwant\n%v", got, wantKeys)
		}
		if err := cl.Release(ctx(t)); err != nil {
			t.Fatal(err)
		}
		if err := cl.Release(ctx(t)); !errors.Is(err, fleet.ErrLeaseLost) {
			t.Fatalf("second Release: %v, want ErrLeaseLost", err)
		}
		if _, ok := e.get(t, e.poolKey("cf-cookies", ":claim:"+id)); ok {
			t.Fatal("claim key left after Release")
		}
		items, err := p.List(ctx(t))
		if err != nil || len(items) != 1 || items[0].ID != id {
			t.Fatalf("List = %v, %v", items, err)
		}
		if n, err := p.Size(ctx(t)); n != 1 || err != nil {
			t.Fatalf("Size = %d, %v", n, err)
		}
		if ok, err := p.Delete(ctx(t), id); !ok || err != nil {
			t.Fatalf("Delete = %v, %v", ok, err)
		}
		// Only the wake-up counter, the indexed fields and the registry
		// entry stay.
		if got := e.keys(t); !slices.Equal(got, []string{e.idxKey("cf-cookies", "fields"), e.idxKey("cf-cookies", "sig"), e.Prefix + "fleet:pools"}) {
			t.Fatalf("keys after Delete: %v", got)
		}
	})
}
