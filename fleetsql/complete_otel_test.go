package fleetsql_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/fleetsql"
)

// recSpan is a span that keeps its attributes: what a tracer's span in
// the handler's ctx (fleetotel's worker middleware puts one there) is told.
type recSpan struct {
	noop.Span
	mu    sync.Mutex
	attrs map[attribute.Key]string
}

func (s *recSpan) IsRecording() bool { return true }

func (s *recSpan) SetAttributes(kv ...attribute.KeyValue) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, a := range kv {
		s.attrs[a.Key] = a.Value.String()
	}
}

func (s *recSpan) get(k string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.attrs[attribute.Key(k)]
}

// The handler's span says how the task was completed: "sql" when its
// transaction wrote the completion, "sql-found" when a delivery found it
// done and acked it without running the handler.
func TestCompleteSpanAttribute(t *testing.T) {
	forEach(t, func(t *testing.T, d fleetsql.Dialect) {
		o, db, _ := newOutbox(t, d)
		makeShipments(t, db, d)
		f, _ := openFleet(t, sharedRedis(t).URL())
		q := fleet.NewQueue[Ship](f, ships, fleet.QueueOptions{})
		if _, err := q.Submit(context.Background(), Ship{Order: 1}); err != nil {
			t.Fatal(err)
		}
		tk := reserveOne(t, q)
		h := fleetsql.Once(o, fleet.BatchFunc[struct{}, struct{}, Ship](func(ctx context.Context, _ *fleet.Slot[struct{}, struct{}], tk *fleet.Task[Ship]) error {
			return ship(ctx, db, o, tk, "w", nil)
		}))
		for _, want := range []string{"sql", "sql-found"} {
			span := &recSpan{attrs: map[attribute.Key]string{}}
			ctx, cancel := context.WithTimeout(trace.ContextWithSpan(context.Background(), span), 10*time.Second)
			err := h.Handle(ctx, nil, tk)
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			if got := span.get(fleetsql.SpanAttribute); got != want {
				t.Errorf("%s = %q, want %q", fleetsql.SpanAttribute, got, want)
			}
		}
		if err := tk.Ack(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got := shipments(t, db); len(got) != 1 {
			t.Fatalf("shipments: %v", got)
		}
	})
}
