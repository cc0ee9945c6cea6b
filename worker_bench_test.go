package fleet_test

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/fleettest"
)

// Benchmarks of the worker runtime on the single node.
// Run: go test -run '^$' -bench 'Worker' -benchtime 2s .

// BenchmarkWorkerEmit: a loop worker with 50 slots emitting (stream push +
// emit event per output). ns/op is per emit across the slots.
func BenchmarkWorkerEmit(b *testing.B) {
	f, _ := benchFleet(b)
	var left atomic.Int64
	left.Store(int64(b.N))
	finished := make(chan struct{})
	var closed atomic.Bool
	w := fleet.NewLoopWorker(f, fleet.WorkerOptions{Type: "bench-emit", ID: "w", Slots: 50},
		fleet.LoopFunc[wcfg, benchOutput](func(ctx context.Context, s *fleet.Slot[wcfg, benchOutput]) error {
			for left.Add(-1) >= 0 {
				if _, err := s.Emit(ctx, benchOutput{"https://example.com/a", 200, 1234}); err != nil {
					return err
				}
			}
			if closed.CompareAndSwap(false, true) {
				close(finished)
			}
			<-ctx.Done()
			return nil
		}))
	b.ResetTimer()
	if err := w.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	<-finished
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "emits/s")
	_ = w.Stop(context.Background())
}

// BenchmarkWorkerConfigPropagation: the time from UpdateConfig returning to
// a slot seeing the new gen, through the client-side caching invalidation
// (no polling). Reports p50 and p99 in ms.
func BenchmarkWorkerConfigPropagation(b *testing.B) {
	f, _ := benchFleet(b)
	seen := make(chan int64, 1)
	w := fleet.NewLoopWorker(f, fleet.WorkerOptions{Type: "bench-cfg", ID: "w", Slots: 1},
		fleet.LoopFunc[wcfg, benchOutput](func(ctx context.Context, s *fleet.Slot[wcfg, benchOutput]) error {
			for {
				select {
				case <-ctx.Done():
					return nil
				case <-s.ConfigChanged():
					select {
					case seen <- s.Gen():
					default:
					}
				}
			}
		}))
	if err := w.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	defer w.Stop(context.Background())
	ctx := context.Background()
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		patch := json.RawMessage(`{"rate":` + strconv.Itoa(i%100) + `}`)
		gen, err := f.UpdateConfig(ctx, "bench-cfg", "w", patch)
		if err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		for g := int64(0); g < gen; {
			select {
			case g = <-seen:
			case <-time.After(10 * time.Second):
				b.Fatalf("gen %d not seen", gen)
			}
		}
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	slices.Sort(lat)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(ms(lat[len(lat)/2]), "p50-ms")
	b.ReportMetric(ms(lat[len(lat)*99/100]), "p99-ms")
}

// BenchmarkWorkerIdleCost: what a batch worker with 50 idle slots costs
// Redis, measured on a dedicated server as the delta of INFO stats
// total_commands_processed over 6 s (the INFO calls themselves taken off).
// Its figure is cmds/s; b.N does not matter.
func BenchmarkWorkerIdleCost(b *testing.B) {
	ctx := context.Background()
	srv, err := fleettest.StartServer(ctx, fleettest.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Stop()
	f, err := fleet.Open(ctx, fleet.Options{URL: srv.URL()})
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	q := fleet.NewQueue[job](f, "idle", fleet.QueueOptions{})
	w := fleet.NewBatchWorker(f, fleet.WorkerOptions{Type: "idle", ID: "w", Slots: 50}, q,
		fleet.BatchFunc[wcfg, out, job](func(ctx context.Context, s *fleet.Slot[wcfg, out], t *fleet.Task[job]) error { return nil }))
	if err := w.Start(ctx); err != nil {
		b.Fatal(err)
	}
	defer w.Stop(ctx)
	count := func() float64 {
		s, err := srv.Cli(ctx, "INFO", "stats")
		if err != nil {
			b.Fatal(err)
		}
		for _, l := range strings.Split(s, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(l), "total_commands_processed:"); ok {
				n, _ := strconv.ParseFloat(v, 64)
				return n
			}
		}
		b.Fatal("no total_commands_processed")
		return 0
	}
	time.Sleep(time.Second) // let Start's commands pass
	b.ResetTimer()
	for range b.N {
	}
	const window = 6 * time.Second
	c0 := count()
	time.Sleep(window)
	c1 := count()
	b.StopTimer()
	b.ReportMetric((c1-c0-1)/window.Seconds(), "cmds/s")
}

// BenchmarkWorkerDrain: a batch worker of 50 slots drains a queue of b.N
// tasks with a no-op handler, on a server of its own; ns/op is per task,
// and client-µs/task the process's CPU time per task over the drain (the
// client's work: what the worker costs beside Redis). With -benchmem,
// allocs/op and B/op are per task drained.
//
//	go test -run '^$' -bench BenchmarkWorkerDrain -benchtime 60000x -benchmem .
func BenchmarkWorkerDrain(b *testing.B) {
	srv, err := fleettest.StartServer(context.Background(), fleettest.Config{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(srv.Stop)
	f := costFleet(b, srv.URL())
	q := fleet.NewQueue[costJob](f, "drain", fleet.QueueOptions{})
	batch := make([]costJob, 1000)
	for left := b.N; left > 0; left -= len(batch) {
		if _, err := q.SubmitMany(context.Background(), batch[:min(left, len(batch))]); err != nil {
			b.Fatal(err)
		}
	}
	var done atomic.Int64
	all := make(chan struct{})
	cpu0 := processCPU(b)
	b.ResetTimer()
	startNoopWorker(b, f, q, "drain", 50, func() {
		if done.Add(1) == int64(b.N) {
			close(all)
		}
	})
	select {
	case <-all:
	case <-time.After(5 * time.Minute):
		b.Fatal("the drain did not end within 5 minutes")
	}
	b.StopTimer()
	b.ReportMetric(float64((processCPU(b)-cpu0)/time.Nanosecond)/1000/float64(b.N), "client-µs/task")
}

// processCPU is the CPU time this process has used (user and system).
func processCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkWorkerIdleWakeups: how many idle workers one task wakes. P
// workers, each on a Fleet of its own (as P processes would be), 4 slots
// each, sleep on one queue; tasks are submitted one at a time, each after
// the last was handled, so that every worker is asleep at each submit.
// takes/task counts the reserve scripts that ran (one LPOP each), of which
// one finds the task; server-µs/task is the server's CPU per task.
//
//	go test -run '^$' -bench BenchmarkWorkerIdleWakeups -benchtime 300x .
func BenchmarkWorkerIdleWakeups(b *testing.B) {
	for _, p := range []int{1, 4} {
		b.Run(strconv.Itoa(p)+"-workers", func(b *testing.B) { benchIdleWakeups(b, p) })
	}
}

func benchIdleWakeups(b *testing.B, p int) {
	ctx := context.Background()
	srv, err := fleettest.StartServer(ctx, fleettest.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Stop()
	open := func() *fleet.Fleet {
		f, err := fleet.Open(ctx, fleet.Options{URL: srv.URL()})
		if err != nil {
			b.Fatal(err)
		}
		return f
	}
	var handled atomic.Int64
	for i := range p {
		f := open()
		defer f.Close()
		w := fleet.NewBatchWorker(f, fleet.WorkerOptions{Type: "wake", ID: strconv.Itoa(i), Slots: 4}, fleet.NewQueue[job](f, "wake", fleet.QueueOptions{}),
			fleet.BatchFunc[wcfg, out, job](func(context.Context, *fleet.Slot[wcfg, out], *fleet.Task[job]) error { handled.Add(1); return nil }))
		if err := w.Start(ctx); err != nil {
			b.Fatal(err)
		}
		defer w.Stop(ctx)
	}
	sf := open()
	defer sf.Close()
	q := fleet.NewQueue[job](sf, "wake", fleet.QueueOptions{})
	submit := func(i int) {
		want := handled.Load() + 1
		if _, err := q.Submit(ctx, jobN(i)); err != nil {
			b.Fatal(err)
		}
		for handled.Load() < want {
			time.Sleep(50 * time.Microsecond)
		}
		time.Sleep(2 * time.Millisecond) // every worker back asleep
	}
	for i := range 20 { // warm: scripts loaded, every worker armed
		submit(i)
	}
	s0 := ownStats(b, srv)
	b.ResetTimer()
	for i := range b.N {
		submit(i)
	}
	b.StopTimer()
	c := ownStats(b, srv).Since(s0)
	b.ReportMetric(float64(c.Calls["lpop"])/float64(b.N), "takes/task")
	b.ReportMetric(float64(c.CPU.Microseconds())/float64(b.N), "server-µs/task")
	b.ReportMetric(float64(c.Commands())/float64(b.N), "cmds/task")
}
