package fleet_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/internal/redistest"
)

// exampleFleet opens a Fleet for an Example on the test binary's Redis (a
// throwaway redis-server, or FLEET_REDIS_URL), under a prefix of its own.
// In your code: fleet.Open(ctx, fleet.Options{URL: "redis://127.0.0.1:6379"}).
func exampleFleet(name string) (*fleet.Fleet, func()) {
	url, err := redistest.SingleURLOrErr()
	if err != nil {
		log.Fatal(err)
	}
	prefix := "example-" + name + ":"
	redistest.DeletePrefix(url, prefix)
	f, err := fleet.Open(context.Background(), fleet.Options{URL: url, Prefix: prefix})
	if err != nil {
		log.Fatal(err)
	}
	return f, func() { f.Close(); redistest.DeletePrefix(url, prefix) }
}

func ExampleKV() {
	f, done := exampleFleet("kv")
	defer done()
	ctx := context.Background()

	type config struct {
		Proxy string `json:"proxy"`
		Limit int    `json:"limit"`
	}
	kv := f.KV("harvester-state")
	_ = kv.Set(ctx, "last-harvest", "2026-12-02T09:00:00Z", 5*time.Minute)
	_ = kv.Set(ctx, "active-config", config{Proxy: "socks5://p1", Limit: 3}, 0)

	last, ok, _ := kv.GetString(ctx, "last-harvest")
	fmt.Println(last, ok)
	cfg, ok, _ := fleet.GetAs[config](ctx, kv, "active-config")
	fmt.Printf("%+v %v\n", cfg, ok)
	_, ok, _ = kv.Get(ctx, "never-set")
	fmt.Println(ok)
	// Output:
	// 2026-12-02T09:00:00Z true
	// {Proxy:socks5://p1 Limit:3} true
	// false
}

// A read that must see every write acknowledged before it, in any process,
// skips the client-side cache; the others keep reading from it.
func ExampleWithFreshReads() {
	f, done := exampleFleet("fresh")
	defer done()
	ctx := context.Background()

	kv := f.KV("leader")
	_ = kv.Set(ctx, "term", 7, 0)
	term, _, _ := fleet.GetAs[int](fleet.WithFreshReads(ctx), kv, "term")
	fmt.Println(term)
	// Output: 7
}

func ExampleCounter() {
	f, done := exampleFleet("counter")
	defer done()
	ctx := context.Background()

	inflight := f.Counter("inflight-requests")
	_, _ = inflight.Incr(ctx)
	_, _ = inflight.IncrBy(ctx, 4)
	n, _ := inflight.Decr(ctx)
	fmt.Println(n)
	// Output: 4
}

func ExampleLock_Acquire() {
	f, done := exampleFleet("lock")
	defer done()
	ctx := context.Background()

	lock := f.Lock("harvest:nowsecure.nl")
	lease, err := lock.Acquire(ctx, fleet.LockOptions{Hold: 30 * time.Second, Wait: 2 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	// Another holder fails at once with a zero wait.
	_, err = lock.Acquire(ctx, fleet.LockOptions{Hold: time.Second})
	fmt.Println(errors.Is(err, fleet.ErrNotObtained))
	fmt.Println(lease.Release(ctx))
	// Output:
	// true
	// <nil>
}

func ExampleLock_Do() {
	f, done := exampleFleet("lockdo")
	defer done()
	ctx := context.Background()

	err := f.Lock("migrate:step-3").Do(ctx, fleet.LockOptions{Hold: 10 * time.Second, Wait: time.Second, KeepAlive: true},
		func(ctx context.Context, lease *fleet.Lease) error {
			// Only one process anywhere runs this at a time. Pass
			// lease.Fence() to a store that refuses stale holders.
			fmt.Println("migrating, fence > 0:", lease.Fence() > 0)
			return nil
		})
	fmt.Println(err)
	// Output:
	// migrating, fence > 0: true
	// <nil>
}
