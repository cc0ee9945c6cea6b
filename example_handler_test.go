package fleet_test

import (
	"context"
	"fmt"
	"log"
	"sync/atomic"
	"time"

	"github.com/fleet-go/fleet"
)

func ExampleTaskFunc() {
	f, done := exampleFleet("handler")
	defer done()
	ctx := context.Background()

	type Ping struct {
		Host string `json:"host" validate:"required,hostname"`
	}
	var pinged atomic.Int64
	q := fleet.NewQueue[Ping](f, "pings", fleet.QueueOptions{})
	// No config type, no output type: a function of the payload.
	w := fleet.NewBatchWorker(f, fleet.WorkerOptions{Type: "pings", ID: "w1", Slots: 2}, q,
		fleet.TaskFunc(func(ctx context.Context, p Ping) error {
			pinged.Add(1)
			return nil // acked
		}))
	if err := w.Start(ctx); err != nil {
		log.Fatal(err)
	}
	_, _ = q.SubmitMany(ctx, []Ping{{Host: "example.org"}, {Host: "example.net"}})
	for w.Stats().Done < 2 {
		time.Sleep(5 * time.Millisecond)
	}
	_ = w.Stop(ctx)
	fmt.Println(pinged.Load(), w.Stats().Done)
	// Output: 2 2
}
