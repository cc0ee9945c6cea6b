package fleetotel_test

import (
	"context"
	"fmt"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/fleetotel"
)

// Crawl is the example's task payload.
type Crawl struct {
	URL string `json:"url" validate:"required,url"`
}

func Example() {
	ctx := context.Background()
	// The application's SDK: here an in-memory exporter and a manual reader.
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { _ = tp.Shutdown(ctx); _ = mp.Shutdown(ctx) }()

	tel, err := fleetotel.New(fleetotel.Options{TracerProvider: tp, MeterProvider: mp})
	if err != nil {
		fmt.Println(err)
		return
	}
	opts := targets[0].opts // fleet.Options{URL: "redis://..."}
	opts.Prefix, opts.Observer = "example-otel:", tel.Observer()
	f, err := fleet.Open(ctx, opts)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer f.Close()
	defer deletePrefix(nil, targets[0], opts.Prefix)

	q := fleet.NewQueue[Crawl](f, "crawl", fleet.QueueOptions{})
	done := make(chan struct{})
	w := fleet.NewBatchWorker(f, fleet.WorkerOptions{Type: "crawler", Slots: 1, Middleware: []fleet.Middleware{tel.Middleware()}}, q,
		fleet.BatchFunc[struct{}, struct{}, Crawl](func(ctx context.Context, _ *fleet.Slot[struct{}, struct{}], t *fleet.Task[Crawl]) error {
			defer close(done)
			return nil
		}))
	if err := w.Start(ctx); err != nil {
		fmt.Println(err)
		return
	}
	defer func() {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_ = w.Stop(sctx)
	}()
	if _, err := q.Submit(ctx, Crawl{URL: "https://example.com/"}); err != nil {
		fmt.Println(err)
		return
	}
	<-done
	for end := time.Now().Add(10 * time.Second); len(spans.GetSpans()) < 2 && time.Now().Before(end); {
		time.Sleep(time.Millisecond) // the handler span ends as the handler returns
	}
	// The two spans may end in either order (the handler can finish before
	// Submit returns): find them by name.
	byName := map[string]tracetest.SpanStub{}
	for _, s := range spans.GetSpans() {
		byName[s.Name] = s
	}
	sub, proc := byName["submit crawl"], byName["process crawl"]
	fmt.Println(sub.Name, "->", proc.Name, "same trace:", proc.Parent.SpanID() == sub.SpanContext.SpanID())

	var rm metricdata.ResourceMetrics
	_ = reader.Collect(ctx, &rm)
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if m.Name == "messaging.client.sent.messages" {
			fmt.Println(m.Name, m.Data.(metricdata.Sum[int64]).DataPoints[0].Value)
		}
	}
	// Output:
	// submit crawl -> process crawl same trace: true
	// messaging.client.sent.messages 1
}
