package fleet

import (
	"context"
	"testing"
	"time"
)

// TestPauseGate: a batch worker's pause gate, which its fetcher and its
// slots check before each reserve and each take, costs the server nothing
// while the flag does not change (a hundred checks, no GET), sees a pause
// and a resume made by another process through the key's invalidation,
// and without caching reads the flag at most once per its poll.
func TestPauseGate(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, openOwn := ownServer(t)
	// CacheTTL an hour: only the invalidation can tell the gate in time.
	open := func(noCache bool) *Fleet { return openOwn(Options{DisableCache: noCache, CacheTTL: time.Hour}) }
	gets := func() int64 { return serverStats(t, s).Calls["get"] }
	f, other := open(false), open(false)
	if _, err := NewQueue[int](other, "pg", QueueOptions{}).Submit(ctx, 1); err != nil {
		t.Fatal(err) // the queue exists: Pause refuses an unknown one
	}
	g := newPauseGate(f, f.keys.Queue("pg").Paused, time.Hour)
	defer g.stop()
	if g.check(ctx) {
		t.Fatal("paused before any Pause")
	}
	before := gets()
	for range 100 {
		if g.check(ctx) {
			t.Fatal("paused before any Pause")
		}
	}
	if n := gets() - before; n != 0 {
		t.Fatalf("%d GETs for 100 checks of an unchanged flag, want 0", n)
	}
	if err := other.Queue("pg").Pause(ctx); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, func() bool { return g.check(ctx) })
	if err := other.Queue("pg").Resume(ctx); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, func() bool { return !g.check(ctx) })

	// Without caching: one read, then none until the poll comes round.
	nc := open(true)
	slow := newPauseGate(nc, nc.keys.Queue("pg").Paused, time.Hour)
	defer slow.stop()
	before = gets()
	for range 10 {
		if slow.check(ctx) {
			t.Fatal("paused after Resume")
		}
	}
	if n := gets() - before; n != 1 {
		t.Fatalf("%d GETs for 10 checks without caching within the poll, want 1", n)
	}
}
