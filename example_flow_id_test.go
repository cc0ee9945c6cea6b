package fleet_test

import (
	"context"
	"fmt"
	"time"

	"github.com/fleet-go/fleet"
)

// A flow with a caller-chosen id (an order's id, or a request's
// idempotency key): a retried request submits it again, and gets the same
// run, with the same step ids. WaitFlow then waits for the flow to be done
// and returns its final status.
func ExampleFlowOptions_callerID() {
	f, done := exampleFleet("flowid")
	defer done()
	ctx := context.Background()
	pages := fleet.NewQueue[Page](f, "fetch", fleet.QueueOptions{})

	submit := func() string { // what an HTTP handler would do, on each try
		fl := fleet.NewFlow(f, fleet.FlowOptions{ID: "order-42"})
		s := fleet.AddStep(fl, pages, Page{URL: "https://example.com/a"}, fleet.SubmitOptions{})
		if err := fl.Submit(ctx); err != nil {
			panic(err)
		}
		return s.ID()
	}
	fmt.Println("first try:", submit())
	fmt.Println("retried:", submit())

	st, _ := pages.Stats(ctx)
	fmt.Println("fetches pending:", st.Pending)
	ts, _ := pages.Reserve(ctx, 2, time.Second)
	for _, t := range ts {
		t.Ack(ctx)
	}
	fs, err := f.WaitFlow(ctx, "order-42")
	fmt.Println(fs.State, fs.Succeeded, err)
	// Output:
	// first try: order-42/0
	// retried: order-42/0
	// fetches pending: 1
	// done 1 <nil>
}
