package fleet

// The lease mechanism of every primitive that holds something under a
// lease (locks, semaphore permits, pool claims and task reservations) is
// internal/lease: a lease's end counted on this process's monotonic clock
// from the send of the call that took it or last extended it (lease.Clock),
// and work under it given a ctx (lease.Start) that ends, with cause
// ErrLeaseLost, at that end less a margin, whether or not Redis answers,
// while the lease is extended on the same timer. What knows the
// primitives is here: Lock and Semaphore share one acquire loop
// (acquireLease), and Lock.Do, Semaphore.Do and Query.Do one runner
// (runLeased).

import (
	"context"
	"errors"
	"time"

	"github.com/fleet-go/fleet/internal/lease"
)

// leased is what runLeased runs fn under: the lease, how to end it (end
// runs with a ctx of its own, bounded by the hold: the caller's ctx may be
// why fn ended), and how to give it up in the background when it was lost
// (the connection may be what failed, and the server may still hold it for
// us).
type leased struct {
	op, name string
	keep     lease.Keep
	hold     time.Duration
	end      func(ctx context.Context) error
	abandon  func()
}

// runLeased runs fn with a ctx kept by l.keep (see lease.Start), and always
// ends the lease afterwards, even when fn panics (the panic goes on after
// the end): by l.end, or, when the lease was lost, by l.abandon. It returns
// fn's error, joined with a failed end's, or with ErrLeaseLost when the
// lease was lost while fn ran.
func runLeased(ctx context.Context, l leased, fn func(ctx context.Context) error) (err error) {
	kept := lease.Start(ctx, l.keep)
	defer func() {
		kept.Stop()
		lost := kept.Lost()
		kept.Cancel(nil)
		if lost {
			l.abandon()
			err = errors.Join(err, opErr(l.op, l.name, ErrLeaseLost))
			return
		}
		ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.hold)
		defer cancel()
		if eerr := l.end(ectx); eerr != nil {
			if outcomeUnknown(eerr) {
				l.abandon()
			}
			err = errors.Join(err, eerr)
		}
	}()
	return fn(kept.Wrap(kept.Ctx()))
}

// acquirer is a lock or a semaphore, as acquireLease takes it.
type acquirer interface {
	// try takes the lease once under token. It returns the lease (its
	// clock counted from just before the send), or how long until the
	// holder's (first) lease ends (-1 when unknown). When the script's
	// outcome is unknown it abandons token.
	try(ctx context.Context, token string, hold time.Duration) (*Lease, time.Duration, error)
	// wait blocks until a lease is taken, until comes (ErrNotObtained),
	// ctx ends or the Fleet closes; token is the one try failed with, and
	// next what it returned.
	wait(ctx context.Context, token string, hold time.Duration, until time.Time, next time.Duration) (*Lease, error)
	// abandon undoes, in the background, a call of token whose outcome is
	// unknown; with tomb it also stops a late acquire of token.
	abandon(token string, hold time.Duration, tomb bool)
}

// acquireLease is the acquire loop of Lock and Semaphore: it tries, waits
// up to wait while another holds the lease, and returns a lease with more
// than lease.Margin(hold) left: one whose reply came back too late (a
// paused server, a slow network) is given back and tried again within the
// wait. It returns ErrNotObtained when the wait runs out.
func acquireLease(ctx context.Context, a acquirer, hold, wait time.Duration) (*Lease, error) {
	until := time.Now().Add(wait)
	for {
		token := newToken()
		l, next, err := a.try(ctx, token, hold)
		if l == nil && err == nil {
			if wait == 0 {
				return nil, ErrNotObtained
			}
			l, err = a.wait(ctx, token, hold, until, next)
		}
		if err != nil {
			return nil, err
		}
		if l.clock.Usable(lease.Margin(hold)) {
			return l, nil
		}
		// Expired on arrival: the reply came back too late to use the
		// lease. Give it back (another may hold it already, which the
		// release leaves alone) and try again within the wait.
		if err := l.Release(ctx); err != nil && !errors.Is(err, ErrLeaseLost) {
			a.abandon(l.token, hold, false)
		}
		if !time.Now().Before(until) {
			return nil, ErrNotObtained
		}
	}
}
