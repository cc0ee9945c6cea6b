package fleet_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fleet-go/fleet"
)

// Harvest is a task payload; validate tags are checked on submit.
type Harvest struct {
	URL   string `json:"url" validate:"required,url"`
	Depth int    `json:"depth" validate:"gte=0,lte=5"`
}

func ExampleNewQueue() {
	f, done := exampleFleet("queue")
	defer done()
	ctx := context.Background()
	q := fleet.NewQueue[Harvest](f, "harvester", fleet.QueueOptions{Lease: time.Minute})

	if _, err := q.Submit(ctx, Harvest{URL: "https://example.com", Depth: 1}); err != nil {
		panic(err)
	}
	_, err := q.Submit(ctx, Harvest{URL: "not a url", Depth: 9})
	fmt.Println(errors.Is(err, fleet.ErrInvalidPayload), err)

	tasks, err := q.Reserve(ctx, 10, time.Second)
	if err != nil {
		panic(err)
	}
	for _, t := range tasks {
		fmt.Println("harvest", t.Payload.URL, "attempt", t.Attempts+1)
		if err := t.Ack(ctx); err != nil {
			panic(err)
		}
	}
	st, _ := q.Stats(ctx)
	fmt.Printf("%+v\n", st)
	// Output:
	// true fleet: submit "harvester": fleet: invalid task payload: url (fails url), depth (fails lte=5)
	// harvest https://example.com attempt 1
	// {Pending:0 InFlight:0 Scheduled:0 Dead:0 Paused:false}
}

func ExampleFleet_RunSweeper() {
	f, done := exampleFleet("sweeper")
	defer done()
	ctx, cancel := context.WithCancel(context.Background())
	q := fleet.NewQueue[Harvest](f, "crawl", fleet.QueueOptions{Lease: 100 * time.Millisecond})

	// The host runs one sweeper (or several: they never duplicate a task).
	swept := make(chan error)
	go func() { swept <- f.RunSweeper(ctx, fleet.SweeperOptions{Interval: 50 * time.Millisecond}) }()

	q.Submit(ctx, Harvest{URL: "https://example.com/a"})
	q.Reserve(ctx, 1, 0) // a worker takes the task and crashes

	tasks, _ := q.Reserve(ctx, 1, 5*time.Second) // the sweeper brings it back
	fmt.Println("redelivered", tasks[0].Payload.URL, "attempts", tasks[0].Attempts)
	tasks[0].Ack(ctx)

	cancel()
	fmt.Println("sweeper returned", <-swept)
	// Output:
	// redelivered https://example.com/a attempts 1
	// sweeper returned <nil>
}
