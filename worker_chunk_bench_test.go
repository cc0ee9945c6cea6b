package fleet_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/fleettest"
)

// BenchmarkChunkDrain: a chunk worker's drain against a batch worker's, by
// turns in one run: b.N tasks (10,000 with the command below) drained by
// a BatchWorker of 50 slots, and by a ChunkWorker of 4 slots taking chunks
// of 100 (MaxWait 10 ms). tasks/s is the drain's rate, client-µs/task this
// process's CPU per task, redis-µs/task and cmds/task the server's CPU and
// commands per task (submits excluded).
//
//	go test -run '^$' -bench BenchmarkChunkDrain -benchtime 10000x -count 3 .
func BenchmarkChunkDrain(b *testing.B) {
	b.Run("batch", func(b *testing.B) {
		benchDrain(b, fleet.QueueOptions{}, func(f *fleet.Fleet, q *fleet.Queue[sealJob], onEnd func(string, error)) *fleet.Worker {
			return fleet.NewBatchWorker(f, fleet.WorkerOptions{Type: "drain", ID: "w", Slots: 50, OnTaskEnd: onEnd}, q,
				fleet.BatchFunc[costCfg, costOut, sealJob](func(ctx context.Context, _ *fleet.Slot[costCfg, costOut], t *fleet.Task[sealJob]) error {
					return nil
				}))
		})
	})
	b.Run("chunk", func(b *testing.B) {
		benchDrain(b, fleet.QueueOptions{}, func(f *fleet.Fleet, q *fleet.Queue[sealJob], onEnd func(string, error)) *fleet.Worker {
			return fleet.NewChunkWorker(f, fleet.WorkerOptions{Type: "drain", ID: "w", Slots: 4, OnTaskEnd: onEnd}, q,
				fleet.ChunkOptions{MinSize: 100, MaxSize: 100, MaxWait: 10 * time.Millisecond},
				fleet.ChunkFunc[costCfg, costOut, sealJob](func(ctx context.Context, _ *fleet.Slot[costCfg, costOut], c *fleet.Chunk[sealJob]) error {
					return nil
				}))
		})
	})
}

// benchDrain submits b.N tasks to a queue with opts, then times their
// drain by the worker that mk makes (BenchmarkChunkDrain,
// BenchmarkTaskLogDrain, BenchmarkStepDrain). cmds/task counts every
// command the server ran, the scripts' own commands included;
// scripts/task the script calls (EVALSHA, EVAL) that clients sent.
func benchDrain(b *testing.B, opts fleet.QueueOptions, mk func(f *fleet.Fleet, q *fleet.Queue[sealJob], onEnd func(string, error)) *fleet.Worker) {
	ctx := context.Background()
	srv, err := fleettest.StartServer(ctx, fleettest.Config{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(srv.Stop)
	f := costFleet(b, srv.URL())
	q := fleet.NewQueue[sealJob](f, "drain", opts)
	batch := make([]sealJob, 500)
	for i := range batch {
		batch[i].Body = "page"
	}
	for left := b.N; left > 0; left -= len(batch) {
		if _, err := q.SubmitMany(ctx, batch[:min(left, len(batch))]); err != nil {
			b.Fatal(err)
		}
	}
	var done atomic.Int64
	all := make(chan struct{})
	onEnd := func(id string, err error) {
		if err != nil {
			b.Error(id, err)
		}
		if done.Add(1) == int64(b.N) {
			close(all)
		}
	}
	cmds0, rcpu0 := serverCounters(b, srv)
	scripts0 := ownStats(b, srv).Calls
	cpu0 := processCPU(b)
	start := time.Now()
	b.ResetTimer()
	w := mk(f, q, onEnd)
	if err := w.Start(ctx); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = w.Stop(context.Background()) })
	select {
	case <-all:
	case <-time.After(5 * time.Minute):
		b.Fatal("the drain did not end within 5 minutes")
	}
	b.StopTimer()
	took := time.Since(start)
	cmds1, rcpu1 := serverCounters(b, srv)
	scripts1 := ownStats(b, srv).Calls
	b.ReportMetric(float64(b.N)/took.Seconds(), "tasks/s")
	b.ReportMetric(float64((processCPU(b)-cpu0)/time.Nanosecond)/1000/float64(b.N), "client-µs/task")
	b.ReportMetric((rcpu1-rcpu0)*1e6/float64(b.N), "redis-µs/task")
	b.ReportMetric(float64(cmds1-cmds0)/float64(b.N), "cmds/task")
	b.ReportMetric(float64(scripts1["evalsha"]+scripts1["eval"]-scripts0["evalsha"]-scripts0["eval"])/float64(b.N), "scripts/task")
}
