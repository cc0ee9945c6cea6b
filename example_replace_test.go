package fleet_test

import (
	"context"
	"fmt"
	"time"

	"github.com/fleet-go/fleet"
)

func ExampleSubmitOptions_replace() {
	f, done := exampleFleet("replace")
	defer done()
	ctx := context.Background()
	q := fleet.NewQueue[Harvest](f, "reindex", fleet.QueueOptions{})

	// One waiting task per document: a later submit replaces its payload.
	first, _ := q.SubmitWith(ctx, Harvest{URL: "https://example.com/v1"}, fleet.SubmitOptions{DedupKey: "doc-42"})
	id, err := q.SubmitWith(ctx, Harvest{URL: "https://example.com/v2"}, fleet.SubmitOptions{DedupKey: "doc-42", Replace: true})
	fmt.Println(id == first, err)

	// A burst of edits: the task runs once, 2 s after the last (within a
	// minute of the first), with the last payload.
	d := &fleet.Debounce{Window: 2 * time.Second, MaxWait: time.Minute}
	for _, v := range []string{"a", "b", "c"} {
		if _, err := q.SubmitWith(ctx, Harvest{URL: "https://example.com/" + v}, fleet.SubmitOptions{DedupKey: "doc-7", Debounce: d}); err != nil {
			panic(err)
		}
	}
	ts, _ := q.Reserve(ctx, 10, 0)
	fmt.Println(len(ts), ts[0].ID == first, ts[0].Payload.URL)
	// Output:
	// true <nil>
	// 1 true https://example.com/v2
}
