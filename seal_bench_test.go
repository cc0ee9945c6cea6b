package fleet_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/fleettest"
)

type sealJob struct {
	Body string `json:"body"`
}

// BenchmarkSealedDrain: the cost of QueueOptions.Sealer (a Keyring) on a
// worker's drain, against the same queue unsealed, by turns in one run:
// b.N tasks submitted (sealed: submit-client-µs/task is this process's CPU
// per task for SubmitMany), then drained by a BatchWorker of 50 slots
// whose handler sets a result of the payload's size (sealed too);
// client-µs/task is this process's CPU per task for the drain.
//
//	go test -run '^$' -bench BenchmarkSealedDrain -benchtime 20000x -count 3 .
func BenchmarkSealedDrain(b *testing.B) {
	kr := keyring(b, newKey(b, "k1"))
	for _, size := range []struct {
		name string
		n    int
	}{{"64B", 64}, {"1KiB", 1024}} {
		for _, mode := range []struct {
			name   string
			sealer fleet.Sealer
		}{{"off", nil}, {"sealed", kr}} {
			b.Run(size.name+"/"+mode.name, func(b *testing.B) { benchSealedDrain(b, size.n, mode.sealer) })
		}
	}
}

func benchSealedDrain(b *testing.B, size int, sealer fleet.Sealer) {
	ctx := context.Background()
	srv, err := fleettest.StartServer(ctx, fleettest.Config{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(srv.Stop)
	f := costFleet(b, srv.URL())
	q := fleet.NewQueue[sealJob](f, "drain", fleet.QueueOptions{Sealer: sealer, Retention: time.Minute})
	batch := make([]sealJob, 500)
	for i := range batch {
		batch[i].Body = strings.Repeat("x", size-len(`{"body":""}`))
	}
	cpu0 := processCPU(b)
	for left := b.N; left > 0; left -= len(batch) {
		if _, err := q.SubmitMany(ctx, batch[:min(left, len(batch))]); err != nil {
			b.Fatal(err)
		}
	}
	submitCPU := processCPU(b) - cpu0
	var done atomic.Int64
	all := make(chan struct{})
	cpu0 = processCPU(b)
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
		fleet.BatchFunc[costCfg, costOut, sealJob](func(_ context.Context, _ *fleet.Slot[costCfg, costOut], t *fleet.Task[sealJob]) error {
			return t.SetResult(t.Payload.Body)
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
	b.ReportMetric(float64(submitCPU/time.Nanosecond)/1000/float64(b.N), "submit-client-µs/task")
	b.ReportMetric(float64((processCPU(b)-cpu0)/time.Nanosecond)/1000/float64(b.N), "client-µs/task")
}
