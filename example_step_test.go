package fleet_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"sync/atomic"
	"time"

	"github.com/fleet-go/fleet"
)

// A durable handler marks its work as steps: a step that succeeded is not
// run again when the task runs again, which gets its recorded result. Here
// the login succeeds and the fetch fails in the first run; the retry
// logs in no more, fetches, then sleeps: the task leaves its slot
// (uncounted) and comes back when the sleep ends, its steps memoized.
func ExampleStep() {
	f, done := exampleFleet("step")
	defer done()
	ctx := context.Background()

	type Harvest struct {
		Account string `json:"account" validate:"required"`
	}
	q := fleet.NewQueue[Harvest](f, "harvests", fleet.QueueOptions{Retention: time.Hour, BackoffBase: time.Millisecond, BackoffMax: time.Millisecond})
	var logins, fetches atomic.Int32
	w := fleet.NewBatchWorker(f, fleet.WorkerOptions{Type: "harvester", ID: "w1", Slots: 1}, q,
		fleet.BatchFunc[struct{}, struct{}, Harvest](func(ctx context.Context, s *fleet.Slot[struct{}, struct{}], t *fleet.Task[Harvest]) error {
			cookie, err := fleet.Step(ctx, t, "login", func(ctx context.Context) (string, error) {
				logins.Add(1)
				return "session-of-" + t.Payload.Account, nil
			})
			if err != nil {
				return err
			}
			pages, err := fleet.Step(ctx, t, "fetch", func(ctx context.Context) (int, error) {
				if fetches.Add(1) == 1 {
					return 0, errors.New("503")
				}
				return 50, nil
			})
			if err != nil {
				return err
			}
			if err := fleet.Sleep(ctx, t, "cool-down", 50*time.Millisecond); err != nil {
				return err // parked until then, holding no slot
			}
			return t.SetResult(fmt.Sprintf("%d pages with %s", pages, cookie))
		}))
	if err := w.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer func() { _ = w.Stop(ctx) }()
	id, _ := q.Submit(ctx, Harvest{Account: "acme"})
	rec, _ := q.Lookup(ctx, id)
	for rec.Status != fleet.TaskDone {
		time.Sleep(5 * time.Millisecond)
		rec, _ = q.Lookup(ctx, id)
	}
	fmt.Printf("result %s after %d login(s) and %d fetch(es)\n", rec.Result, logins.Load(), fetches.Load())
	for _, st := range rec.Steps {
		fmt.Printf("step %d %s: %s\n", st.Index, st.Name, st.State)
	}
	// Output:
	// result "50 pages with session-of-acme" after 1 login(s) and 2 fetch(es)
	// step 0 login: done
	// step 1 fetch: done
	// step 2 cool-down: sleep
}
