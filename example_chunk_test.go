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

// A chunk worker hands its handler many tasks at once: here rows written
// to a store in one insert, chunks of 2 to 50, or fewer after 20 ms. The
// handler marks a bad row failed for good (a dead letter); the others are
// acked together, in one script call, when it returns nil.
func ExampleNewChunkWorker() {
	f, done := exampleFleet("chunkworker")
	defer done()
	ctx := context.Background()

	type Row struct {
		Key string `json:"key" validate:"required"`
		N   int    `json:"n"`
	}
	q := fleet.NewQueue[Row](f, "rows", fleet.QueueOptions{})
	var stored atomic.Int64
	w := fleet.NewChunkWorker(f, fleet.WorkerOptions{Type: "rows", ID: "w1", Slots: 1}, q,
		fleet.ChunkOptions{MinSize: 2, MaxSize: 50, MaxWait: 20 * time.Millisecond},
		fleet.ChunkFunc[struct{}, struct{}, Row](func(ctx context.Context, s *fleet.Slot[struct{}, struct{}], c *fleet.Chunk[Row]) error {
			for i, t := range c.Tasks {
				if t.Payload.N < 0 {
					_ = c.Fail(i, fmt.Errorf("row %s: negative: %w", t.Payload.Key, fleet.ErrPermanent))
					continue
				}
				stored.Add(1) // one insert of the good rows, in a real handler
			}
			return nil // the tasks not marked are acked
		}))
	if err := w.Start(ctx); err != nil {
		log.Fatal(err)
	}
	_, _ = q.SubmitMany(ctx, []Row{{Key: "a", N: 1}, {Key: "b", N: 2}, {Key: "c", N: -1}, {Key: "d", N: 4}})
	for w.Stats().Done+w.Stats().Failed < 4 {
		time.Sleep(5 * time.Millisecond)
	}
	_ = w.Stop(ctx)
	st := w.Stats()
	fmt.Printf("stored=%d done=%d failed=%d\n", stored.Load(), st.Done, st.Failed)

	bad := fleet.NewChunkWorker(f, fleet.WorkerOptions{Type: "rows", ID: "w2"}, q,
		fleet.ChunkOptions{MinSize: 10, MaxSize: 5},
		fleet.ChunkFunc[struct{}, struct{}, Row](func(ctx context.Context, s *fleet.Slot[struct{}, struct{}], c *fleet.Chunk[Row]) error { return nil }))
	fmt.Println(errors.Is(bad.Start(ctx), fleet.ErrInvalidOptions))
	// Output:
	// stored=3 done=3 failed=1
	// true
}
