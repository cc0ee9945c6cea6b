package fleet

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

var queueSnoozeScript = newScript("queue_snooze.lua")

// snoozeWake bounds the snoozes after which this process wakes its own
// reserves of the queue when the task is due; longer ones are found by the
// reserves' polls.
const snoozeWake = time.Minute

// refundTimeout bounds giving back the tokens a limited reserve took and
// did not use.
const refundTimeout = time.Second

// Snooze ends the reservation without counting an attempt: the task goes,
// unchanged, to :scheduled, due after (server clock; a negative after
// counts as zero). It is what a batch worker does for a handler that
// returned RateLimited. When the task is due (within a minute), this
// process's workers and Reserve calls on the queue are woken to take it.
// A task that Queue.Cancel asked to stop goes to the dead letters instead,
// as cancelled, and Snooze says ErrCanceled. May return ErrLeaseLost
// (nothing changes), ErrCanceled, ErrWrongType, ErrUnavailable.
func (t *Task[T]) Snooze(ctx context.Context, after time.Duration) error {
	q := t.q
	if err := q.ready(ctx); err != nil {
		return opErr("snooze", q.name, err)
	}
	keys := []string{q.k.Processing, q.k.Body, q.k.Lease, q.k.Scheduled, q.k.Dead, q.k.Dedup}
	delay := millis(max(after, 0))
	at, err := withCanceledEntry(func(entry string) (int64, error) {
		return queueSnoozeScript.Exec(ctx, q.f.client, keys, []string{t.ID, t.token, delay, entry, t.dedup}).AsInt64()
	}, func(at int64) bool { return at == -2 }, func() string { return t.canceledEntry("snoozed before it ended") })
	switch {
	case err != nil:
	case at == 0:
		err = fmt.Errorf("%w: task %s", ErrLeaseLost, t.ID)
	case at < 0:
		return opErr("snooze", q.name, t.buriedCanceled(ctx))
	}
	if err == nil && after <= snoozeWake {
		// Wake this process's reserves when the task is due: an idle
		// fetcher would otherwise only find it at its next poll.
		time.AfterFunc(max(after, 0)+time.Millisecond, func() {
			if q.look != nil {
				q.look.soon() // the next reserve looks at :scheduled
			}
			q.f.watch.pokeAll(q.k.Pending)
		})
	}
	return opErr("snooze", q.name, err)
}

// snoozeLimited snoozes t for the retry-after of err, a RateLimitedError.
func (t *Task[T]) snoozeLimited(ctx context.Context, err error) error {
	var rl *RateLimitedError
	if !errors.As(err, &rl) {
		return t.Snooze(ctx, 0)
	}
	return t.Snooze(ctx, rl.RetryAfter)
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
// (Limiter.book): it may be used from at (monoNow) on.
type limitBooking struct {
	mu   sync.Mutex
	held bool
	at   int64
}

// limitTake takes the queue's tokens for a reserve of up to n tasks: a
// token booked earlier once it is due, else as many as the limiter has,
// up to n, else it books one. It returns how many tasks the reserve may
// take, or how long until it may take one.
func (q *Queue[T]) limitTake(ctx context.Context, n int) (int, time.Duration, error) {
	b := &q.booked
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.held {
		if d := b.at - monoNow(); d > 0 {
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
	b.held, b.at = true, monoNow()+int64(wait)
	return 0, wait, nil
}

// reserveAs is reserveOnceAs under the queue's rate limit (QueueOptions.
// RateLimit): it first takes the limiter's tokens (limitTake), reserves that
// many tasks at most, and gives back the tokens of the tasks it did not
// find, so an empty queue costs the limiter nothing. With no token to use
// yet it reserves nothing, and says in
// reserveState.limited how long until it may: the fetcher and Reserve
// sleep that long instead of spinning. The token it booked meanwhile
// counts as taken, so a reserve that comes late loses no rate. A handle
// stopped with a token booked leaves it unused.
func (q *Queue[T]) reserveAs(ctx context.Context, n int, wantLeft bool, owner string) ([]*Task[T], reserveState, error) {
	lim := q.opts.RateLimit
	if lim == nil {
		return q.reserveOnceAs(ctx, n, wantLeft, owner)
	}
	got, wait, err := q.limitTake(ctx, n)
	if err != nil || got == 0 {
		return nil, reserveState{nextReady: -1, limited: wait}, err
	}
	tasks, st, err := q.reserveOnceAs(ctx, got, wantLeft, owner)
	if unused := got - len(tasks); unused > 0 {
		// A refund that fails only slows the limiter down for a moment.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), refundTimeout)
		_ = lim.refund(rctx, unused)
		cancel()
	}
	return tasks, st, err
}
