package fleet_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/fleet-go/fleet"
)

// A handler writes with the task's logger, fleet.Logger(ctx): its lines
// are kept with the task, one entry per run (written with the run's end,
// in one call), and shown by Lookup, fleetctl task get and the
// dashboard's task page. Here the first run fails and the second
// succeeds; the queue keeps records for an hour, and the log with them.
func ExampleLogger() {
	f, done := exampleFleet("logger")
	defer done()
	ctx := context.Background()

	type Page struct {
		URL string `json:"url" validate:"required,url"`
	}
	q := fleet.NewQueue[Page](f, "pages", fleet.QueueOptions{Retention: time.Hour, BackoffBase: time.Millisecond, BackoffMax: time.Millisecond})
	runs := 0
	w := fleet.NewBatchWorker(f, fleet.WorkerOptions{Type: "pages", ID: "w1", Slots: 1}, q,
		fleet.TaskFunc(func(ctx context.Context, p Page) error {
			runs++
			fleet.Logger(ctx).Info("fetching", "url", p.URL, "run", runs)
			if runs == 1 {
				fleet.Logger(ctx).Warn("upstream busy", "url", p.URL, "status", 503)
				return errors.New("503")
			}
			return nil
		}))
	if err := w.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer func() { _ = w.Stop(ctx) }()
	id, _ := q.Submit(ctx, Page{URL: "https://example.org/1"})
	rec, _ := q.Lookup(ctx, id)
	for rec.Status != fleet.TaskDone {
		time.Sleep(5 * time.Millisecond)
		rec, _ = q.Lookup(ctx, id)
	}
	for _, run := range rec.Logs {
		for _, l := range run.Lines {
			fmt.Printf("attempt %d on %s: %s %s %s\n", run.Attempt, run.Worker, l.Level, l.Message, l.Attrs["url"])
		}
	}
	// Output:
	// attempt 1 on pages|w1: INFO fetching "https://example.org/1"
	// attempt 1 on pages|w1: WARN upstream busy "https://example.org/1"
	// attempt 2 on pages|w1: INFO fetching "https://example.org/1"
}
