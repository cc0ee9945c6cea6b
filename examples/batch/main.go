// Command batch runs a batch automation: a worker whose slots take page
// tasks from a queue, and a submitter that fills the queue.
//
//	go run ./examples/batch -tasks 100 -slots 8            # both roles
//	go run ./examples/batch -role submit -prefix demo: -tasks 1000
//	go run ./examples/batch -role worker -prefix demo: -id w2 -sweep 1s
//
// The worker role stops when the queue is empty (nothing pending, in
// flight or scheduled), or at -timeout, and prints a summary line
// "done=N failed=M". With -print-acks it prints "acked <id>" for each task
// it acked, so that a test can kill it and count. It uses FLEET_REDIS_URL,
// or starts a throwaway redis-server.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"sync"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/examples/internal/exredis"
)

// Page is a task: a page to fetch.
type Page struct {
	URL string `json:"url" validate:"required,url"`
	N   int    `json:"n" validate:"gte=0"`
}

// Config is the automation's config, pushed live with UpdateConfig.
type Config struct {
	// WorkMS is how long a fetch takes, in milliseconds.
	WorkMS int `json:"work_ms" validate:"gte=0,lte=60000"`
}

// Result is the automation's output.
type Result struct {
	URL   string `json:"url"`
	Bytes int    `json:"bytes"`
}

func main() {
	role := flag.String("role", "both", "worker, submit or both")
	tasks := flag.Int("tasks", 100, "tasks to submit")
	slots := flag.Int("slots", 8, "worker slots")
	id := flag.String("id", "w1", "worker id")
	prefix := flag.String("prefix", fmt.Sprintf("example-batch-%d:", os.Getpid()), "key prefix (share it between processes)")
	work := flag.Duration("work", 10*time.Millisecond, "how long each task takes (the initial config)")
	lease := flag.Duration("lease", 30*time.Second, "task lease")
	sweep := flag.Duration("sweep", 0, "run a sweeper at this interval (0: none)")
	timeout := flag.Duration("timeout", time.Minute, "give up after this long")
	printAcks := flag.Bool("print-acks", false, `print "acked <id>" for each acked task`)
	flag.StringVar(&layout, "layout", "", "key layout: compat or tagged (defaults to compat on a single node, tagged on a cluster)")
	flag.Parse()
	if err := run(*role, *tasks, *slots, *id, *prefix, *work, *lease, *sweep, *timeout, *printAcks); err != nil {
		log.Fatal(err)
	}
}

// layout is the -layout flag.
var layout string

func run(role string, tasks, slots int, id, prefix string, work, lease, sweep, timeout time.Duration, printAcks bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	url, stop, err := exredis.URL(ctx)
	if err != nil {
		return err
	}
	defer stop()
	f, err := fleet.Open(ctx, fleet.Options{URL: url, Prefix: prefix, Layout: fleet.Layout(layout)})
	if err != nil {
		return err
	}
	defer f.Close()
	q := fleet.NewQueue[Page](f, "pages", fleet.QueueOptions{Lease: lease, BackoffBase: 10 * time.Millisecond, BackoffMax: 100 * time.Millisecond})

	if role == "submit" || role == "both" {
		pages := make([]Page, tasks)
		for i := range pages {
			pages[i] = Page{URL: fmt.Sprintf("https://example.org/page/%d", i), N: i}
		}
		if _, err := q.SubmitMany(ctx, pages); err != nil {
			return err
		}
		fmt.Printf("submitted=%d\n", tasks)
	}
	if role == "submit" {
		return nil
	}

	if sweep > 0 {
		var wg sync.WaitGroup
		sctx, scancel := context.WithCancel(ctx)
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = f.RunSweeper(sctx, fleet.SweeperOptions{Interval: sweep})
		}()
		defer wg.Wait()
		defer scancel()
	}

	var mu sync.Mutex
	w := fleet.NewBatchWorker(f, fleet.WorkerOptions{Type: "pages", ID: id, Slots: slots, Heartbeat: time.Second,
		Config: Config{WorkMS: int(work / time.Millisecond)},
		OnTaskEnd: func(taskID string, err error) {
			if err == nil && printAcks {
				mu.Lock()
				fmt.Printf("acked %s\n", taskID)
				mu.Unlock()
			}
		}}, q,
		fleet.BatchFunc[Config, Result, Page](func(ctx context.Context, s *fleet.Slot[Config, Result], t *fleet.Task[Page]) error {
			select {
			case <-time.After(time.Duration(s.Config().WorkMS) * time.Millisecond):
			case <-ctx.Done():
				return ctx.Err()
			}
			// Record that the work was done, per task, with a primitive.
			if _, err := s.Fleet().Counter("done." + t.ID).Incr(ctx); err != nil {
				return err
			}
			s.Count("pages", 1)
			_, err := s.Emit(ctx, Result{URL: t.Payload.URL, Bytes: 1000 + t.Payload.N})
			return err
		}))
	if err := f.PublishCatalog(ctx, w.Catalog()); err != nil {
		return err
	}
	if err := w.Start(ctx); err != nil {
		return err
	}
	// Work until the queue is empty twice in a row.
	empty := 0
	for empty < 2 && ctx.Err() == nil {
		time.Sleep(100 * time.Millisecond)
		st, err := q.Stats(ctx)
		if err == nil && st.Pending+st.InFlight+st.Scheduled == 0 {
			empty++
		} else {
			empty = 0
		}
	}
	sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer scancel()
	err = w.Stop(sctx)
	s := w.Stats()
	fmt.Printf("done=%d failed=%d\n", s.Done, s.Failed)
	if err != nil {
		return err
	}
	return ctx.Err()
}
