package fleet_test

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/internal/costmeter"
	"github.com/fleet-go/fleet/internal/redistest"
)

type tiny struct {
	N int `json:"n"`
}

func benchQueue[T any](b *testing.B, opts fleet.QueueOptions, mods ...func(*fleet.Options)) (*fleet.Queue[T], *env) {
	b.Helper()
	tg := redistest.Target{Name: "single-compat", URL: redistest.SingleURL(b)}
	raw := redistest.Client(b, tg)
	prefix := redistest.Prefix(b, tg)
	o := fleet.Options{URL: tg.URL, Prefix: prefix}
	for _, m := range mods {
		m(&o)
	}
	f, err := fleet.Open(context.Background(), o)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { f.Close() })
	return fleet.NewQueue[T](f, "bench", opts), &env{F: f, Raw: raw, Prefix: prefix, Tg: tg}
}

// BenchmarkQueueSubmit: one task per call, from parallel goroutines
// (rueidis pipelines them).
func BenchmarkQueueSubmit(b *testing.B) {
	q, _ := benchQueue[tiny](b, fleet.QueueOptions{})
	ctx := context.Background()
	b.SetParallelism(8)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := q.Submit(ctx, tiny{N: 1}); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkQueueSubmitMany: batches of 100 in one round trip; ns/op is per
// task.
func BenchmarkQueueSubmitMany(b *testing.B) {
	q, _ := benchQueue[tiny](b, fleet.QueueOptions{})
	ctx := context.Background()
	batch := make([]tiny, 100)
	b.ResetTimer()
	for i := 0; i < b.N; i += len(batch) {
		if _, err := q.SubmitMany(ctx, batch[:min(len(batch), b.N-i)]); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkQueueReserveAck: reserve batches of 50 and ack each; ns/op is
// per task.
func BenchmarkQueueReserveAck(b *testing.B) {
	q, _ := benchQueue[tiny](b, fleet.QueueOptions{})
	fillQueue(b, q, b.N)
	b.ResetTimer()
	reserveAck(b, q, b.N)
}

// reserveAck reserves n tasks of q in batches of 50 and acks each batch's
// tasks at once.
func reserveAck(b *testing.B, q *fleet.Queue[tiny], n int) {
	ctx := context.Background()
	for done := 0; done < n; {
		tasks, err := q.Reserve(ctx, 50, 0)
		if err != nil || len(tasks) == 0 {
			b.Fatal(len(tasks), err)
		}
		var wg sync.WaitGroup
		for _, t := range tasks {
			wg.Go(func() {
				if err := t.Ack(ctx); err != nil {
					b.Error(err)
				}
			})
		}
		wg.Wait()
		done += len(tasks)
	}
}

// BenchmarkQueueReserveRelease: 50 goroutines loop Reserve(1) and Release
// on a queue with a backlog of 100 (the raw Reserve(1)/Nack loops of issue
// 22: a Release is the same end as a Nack, without the backoff that would
// empty the queue); ns/op is per cycle, and script-calls/op the script
// calls (EVALSHA) that the server ran per cycle: 2 when every call is its
// own, fewer when concurrent calls share one.
func BenchmarkQueueReserveRelease(b *testing.B) {
	q, srv := benchQueue[tiny](b, fleet.QueueOptions{})
	ctx := context.Background()
	fillQueue(b, q, 100)
	m, err := costmeter.Start(ctx, srv.Raw)
	if err != nil {
		b.Fatal(err)
	}
	b.SetParallelism(max(1, 50/runtime.GOMAXPROCS(0)))
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			ts, err := q.Reserve(ctx, 1, 0)
			if err != nil || len(ts) != 1 {
				b.Errorf("Reserve(1) = %d tasks, %v", len(ts), err)
				return
			}
			if err := ts[0].Release(ctx); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	cost, err := m.Stop(ctx)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(cost.Scripts())/float64(b.N), "script-calls/op")
}

func fillQueue(b *testing.B, q *fleet.Queue[tiny], n int) {
	b.Helper()
	batch := make([]tiny, 1000)
	for i := 0; i < n; i += len(batch) {
		if _, err := q.SubmitMany(context.Background(), batch[:min(len(batch), n-i)]); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkQueueEndToEnd: 8 submitters and 16 consumers (reserve up to 10,
// ack each) until b.N tasks are done; ns/op is per task.
func BenchmarkQueueEndToEnd(b *testing.B) {
	q, _ := benchQueue[tiny](b, fleet.QueueOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var left atomic.Int64
	left.Store(int64(b.N))
	var wg sync.WaitGroup
	b.ResetTimer()
	var next atomic.Int64
	for range 8 {
		wg.Go(func() {
			for next.Add(1) <= int64(b.N) {
				if _, err := q.Submit(ctx, tiny{N: 1}); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	for range 16 {
		wg.Go(func() {
			for left.Load() > 0 && ctx.Err() == nil {
				tasks, err := q.Reserve(ctx, 10, 50*time.Millisecond)
				if err != nil {
					return
				}
				for _, t := range tasks {
					if err := t.Ack(ctx); err != nil {
						b.Error(err)
					}
					if left.Add(-1) == 0 {
						cancel()
					}
				}
			}
		})
	}
	wg.Wait()
}

// BenchmarkQueuePickupLatency: one consumer waits on an idle queue; each op
// submits one task and waits until the consumer has it. Reports p50 and p99.
func BenchmarkQueuePickupLatency(b *testing.B) {
	for _, noCache := range []bool{false, true} {
		b.Run("cache="+strconv.FormatBool(!noCache), func(b *testing.B) {
			q, e := benchQueue[tiny](b, fleet.QueueOptions{}, func(o *fleet.Options) { o.DisableCache = noCache })
			producer := fleet.NewQueue[tiny](openBench(b, e), "bench", fleet.QueueOptions{})
			ctx, cancel := context.WithCancel(context.Background())
			got := make(chan time.Time)
			done := make(chan struct{})
			go func() {
				defer close(done)
				for ctx.Err() == nil {
					tasks, err := q.Reserve(ctx, 1, 10*time.Second)
					if err != nil || len(tasks) == 0 {
						continue
					}
					at := time.Now()
					_ = tasks[0].Ack(ctx)
					got <- at
				}
			}()
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for range b.N {
				time.Sleep(20 * time.Millisecond) // the consumer is idle again
				start := time.Now()
				if _, err := producer.Submit(ctx, tiny{N: 1}); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, (<-got).Sub(start))
			}
			b.StopTimer()
			cancel()
			<-done
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
		})
	}
}

// openBench opens a second Fleet (another process, in effect) on the same
// server and prefix as e's.
func openBench(b *testing.B, e *env) *fleet.Fleet {
	b.Helper()
	f, err := fleet.Open(context.Background(), fleet.Options{URL: e.Tg.URL, Prefix: e.Prefix})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { f.Close() })
	return f
}

// BenchmarkQueueMemory reports Redis memory per pending task by payload
// size (used_memory delta over 10,000 tasks; one measurement per run).
func BenchmarkQueueMemory(b *testing.B) {
	for _, size := range []int{16, 256, 4096} {
		b.Run("payload="+strconv.Itoa(size), func(b *testing.B) {
			type blob struct {
				S string `json:"s"`
			}
			q, e := benchQueue[blob](b, fleet.QueueOptions{})
			ctx := context.Background()
			p := blob{S: strings.Repeat("x", max(size-8, 1))}
			const n = 10_000
			for range 1 { // one measurement, whatever b.N: run with -benchtime 1x
				e.Raw.Do(ctx, e.Raw.B().Del().Key(e.Prefix+"fleet:queue:bench").Build())
				before := usedMemory(b, e)
				batch := make([]blob, 500)
				for i := range batch {
					batch[i] = p
				}
				for i := 0; i < n; i += len(batch) {
					if _, err := q.SubmitMany(ctx, batch); err != nil {
						b.Fatal(err)
					}
				}
				after := usedMemory(b, e)
				b.ReportMetric(float64(after-before)/n, "bytes/task")
			}
			e.Raw.Do(ctx, e.Raw.B().Del().Key(e.Prefix+"fleet:queue:bench").Build())
		})
	}
}

func usedMemory(b *testing.B, e *env) int64 {
	b.Helper()
	out, err := e.Raw.Do(context.Background(), e.Raw.B().Info().Section("memory").Build()).ToString()
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.SplitSeq(out, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	b.Fatal("no used_memory")
	return 0
}

// BenchmarkQueueNack: reserve batches of 50 and nack each from parallel
// goroutines (the nacks go together: internal/engine/callgroup.go); ns/op
// is per nack, the reserves untimed. The retries wait an hour, out of the
// way.
func BenchmarkQueueNack(b *testing.B) {
	q, _ := benchQueue[tiny](b, fleet.QueueOptions{MaxAttempts: 1000, BackoffBase: time.Hour, BackoffMax: time.Hour})
	fillQueue(b, q, b.N)
	ctx := context.Background()
	cause := errors.New("boom")
	b.ResetTimer()
	for done := 0; done < b.N; {
		b.StopTimer()
		ts, err := q.Reserve(ctx, min(50, b.N-done), 0)
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		var wg sync.WaitGroup
		for _, t := range ts {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := t.Nack(ctx, cause); err != nil {
					b.Error(err)
				}
			}()
		}
		wg.Wait()
		done += len(ts)
	}
}
