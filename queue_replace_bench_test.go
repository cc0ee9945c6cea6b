package fleet_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/fleet-go/fleet"
)

// BenchmarkQueueSubmitWithDedup: SubmitWith with a fresh dedup key per
// call (the submit script's plain path: no holder, a push and the key),
// from parallel goroutines. It is the baseline that Replace and Debounce
// must leave as it was.
func BenchmarkQueueSubmitWithDedup(b *testing.B) {
	q, _ := benchQueue[tiny](b, fleet.QueueOptions{})
	ctx := context.Background()
	var n atomic.Int64
	b.SetParallelism(8)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			k := "k" + strconv.FormatInt(n.Add(1), 10)
			if _, err := q.SubmitWith(ctx, tiny{N: 1}, fleet.SubmitOptions{DedupKey: k}); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
