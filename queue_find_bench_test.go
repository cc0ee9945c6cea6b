package fleet_test

import (
	"context"
	"testing"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/internal/costmeter"
)

// BenchmarkQueueMetaIndex: the cost of the metadata index
// (QueueOptions.IndexMeta) per submit and per ack, beside the same
// queue that indexes nothing: every task carries {"tenant": "acme"}
// (SubmitWith, from parallel goroutines; then Reserve of 50 and an Ack
// each). commands/op counts the server's commands per task (an EVALSHA
// and each command its script ran), server-µs/op its CPU per task.
func BenchmarkQueueMetaIndex(b *testing.B) {
	meta := fleet.SubmitOptions{Metadata: map[string]string{"tenant": "acme"}}
	for _, tc := range []struct {
		name  string
		index []string
	}{{"plain", nil}, {"indexed", []string{"tenant"}}} {
		measure := func(b *testing.B, e *env, run func()) {
			ctx := context.Background()
			m, err := costmeter.Start(ctx, e.Raw)
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			run()
			b.StopTimer()
			cost, err := m.Stop(ctx)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(cost.Commands())/float64(b.N), "commands/op")
			b.ReportMetric(float64(cost.CPU.Microseconds())/float64(b.N), "server-µs/op")
		}
		b.Run("submit/"+tc.name, func(b *testing.B) {
			q, e := benchQueue[tiny](b, fleet.QueueOptions{IndexMeta: tc.index})
			ctx := context.Background()
			if _, err := q.SubmitWith(ctx, tiny{}, meta); err != nil { // the registration, before the meter
				b.Fatal(err)
			}
			b.SetParallelism(8)
			measure(b, e, func() {
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if _, err := q.SubmitWith(ctx, tiny{N: 1}, meta); err != nil {
							b.Error(err)
							return
						}
					}
				})
			})
		})
		b.Run("ack/"+tc.name, func(b *testing.B) {
			q, e := benchQueue[tiny](b, fleet.QueueOptions{IndexMeta: tc.index})
			ctx := context.Background()
			subs := make([]fleet.Submission[tiny], 1000)
			for i := range subs {
				subs[i].Options = meta
			}
			for i := 0; i < b.N; i += len(subs) {
				if _, err := q.SubmitManyWith(ctx, subs[:min(len(subs), b.N-i)]); err != nil {
					b.Fatal(err)
				}
			}
			measure(b, e, func() { reserveAck(b, q, b.N) })
		})
	}
}
