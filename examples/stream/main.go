// Command stream runs a loop automation whose slots emit readings, and a
// consumer that follows the emit events (event:<type>.emit) and pops the
// output stream (stream:<type>).
//
//	go run ./examples/stream -slots 4 -per-slot 25
//
// It prints "done=N failed=M" where done counts the outputs popped, and
// "events=N" for the events seen. It uses FLEET_REDIS_URL, or starts a
// throwaway redis-server.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/examples/internal/exredis"
)

// Config is the sensor automation's config.
type Config struct {
	// IntervalMS is the time between two readings of a slot.
	IntervalMS int `json:"interval_ms" validate:"gte=0,lte=10000"`
}

// Reading is the sensor automation's output.
type Reading struct {
	Slot  int     `json:"slot"`
	Seq   int     `json:"seq"`
	Value float64 `json:"value"`
}

func main() {
	slots := flag.Int("slots", 4, "worker slots")
	perSlot := flag.Int("per-slot", 25, "readings each slot emits")
	interval := flag.Duration("interval", 5*time.Millisecond, "time between readings")
	timeout := flag.Duration("timeout", 30*time.Second, "give up after this long")
	flag.Parse()
	if err := run(*slots, *perSlot, *interval, *timeout); err != nil {
		log.Fatal(err)
	}
}

func run(slots, perSlot int, interval, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	url, stop, err := exredis.URL(ctx)
	if err != nil {
		return err
	}
	defer stop()
	f, err := fleet.Open(ctx, fleet.Options{URL: url, Prefix: fmt.Sprintf("example-stream-%d:", os.Getpid())})
	if err != nil {
		return err
	}
	defer f.Close()

	// The consumer subscribes first: events are not stored.
	events, err := fleet.Subscribe[fleet.StreamEntry[Reading]](ctx, f, "sensor.emit", fleet.SubscribeOptions{})
	if err != nil {
		return err
	}
	defer events.Close()

	w := fleet.NewLoopWorker(f, fleet.WorkerOptions{Type: "sensor", ID: "s1", Slots: slots,
		Config: Config{IntervalMS: int(interval / time.Millisecond)}},
		fleet.LoopFunc[Config, Reading](func(ctx context.Context, s *fleet.Slot[Config, Reading]) error {
			for i := range perSlot {
				if _, err := s.Emit(ctx, Reading{Slot: s.Index(), Seq: i, Value: float64(s.Index()*1000 + i)}); err != nil {
					return err
				}
				s.Metric("last_seq", float64(i))
				select {
				case <-time.After(time.Duration(s.Config().IntervalMS) * time.Millisecond):
				case <-ctx.Done():
					return nil
				}
			}
			<-ctx.Done() // done emitting: idle until stopped
			return nil
		}))
	if err := w.Start(ctx); err != nil {
		return err
	}
	out := fleet.NewStream[Reading](f, "sensor", fleet.StreamOptions{})
	want := slots * perSlot
	seen, popped, failed := 0, 0, 0
	last := map[int]int{}
	for (seen < want || popped < want) && ctx.Err() == nil {
		select {
		case <-events.C():
			seen++
		case <-time.After(20 * time.Millisecond):
		}
		entries, err := out.Pop(ctx, 100)
		if err != nil {
			failed++
			continue
		}
		for _, e := range entries {
			// A slot's readings come out in order.
			if prev, ok := last[e.Data.Slot]; ok && e.Data.Seq <= prev {
				failed++
			}
			last[e.Data.Slot] = e.Data.Seq
			popped++
		}
	}
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer scancel()
	if err := w.Stop(sctx); err != nil {
		return err
	}
	fmt.Printf("emitted=%d events=%d\n", w.Stats().Emitted, seen)
	fmt.Printf("done=%d failed=%d\n", popped, failed)
	return ctx.Err()
}
