// Command durable runs durable harvests: each task logs in, fetches its
// pages, cools down and writes its results, each part a recorded step
// (fleet.Step) or sleep (fleet.Sleep), so that a run after a crash does
// not do again what was recorded.
//
//	go run ./examples/durable                          # one process, 3 harvests
//	go run ./examples/durable -crash-after fetch-2     # a worker dies mid-task, a second one resumes
//
// With -crash-after, the first worker process exits (as a SIGKILL would
// leave it: no ack, no release) right after the step of that name was
// recorded; a second worker, started by this command on the same Redis,
// takes the task over once its lease runs out (a sweeper re-queues it),
// and its run returns the recorded steps without running them. Every
// effect prints a line "effect <task> <step> run=<n>" and the end a line
// "done <task> logins=<n> fetches=<n>". It uses FLEET_REDIS_URL, or
// starts a throwaway redis-server.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/examples/internal/exredis"
)

// Harvest is a task: an account's pages to fetch.
type Harvest struct {
	Account string `json:"account" validate:"required"`
	Pages   int    `json:"pages" validate:"gte=1,lte=20"`
}

func main() {
	role := flag.String("role", "main", "main, or worker (started by main)")
	harvests := flag.Int("harvests", 3, "harvests to submit")
	crashAfter := flag.String("crash-after", "", "the first worker exits right after recording this step")
	prefix := flag.String("prefix", fmt.Sprintf("example-durable-%d:", os.Getpid()), "key prefix")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var err error
	if *role == "worker" {
		err = work(ctx, os.Getenv("FLEET_REDIS_URL"), *prefix, *crashAfter, *harvests)
	} else {
		err = runMain(ctx, *prefix, *crashAfter, *harvests)
	}
	if err != nil {
		log.Fatal(err)
	}
}

// runMain submits the harvests and runs the workers: one, or, with
// crashAfter, one that dies and one that resumes, each a process.
func runMain(ctx context.Context, prefix, crashAfter string, n int) error {
	url, stop, err := exredis.URL(ctx)
	if err != nil {
		return err
	}
	defer stop()
	f, err := fleet.Open(ctx, fleet.Options{URL: url, Prefix: prefix})
	if err != nil {
		return err
	}
	defer f.Close()
	q := queue(f)
	for i := range n {
		if _, err := q.Submit(ctx, Harvest{Account: "acct-" + strconv.Itoa(i), Pages: 3}); err != nil {
			return err
		}
	}
	fmt.Printf("submitted=%d\n", n)
	self, err := os.Executable()
	if err != nil {
		return err
	}
	worker := func(crash string) error {
		cmd := exec.CommandContext(ctx, self, "-role", "worker", "-prefix", prefix, "-crash-after", crash, "-harvests", strconv.Itoa(n))
		cmd.Env = append(os.Environ(), "FLEET_REDIS_URL="+url)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		return cmd.Run()
	}
	if crashAfter != "" {
		err := worker(crashAfter)
		fmt.Printf("first worker exited: %v\n", err)
	}
	return worker("")
}

func queue(f *fleet.Fleet) *fleet.Queue[Harvest] {
	return fleet.NewQueue[Harvest](f, "harvests", fleet.QueueOptions{Lease: time.Second, BackoffBase: 10 * time.Millisecond, BackoffMax: 100 * time.Millisecond})
}

// work runs a worker (and a sweeper, which re-queues a task whose worker
// died) until n harvests are done, or, with crashAfter, until it dies.
func work(ctx context.Context, url, prefix, crashAfter string, n int) error {
	f, err := fleet.Open(ctx, fleet.Options{URL: url, Prefix: prefix})
	if err != nil {
		return err
	}
	defer f.Close()
	q := queue(f)
	sctx, scancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = f.RunSweeper(sctx, fleet.SweeperOptions{Interval: 200 * time.Millisecond})
	}()
	defer wg.Wait()
	defer scancel()

	var mu sync.Mutex
	runs := map[string]int{} // "<task> <step>" -> effects in this process
	effect := func(t *fleet.Task[Harvest], step string) {
		mu.Lock()
		defer mu.Unlock()
		runs[t.ID+" "+step]++
		fmt.Printf("effect %s %s run=%d\n", t.Payload.Account, step, runs[t.ID+" "+step])
	}
	// recorded is what a step returns once recorded: the crash point.
	recorded := func(step string) {
		if step == crashAfter {
			fmt.Printf("crash after %s\n", step)
			os.Exit(3) // no ack, no release: as a SIGKILL leaves it
		}
	}
	done := make(chan string, n)
	w := fleet.NewBatchWorker(f, fleet.WorkerOptions{Type: "harvester", ID: "w" + strconv.Itoa(os.Getpid()), Slots: 1}, q,
		fleet.BatchFunc[struct{}, struct{}, Harvest](func(ctx context.Context, s *fleet.Slot[struct{}, struct{}], t *fleet.Task[Harvest]) error {
			// Hand "<task id>/<step>" downstream as the idempotency key of
			// an effect that must not repeat: a step's effect repeats only
			// if its process dies between the effect and the record.
			cookie, err := fleet.Step(ctx, t, "login", func(ctx context.Context) (string, error) {
				effect(t, "login")
				return "session-" + t.Payload.Account, nil
			})
			if err != nil {
				return err
			}
			recorded("login")
			total := 0
			for p := range t.Payload.Pages {
				name := "fetch-" + strconv.Itoa(p)
				bytes, err := fleet.Step(ctx, t, name, func(ctx context.Context) (int, error) {
					effect(t, name)
					return 1000 + p, nil // a page fetched with cookie
				})
				if err != nil {
					return err
				}
				recorded(name)
				total += bytes
			}
			// Cool down without holding the slot: the task is parked and
			// comes back, its steps above memoized.
			if err := fleet.Sleep(ctx, t, "cool-down", 300*time.Millisecond); err != nil {
				return err
			}
			if _, err := fleet.Step(ctx, t, "write", func(ctx context.Context) (bool, error) {
				effect(t, "write")
				return true, nil
			}); err != nil {
				return err
			}
			fmt.Printf("done %s bytes=%d with %s\n", t.Payload.Account, total, cookie)
			done <- t.ID
			return nil
		}))
	if err := w.Start(ctx); err != nil {
		return err
	}
	defer func() { _ = w.Stop(context.Background()) }()
	for range n {
		select {
		case <-done:
		case <-ctx.Done():
			return fmt.Errorf("harvests not done: %w", ctx.Err())
		}
	}
	// Every harvest ran each step's effect at most once in this process;
	// the task the first worker died in ran none it had recorded.
	mu.Lock()
	defer mu.Unlock()
	for k, v := range runs {
		if v > 1 {
			return fmt.Errorf("step %s ran %d times", k, v)
		}
	}
	fmt.Printf("all %d harvests done\n", n)
	return nil
}
