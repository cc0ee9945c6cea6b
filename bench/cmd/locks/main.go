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
//
// The fenced floor is what a fenced lock costs at least, on plain rueidis:
// one script that takes the lock (SET NX PX) and its fencing token (INCR)
// together, one compare-and-delete script to release it, and a waiter that
// retries every millisecond. Each round measures every library in turn
// (-rounds, default 3); the table gives the medians, and fleet's ratios to
// the floor with their min-max over the rounds.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"slices"
	"strconv"
	"strings"
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
	rounds := flag.Int("rounds", 3, "rounds: every library measured in turn in each")
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
		{"fenced floor", func() (locker, error) { return newFloor(addr) }},
		{"bsm/redislock", func() (locker, error) { return newRedislock(addr), nil }},
		{"redsync", func() (locker, error) { return newRedsync(addr), nil }},
		{"rueidislock", func() (locker, error) { return newRueidislock(addr) }},
	}
	all := make([][]result, len(makers)) // by library, by round
	for range *rounds {
		for i, m := range makers {
			l, err := m.make()
			if err != nil {
				log.Fatalf("%s: %v", m.name, err)
			}
			r := result{name: m.name}
			r.pairs = uncontended(ctx, l, *n, *d)
			r.acq, r.p50, r.p99, r.contendedErrs = contended(ctx, l, *n, *d)
			l.close()
			all[i] = append(all[i], r)
		}
	}
	med := func(rs []result, v func(result) float64) float64 {
		xs := make([]float64, len(rs))
		for i, r := range rs {
			xs[i] = v(r)
		}
		slices.Sort(xs)
		return xs[len(xs)/2]
	}
	fmt.Printf("redis %s, %d goroutines, %v each, %d rounds (medians)\n", addr, *n, *d, *rounds)
	fmt.Printf("%-15s %12s %8s %12s %8s %10s %10s\n", "library", "uncont/s", "fleet÷", "contended/s", "fleet÷", "p50", "p99")
	fleetRs := all[0]
	for i, rs := range all {
		pairs, acq := med(rs, func(r result) float64 { return r.pairs }), med(rs, func(r result) float64 { return r.acq })
		fp, fa := med(fleetRs, func(r result) float64 { return r.pairs }), med(fleetRs, func(r result) float64 { return r.acq })
		p50 := time.Duration(med(rs, func(r result) float64 { return float64(r.p50) }))
		p99 := time.Duration(med(rs, func(r result) float64 { return float64(r.p99) }))
		fmt.Printf("%-15s %12.0f %8.2f %12.0f %8.2f %10v %10v\n", makers[i].name, pairs, fp/pairs, acq, fa/acq,
			p50.Round(time.Microsecond), p99.Round(time.Microsecond))
		var errs int64
		for _, r := range rs {
			errs += r.contendedErrs
		}
		if errs > 0 {
			fmt.Printf("  (%s: %d contended acquisitions timed out)\n", makers[i].name, errs)
		}
	}
	// fleet against the floor, round by round.
	var up, cp []float64
	for r := range *rounds {
		up = append(up, all[0][r].pairs/all[1][r].pairs)
		cp = append(cp, all[0][r].acq/all[1][r].acq)
	}
	slices.Sort(up)
	slices.Sort(cp)
	fmt.Printf("fleet ÷ fenced floor, by round: uncontended %.2f (%.2f–%.2f), contended %.2f (%.2f–%.2f)\n",
		up[len(up)/2], up[0], up[len(up)-1], cp[len(cp)/2], cp[0], cp[len(cp)-1])
	var p99s []string
	for _, r := range all[0] {
		p99s = append(p99s, r.p99.Round(time.Microsecond).String())
	}
	fmt.Printf("fleet hand-off p99 by round: %s\n", strings.Join(p99s, ", "))
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

// floorLocker is the fenced floor: SET NX PX and INCR of the fence in one
// script, a compare-and-delete script to release, a retry every ms.
type floorLocker struct{ c rueidis.Client }

var (
	floorAcquire = rueidis.NewLuaScript(`
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return redis.call('INCR', KEYS[2])
end
return 0`)
	floorRelease = rueidis.NewLuaScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0`)
)

func newFloor(addr string) (locker, error) {
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	return floorLocker{c}, err
}

func (l floorLocker) lock(ctx context.Context, name string) (func(), error) {
	key, fence := "bench:floor:{"+name+"}", "bench:floor:{"+name+"}:fence"
	token := strconv.FormatInt(time.Now().UnixNano(), 36) + strconv.Itoa(int(tokens.Add(1)))
	for {
		n, err := floorAcquire.Exec(ctx, l.c, []string{key, fence}, []string{token, "10000"}).AsInt64()
		if err != nil {
			return nil, err
		}
		if n > 0 {
			return func() { _ = floorRelease.Exec(context.Background(), l.c, []string{key}, []string{token}).Error() }, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
}
func (l floorLocker) close() { l.c.Close() }

var tokens atomic.Int64
