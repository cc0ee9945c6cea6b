// Command queues compares fleet's task queue with github.com/hibiken/asynq
// on the same redis-server in one run: submit-only, and end to end (submit
// N tiny tasks, then run them with W concurrent no-op handlers until all
// are done). It starts a throwaway redis-server (fleettest) unless
// FLEET_REDIS_URL is set.
//
//	go run ./cmd/queues -n 20000 -workers 50
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/fleettest"
)

type tiny struct {
	N int `json:"n"`
}

func main() {
	n := flag.Int("n", 20000, "tasks per run")
	workers := flag.Int("workers", 50, "concurrent handlers, and concurrent submitters")
	batch := flag.Int("batch", 20, "fleet: tasks per Reserve")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	url := os.Getenv("FLEET_REDIS_URL")
	if url == "" {
		s, err := fleettest.StartServer(ctx, fleettest.Config{})
		if err != nil {
			log.Fatal(err)
		}
		defer s.Stop()
		url = s.URL()
	}
	addr := strings.TrimPrefix(url, "redis://")
	fmt.Printf("redis %s, n=%d, workers=%d\n", url, *n, *workers)

	fSubmit, fE2E, fMany := runFleet(ctx, url, *n, *workers, *batch)
	aSubmit, aE2E := runAsynq(addr, *n, *workers)

	rate := func(d time.Duration) float64 { return float64(*n) / d.Seconds() }
	fmt.Printf("%-28s %12s %12s %8s\n", "", "fleet t/s", "asynq t/s", "ratio")
	fmt.Printf("%-28s %12.0f %12.0f %7.2fx\n", "submit (1 per call)", rate(fSubmit), rate(aSubmit), aSubmit.Seconds()/fSubmit.Seconds())
	fmt.Printf("%-28s %12.0f %12s\n", "submit (SubmitMany of 100)", rate(fMany), "-")
	fmt.Printf("%-28s %12.0f %12.0f %7.2fx\n", "end to end (submit + run)", rate(fE2E), rate(aE2E), aE2E.Seconds()/fE2E.Seconds())
}

// submitAll runs submit n times from w goroutines.
func submitAll(n, w int, submit func() error) time.Duration {
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range w {
		wg.Go(func() {
			for next.Add(1) <= int64(n) {
				if err := submit(); err != nil {
					log.Fatal(err)
				}
			}
		})
	}
	wg.Wait()
	return time.Since(start)
}

func runFleet(ctx context.Context, url string, n, w, batch int) (submit, e2e, many time.Duration) {
	f, err := fleet.Open(ctx, fleet.Options{URL: url, Prefix: fmt.Sprintf("bench%d:", time.Now().UnixNano())})
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	q := fleet.NewQueue[tiny](f, "tiny", fleet.QueueOptions{})
	defer q.PurgeDead(ctx)

	// Submit only, then drain without timing.
	submit = submitAll(n, w, func() error { _, err := q.Submit(ctx, tiny{N: 1}); return err })
	fleetRun(ctx, q, n, w, batch)

	// SubmitMany, then drain.
	start := time.Now()
	b := make([]tiny, 100)
	for i := 0; i < n; i += len(b) {
		if _, err := q.SubmitMany(ctx, b[:min(len(b), n-i)]); err != nil {
			log.Fatal(err)
		}
	}
	many = time.Since(start)
	fleetRun(ctx, q, n, w, batch)

	// End to end: submit n, then w handlers until all are done.
	start = time.Now()
	submitAll(n, w, func() error { _, err := q.Submit(ctx, tiny{N: 1}); return err })
	fleetRun(ctx, q, n, w, batch)
	return submit, time.Since(start), many
}

// fleetRun runs n tasks with w handlers, each reserving up to batch.
func fleetRun(ctx context.Context, q *fleet.Queue[tiny], n, w, batch int) {
	var left atomic.Int64
	left.Store(int64(n))
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for range w {
		wg.Go(func() {
			for rctx.Err() == nil {
				tasks, err := q.Reserve(rctx, batch, 100*time.Millisecond)
				if err != nil {
					if rctx.Err() == nil {
						log.Fatal(err)
					}
					return
				}
				for _, t := range tasks {
					if err := t.Ack(rctx); err != nil {
						log.Fatal(err)
					}
					if left.Add(-1) == 0 {
						cancel()
					}
				}
			}
		})
	}
	wg.Wait()
}

func runAsynq(addr string, n, w int) (submit, e2e time.Duration) {
	opt := asynq.RedisClientOpt{Addr: addr, PoolSize: w}
	client := asynq.NewClient(opt)
	defer client.Close()
	queue := fmt.Sprintf("bench%d", time.Now().UnixNano())
	enqueue := func() error {
		_, err := client.Enqueue(asynq.NewTask("tiny", []byte(`{"n":1}`)), asynq.Queue(queue))
		return err
	}
	submit = submitAll(n, w, enqueue)
	asynqRun(opt, queue, n, w)

	start := time.Now()
	submitAll(n, w, enqueue)
	asynqRun(opt, queue, n, w)
	return submit, time.Since(start)
}

func asynqRun(opt asynq.RedisClientOpt, queue string, n, w int) {
	var left atomic.Int64
	left.Store(int64(n))
	done := make(chan struct{})
	srv := asynq.NewServer(opt, asynq.Config{
		Concurrency: w,
		Queues:      map[string]int{queue: 1},
		Logger:      quietLogger{},
		LogLevel:    asynq.ErrorLevel,
	})
	err := srv.Start(asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
		if left.Add(-1) == 0 {
			close(done)
		}
		return nil
	}))
	if err != nil {
		log.Fatal(err)
	}
	<-done
	srv.Shutdown()
}

// quietLogger keeps asynq's logs out of the figures.
type quietLogger struct{}

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

func (quietLogger) Debug(args ...any) {}
func (quietLogger) Info(args ...any)  {}
func (quietLogger) Warn(args ...any)  {}
func (quietLogger) Error(args ...any) { discard.Error(fmt.Sprint(args...)) }
func (quietLogger) Fatal(args ...any) { log.Fatal(args...) }
