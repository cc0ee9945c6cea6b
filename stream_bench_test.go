package fleet_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
)

// Benchmarks of Stream and the event bus, 50 goroutines on the single node.
// Run: go test -run '^$' -bench 'Stream' -benchtime 3s .

type benchOutput struct {
	URL   string `json:"url"`
	Code  int    `json:"code"`
	Bytes int    `json:"bytes"`
}

func BenchmarkStreamPush(b *testing.B) {
	f, _ := benchFleet(b)
	s := fleet.NewStream[benchOutput](f, "bench-push", fleet.StreamOptions{})
	ctx := context.Background()
	parallel(b, func(pb *testing.PB) {
		for pb.Next() {
			if _, err := s.Push(ctx, benchOutput{"https://example.com/a", 200, 1234}); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkStreamPushMany pushes batches of 100: ns/op is per batch,
// entries/s the rate of entries.
func BenchmarkStreamPushMany(b *testing.B) {
	f, _ := benchFleet(b)
	s := fleet.NewStream[benchOutput](f, "bench-pushmany", fleet.StreamOptions{})
	ctx := context.Background()
	batch := make([]benchOutput, 100)
	for i := range batch {
		batch[i] = benchOutput{"https://example.com/" + strconv.Itoa(i), 200, i}
	}
	start := time.Now()
	parallel(b, func(pb *testing.PB) {
		for pb.Next() {
			if _, err := s.PushMany(ctx, batch); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N*len(batch))/time.Since(start).Seconds(), "entries/s")
}

// BenchmarkStreamEmit is push + publish, with one subscriber draining.
func BenchmarkStreamEmit(b *testing.B) {
	f, _ := benchFleet(b)
	s := fleet.NewStream[benchOutput](f, "bench-emit", fleet.StreamOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sub, err := fleet.Subscribe[fleet.StreamEntry[benchOutput]](ctx, f, "bench-emit.emit", fleet.SubscribeOptions{})
	if err != nil {
		b.Fatal(err)
	}
	var got atomic.Int64
	go func() {
		for range sub.C() {
			got.Add(1)
		}
	}()
	parallel(b, func(pb *testing.PB) {
		for pb.Next() {
			if _, err := s.Emit(ctx, benchOutput{"https://example.com/a", 200, 1234}); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	sub.Close()
	b.ReportMetric(float64(sub.Dropped()), "dropped")
}

// BenchmarkStreamRawZAdd is the floor: a bare rueidis ZADD of a member of
// the same size, no trimming, no envelope.
func BenchmarkStreamRawZAdd(b *testing.B) {
	_, raw := benchFleet(b)
	key := lastPrefix + "stream:bench-raw"
	ctx := context.Background()
	var n atomic.Int64
	parallel(b, func(pb *testing.PB) {
		for pb.Next() {
			m := `{"id":"` + strconv.FormatInt(n.Add(1), 10) + `","ts":1733130000.123,"data":{"url":"https://example.com/a","code":200,"bytes":1234}}`
			if err := raw.Do(ctx, raw.B().Zadd().Key(key).ScoreMember().ScoreMember(1733130000.123, m).Build()).Error(); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
