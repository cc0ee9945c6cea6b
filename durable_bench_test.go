package fleet_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
)

// BenchmarkMinReplicas measures what MinReplicas 1 costs against 0, side
// by side on one master with one replica (both local): submit alone, and
// end to end (submit, reserve, ack: three writes, each followed by WAIT
// with MinReplicas 1), from 8 goroutines. Compare ns/op of min=1 with
// min=0 of the same case:
//
//	go test -run '^$' -bench BenchmarkMinReplicas -benchtime 3s -count 3 .
func BenchmarkMinReplicas(b *testing.B) {
	m, _ := replicated(b)
	for _, c := range []string{"submit", "end-to-end"} {
		for _, min := range []int{0, 1} {
			b.Run(fmt.Sprintf("%s/min=%d", c, min), func(b *testing.B) {
				f, err := fleet.Open(context.Background(), fleet.Options{URL: m.URL(), MinReplicas: min, Prefix: fmt.Sprintf("b%s%d:", c, min)})
				if err != nil {
					b.Fatal(err)
				}
				defer f.Close()
				q := fleet.NewQueue[tiny](f, "bench", fleet.QueueOptions{Lease: time.Minute})
				ctx := context.Background()
				b.SetParallelism(8)
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if _, err := q.Submit(ctx, tiny{N: 1}); err != nil {
							b.Error(err)
							return
						}
						if c == "submit" {
							continue
						}
						tasks, err := q.Reserve(ctx, 1, 0)
						if err != nil {
							b.Error(err)
							return
						}
						for _, t := range tasks {
							if err := t.Ack(ctx); err != nil {
								b.Error(err)
								return
							}
						}
					}
				})
				b.StopTimer()
				if _, err := m.Cli(ctx, "flushall"); err != nil {
					b.Fatal(err)
				}
			})
		}
	}
}
