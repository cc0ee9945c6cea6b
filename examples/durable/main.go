// Command durable runs durable harvests: each task logs in, fetches its
// pages as child tasks and waits for them, cools down, waits for an
// approval that another process sends, and writes its results, each part
// a recorded step (fleet.Step), a child (fleet.StartChild,
// fleet.AwaitChildren), a sleep (fleet.Sleep) or a signal
// (fleet.WaitSignal), so that a run after a crash does not do again what
// was recorded.
//
//	go run ./examples/durable                          # 3 harvests, approved by another process
//	go run ./examples/durable -crash-after fetch-1     # a worker dies mid-task, a second one resumes
//
// With -crash-after, the first worker process exits (as a SIGKILL would
// leave it: no ack, no release) right after the step of that name was
// recorded; a second worker, started by this command on the same Redis,
// takes the task over once its lease runs out (a sweeper re-queues it),
// and its run returns the recorded steps without running them. The pages
// are fetched by a second queue's worker, in the process that finishes
// the harvests. An approver process sends each harvest the signal
// "approved" as soon as it is submitted: a signal sent before the wait is
// kept for it. Every effect prints a line "effect <account> <step>
// run=<n>" and the end a line "done <account> bytes=<n> with <cookie>
// approved by <who>". It uses FLEET_REDIS_URL, or starts a throwaway
// redis-server.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"strconv"
	"strings"
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

// Page is a child task of a harvest: one page to fetch.
type Page struct {
	Account string `json:"account" validate:"required"`
	N       int    `json:"n" validate:"gte=0"`
	Cookie  string `json:"cookie" validate:"required"`
}

func main() {
	role := flag.String("role", "main", "main, or worker (started by main)")
	harvests := flag.Int("harvests", 3, "harvests to submit")
	crashAfter := flag.String("crash-after", "", "the first worker exits right after recording this step")
	prefix := flag.String("prefix", fmt.Sprintf("example-durable-%d:", os.Getpid()), "key prefix")
	ids := flag.String("ids", "", "approver: the harvests' ids, comma-separated")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var err error
	switch *role {
	case "worker":
		err = work(ctx, os.Getenv("FLEET_REDIS_URL"), *prefix, *crashAfter, *harvests)
	case "approver":
		err = approve(ctx, os.Getenv("FLEET_REDIS_URL"), *prefix, strings.Split(*ids, ","))
	default:
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
	q, _ := queues(f)
	var ids []string
	for i := range n {
		id, err := q.Submit(ctx, Harvest{Account: "acct-" + strconv.Itoa(i), Pages: 3})
		if err != nil {
			return err
		}
		ids = append(ids, id)
	}
	fmt.Printf("submitted=%d\n", n)
	self, err := os.Executable()
	if err != nil {
		return err
	}
	run := func(args ...string) error {
		cmd := exec.CommandContext(ctx, self, append([]string{"-prefix", prefix, "-harvests", strconv.Itoa(n)}, args...)...)
		cmd.Env = append(os.Environ(), "FLEET_REDIS_URL="+url)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		return cmd.Run()
	}
	worker := func(crash string) error { return run("-role", "worker", "-crash-after", crash) }
	if err := run("-role", "approver", "-ids", strings.Join(ids, ",")); err != nil {
		return err
	}
	if crashAfter != "" {
		err := worker(crashAfter)
		fmt.Printf("first worker exited: %v\n", err)
	}
	return worker("")
}

func queues(f *fleet.Fleet) (*fleet.Queue[Harvest], *fleet.Queue[Page]) {
	opts := fleet.QueueOptions{Lease: time.Second, BackoffBase: 10 * time.Millisecond, BackoffMax: 100 * time.Millisecond}
	return fleet.NewQueue[Harvest](f, "harvests", opts), fleet.NewQueue[Page](f, "pages", opts)
}

// approve sends each harvest the signal "approved", from a process of its
// own: a harvest that has not reached its wait yet keeps it.
func approve(ctx context.Context, url, prefix string, ids []string) error {
	f, err := fleet.Open(ctx, fleet.Options{URL: url, Prefix: prefix})
	if err != nil {
		return err
	}
	defer f.Close()
	q, _ := queues(f)
	for _, id := range ids {
		if err := q.Signal(ctx, id, "approved", "ops"); err != nil {
			return err
		}
	}
	fmt.Printf("approved=%d\n", len(ids))
	return nil
}

// work runs a worker (and a sweeper, which re-queues a task whose worker
// died) until n harvests are done, or, with crashAfter, until it dies.
func work(ctx context.Context, url, prefix, crashAfter string, n int) error {
	f, err := fleet.Open(ctx, fleet.Options{URL: url, Prefix: prefix})
	if err != nil {
		return err
	}
	defer f.Close()
	q, pages := queues(f)
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
			// The pages, as child tasks: each submitted once, however often
			// this runs; the task is parked until the last one ended.
			var kids []fleet.Child
			for p := range t.Payload.Pages {
				name := "fetch-" + strconv.Itoa(p)
				kid, err := fleet.StartChild(ctx, t, name, pages, Page{Account: t.Payload.Account, N: p, Cookie: cookie}, fleet.SubmitOptions{})
				if err != nil {
					return err
				}
				recorded(name)
				kids = append(kids, kid)
			}
			fetched, err := fleet.AwaitChildren(ctx, t, "fetched", time.Minute, kids...)
			if err != nil {
				return err
			}
			total := 0
			for _, r := range fetched {
				var bytes int
				if err := json.Unmarshal(r.Result, &bytes); err != nil {
					return err
				}
				total += bytes
			}
			// Cool down without holding the slot: the task is parked and
			// comes back, its steps above memoized.
			if err := fleet.Sleep(ctx, t, "cool-down", 300*time.Millisecond); err != nil {
				return err
			}
			// Wait for the approval that another process sends (it may
			// have come already: it was kept).
			by, err := fleet.WaitSignal[string](ctx, t, "approved", time.Minute)
			if err != nil {
				return err
			}
			if _, err := fleet.Step(ctx, t, "write", func(ctx context.Context) (bool, error) {
				effect(t, "write")
				return true, nil
			}); err != nil {
				return err
			}
			fmt.Printf("done %s bytes=%d with %s approved by %s\n", t.Payload.Account, total, cookie, by)
			done <- t.ID
			return nil
		}))
	if err := w.Start(ctx); err != nil {
		return err
	}
	defer func() { _ = w.Stop(context.Background()) }()
	if crashAfter == "" {
		// The pages' worker runs in the process that finishes the
		// harvests (a child is a plain task: a page fetched by a process
		// that dies mid-fetch would be fetched again).
		pw := fleet.NewBatchWorker(f, fleet.WorkerOptions{Type: "pages", ID: "p" + strconv.Itoa(os.Getpid()), Slots: 3}, pages,
			fleet.BatchFunc[struct{}, struct{}, Page](func(ctx context.Context, s *fleet.Slot[struct{}, struct{}], p *fleet.Task[Page]) error {
				mu.Lock()
				runs[p.ID]++
				fmt.Printf("effect %s fetch-%d run=%d\n", p.Payload.Account, p.Payload.N, runs[p.ID])
				mu.Unlock()
				return p.SetResult(1000 + p.Payload.N) // the page's bytes
			}))
		if err := pw.Start(ctx); err != nil {
			return err
		}
		defer func() { _ = pw.Stop(context.Background()) }()
	}
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
