package fleet_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/fleettest"
)

// BenchmarkStepDrain: what durable steps cost, by turns in one run: b.N
// tasks drained by a BatchWorker of 50 slots whose handler does the same
// ten pieces of work plainly ("plain") or as ten fleet.Steps ("steps",
// each recorded: its task's first run). cmds/task, scripts/task and
// redis-µs/task are the server's commands (the scripts' own included),
// the script calls sent, and its CPU per task (submits excluded); the
// extra per step is (steps - plain) / 10. A step costs one script call (its record);
// a later run's first Step costs one more (the read of the recorded steps),
// a first run's none.
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

// BenchmarkSleepingTasks: what parked durable tasks cost Redis. b.N tasks
// each record a step and sleep for an hour ("sleep"), or wait an hour for
// a signal ("wait"), and a worker of 50 slots parks them; then, with the worker still running, the server's commands per
// second over 3 s ("sleep-cmds/s": its heartbeats and nothing per task),
// and its used_memory per parked task ("bytes/task": the body in
// :scheduled, and the steps hash, which holds a copy of the body for a
// signal to find it) beside a plain task scheduled an hour out
// ("plain-bytes/task", measured the same way on the same server first).
//
//	go test -run '^$' -bench BenchmarkSleepingTasks -benchtime 100000x .
func BenchmarkSleepingTasks(b *testing.B) {
	for _, mode := range []string{"sleep", "wait"} {
		b.Run(mode, func(b *testing.B) { benchParked(b, mode) })
	}
}

func benchParked(b *testing.B, mode string) {
	ctx := context.Background()
	srv, err := fleettest.StartServer(ctx, fleettest.Config{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(srv.Stop)
	f := costFleet(b, srv.URL())
	c := f.Client()
	used := func() int64 {
		info, err := c.Do(ctx, c.B().Info().Section("memory").Build()).ToString()
		if err != nil {
			b.Fatal(err)
		}
		for _, l := range strings.Split(info, "\r\n") {
			if v, ok := strings.CutPrefix(l, "used_memory:"); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				return n
			}
		}
		b.Fatal("no used_memory")
		return 0
	}
	submit := func(q *fleet.Queue[sealJob], opts fleet.SubmitOptions) {
		batch := make([]fleet.Submission[sealJob], 500)
		for i := range batch {
			batch[i] = fleet.Submission[sealJob]{Payload: sealJob{Body: "page"}, Options: opts}
		}
		for left := b.N; left > 0; left -= len(batch) {
			if _, err := q.SubmitManyWith(ctx, batch[:min(left, len(batch))]); err != nil {
				b.Fatal(err)
			}
		}
	}
	plain := fleet.NewQueue[sealJob](f, "plain", fleet.QueueOptions{})
	m0 := used()
	submit(plain, fleet.SubmitOptions{NotBefore: time.Now().Add(time.Hour)})
	plainBytes := float64(used()-m0) / float64(b.N)

	q := fleet.NewQueue[sealJob](f, "sleepers", fleet.QueueOptions{})
	var parked atomic.Int64
	all := make(chan struct{})
	w := fleet.NewBatchWorker(f, fleet.WorkerOptions{Type: "sleepers", ID: "w", Slots: 50}, q,
		fleet.BatchFunc[costCfg, costOut, sealJob](func(ctx context.Context, _ *fleet.Slot[costCfg, costOut], t *fleet.Task[sealJob]) error {
			if _, err := fleet.Step(ctx, t, "fetch", func(context.Context) (int, error) { return len(t.Payload.Body), nil }); err != nil {
				return err
			}
			var err error
			if mode == "sleep" {
				err = fleet.Sleep(ctx, t, "nap", time.Hour)
			} else {
				_, err = fleet.WaitSignal[int](ctx, t, "go", time.Hour)
			}
			if errors.Is(err, fleet.ErrSuspended) && parked.Add(1) == int64(b.N) {
				close(all)
			}
			return err
		}))
	if err := w.Start(ctx); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = w.Stop(context.Background()) })
	m1 := used()
	b.ResetTimer()
	submit(q, fleet.SubmitOptions{})
	select {
	case <-all:
	case <-time.After(10 * time.Minute):
		b.Fatal("the tasks were not all parked within 10 minutes")
	}
	b.StopTimer()
	// The last snoozes follow their handlers' returns: wait until none is
	// in flight.
	for {
		n, err := c.Do(ctx, c.B().Zcard().Key("fleet:queue:sleepers:processing").Build()).AsInt64()
		if err != nil {
			b.Fatal(err)
		}
		if n == 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	bytes := float64(used()-m1) / float64(b.N)
	cmds0, _ := serverCounters(b, srv)
	time.Sleep(3 * time.Second)
	cmds1, _ := serverCounters(b, srv)
	b.ReportMetric(bytes, "bytes/task")
	b.ReportMetric(plainBytes, "plain-bytes/task")
	b.ReportMetric(float64(cmds1-cmds0)/3, "sleep-cmds/s")
}

// BenchmarkSignalLatency: from a signal to the start of the handler's run
// that it resumes. b.N tasks, one at a time: each parks waiting for a
// signal (a worker of 4 slots), then a second Fleet (its own connections,
// as another process) sends it; "p50-ms" and "p99-ms" are the times from
// the Signal call to the resumed run's start.
//
//	go test -run '^$' -bench BenchmarkSignalLatency -benchtime 300x -count 3 .
func BenchmarkSignalLatency(b *testing.B) {
	ctx := context.Background()
	srv, err := fleettest.StartServer(ctx, fleettest.Config{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(srv.Stop)
	f := costFleet(b, srv.URL())
	sender := costFleet(b, srv.URL())
	c := f.Client()
	q := fleet.NewQueue[sealJob](f, "sig", fleet.QueueOptions{})
	sq := fleet.NewQueue[sealJob](sender, "sig", fleet.QueueOptions{})
	parked := make(chan string, 1)
	resumed := make(chan time.Time, 1)
	w := fleet.NewBatchWorker(f, fleet.WorkerOptions{Type: "sig", ID: "w", Slots: 4}, q,
		fleet.BatchFunc[costCfg, costOut, sealJob](func(ctx context.Context, _ *fleet.Slot[costCfg, costOut], t *fleet.Task[sealJob]) error {
			start := time.Now()
			_, err := fleet.WaitSignal[int](ctx, t, "go", time.Hour)
			switch {
			case errors.Is(err, fleet.ErrSuspended):
				parked <- t.ID
			case err == nil:
				resumed <- start
			}
			return err
		}))
	if err := w.Start(ctx); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = w.Stop(context.Background()) })
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		if _, err := q.Submit(ctx, sealJob{Body: "x"}); err != nil {
			b.Fatal(err)
		}
		id := <-parked
		// Wait for the park itself (the snooze follows the handler's return).
		for {
			n, err := c.Do(ctx, c.B().Hexists().Key("fleet:queue:sig:steps:"+id).Field("\xffpark").Build()).AsInt64()
			if err != nil {
				b.Fatal(err)
			}
			if n == 1 {
				break
			}
			time.Sleep(200 * time.Microsecond)
		}
		t0 := time.Now()
		if err := sq.Signal(ctx, id, "go", 1); err != nil {
			b.Fatal(err)
		}
		select {
		case start := <-resumed:
			lat = append(lat, start.Sub(t0))
		case <-time.After(10 * time.Second):
			b.Fatal("a signalled task did not resume within 10 s")
		}
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2])/1e6, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100])/1e6, "p99-ms")
}
