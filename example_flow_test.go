package fleet_test

import (
	"context"
	"fmt"
	"time"

	"github.com/fleet-go/fleet"
)

// Page is a page to fetch; Report is built from pages.
type Page struct {
	URL string `json:"url"`
}

type Report struct {
	Title string `json:"title"`
}

// A flow over two queues: two fetches, then a report that runs after both
// succeeded and reads their results. In a worker's handler,
// fleet.ResultOf[int](ctx, pages, id) reads a dependency's result the same
// way; Task.Dependencies lists them all.
func ExampleNewFlow() {
	f, done := exampleFleet("flow")
	defer done()
	ctx := context.Background()
	pages := fleet.NewQueue[Page](f, "fetch", fleet.QueueOptions{})
	reports := fleet.NewQueue[Report](f, "report", fleet.QueueOptions{})

	fl := fleet.NewFlow(f, fleet.FlowOptions{})
	a := fleet.AddStep(fl, pages, Page{URL: "https://example.com/a"}, fleet.SubmitOptions{})
	b := fleet.AddStep(fl, pages, Page{URL: "https://example.com/b"}, fleet.SubmitOptions{})
	fleet.AddStep(fl, reports, Report{Title: "weekly"}, fleet.SubmitOptions{After: fleet.Steps(a, b)})
	if err := fl.Submit(ctx); err != nil {
		panic(err)
	}

	// The report waits; the fetches run (here by hand) and succeed.
	st, _ := reports.Stats(ctx)
	fmt.Println("reports waiting:", st.Waiting)
	fetched, _ := pages.Reserve(ctx, 2, time.Second)
	for _, t := range fetched {
		t.SetResult(len(t.Payload.URL))
		t.Ack(ctx)
	}

	// Then the report is released, once, and reads what they returned.
	ts, _ := reports.Reserve(ctx, 1, 5*time.Second)
	deps, _ := ts[0].Dependencies(ctx)
	sum := 0
	for _, d := range deps {
		var n int
		fmt.Sscan(string(d.Result), &n)
		sum += n
	}
	fmt.Println("report", ts[0].Payload.Title, "after", len(deps), "fetches, total", sum)
	ts[0].Ack(ctx)
	// Output:
	// reports waiting: 1
	// report weekly after 2 fetches, total 42
}

// A batch over one queue, with a callback that runs once every task ended,
// with the counts.
func ExampleFleet_NewBatch() {
	f, done := exampleFleet("batch")
	defer done()
	ctx := context.Background()
	pages := fleet.NewQueue[Page](f, "crawl", fleet.QueueOptions{})
	reports := fleet.NewQueue[Report](f, "summary", fleet.QueueOptions{})

	b, err := f.NewBatch(ctx, fleet.BatchOptions{
		OnComplete: fleet.NewCallback(reports, Report{Title: "crawl done"}, fleet.SubmitOptions{}),
	})
	if err != nil {
		panic(err)
	}
	fleet.BatchAdd(ctx, b, pages, []Page{{URL: "https://example.com/1"}, {URL: "https://example.com/2"}}, fleet.SubmitOptions{})
	b.Close(ctx)

	ts, _ := pages.Reserve(ctx, 2, time.Second)
	ts[0].Ack(ctx)
	ts[1].DeadLetter(ctx, fmt.Errorf("404"))

	cb, _ := reports.Reserve(ctx, 1, 5*time.Second)
	st, _, _ := cb[0].BatchStatus(ctx)
	fmt.Printf("%s: %d tasks, %d succeeded, %d failed\n", cb[0].Payload.Title, st.Total, st.Succeeded, st.Failed)
	cb[0].Ack(ctx)
	// Output:
	// crawl done: 2 tasks, 1 succeeded, 1 failed
}

// Wait for a task from any process: it returns when the task ends.
func ExampleQueue_Wait() {
	f, done := exampleFleet("wait")
	defer done()
	ctx := context.Background()
	q := fleet.NewQueue[Page](f, "render", fleet.QueueOptions{})
	id, _ := q.SubmitWith(ctx, Page{URL: "https://example.com"}, fleet.SubmitOptions{Track: true})

	go func() { // a worker, elsewhere
		ts, _ := q.Reserve(ctx, 1, time.Second)
		ts[0].SetResult("rendered")
		ts[0].Ack(ctx)
	}()
	got, err := fleet.ResultOf[string](ctx, q, id, fleet.Await())
	fmt.Println(got, err)
	// Output:
	// rendered <nil>
}
