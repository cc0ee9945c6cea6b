package fleet_test

import (
	"context"
	"fmt"
	"time"

	"github.com/fleet-go/fleet"
)

// A queue that indexes the "tenant" metadata key lists a tenant's tasks in
// any state, a page at a time, in the order they were submitted.
func ExampleQueue_FindByMeta() {
	f, done := exampleFleet("find")
	defer done()
	ctx := context.Background()
	q := fleet.NewQueue[Harvest](f, "crawl", fleet.QueueOptions{IndexMeta: []string{"tenant"}, Retention: time.Hour})

	for i, tenant := range []string{"acme", "globex", "acme", "acme"} {
		opts := fleet.SubmitOptions{Metadata: map[string]string{"tenant": tenant}}
		if i == 3 {
			opts.NotBefore = time.Now().Add(time.Hour)
		}
		if _, err := q.SubmitWith(ctx, Harvest{URL: fmt.Sprintf("https://example.com/%d", i)}, opts); err != nil {
			panic(err)
		}
	}
	tasks, _ := q.Reserve(ctx, 1, 0) // the first acme task
	_ = tasks[0].Ack(ctx)            // done, its record kept (Retention)

	cursor := ""
	for {
		page, next, err := q.FindByMeta(ctx, "tenant", "acme", cursor, 2)
		if err != nil {
			panic(err)
		}
		for _, t := range page { // a done task's payload is gone
			fmt.Println(t.Status, t.Payload != nil)
		}
		if next == "" {
			break
		}
		cursor = next
	}
	// Output:
	// done false
	// pending true
	// scheduled true
}
