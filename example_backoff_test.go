package fleet_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fleet-go/fleet"
)

func ExampleParseBackoff() {
	f, done := exampleFleet("backoff")
	defer done()
	ctx := context.Background()

	// From a config file or a flag: "exponential:1s:10m", "fixed:30s",
	// "linear:5s:1m".
	b, err := fleet.ParseBackoff("linear:5s:1m")
	if err != nil {
		panic(err)
	}
	q := fleet.NewQueue[Harvest](f, "fetch", fleet.QueueOptions{Backoff: b})
	if _, err := q.Submit(ctx, Harvest{URL: "https://example.com"}); err != nil {
		panic(err)
	}
	// Stored with the queue: every process's nacks and sweepers apply it.
	p, _, _ := q.Policy(ctx)
	fmt.Println(p.Backoff, p.BackoffBaseMS, p.BackoffMaxMS)

	// A task's own backoff goes before the queue's.
	_, err = q.SubmitWith(ctx, Harvest{URL: "https://example.com/slow"},
		fleet.SubmitOptions{Backoff: fleet.Backoff{Kind: fleet.BackoffFixed, Base: 30 * time.Second}})
	fmt.Println(err)

	_, err = fleet.ParseBackoff("fixed:0s")
	fmt.Println(errors.Is(err, fleet.ErrInvalidArgument), err)
	// Output:
	// linear 5000 60000
	// <nil>
	// true fleet: invalid argument: backoff "fixed:0s": the base 0s is under a millisecond
}

func ExampleRetryAfter() {
	f, done := exampleFleet("retryafter")
	defer done()
	ctx := context.Background()
	q := fleet.NewQueue[Harvest](f, "remote", fleet.QueueOptions{})
	if _, err := q.Submit(ctx, Harvest{URL: "https://example.com"}); err != nil {
		panic(err)
	}
	tasks, err := q.Reserve(ctx, 1, time.Second)
	if err != nil {
		panic(err)
	}
	// What a handler returns when the remote side said "Retry-After: 120":
	// the attempt counts, and the retry is due in two minutes, not after
	// the backoff.
	cause := fleet.RetryAfter(2*time.Minute, errors.New("503 from upstream"))
	var ra *fleet.RetryAfterError
	fmt.Println(errors.As(cause, &ra), ra.After)
	if err := tasks[0].Nack(ctx, cause); err != nil {
		panic(err)
	}
	st, _ := q.Stats(ctx)
	fmt.Println("scheduled", st.Scheduled)
	// Output:
	// true 2m0s
	// scheduled 1
}
