package fleetotel_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/fleetotel"
)

// pipeline is a queue end to end on the single node: submitters, and a
// batch worker whose handler only counts.
type pipeline struct {
	q    *fleet.Queue[page]
	done atomic.Int64
	want atomic.Int64
	all  chan struct{} // receives when done reaches want
}

// Benchmark sizes: submitters push in parallel; the worker has slots.
const (
	benchSubmitters = 4
	benchSlots      = 8
	benchRound      = 250 // tasks per round of the ratio benchmark
)

// variant names how a pipeline is observed.
type variant string

const (
	bare    variant = "bare"     // no Observer, no middleware
	noop    variant = "noop"     // fleetotel over the no-op providers
	sdk     variant = "sdk"      // fleetotel over the SDK: every span sampled and batched to an exporter that discards it, every metric aggregated
	sampled variant = "sdk-10pc" // the same, but a tenth of the traces sampled (ParentBased(TraceIDRatioBased(0.1)))
)

func newPipeline(b *testing.B, v variant) *pipeline {
	b.Helper()
	var obs *fleet.Observer
	var mws []fleet.Middleware
	switch v {
	case noop, sdk, sampled:
		opts := fleetotel.Options{TracerProvider: tracenoop.NewTracerProvider(), MeterProvider: metricnoop.NewMeterProvider()}
		if v != noop {
			sampler := sdktrace.AlwaysSample()
			if v == sampled {
				sampler = sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0.1))
			}
			tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()), sdktrace.WithSampler(sampler))
			mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
			b.Cleanup(func() {
				_ = tp.Shutdown(context.Background())
				_ = mp.Shutdown(context.Background())
			})
			opts.TracerProvider, opts.MeterProvider = tp, mp
		}
		tel, err := fleetotel.New(opts)
		if err != nil {
			b.Fatal(err)
		}
		obs, mws = tel.Observer(), []fleet.Middleware{tel.Middleware()}
	}
	tg := targets[0]
	opts := tg.opts
	opts.Prefix, opts.Observer = fmt.Sprintf("otelbench%d:", prefixes.Add(1)), obs
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	f, err := fleet.Open(ctx, opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = f.Close()
		deletePrefix(b, tg, opts.Prefix)
	})
	p := &pipeline{q: fleet.NewQueue[page](f, "bench", fleet.QueueOptions{}), all: make(chan struct{}, 1)}
	w := fleet.NewBatchWorker(f, fleet.WorkerOptions{Type: "bench", ID: string(v), Slots: benchSlots, Middleware: mws}, p.q,
		fleet.BatchFunc[cfg, out, page](func(context.Context, *fleet.Slot[cfg, out], *fleet.Task[page]) error {
			if p.done.Add(1) == p.want.Load() {
				p.all <- struct{}{}
			}
			return nil
		}))
	if err := w.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = w.Stop(ctx)
	})
	return p
}

// cpuTime is the CPU time this process has used, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// run submits n tasks (benchSubmitters in parallel, one Submit each) and
// returns once the worker has handled them all, with the wall time and
// this process's CPU time it took.
func (p *pipeline) run(b *testing.B, n int) (wall, cpu time.Duration) {
	start, cpu0 := time.Now(), cpuTime()
	p.want.Store(p.done.Load() + int64(n))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	var next atomic.Int64
	for range benchSubmitters {
		wg.Go(func() {
			for next.Add(1) <= int64(n) {
				if _, err := p.q.Submit(ctx, page{URL: "https://example.com/"}); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	select {
	case <-p.all:
	case <-ctx.Done():
		b.Fatalf("handled %d of %d", p.done.Load(), p.want.Load())
	}
	return time.Since(start), cpuTime() - cpu0
}

// BenchmarkEndToEnd: submit, reserve, handle, ack, per task, without
// fleetotel and with it (no-op providers, and the SDK sampling every
// trace or a tenth of them).
func BenchmarkEndToEnd(b *testing.B) {
	for _, v := range []variant{bare, noop, sdk, sampled} {
		b.Run(string(v), func(b *testing.B) {
			p := newPipeline(b, v)
			p.run(b, 100) // warm up: connections, scripts
			b.ResetTimer()
			_, cpu := p.run(b, b.N)
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/task")
		})
	}
}

// BenchmarkEndToEndRatio runs the bare pipeline and one with fleetotel (over
// the no-op providers, and over the SDK sampling every trace or a tenth of
// them) in alternating rounds of benchRound tasks, so that both see the
// same machine, b.N tasks each, and reports the throughput with fleetotel
// over the throughput without it ("ratio"; the goal is at least 0.9). The
// "bare" case runs two bare pipelines: the noise floor, around 1.
func BenchmarkEndToEndRatio(b *testing.B) {
	for _, v := range []variant{bare, noop, sdk, sampled} {
		b.Run(string(v), func(b *testing.B) {
			pb, pv := newPipeline(b, bare), newPipeline(b, v)
			pb.run(b, 100)
			pv.run(b, 100)
			b.ResetTimer()
			var tb, tv, cb, cv time.Duration
			runBare := func(n int) { w, c := pb.run(b, n); tb, cb = tb+w, cb+c }
			runOtel := func(n int) { w, c := pv.run(b, n); tv, cv = tv+w, cv+c }
			for i, left := 0, b.N; left > 0; i, left = i+1, left-benchRound {
				n := min(left, benchRound)
				if i%2 == 0 { // each goes first every other round: the second one pays for the first one's tail
					runBare(n)
					runOtel(n)
				} else {
					runOtel(n)
					runBare(n)
				}
			}
			b.StopTimer()
			per := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / float64(b.N) }
			b.ReportMetric(per(tb), "bare-ns/task")
			b.ReportMetric(per(tv), "otel-ns/task")
			b.ReportMetric(per(cb), "bare-cpu-ns/task")
			b.ReportMetric(per(cv), "otel-cpu-ns/task")
			b.ReportMetric(tb.Seconds()/tv.Seconds(), "ratio")
		})
	}
}
