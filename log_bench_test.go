package fleet_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/fleettest"
)

// BenchmarkTaskLogDrain: the cost of per-task logs on a worker's drain,
// by turns in one run: b.N tasks drained by a BatchWorker of 50 slots
// whose handler gives the task's logger 10 lines, on a queue that keeps
// records (Retention, so each run's log is written) with logs off
// (Logs.Lines < 0: the lines are discarded) and on, and on a queue that
// keeps no records (the ack writes no log: the lines cost this process
// only). client-µs/task is this process's CPU per task, redis-µs/task and
// cmds/task the server's CPU and commands per task (submits excluded).
//
//	go test -run '^$' -bench BenchmarkTaskLogDrain -benchtime 10000x -count 3 .
func BenchmarkTaskLogDrain(b *testing.B) {
	for _, mode := range []struct {
		name string
		opts fleet.QueueOptions
	}{
		{"off", fleet.QueueOptions{Retention: time.Minute, Logs: fleet.LogOptions{Lines: -1}}},
		{"on", fleet.QueueOptions{Retention: time.Minute}},
		{"on-no-record", fleet.QueueOptions{}},
	} {
		b.Run(mode.name, func(b *testing.B) { benchTaskLogDrain(b, mode.opts) })
	}
}

func benchTaskLogDrain(b *testing.B, opts fleet.QueueOptions) {
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
	cmds0, rcpu0 := serverCounters(b, srv)
	cpu0 := processCPU(b)
	b.ResetTimer()
	w := fleet.NewBatchWorker(f, fleet.WorkerOptions{Type: "drain", ID: "w", Slots: 50,
		OnTaskEnd: func(id string, err error) {
			if err != nil {
				b.Error(id, err)
			}
			if done.Add(1) == int64(b.N) {
				close(all)
			}
		}}, q,
		fleet.BatchFunc[costCfg, costOut, sealJob](func(ctx context.Context, _ *fleet.Slot[costCfg, costOut], t *fleet.Task[sealJob]) error {
			log := fleet.Logger(ctx)
			for i := range 10 {
				log.Info("fetched", "page", t.Payload.Body, "i", i, "status", 200)
			}
			return nil
		}))
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
	cmds1, rcpu1 := serverCounters(b, srv)
	b.ReportMetric(float64((processCPU(b)-cpu0)/time.Nanosecond)/1000/float64(b.N), "client-µs/task")
	b.ReportMetric((rcpu1-rcpu0)*1e6/float64(b.N), "redis-µs/task")
	b.ReportMetric(float64(cmds1-cmds0)/float64(b.N), "cmds/task")
}
