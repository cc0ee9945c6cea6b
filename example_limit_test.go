package fleet_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"sync/atomic"
	"time"

	"github.com/fleet-go/fleet"
)

func ExampleLimiter() {
	f, done := exampleFleet("limiter")
	defer done()
	ctx := context.Background()

	// At most 10 logins per minute to example.org across the fleet, 3 at
	// once after a rest.
	logins := f.Limiter("login:example.org", fleet.LimitOptions{Rate: 10, Per: time.Minute, Burst: 3})
	for range 4 {
		r, err := logins.Allow(ctx, 1)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(r.Allowed, r.Remaining, r.RetryAfter > 0)
	}

	// At most 50 requests per second: Wait sleeps until a token is due.
	requests := f.Limiter("example.org", fleet.LimitOptions{Rate: 50})
	for range 3 {
		if err := requests.Wait(ctx, 1); err != nil {
			log.Fatal(err)
		}
	}
	fmt.Println("fetched 3 pages")
	// Output:
	// true 2 false
	// true 1 false
	// true 0 false
	// false 0 true
	// fetched 3 pages
}

func ExampleSemaphore() {
	f, done := exampleFleet("semaphore")
	defer done()
	ctx := context.Background()

	// At most 2 sessions of account 42 at once, fleet-wide: one semaphore
	// per account.
	sessions := f.Semaphore("sessions:account-42", 2)
	opts := fleet.SemaphoreOptions{Hold: 30 * time.Second}
	a, _ := sessions.Acquire(ctx, opts)
	b, _ := sessions.Acquire(ctx, opts)
	_, err := sessions.Acquire(ctx, opts) // zero Wait: fails at once
	fmt.Println(errors.Is(err, fleet.ErrNotObtained))

	// A release wakes a waiter (of any process) at once.
	got := make(chan error)
	go func() {
		p, err := sessions.Acquire(ctx, fleet.SemaphoreOptions{Hold: 30 * time.Second, Wait: 10 * time.Second})
		if err == nil {
			err = p.Release(ctx)
		}
		got <- err
	}()
	_ = a.Release(ctx)
	fmt.Println(<-got)
	_ = b.Release(ctx)
	// Output:
	// true
	// <nil>
}

func ExampleRateLimited() {
	f, done := exampleFleet("ratelimited")
	defer done()
	ctx := context.Background()

	type Fetch struct {
		URL string `json:"url" validate:"required,url"`
	}
	// Every worker of the queue shares one limiter: 50 tasks per second.
	q := fleet.NewQueue[Fetch](f, "fetches", fleet.QueueOptions{
		RateLimit: f.Limiter("fetches", fleet.LimitOptions{Rate: 50}),
	})
	_, _ = q.Submit(ctx, Fetch{URL: "https://example.org/a"})

	handled := make(chan int, 2)
	var runs atomic.Int64
	w := fleet.NewBatchWorker(f, fleet.WorkerOptions{Type: "fetcher", ID: "w1", Slots: 2}, q,
		fleet.BatchFunc[struct{}, struct{}, Fetch](func(ctx context.Context, s *fleet.Slot[struct{}, struct{}], t *fleet.Task[Fetch]) error {
			handled <- t.Attempts
			if runs.Add(1) == 1 {
				// The remote side said 429: try again in 50 ms, and
				// count no attempt.
				return fleet.RateLimited(50 * time.Millisecond)
			}
			return nil
		}))
	if err := w.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer w.Stop(ctx)
	fmt.Println("attempts:", <-handled)
	fmt.Println("attempts:", <-handled)
	// Output:
	// attempts: 0
	// attempts: 0
}

func ExampleSemaphore_Do() {
	f, done := exampleFleet("semaphore-do")
	defer done()
	ctx := context.Background()

	// One browser session of account 42 at a time. Do gives the permit
	// back when fn returns; with KeepAlive the permit's lease is extended
	// every Hold/3 while fn runs, and fn's ctx ends (cause ErrLeaseLost)
	// should the lease no longer be provable.
	sessions := f.Semaphore("sessions:account-42", 1)
	err := sessions.Do(ctx, fleet.SemaphoreOptions{Hold: 3 * time.Second, KeepAlive: true},
		func(ctx context.Context, permit *fleet.Lease) error {
			fmt.Println("browsing; lease left > 2s:", time.Until(permit.Deadline()) > 2*time.Second)
			return nil
		})
	fmt.Println(err)
	// Output:
	// browsing; lease left > 2s: true
	// <nil>
}
