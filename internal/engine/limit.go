package engine

import (
	"context"
	"sync"
	"time"

	"github.com/fleet-go/fleet/internal/mono"
)

// snoozeWake bounds the snoozes after which this process wakes its own
// reserves of the queue when the task is due; longer ones are found by the
// reserves' polls.
const snoozeWake = time.Minute

// Limiter is a rate limit on a queue's reserves (the root's Limiter,
// QueueOptions.RateLimit).
type Limiter interface {
	// Book takes up to n tokens: it returns how many it took, or, with none
	// to take now, books one and says how long until it is due.
	Book(ctx context.Context, n int) (int, time.Duration, error)
	// Refund gives back n tokens taken and not used, within a bound of its
	// own: ctx never ends (no caller waits on it).
	Refund(ctx context.Context, n int) error
}

// limitBooking is a token that a limited queue handle booked ahead
// (Limiter.book): it may be used from at (mono.Now) on.
type limitBooking struct {
	mu   sync.Mutex
	held bool
	at   int64
}

// limitTake takes the queue's tokens for a reserve of up to n tasks: a
// token booked earlier once it is due, else as many as the limiter has,
// up to n, else it books one. It returns how many tasks the reserve may
// take, or how long until it may take one.
func (q *Queue) limitTake(ctx context.Context, n int) (int, time.Duration, error) {
	b := &q.booked
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.held {
		if d := b.at - mono.Now(); d > 0 {
			return 0, time.Duration(d), nil
		}
		b.held = false
		return 1, 0, nil
	}
	got, wait, err := q.opts.RateLimit.Book(ctx, n)
	if err != nil || wait == 0 {
		return got, 0, err
	}
	// Counted from the reply: on this clock, no sooner than the server's.
	b.held, b.at = true, mono.Now()+int64(wait)
	return 0, wait, nil
}
