package fleet_test

import (
	"context"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/internal/redistest"
)

// Benchmarks of KV, Counter and Lock against bare rueidis loops on the same
// server. Run: go test -run '^$' -bench 'KV|Counter|Lock' -benchtime 3s .

// goroutines is how many goroutines the parallel benchmarks run.
const goroutines = 50

// lastPrefix is the key prefix of the last benchFleet (benchmarks run one
// at a time).
var lastPrefix string

func benchFleet(b *testing.B, mods ...func(*fleet.Options)) (*fleet.Fleet, rueidis.Client) {
	b.Helper()
	tg := redistest.Target{Name: "single-compat", URL: redistest.SingleURL(b)}
	lastPrefix = redistest.Prefix(b, tg)
	opts := fleet.Options{URL: tg.URL, Prefix: lastPrefix}
	for _, m := range mods {
		m(&opts)
	}
	f, err := fleet.Open(context.Background(), opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { f.Close() })
	opt, _ := rueidis.ParseURL(tg.URL)
	raw, err := rueidis.NewClient(opt)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(raw.Close)
	return f, raw
}

func parallel(b *testing.B, fn func(pb *testing.PB)) {
	b.SetParallelism(max(1, goroutines/runtime.GOMAXPROCS(0)))
	b.ResetTimer()
	b.RunParallel(fn)
}

func BenchmarkKVGet(b *testing.B) {
	const nkeys = 100
	names := make([]string, nkeys)
	for i := range names {
		names[i] = "k" + strconv.Itoa(i)
	}
	setup := func(b *testing.B, mods ...func(*fleet.Options)) (*fleet.KV, rueidis.Client) {
		f, raw := benchFleet(b, mods...)
		kv := f.KV("bench")
		for i := range nkeys {
			if err := kv.Set(context.Background(), names[i], "value-of-some-length-0123456789", 0); err != nil {
				b.Fatal(err)
			}
		}
		return kv, raw
	}
	b.Run("fleet-cached", func(b *testing.B) {
		kv, _ := setup(b)
		var n atomic.Int64
		parallel(b, func(pb *testing.PB) {
			ctx := context.Background()
			for i := n.Add(1); pb.Next(); i++ {
				if _, _, err := kv.GetString(ctx, names[i%nkeys]); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
	b.Run("fleet-uncached", func(b *testing.B) {
		kv, _ := setup(b, func(o *fleet.Options) { o.DisableCache = true })
		var n atomic.Int64
		parallel(b, func(pb *testing.PB) {
			ctx := context.Background()
			for i := n.Add(1); pb.Next(); i++ {
				if _, _, err := kv.GetString(ctx, names[i%nkeys]); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
	// The bare loop reads the very keys fleet reads, through the same cache.
	b.Run("rueidis-DoCache", func(b *testing.B) {
		f, _ := benchFleet(b)
		raw := f.Client() // the same client and cache fleet uses
		kv := f.KV("bench")
		keys := make([]string, nkeys)
		for i := range keys {
			if err := kv.Set(context.Background(), names[i], "value-of-some-length-0123456789", 0); err != nil {
				b.Fatal(err)
			}
			keys[i] = lastPrefix + "fleet:kv:bench:" + names[i]
		}
		var n atomic.Int64
		parallel(b, func(pb *testing.PB) {
			ctx := context.Background()
			for i := n.Add(1); pb.Next(); i++ {
				if _, err := raw.DoCache(ctx, raw.B().Get().Key(keys[i%nkeys]).Cache(), time.Minute).ToString(); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
}

func BenchmarkCounterIncr(b *testing.B) {
	b.Run("fleet", func(b *testing.B) {
		f, _ := benchFleet(b)
		c := f.Counter("bench")
		parallel(b, func(pb *testing.PB) {
			ctx := context.Background()
			for pb.Next() {
				if _, err := c.Incr(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
	b.Run("rueidis-INCR", func(b *testing.B) {
		_, raw := benchFleet(b)
		key := "bare:counter:" + strconv.Itoa(int(time.Now().UnixNano()))
		b.Cleanup(func() { raw.Do(context.Background(), raw.B().Del().Key(key).Build()) })
		parallel(b, func(pb *testing.PB) {
			ctx := context.Background()
			for pb.Next() {
				if err := raw.Do(ctx, raw.B().Incr().Key(key).Build()).Error(); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
}

// Uncontended: each goroutine takes and frees its own lock name.
func BenchmarkLockUncontended(b *testing.B) {
	f, _ := benchFleet(b)
	var id atomic.Int64
	parallel(b, func(pb *testing.PB) {
		ctx := context.Background()
		lk := f.Lock("bench:" + strconv.Itoa(int(id.Add(1))))
		for pb.Next() {
			l, err := lk.Acquire(ctx, fleet.LockOptions{Hold: 10 * time.Second})
			if err != nil {
				b.Fatal(err)
			}
			if err := l.Release(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// Contended: 50 goroutines on one name. Reports acquisitions per second and
// the hand-off latency from one holder's release to the next one's acquire.
func BenchmarkLockContended(b *testing.B) {
	f, _ := benchFleet(b)
	lk := f.Lock("bench:contended")
	var released atomic.Int64 // unix ns of the last release, 0 at first
	var mu sync.Mutex
	var lats []time.Duration
	parallel(b, func(pb *testing.PB) {
		ctx := context.Background()
		var mine []time.Duration
		for pb.Next() {
			l, err := lk.Acquire(ctx, fleet.LockOptions{Hold: 10 * time.Second, Wait: time.Minute})
			if err != nil {
				b.Fatal(err)
			}
			if at := released.Load(); at != 0 {
				mine = append(mine, time.Duration(time.Now().UnixNano()-at))
			}
			released.Store(time.Now().UnixNano())
			if err := l.Release(ctx); err != nil {
				b.Fatal(err)
			}
		}
		mu.Lock()
		lats = append(lats, mine...)
		mu.Unlock()
	})
	b.StopTimer()
	reportLatency(b, "handoff", lats)
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "acq/s")
}

func reportLatency(b *testing.B, name string, lats []time.Duration) {
	if len(lats) == 0 {
		return
	}
	slices.Sort(lats)
	b.ReportMetric(float64(lats[len(lats)/2].Microseconds()), name+"-p50-µs")
	b.ReportMetric(float64(lats[len(lats)*99/100].Microseconds()), name+"-p99-µs")
}
