package fleet_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/internal/redistest"
)

// benchPool opens a Fleet on the single node under a fresh prefix.
func benchPool(b *testing.B, name string) (*fleet.Pool[cookie, cookieTags], *env) {
	b.Helper()
	tg := redistest.Target{Name: "single-compat", URL: redistest.SingleURL(b)}
	e := &env{Tg: tg, Raw: redistest.Client(b, tg), Prefix: redistest.Prefix(b, tg)}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	f, err := fleet.Open(ctx, fleet.Options{URL: tg.URL, Prefix: e.Prefix})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = f.Close() })
	e.F = f
	return fleet.NewPool[cookie, cookieTags](f, name, fleet.PoolOptions{}), e
}

var benchCookie = cookie{Cookies: map[string]string{"cf_clearance": "0123456789abcdef0123456789abcdef"}, UserAgent: "Mozilla/5.0 (X11; Linux x86_64)", Site: "x"}

// fill puts n items, 1% of them on each of 100 sites, from 64 goroutines
// (rueidis pipelines their concurrent calls).
func fillPool(b *testing.B, p *fleet.Pool[cookie, cookieTags], n int) {
	b.Helper()
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Value
	for range 64 {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if _, err := p.Put(context.Background(), benchCookie, cookieTags{Site: "s" + strconv.Itoa(i%100), Fresh: true}, 0); err != nil {
					failed.Store(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
}

func BenchmarkPoolPut(b *testing.B) {
	p, _ := benchPool(b, "bench-put")
	b.SetParallelism(8)
	var i atomic.Int64
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			site := "s" + strconv.Itoa(int(i.Add(1)%100))
			if _, err := p.Put(context.Background(), benchCookie, cookieTags{Site: site, Fresh: true}, time.Hour); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func BenchmarkPoolClaimRelease50(b *testing.B) {
	p, _ := benchPool(b, "bench-claim")
	fillPool(b, p, 1000)
	b.ResetTimer()
	var left atomic.Int64
	left.Store(int64(b.N))
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				cl, err := p.Claim(context.Background(), fleet.ClaimOptions{Hold: time.Minute})
				if err != nil || cl == nil {
					b.Errorf("Claim = %v, %v", cl, err)
					return
				}
				if err := cl.Release(context.Background()); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// BenchmarkPoolClaimLatency claims with a filter that matches 1% of the
// items, on pools of growing size, and reports the claim's p50 and p99
// and Redis memory per item.
func BenchmarkPoolClaimLatency(b *testing.B) {
	for _, n := range []int{1000, 10000, 100000} {
		b.Run(fmt.Sprintf("items=%d", n), func(b *testing.B) {
			p, e := benchPool(b, "bench-lat")
			before := usedMemory(b, e)
			start := time.Now()
			fillPool(b, p, n)
			fillRate := float64(n) / time.Since(start).Seconds()
			perItem := float64(usedMemory(b, e)-before) / float64(n)
			q := p.Where(fleet.Eq("site", "s42"))
			lat := make([]time.Duration, 0, b.N)
			ctx := context.Background()
			b.ResetTimer()
			for range b.N {
				t0 := time.Now()
				cl, err := q.Claim(ctx, fleet.ClaimOptions{Hold: time.Minute})
				lat = append(lat, time.Since(t0))
				if err != nil || cl == nil {
					b.Fatalf("Claim = %v, %v", cl, err)
				}
				if err := cl.Release(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
			b.ReportMetric(fillRate, "fill-puts/s")
			b.ReportMetric(perItem, "redis-bytes/item")
		})
	}
}

// holdN claims n items of p concurrently, for an hour, and returns the
// claims.
func holdN(b *testing.B, p *fleet.Pool[cookie, cookieTags], n int) {
	b.Helper()
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Value
	for range 64 {
		wg.Go(func() {
			for next.Add(1) <= int64(n) {
				cl, err := p.Claim(context.Background(), fleet.ClaimOptions{Hold: time.Hour})
				if err != nil || cl == nil {
					failed.Store(fmt.Errorf("Claim = %v, %v", cl, err))
					return
				}
			}
		})
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkPoolClaimShare claims one item (and releases it at once, so the
// share stays put) on a 100,000-item pool of which 0%, 90% or 99.9% are
// claimed and held, and claims on the pool with every item held (a claim
// that finds none); it reports the claim's p50 and p99 and the time it
// took to claim the held share.
//
//	go test -run '^$' -bench BenchmarkPoolClaimShare -benchtime 2000x .
func BenchmarkPoolClaimShare(b *testing.B) {
	const n = 100_000
	for _, tc := range []struct {
		name string
		held int
	}{{"claimed=0%", 0}, {"claimed=90%", n * 9 / 10}, {"claimed=99.9%", n - n/1000}, {"none-free", n}} {
		p, _ := benchPool(b, "bench-share")
		fillPool(b, p, n)
		start := time.Now()
		holdN(b, p, tc.held)
		holdRate := float64(tc.held) / time.Since(start).Seconds()
		b.Run(tc.name, func(b *testing.B) {
			ctx := context.Background()
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for range b.N {
				t0 := time.Now()
				cl, err := p.Claim(ctx, fleet.ClaimOptions{Hold: time.Minute})
				lat = append(lat, time.Since(t0))
				if err != nil || (cl == nil) != (tc.held == n) {
					b.Fatalf("Claim = %v, %v", cl, err)
				}
				if cl != nil {
					if err := cl.Release(ctx); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
			if tc.held > 0 {
				b.ReportMetric(holdRate, "hold-claims/s")
			}
		})
	}
}
