package fleet_test

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

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

// BenchmarkQueueSubmitDebounce: a debounced submit against a plain one,
// from parallel goroutines, by turns in one run: "plain" (Submit),
// "debounce-new" (a fresh key per call: the debounce's first submit) and
// "debounce-hot" (64 keys in turn: each submit replaces its key's pending
// task and moves its start, the debounce's usual case).
//
//	go test -run '^$' -bench BenchmarkQueueSubmitDebounce -benchtime 20000x -count 3 .
func BenchmarkQueueSubmitDebounce(b *testing.B) {
	deb := &fleet.Debounce{Window: time.Hour, MaxWait: 2 * time.Hour}
	for _, mode := range []string{"plain", "debounce-new", "debounce-hot"} {
		b.Run(mode, func(b *testing.B) {
			q, _ := benchQueue[tiny](b, fleet.QueueOptions{})
			ctx := context.Background()
			var n atomic.Int64
			b.SetParallelism(8)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := n.Add(1)
					var err error
					switch mode {
					case "plain":
						_, err = q.Submit(ctx, tiny{N: 1})
					case "debounce-new":
						_, err = q.SubmitWith(ctx, tiny{N: 1}, fleet.SubmitOptions{DedupKey: "k" + strconv.FormatInt(i, 10), Debounce: deb})
					default:
						_, err = q.SubmitWith(ctx, tiny{N: int(i)}, fleet.SubmitOptions{DedupKey: "k" + strconv.FormatInt(i%64, 10), Debounce: deb})
					}
					if err != nil && !errors.Is(err, fleet.ErrDuplicate) {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
