package fleet_test

import (
	"context"
	"encoding/json"
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

func ExampleWaitSignal() {
	f, done := exampleFleet("signal")
	defer done()
	ctx := context.Background()

	type Order struct {
		ID string `json:"id" validate:"required"`
	}
	orders := fleet.NewQueue[Order](f, "orders", fleet.QueueOptions{Retention: time.Hour})
	waiting := make(chan string, 1)
	w := fleet.NewBatchWorker(f, fleet.WorkerOptions{Type: "orders", ID: "w1", Slots: 1}, orders,
		fleet.BatchFunc[struct{}, struct{}, Order](func(ctx context.Context, s *fleet.Slot[struct{}, struct{}], t *fleet.Task[Order]) error {
			by, err := fleet.WaitSignal[string](ctx, t, "approved", 24*time.Hour)
			if err != nil {
				if errors.Is(err, fleet.ErrSuspended) {
					waiting <- t.ID
				}
				return err // parked until the signal comes, holding no slot
			}
			return t.SetResult("shipped " + t.Payload.ID + ", approved by " + by)
		}))
	if err := w.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer func() { _ = w.Stop(ctx) }()
	id, _ := orders.Submit(ctx, Order{ID: "o-17"})
	<-waiting
	// Any process: the parked task is made ready at once.
	if err := orders.Signal(ctx, id, "approved", "alice"); err != nil {
		log.Fatal(err)
	}
	result, err := fleet.ResultOf[string](ctx, orders, id, fleet.Await())
	fmt.Println(result, err)
	fmt.Println(errors.Is(orders.Signal(ctx, id, "approved", "bob"), fleet.ErrTaskFinished))
	// Output:
	// shipped o-17, approved by alice <nil>
	// true
}

func ExampleAwaitChildren() {
	f, done := exampleFleet("children")
	defer done()
	ctx := context.Background()

	type Report struct {
		Sites []string `json:"sites" validate:"required"`
	}
	type Fetch struct {
		Site string `json:"site" validate:"required"`
	}
	reports := fleet.NewQueue[Report](f, "reports", fleet.QueueOptions{Retention: time.Hour})
	fetches := fleet.NewQueue[Fetch](f, "fetches", fleet.QueueOptions{})
	rw := fleet.NewBatchWorker(f, fleet.WorkerOptions{Type: "reports", ID: "r1", Slots: 1}, reports,
		fleet.BatchFunc[struct{}, struct{}, Report](func(ctx context.Context, s *fleet.Slot[struct{}, struct{}], t *fleet.Task[Report]) error {
			var kids []fleet.Child
			for _, site := range t.Payload.Sites {
				c, err := fleet.StartChild(ctx, t, "fetch "+site, fetches, Fetch{Site: site}, fleet.SubmitOptions{})
				if err != nil {
					return err
				}
				kids = append(kids, c)
			}
			ends, err := fleet.AwaitChildren(ctx, t, "fetched", time.Hour, kids...)
			if err != nil {
				return err // parked until the last child ends
			}
			total := 0
			for _, e := range ends {
				var n int
				_ = json.Unmarshal(e.Result, &n)
				total += n
			}
			return t.SetResult(total)
		}))
	fw := fleet.NewBatchWorker(f, fleet.WorkerOptions{Type: "fetches", ID: "f1", Slots: 2}, fetches,
		fleet.BatchFunc[struct{}, struct{}, Fetch](func(ctx context.Context, s *fleet.Slot[struct{}, struct{}], t *fleet.Task[Fetch]) error {
			return t.SetResult(len(t.Payload.Site)) // the "bytes" fetched
		}))
	for _, w := range []*fleet.Worker{rw, fw} {
		if err := w.Start(ctx); err != nil {
			log.Fatal(err)
		}
		defer func() { _ = w.Stop(ctx) }()
	}
	id, _ := reports.Submit(ctx, Report{Sites: []string{"a.example", "bb.example"}})
	total, err := fleet.ResultOf[int](ctx, reports, id, fleet.Await())
	fmt.Println(total, err)
	// Output:
	// 19 <nil>
}
