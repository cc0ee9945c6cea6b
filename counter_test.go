package fleet_test

import (
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/internal/redistest"
)

func TestCounterConcurrentIncrements(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := e.F.Counter("inflight-requests")
		var wg sync.WaitGroup
		for range 10 {
			wg.Go(func() {
				for range 100 {
					if _, err := c.Incr(ctx(t)); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		if v, err := c.Get(ctx(t)); err != nil || v != 1000 {
			t.Fatalf("Get = %d, %v; want 1000", v, err)
		}
		if s, _ := e.get(t, e.Prefix+"fleet:counter:inflight-requests"); s != "1000" {
			t.Fatalf("stored %q, want 1000", s)
		}
		if got := e.keys(t); !slices.Equal(got, []string{e.Prefix + "fleet:counter:inflight-requests"}) {
			t.Fatalf("keys %v", got)
		}
	})
}

func TestCounterOperations(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := e.F.Counter("tokens:hour")
		if v, err := c.Get(ctx(t)); err != nil || v != 0 {
			t.Fatalf("Get of a new counter = %d, %v", v, err)
		}
		steps := []struct {
			op   func() (int64, error)
			want int64
		}{
			{func() (int64, error) { return c.Incr(ctx(t)) }, 1},
			{func() (int64, error) { return c.IncrBy(ctx(t), 41) }, 42},
			{func() (int64, error) { return c.Decr(ctx(t)) }, 41},
			{func() (int64, error) { return c.IncrBy(ctx(t), -50) }, -9},
		}
		for i, s := range steps {
			if v, err := s.op(); err != nil || v != s.want {
				t.Fatalf("step %d = %d, %v; want %d", i, v, err, s.want)
			}
		}
		if err := c.Set(ctx(t), 7); err != nil {
			t.Fatal(err)
		}
		if v, _ := c.Get(ctx(t)); v != 7 {
			t.Fatalf("after Set: %d", v)
		}
		if ok, err := c.Delete(ctx(t)); !ok || err != nil {
			t.Fatalf("Delete = %v, %v", ok, err)
		}
		if v, _ := c.Get(ctx(t)); v != 0 {
			t.Fatalf("after Delete: %d", v)
		}
		if got := e.keys(t); len(got) != 0 {
			t.Fatalf("keys left: %v", got)
		}
	})
}

func TestCounterWrongType(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		text := e.Prefix + "fleet:counter:text"
		e.do(t, e.Raw.B().Set().Key(text).Value("not a number").Build())
		c := e.F.Counter("text")
		if _, err := c.Incr(ctx(t)); !errors.Is(err, fleet.ErrWrongType) {
			t.Fatalf("Incr on text: %v, want ErrWrongType", err)
		}
		if _, err := c.Get(ctx(t)); !errors.Is(err, fleet.ErrWrongType) {
			t.Fatalf("Get on text: %v, want ErrWrongType", err)
		}
		if s, _ := e.get(t, text); s != "not a number" {
			t.Fatalf("text changed to %q", s)
		}
		hash := e.Prefix + "fleet:counter:hash"
		e.do(t, e.Raw.B().Hset().Key(hash).FieldValue().FieldValue("a", "1").Build())
		h := e.F.Counter("hash")
		if err := h.Set(ctx(t), 3); !errors.Is(err, fleet.ErrWrongType) {
			t.Fatalf("Set on a hash: %v, want ErrWrongType", err)
		}
		if _, err := h.IncrBy(ctx(t), 2); !errors.Is(err, fleet.ErrWrongType) {
			t.Fatalf("IncrBy on a hash: %v, want ErrWrongType", err)
		}
		if v, _ := e.Raw.Do(ctx(t), e.Raw.B().Hget().Key(hash).Field("a").Build()).ToString(); v != "1" {
			t.Fatalf("hash changed: a=%q", v)
		}
	})
}
