package fleet_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/fleet-go/fleet"
)

// BenchmarkStepDrain: what durable steps cost, by turns in one run: b.N
// tasks drained by a BatchWorker of 50 slots whose handler does the same
// ten pieces of work plainly ("plain") or as ten fleet.Steps ("steps",
// each recorded: its task's first run). cmds/task and redis-µs/task are
// the server's commands and CPU per task (submits excluded); the extra per
// step is (steps - plain) / 10. A step costs one script call (its record),
// and a run's first Step one more (the read of the recorded steps).
//
//	go test -run '^$' -bench BenchmarkStepDrain -benchtime 5000x -count 3 .
func BenchmarkStepDrain(b *testing.B) {
	for _, mode := range []string{"plain", "steps"} {
		b.Run(mode, func(b *testing.B) {
			benchDrain(b, fleet.QueueOptions{}, func(f *fleet.Fleet, q *fleet.Queue[sealJob], onEnd func(string, error)) *fleet.Worker {
				return fleet.NewBatchWorker(f, fleet.WorkerOptions{Type: "drain", ID: "w", Slots: 50, OnTaskEnd: onEnd}, q,
					fleet.BatchFunc[costCfg, costOut, sealJob](func(ctx context.Context, _ *fleet.Slot[costCfg, costOut], t *fleet.Task[sealJob]) error {
						for i := range 10 {
							work := func(context.Context) (int, error) { return len(t.Payload.Body) + i, nil }
							if mode == "plain" {
								_, _ = work(ctx)
								continue
							}
							if _, err := fleet.Step(ctx, t, "s"+strconv.Itoa(i), work); err != nil {
								return err
							}
						}
						return nil
					}))
			})
		})
	}
}
