// Command locks measures fleet's Lock against github.com/bsm/redislock,
// github.com/go-redsync/redsync/v4 and rueidislock on the same redis-server in
// one run, and prints each figure with its ratio to fleet's.
//
//	go run ./cmd/locks -d 3s
//
// Uncontended: 50 goroutines, each on its own lock name, acquire+release
// pairs per second. Contended: 50 goroutines on one name, acquisitions per
// second and the hand-off latency from one holder's release to the next
// holder's acquire (p50, p99). It uses FLEET_REDIS_URL or starts a
// throwaway redis-server.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	goredislib "github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/redis/rueidis/rueidislock"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/fleettest"
)

// locker takes a named lock, waiting, and returns its release.
type locker interface {
	lock(ctx context.Context, name string) (func(), error)
	close()
}

type result struct {
	name          string
	pairs         float64 // uncontended pairs/s
	acq           float64 // contended acquisitions/s
	p50, p99      time.Duration
	contendedErrs int64
}

func main() {
	d := flag.Duration("d", 3*time.Second, "how long each measurement runs")
	n := flag.Int("g", 50, "goroutines")
	flag.Parse()
	ctx := context.Background()
	addr := ""
	if url := os.Getenv("FLEET_REDIS_URL"); url != "" {
		opt, err := rueidis.ParseURL(url)
		if err != nil {
			log.Fatal(err)
		}
		addr = opt.InitAddress[0]
	} else {
		s, err := fleettest.StartServer(ctx, fleettest.Config{})
		if err != nil {
			log.Fatal(err)
		}
		defer s.Stop()
		addr = s.Addr
	}
	makers := []struct {
		name string
		make func() (locker, error)
	}{
		{"fleet", func() (locker, error) { return newFleet(ctx, addr) }},
		{"bsm/redislock", func() (locker, error) { return newRedislock(addr), nil }},
		{"redsync", func() (locker, error) { return newRedsync(addr), nil }},
		{"rueidislock", func() (locker, error) { return newRueidislock(addr) }},
	}
	var results []result
	for _, m := range makers {
		l, err := m.make()
		if err != nil {
			log.Fatalf("%s: %v", m.name, err)
		}
		r := result{name: m.name}
		r.pairs = uncontended(ctx, l, *n, *d)
		r.acq, r.p50, r.p99, r.contendedErrs = contended(ctx, l, *n, *d)
		l.close()
		results = append(results, r)
	}
	base := results[0]
	fmt.Printf("redis %s, %d goroutines, %v each\n", addr, *n, *d)
	fmt.Printf("%-15s %12s %8s %12s %8s %10s %10s\n", "library", "uncont/s", "fleet÷", "contended/s", "fleet÷", "p50", "p99")
	for _, r := range results {
		fmt.Printf("%-15s %12.0f %8.2f %12.0f %8.2f %10v %10v\n", r.name, r.pairs, base.pairs/r.pairs, r.acq, base.acq/r.acq,
			r.p50.Round(time.Microsecond), r.p99.Round(time.Microsecond))
		if r.contendedErrs > 0 {
			fmt.Printf("  (%s: %d contended acquisitions timed out)\n", r.name, r.contendedErrs)
		}
	}
}

func uncontended(ctx context.Context, l locker, n int, d time.Duration) float64 {
	var total atomic.Int64
	var wg sync.WaitGroup
	stop := time.Now().Add(d)
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	for i := range n {
		name := "bench-u-" + run + "-" + strconv.Itoa(i)
		wg.Go(func() {
			for time.Now().Before(stop) {
				release, err := l.lock(ctx, name)
				if err != nil {
					log.Fatalf("uncontended: %v", err)
				}
				release()
				total.Add(1)
			}
		})
	}
	wg.Wait()
	return float64(total.Load()) / d.Seconds()
}

func contended(ctx context.Context, l locker, n int, d time.Duration) (float64, time.Duration, time.Duration, int64) {
	var total, errs atomic.Int64
	var released atomic.Int64
	var mu sync.Mutex
	var lats []time.Duration
	var wg sync.WaitGroup
	start := time.Now()
	stop := start.Add(d)
	name := "bench-c-" + strconv.FormatInt(start.UnixNano(), 36)
	for range n {
		wg.Go(func() {
			var mine []time.Duration
			for time.Now().Before(stop) {
				lctx, cancel := context.WithDeadline(ctx, stop.Add(time.Second))
				release, err := l.lock(lctx, name)
				cancel()
				if err != nil {
					errs.Add(1)
					continue
				}
				if at := released.Load(); at != 0 {
					mine = append(mine, time.Duration(time.Now().UnixNano()-at))
				}
				total.Add(1)
				released.Store(time.Now().UnixNano())
				release()
			}
			mu.Lock()
			lats = append(lats, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	slices.Sort(lats)
	var p50, p99 time.Duration
	if len(lats) > 0 {
		p50, p99 = lats[len(lats)/2], lats[len(lats)*99/100]
	}
	return float64(total.Load()) / time.Since(start).Seconds(), p50, p99, errs.Load()
}

type fleetLocker struct{ f *fleet.Fleet }

func newFleet(ctx context.Context, addr string) (locker, error) {
	f, err := fleet.Open(ctx, fleet.Options{Addrs: []string{addr}, Prefix: "bench:"})
	return fleetLocker{f}, err
}

func (l fleetLocker) lock(ctx context.Context, name string) (func(), error) {
	lease, err := l.f.Lock(name).Acquire(ctx, fleet.LockOptions{Hold: 10 * time.Second, Wait: time.Minute})
	if err != nil {
		return nil, err
	}
	return func() { _ = lease.Release(context.Background()) }, nil
}
func (l fleetLocker) close() { l.f.Close() }

type redislockLocker struct {
	c *goredislib.Client
	l *redislock.Client
}

func newRedislock(addr string) locker {
	c := goredislib.NewClient(&goredislib.Options{Addr: addr, PoolSize: 64})
	return redislockLocker{c, redislock.New(c)}
}

func (l redislockLocker) lock(ctx context.Context, name string) (func(), error) {
	lk, err := l.l.Obtain(ctx, "bench:redislock:"+name, 10*time.Second, &redislock.Options{RetryStrategy: redislock.LinearBackoff(time.Millisecond)})
	if err != nil {
		return nil, err
	}
	return func() { _ = lk.Release(context.Background()) }, nil
}
func (l redislockLocker) close() { l.c.Close() }

type redsyncLocker struct {
	c  *goredislib.Client
	rs *redsync.Redsync
}

func newRedsync(addr string) locker {
	c := goredislib.NewClient(&goredislib.Options{Addr: addr, PoolSize: 64})
	return redsyncLocker{c, redsync.New(goredis.NewPool(c))}
}

func (l redsyncLocker) lock(ctx context.Context, name string) (func(), error) {
	m := l.rs.NewMutex("bench:redsync:"+name, redsync.WithExpiry(10*time.Second), redsync.WithTries(1<<20), redsync.WithRetryDelay(time.Millisecond))
	if err := m.LockContext(ctx); err != nil {
		return nil, err
	}
	return func() { _, _ = m.UnlockContext(context.Background()) }, nil
}
func (l redsyncLocker) close() { l.c.Close() }

type rueidisLocker struct{ l rueidislock.Locker }

func newRueidislock(addr string) (locker, error) {
	l, err := rueidislock.NewLocker(rueidislock.LockerOption{
		ClientOption: rueidis.ClientOption{InitAddress: []string{addr}},
		KeyPrefix:    "bench:rueidislock",
		KeyMajority:  1, // one Redis: one key per lock, like the others
		KeyValidity:  10 * time.Second,
	})
	return rueidisLocker{l}, err
}

func (l rueidisLocker) lock(ctx context.Context, name string) (func(), error) {
	_, cancel, err := l.l.WithContext(ctx, name)
	if err != nil {
		return nil, err
	}
	return cancel, nil
}
func (l rueidisLocker) close() { l.l.Close() }
