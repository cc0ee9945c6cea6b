package fleet_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/internal/costmeter"
)

// BenchmarkSchedulerTick: the cost of one tick of an every-second schedule
// with 5 scheduler replicas, each in its own Fleet, driven tick by tick on
// a simulated clock (one round of each replica per op, one after the
// other). cmds/tick counts every command the server ran for the tick,
// inside scripts too; exactly one replica submits.
func BenchmarkSchedulerTick(b *testing.B) {
	q, e := benchQueue[tiny](b, fleet.QueueOptions{})
	ctx := context.Background()
	if err := fleet.AddSchedule(ctx, q, "tick", fleet.Every(time.Second), tiny{N: 1}, fleet.ScheduleOptions{}); err != nil {
		b.Fatal(err)
	}
	var rounds []func(context.Context, time.Time) error
	for range 5 {
		f, err := fleet.Open(ctx, fleet.Options{URL: e.Tg.URL, Prefix: e.Prefix})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { f.Close() })
		rounds = append(rounds, fleet.SchedulerRound(f))
	}
	start := time.Now().Truncate(time.Second).Add(time.Second)
	for _, r := range rounds { // warm: the replicas read the schedules once
		if err := r(ctx, start); err != nil {
			b.Fatal(err)
		}
	}
	before, err := costmeter.Read(ctx, e.Raw)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := range b.N {
		now := start.Add(time.Duration(i+1)*time.Second + 3*time.Millisecond)
		for _, r := range rounds {
			if err := r(ctx, now); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.StopTimer()
	after, _ := costmeter.Read(ctx, e.Raw)
	b.ReportMetric(float64(after.Since(before).Commands())/float64(b.N), "cmds/tick")
	if n, _ := e.Raw.Do(ctx, e.Raw.B().Llen().Key(e.Prefix+"fleet:queue:bench").Build()).AsInt64(); n != int64(b.N)+1 && n != int64(b.N) {
		b.Fatalf("%d tasks for %d ticks", n, b.N)
	}
}

// BenchmarkCancelLatency: from Queue.Cancel's call to the running handler
// seeing its ctx cancelled (cause ErrCanceled), through Redis pub/sub, from
// another Fleet. p50 and p99 are reported.
func BenchmarkCancelLatency(b *testing.B) {
	q, e := benchQueue[tiny](b, fleet.QueueOptions{})
	ctx := context.Background()
	started := make(chan string, 1)
	seen := make(chan time.Time, 1)
	w := fleet.NewBatchWorker(e.F, fleet.WorkerOptions{Type: "bench", ID: "w", Slots: 1}, q,
		fleet.BatchFunc[struct{}, struct{}, tiny](func(ctx context.Context, s *fleet.Slot[struct{}, struct{}], t *fleet.Task[tiny]) error {
			started <- t.ID
			<-ctx.Done()
			seen <- time.Now()
			return ctx.Err()
		}))
	if err := w.Start(ctx); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = w.Stop(ctx) })
	other, err := fleet.Open(ctx, fleet.Options{URL: e.Tg.URL, Prefix: e.Prefix})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { other.Close() })
	oq := fleet.NewQueue[tiny](other, "bench", fleet.QueueOptions{})
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		if _, err := q.Submit(ctx, tiny{}); err != nil {
			b.Fatal(err)
		}
		id := <-started
		b.StartTimer()
		t0 := time.Now()
		if err := oq.Cancel(ctx, id); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, (<-seen).Sub(t0))
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
}

// BenchmarkPriorityWorker: tasks handled per second by a batch worker of 8
// slots with a no-op handler, over one queue (NewBatchWorker) and over
// three weighted queues (NewPriorityWorker), all pre-filled; ns/op is per
// task, so the ratio of the two is the throughput ratio.
func BenchmarkPriorityWorker(b *testing.B) {
	for _, n := range []int{1, 3} {
		b.Run(fmt.Sprintf("queues=%d", n), func(b *testing.B) {
			_, e := benchQueue[tiny](b, fleet.QueueOptions{})
			ctx := context.Background()
			var wqs []fleet.WeightedQueue[tiny]
			for i := range n {
				q := fleet.NewQueue[tiny](e.F, "prio"+strconv.Itoa(i), fleet.QueueOptions{})
				per := b.N / n
				if i == 0 {
					per += b.N % n
				}
				batch := make([]tiny, 0, 1000)
				for j := 0; j < per; j++ {
					batch = append(batch, tiny{N: j})
					if len(batch) == cap(batch) || j == per-1 {
						if _, err := q.SubmitMany(ctx, batch); err != nil {
							b.Fatal(err)
						}
						batch = batch[:0]
					}
				}
				wqs = append(wqs, fleet.WeightedQueue[tiny]{Queue: q, Weight: 1 + i})
			}
			var done atomic.Int64
			all := make(chan struct{})
			h := fleet.BatchFunc[struct{}, struct{}, tiny](func(ctx context.Context, s *fleet.Slot[struct{}, struct{}], t *fleet.Task[tiny]) error {
				if done.Add(1) == int64(b.N) {
					close(all)
				}
				return nil
			})
			opts := fleet.WorkerOptions{Type: "bench", ID: "w", Slots: 8}
			var w *fleet.Worker
			if n == 1 {
				w = fleet.NewBatchWorker(e.F, opts, wqs[0].Queue, h)
			} else {
				w = fleet.NewPriorityWorker(e.F, opts, fleet.PriorityWeighted, wqs, h)
			}
			before, err := costmeter.Read(ctx, e.Raw)
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			if err := w.Start(ctx); err != nil {
				b.Fatal(err)
			}
			<-all
			b.StopTimer()
			after, _ := costmeter.Read(ctx, e.Raw)
			_ = w.Stop(ctx)
			cost := after.Since(before)
			b.ReportMetric(float64(cost.Calls["evalsha"])/float64(b.N), "scripts/task")
			b.ReportMetric(float64(cost.Commands())/float64(b.N), "cmds/task")
		})
	}
}

// BenchmarkRetainedResult: the server memory one retained result costs
// (QueueOptions.Retention), with a small result ({"links":42}) and with a
// 1 KiB one: INFO used_memory before and after deleting the b.N records
// left by b.N acks, per record; and MEMORY USAGE of one record's key.
func BenchmarkRetainedResult(b *testing.B) {
	for _, size := range []int{0, 1024} {
		b.Run(fmt.Sprintf("result=%dB", size), func(b *testing.B) {
			q, e := benchQueue[tiny](b, fleet.QueueOptions{Retention: time.Hour})
			ctx := context.Background()
			var result any = map[string]int{"links": 42}
			if size > 0 {
				result = strings.Repeat("x", size)
			}
			if _, err := q.SubmitMany(ctx, make([]tiny, b.N)); err != nil {
				b.Fatal(err)
			}
			var tasks []*fleet.Task[tiny]
			for len(tasks) < b.N {
				ts, err := q.Reserve(ctx, min(b.N-len(tasks), fleet.MaxReserve), 0)
				if err != nil {
					b.Fatal(err)
				}
				tasks = append(tasks, ts...)
			}
			b.ResetTimer()
			for _, t := range tasks {
				if err := t.SetResult(result); err != nil {
					b.Fatal(err)
				}
				if err := t.Ack(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			key := e.Prefix + "fleet:queue:bench:result:" + tasks[0].ID
			n, err := e.Raw.Do(ctx, e.Raw.B().MemoryUsage().Key(key).Build()).AsInt64()
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(n), "MEMORY-USAGE-B")
			mem1 := usedMemory(b, e)
			for _, t := range tasks {
				e.Raw.Do(ctx, e.Raw.B().Del().Key(e.Prefix+"fleet:queue:bench:result:"+t.ID).Build())
			}
			b.ReportMetric(float64(mem1-usedMemory(b, e))/float64(b.N), "used-B/result")
		})
	}
}
