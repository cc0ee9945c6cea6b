package fleet_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/fleettest"
)

// Under WithFreshReads every KV read reaches the server and returns its
// value; without it, repeated reads are served from the cache.
func TestKVWithFreshReads(t *testing.T) {
	s, f := ownServer(t, fleet.Options{})
	kv := f.KV("fresh")
	c := ctx(t)
	if err := kv.Set(c, "k", "v1", 0); err != nil {
		t.Fatal(err)
	}
	if got, _, err := kv.GetString(c, "k"); err != nil || got != "v1" {
		t.Fatalf("GetString = %q, %v", got, err)
	}
	before := getCalls(t, s)
	for range 5 {
		if got, _, err := kv.GetString(c, "k"); err != nil || got != "v1" {
			t.Fatalf("cached GetString = %q, %v", got, err)
		}
	}
	if n := getCalls(t, s) - before; n != 0 {
		t.Fatalf("%d GETs reached the server for 5 cached reads, want 0", n)
	}
	fresh := fleet.WithFreshReads(c)
	before = getCalls(t, s)
	for range 5 {
		if got, _, err := kv.GetString(fresh, "k"); err != nil || got != "v1" {
			t.Fatalf("fresh GetString = %q, %v", got, err)
		}
	}
	if v, ok, err := fleet.GetAs[string](fresh, kv, "k"); err != nil || !ok || v != "v1" {
		t.Fatalf("fresh GetAs = %q, %v, %v", v, ok, err)
	}
	if _, ok, err := kv.Get(fresh, "missing"); err != nil || ok {
		t.Fatalf("fresh Get(missing) = %v, %v", ok, err)
	}
	if n := getCalls(t, s) - before; n != 7 {
		t.Fatalf("%d GETs reached the server for 7 fresh reads, want 7", n)
	}
}

// A reader whose connection freezes serves its cached value for at most
// CacheTTL after the send of the read that fetched it, though a write
// elsewhere has replaced the value and its invalidation cannot arrive:
// no read that begins later than that returns the old value. Once the
// connection thaws, the reader sees the write.
func TestKVCachedReadStalenessBoundWhileFrozen(t *testing.T) {
	s, writer := ownServer(t, fleet.Options{})
	p, err := fleettest.StartProxy(s.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	const bound = 400 * time.Millisecond
	reader, err := fleet.Open(ctx(t), fleet.Options{URL: p.URL(), CacheTTL: bound})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reader.Close() })
	c := ctx(t)
	if err := writer.KV("b").Set(c, "k", "old", 0); err != nil {
		t.Fatal(err)
	}
	rkv := reader.KV("b")
	// The fetching read is sent before fetched: its value may be served
	// until fetched+bound at the latest.
	if got, _, err := rkv.GetString(c, "k"); err != nil || got != "old" {
		t.Fatalf("first read = %q, %v", got, err)
	}
	fetched := time.Now()
	p.Freeze()
	if err := writer.KV("b").Set(c, "k", "new", 0); err != nil {
		t.Fatal(err)
	}
	limit := time.Now().Add(bound) // past the cached value's end
	var stale, after, afterErrs int
	for time.Now().Before(limit.Add(300 * time.Millisecond)) {
		rc, cancel := context.WithTimeout(c, 50*time.Millisecond)
		began := time.Now()
		got, _, err := rkv.GetString(rc, "k")
		cancel()
		if err == nil && got == "old" {
			stale++
			if !began.Before(fetched.Add(bound)) {
				t.Fatalf("a read begun %v after the fetching read returned the overwritten value (bound %v)", began.Sub(fetched), bound)
			}
		}
		if began.After(limit) {
			after++
			if err != nil {
				afterErrs++
				if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, fleet.ErrUnavailable) {
					t.Fatalf("a read past the bound failed with %v, want its ctx's end or ErrUnavailable", err)
				}
			}
		}
	}
	if stale == 0 {
		t.Fatal("no read served the cached value while frozen: the test saw no staleness to bound")
	}
	if after == 0 || afterErrs != after {
		t.Fatalf("%d reads past the bound, %d of them failed: want every one to wait on the frozen server", after, afterErrs)
	}
	p.Thaw()
	waitFor(t, 10*time.Second, func() bool { s, _, _ := rkv.GetString(c, "k"); return s == "new" }, "the reader never saw the write after the thaw")
}

// CacheTTL defaults to 2s, the bound on a cached read's staleness.
func TestDefaultCacheTTL(t *testing.T) {
	if fleet.DefaultCacheTTL != 2*time.Second {
		t.Fatalf("DefaultCacheTTL = %v, want 2s", fleet.DefaultCacheTTL)
	}
}
