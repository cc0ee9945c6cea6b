package fleet_test

import (
	"context"
	"fmt"
	"log"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/internal/redistest"
)

func ExampleObserver() {
	url, err := redistest.SingleURLOrErr()
	if err != nil {
		log.Fatal(err)
	}
	const prefix = "example-observer:"
	redistest.DeletePrefix(url, prefix)
	defer redistest.DeletePrefix(url, prefix)
	ctx := context.Background()
	obs := &fleet.Observer{
		// Carry a trace context in each new task's body (fleetotel injects
		// the submit span's here), and hear how the submit went.
		Submit: func(ctx context.Context, e fleet.SubmitEvent) (map[string]string, func(int, error)) {
			return map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
				func(n int, err error) { fmt.Println("submitted to", e.Queue+":", n, err) }
		},
		TaskEnded: func(ctx context.Context, e fleet.TaskEndEvent) { fmt.Println("ended:", e.Outcome) },
	}
	f, err := fleet.Open(ctx, fleet.Options{URL: url, Prefix: prefix, Observer: obs})
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	q := fleet.NewQueue[string](f, "observed", fleet.QueueOptions{})
	if _, err := q.Submit(ctx, "hello"); err != nil {
		log.Fatal(err)
	}
	tasks, err := q.Reserve(ctx, 1, 0)
	if err != nil || len(tasks) != 1 {
		log.Fatal(err)
	}
	_ = tasks[0].Ack(ctx)
	// Output:
	// submitted to observed: 1 <nil>
	// ended: processed
}
