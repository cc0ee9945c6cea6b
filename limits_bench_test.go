package fleet_test

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/fleettest"
)

// benchServer starts a server of the benchmark's own, a Fleet on it and a
// bare rueidis client.
func benchServer(b *testing.B) (*fleettest.Server, *fleet.Fleet, rueidis.Client) {
	b.Helper()
	if err := fleettest.Available(); err != nil {
		b.Fatal(err)
	}
	s, err := fleettest.StartServer(context.Background(), fleettest.Config{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(s.Stop)
	opt, _ := rueidis.ParseURL(s.URL())
	c, err := rueidis.NewClient(opt)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Close)
	f, err := fleet.Open(context.Background(), fleet.Options{URL: s.URL()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { f.Close() })
	return s, f, c
}

// latencies gathers per-call durations from many goroutines.
type latencies struct {
	mu sync.Mutex
	d  []time.Duration
}

func (l *latencies) add(d []time.Duration) {
	l.mu.Lock()
	l.d = append(l.d, d...)
	l.mu.Unlock()
}

// p returns the q-quantile in µs.
func (l *latencies) p(q float64) float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.d) == 0 {
		return 0
	}
	slices.Sort(l.d)
	return float64(l.d[int(q*float64(len(l.d)-1))]) / 1e3
}

// BenchmarkLimiterAllow: Limiter.Allow beside the floor, a bare rueidis
// EVALSHA of the same script with the same arguments, by turns in every
// goroutine (each its own limiter, never denied), so both see the same
// load on the shared machine. x-floor is fleet's rate as a share of the
// floor's (the floor's time per call over fleet's); p50s are per call.
//
//	go test -run '^$' -bench 'LimiterAllow' -benchtime 5s -count 3 .
func BenchmarkLimiterAllow(b *testing.B) {
	_, f, c := benchServer(b)
	script := rueidis.NewLuaScript(fleet.LimitAllowScript)
	opts := fleet.LimitOptions{Rate: 1_000_000, Per: time.Second, Burst: 1_000_000}
	var id atomic.Int64
	var fleetNs, floorNs atomic.Int64
	var fleetLat, floorLat latencies
	parallel(b, func(pb *testing.PB) {
		ctx := context.Background()
		n := strconv.FormatInt(id.Add(1), 10)
		l := f.Limiter("bench:"+n, opts)
		key := []string{"fleet:limit:floor:" + n}
		args := []string{"1", "1", "1000000", "0"}
		var fl, fr []time.Duration
		for pb.Next() {
			t0 := time.Now()
			r, err := l.Allow(ctx, 1)
			if err != nil || !r.Allowed {
				b.Fatal(r, err)
			}
			t1 := time.Now()
			res, err := script.Exec(ctx, c, key, args).AsIntSlice()
			if err != nil || res[0] != 1 {
				b.Fatal(res, err)
			}
			fl, fr = append(fl, t1.Sub(t0)), append(fr, time.Since(t1))
		}
		var sl, sr time.Duration
		for i := range fl {
			sl, sr = sl+fl[i], sr+fr[i]
		}
		fleetNs.Add(int64(sl))
		floorNs.Add(int64(sr))
		fleetLat.add(fl)
		floorLat.add(fr)
	})
	b.StopTimer()
	if fleetNs.Load() > 0 {
		b.ReportMetric(float64(floorNs.Load())/float64(fleetNs.Load()), "x-floor")
		b.ReportMetric(fleetLat.p(0.5), "fleet-p50-µs")
		b.ReportMetric(floorLat.p(0.5), "floor-p50-µs")
		b.ReportMetric(float64(b.N)/(float64(fleetNs.Load())/1e9)*goroutines, "fleet-allow/s")
	}
}

// BenchmarkSemaphorePair: an uncontended Semaphore acquire+release beside
// a Lock acquire+release, by turns in every goroutine (each its own
// names). x-lock is the semaphore's rate as a share of the lock's.
//
//	go test -run '^$' -bench 'SemaphorePair' -benchtime 5s -count 3 .
func BenchmarkSemaphorePair(b *testing.B) {
	_, f, _ := benchServer(b)
	var id atomic.Int64
	var semNs, lockNs atomic.Int64
	parallel(b, func(pb *testing.PB) {
		ctx := context.Background()
		n := strconv.FormatInt(id.Add(1), 10)
		sem, lk := f.Semaphore("bench:"+n, 3), f.Lock("bench:"+n)
		var ds, dl time.Duration
		for pb.Next() {
			t0 := time.Now()
			p, err := sem.Acquire(ctx, fleet.SemaphoreOptions{Hold: 10 * time.Second})
			if err != nil {
				b.Fatal(err)
			}
			if err := p.Release(ctx); err != nil {
				b.Fatal(err)
			}
			t1 := time.Now()
			l, err := lk.Acquire(ctx, fleet.LockOptions{Hold: 10 * time.Second})
			if err != nil {
				b.Fatal(err)
			}
			if err := l.Release(ctx); err != nil {
				b.Fatal(err)
			}
			ds, dl = ds+t1.Sub(t0), dl+time.Since(t1)
		}
		semNs.Add(int64(ds))
		lockNs.Add(int64(dl))
	})
	b.StopTimer()
	if semNs.Load() > 0 {
		b.ReportMetric(float64(lockNs.Load())/float64(semNs.Load()), "x-lock")
		b.ReportMetric(float64(semNs.Load())/float64(b.N)/1e3, "sem-µs/pair")
		b.ReportMetric(float64(lockNs.Load())/float64(b.N)/1e3, "lock-µs/pair")
	}
}

// BenchmarkSemaphoreHandoff: 8 goroutines over 2 Fleets take turns at a
// semaphore of 1 permit (and, beside it, a Lock): each op is one acquire
// and release. handoff-p50-µs is from a holder's release being sent to the
// next holder's acquire returning.
//
//	go test -run '^$' -bench 'SemaphoreHandoff' -benchtime 3s -count 3 .
func BenchmarkSemaphoreHandoff(b *testing.B) {
	s, f, _ := benchServer(b)
	f2, err := fleet.Open(context.Background(), fleet.Options{URL: s.URL()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { f2.Close() })
	type permit interface{ Release(context.Context) error }
	run := func(b *testing.B, take func(f *fleet.Fleet) (permit, error)) {
		var released atomic.Int64 // unix ns when the last release was sent
		var lat latencies
		var left atomic.Int64
		left.Store(int64(b.N))
		b.ResetTimer()
		var wg sync.WaitGroup
		for g := range 8 {
			fl := []*fleet.Fleet{f, f2}[g%2]
			wg.Go(func() {
				var ds []time.Duration
				defer func() { lat.add(ds) }()
				for left.Add(-1) >= 0 {
					p, err := take(fl)
					if err != nil {
						b.Error(err)
						return
					}
					if r := released.Load(); r > 0 {
						ds = append(ds, time.Duration(time.Now().UnixNano()-r))
					}
					released.Store(time.Now().UnixNano())
					if err := p.Release(context.Background()); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		b.StopTimer()
		b.ReportMetric(lat.p(0.5), "handoff-p50-µs")
		b.ReportMetric(lat.p(0.99), "handoff-p99-µs")
	}
	b.Run("semaphore", func(b *testing.B) {
		run(b, func(f *fleet.Fleet) (permit, error) {
			return f.Semaphore("handoff", 1).Acquire(context.Background(), fleet.SemaphoreOptions{Hold: 10 * time.Second, Wait: time.Minute})
		})
	})
	b.Run("lock", func(b *testing.B) {
		run(b, func(f *fleet.Fleet) (permit, error) {
			return f.Lock("handoff").Acquire(context.Background(), fleet.LockOptions{Hold: 10 * time.Second, Wait: time.Minute})
		})
	})
}
