package fleet_test

import (
	"context"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
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
		b.Run(mode.name, func(b *testing.B) {
			benchDrain(b, mode.opts, func(f *fleet.Fleet, q *fleet.Queue[sealJob], onEnd func(string, error)) *fleet.Worker {
				return fleet.NewBatchWorker(f, fleet.WorkerOptions{Type: "drain", ID: "w", Slots: 50, OnTaskEnd: onEnd}, q,
					fleet.BatchFunc[costCfg, costOut, sealJob](func(ctx context.Context, _ *fleet.Slot[costCfg, costOut], t *fleet.Task[sealJob]) error {
						log := fleet.Logger(ctx)
						for i := range 10 {
							log.Info("fetched", "page", t.Payload.Body, "i", i, "status", 200)
						}
						return nil
					}))
			})
		})
	}
}
