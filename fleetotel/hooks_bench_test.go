package fleetotel_test

import (
	"context"
	"testing"

	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/fleetotel"
)

// BenchmarkHooks: the CPU that fleetotel adds to one task, without Redis:
// the submit hook (span, trace context), the handler middleware (span,
// duration) and the ack's count, over the SDK. cpu-ns/op is the process's
// CPU time per task, the SDK's batching goroutine and the GC included.
func BenchmarkHooks(b *testing.B) {
	for _, v := range []variant{noop, sdk, sampled} {
		b.Run(string(v), func(b *testing.B) {
			opts := fleetotel.Options{TracerProvider: tracenoop.NewTracerProvider(), MeterProvider: metricnoop.NewMeterProvider()}
			if v != noop {
				sampler := sdktrace.AlwaysSample()
				if v == sampled {
					sampler = sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0.1))
				}
				tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()), sdktrace.WithSampler(sampler))
				mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
				defer func() { _ = tp.Shutdown(context.Background()); _ = mp.Shutdown(context.Background()) }()
				opts.TracerProvider, opts.MeterProvider = tp, mp
			}
			tel, err := fleetotel.New(opts)
			if err != nil {
				b.Fatal(err)
			}
			obs := tel.Observer()
			h := tel.Middleware()(func(context.Context, fleet.TaskInfo) error { return nil })
			ctx := context.Background()
			ids := []string{"0193a5c4-7e1f-7cc0-8d52-3b7e1e0f6a11"}
			b.ReportAllocs()
			cpu0 := cpuTime()
			for b.Loop() {
				tr, done := obs.Submit(ctx, fleet.SubmitEvent{Queue: "bench", IDs: ids})
				done(1, nil)
				_ = h(ctx, fleet.TaskInfo{Queue: "bench", ID: ids[0], Trace: tr})
				obs.TaskEnded(ctx, fleet.TaskEndEvent{Queue: "bench", ID: ids[0], Outcome: fleet.TaskProcessed})
			}
			b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
		})
	}
}
