package fleet_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/internal/redistest"
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
	// true fleet: submit "harvester": invalid task payload: url (fails url), depth (fails lte=5)
	// harvest https://example.com attempt 1
	// {Pending:0 Prioritized:0 Grouped:0 InFlight:0 Scheduled:0 Dead:0 Waiting:0 Paused:false Latency:0s}
}

func ExampleFleet_RunSweeper() {
	f, done := exampleFleet("sweeper")
	defer done()
	ctx, cancel := context.WithCancel(context.Background())
	q := fleet.NewQueue[Harvest](f, "crawl", fleet.QueueOptions{Lease: 500 * time.Millisecond})

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

// A hot queue spread over 4 shards (QueueOptions.Shards, tagged layout):
// tasks with the same ShardKey keep their order; Stats sees one queue.
func ExampleQueueOptions_shards() {
	f, done := exampleFleetTagged("shards")
	defer done()
	ctx := context.Background()

	type Event struct {
		User string `json:"user"`
		Seq  int    `json:"seq"`
	}
	q := fleet.NewQueue[Event](f, "events", fleet.QueueOptions{Shards: 4})
	for seq := range 3 {
		for _, user := range []string{"ann", "bob"} {
			_, _ = q.SubmitWith(ctx, Event{User: user, Seq: seq}, fleet.SubmitOptions{ShardKey: user})
		}
	}
	st, _ := q.Stats(ctx)
	fmt.Println("pending:", st.Pending)
	next := map[string]int{}
	for n := 0; n < 6; {
		tasks, _ := q.Reserve(ctx, 6, time.Second)
		for _, t := range tasks {
			if t.Payload.Seq != next[t.Payload.User] {
				fmt.Println("out of order")
			}
			next[t.Payload.User]++
			_ = t.Ack(ctx)
			n++
		}
	}
	fmt.Println("ann:", next["ann"], "bob:", next["bob"])
	// Output:
	// pending: 6
	// ann: 3 bob: 3
}

// exampleFleetTagged is exampleFleet in the tagged layout.
func exampleFleetTagged(name string) (*fleet.Fleet, func()) {
	url, err := redistest.SingleURLOrErr()
	if err != nil {
		log.Fatal(err)
	}
	prefix := "example-" + name + ":"
	redistest.DeletePrefix(url, prefix)
	f, err := fleet.Open(context.Background(), fleet.Options{URL: url, Prefix: prefix, Layout: fleet.LayoutTagged})
	if err != nil {
		log.Fatal(err)
	}
	return f, func() { f.Close(); redistest.DeletePrefix(url, prefix) }
}

// Fleet.Queue is a queue by name, for an operator's calls (a dashboard, a
// command line): the same methods as a typed queue, on raw JSON payloads.
func ExampleFleet_Queue() {
	f, done := exampleFleet("by-name")
	defer done()
	ctx := context.Background()
	q := fleet.NewQueue[Harvest](f, "crawl", fleet.QueueOptions{})
	id, _ := q.Submit(ctx, Harvest{URL: "https://example.com/a"})

	admin := f.Queue("crawl")
	st, _ := admin.Stats(ctx)
	rec, _ := admin.Lookup(ctx, id)
	fmt.Println(st.Pending, rec.Status, string(rec.Payload))
	fmt.Println(admin.Cancel(ctx, id))
	_, err := f.Queue("nosuch").Lookup(ctx, id)
	fmt.Println(errors.Is(err, fleet.ErrNotFound))
	// Output:
	// 1 pending {"url":"https://example.com/a","depth":0}
	// <nil>
	// true
}
