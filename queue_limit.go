package fleet

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/fleet-go/fleet/internal/mono"
)

// snoozeWake bounds the snoozes after which this process wakes its own
// reserves of the queue when the task is due; longer ones are found by the
// reserves' polls.
const snoozeWake = time.Minute

// snoozeLimited snoozes t for the retry-after of err, a RateLimitedError.
func (r *reservation) snoozeLimited(ctx context.Context, err error) error {
	var rl *RateLimitedError
	if !errors.As(err, &rl) {
		return r.Snooze(ctx, 0)
	}
	return r.Snooze(ctx, rl.RetryAfter)
}

// rateLimit checks QueueOptions.RateLimit against the queue's Fleet.
func (o QueueOptions) rateLimit(f *Fleet) error {
	switch l := o.RateLimit; {
	case l == nil:
		return nil
	case l.f != f:
		return fmt.Errorf("%w: QueueOptions.RateLimit %q belongs to another Fleet", ErrInvalidArgument, l.name)
	case l.err != nil:
		return within("QueueOptions.RateLimit", l.err)
	}
	return nil
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
func (q *queueCore) limitTake(ctx context.Context, n int) (int, time.Duration, error) {
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
	got, wait, err := q.opts.RateLimit.book(ctx, n)
	if err != nil || wait == 0 {
		return got, 0, err
	}
	// Counted from the reply: on this clock, no sooner than the server's.
	b.held, b.at = true, mono.Now()+int64(wait)
	return 0, wait, nil
}
