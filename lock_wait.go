package fleet

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/redis/rueidis"

	"github.com/fleet-go/fleet/internal/mono"
	"github.com/fleet-go/fleet/internal/wake"
)

var lockHandoverScript = newScript("lock_handover.lua")

// lockWaiter is one Acquire waiting on a lock in this process. A releasing
// holder of the same process may pick it (assigned: wake.Watcher.Pick, at
// most a bounded number of times in a row) and pass it the lock with one
// script: got then receives the new lease, or nil when the hand over failed
// and the waiter must try for itself. Its place in the gate's hand-over
// queue (wake.Place) is guarded by the watcher.
type lockWaiter struct {
	wake.Place
	token string
	hold  time.Duration
	got   chan *Lease
}

// pickWaiter takes the first lock waiter of key for a hand-over, or returns
// nil when there is none or the lock was handed over too many times in a
// row (wake.Watcher.Pick).
func pickWaiter(w *wake.Watcher, key string) *lockWaiter {
	if x := w.Pick(key); x != nil {
		return x.(*lockWaiter)
	}
	return nil
}

// handover passes the lease's lock to lw in one script and delivers the
// outcome to lw. It reports whether the lock was passed.
func (l *Lease) handover(ctx context.Context, lw *lockWaiter) (bool, error) {
	lk := l.lock
	sent := mono.Now() // the waiter's lease counts from here
	s, err := lockHandoverScript.Exec(ctx, lk.f.client, []string{lk.key, lk.fence},
		[]string{l.token, lw.token, millis(lw.hold), millis(max(lw.hold, fenceLife))}).ToString()
	if err != nil {
		lw.got <- nil
		if rueidis.IsRedisNil(err) {
			return false, nil
		}
		return false, err
	}
	fence, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		lw.got <- nil
		return false, err
	}
	lw.got <- newLease(lk, lw.token, fence, sent, lw.hold)
	return true, nil
}

// wait blocks until the lock is taken for token, until comes, ctx ends or
// the Fleet closes. Waiters wake on a hand-over from a holder of
// this process, on the invalidation of the lock key (a release anywhere),
// or on a capped, jittered backoff as the fallback.
func (l *Lock) wait(ctx context.Context, token string, hold time.Duration, until time.Time, pttl time.Duration) (lease *Lease, err error) {
	deadline := time.NewTimer(time.Until(until))
	defer deadline.Stop()
	watch := l.f.watch
	g := watch.Join(l.key)
	defer watch.Leave(l.key, g)
	lw := &lockWaiter{token: token, hold: hold, got: make(chan *Lease, 1)}
	watch.Enqueue(g, lw, false)
	handed := false // the lease came by a hand-over: its delivery is consumed
	defer func() {
		if watch.Dequeue(g, lw) && !handed {
			// A holder picked this waiter: its delivery is one round trip away.
			if got := <-lw.got; got != nil {
				if lease == nil {
					// Handed over after giving up: pass it on, within the
					// hold it was handed with.
					rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), hold)
					if err := got.Release(rctx); outcomeUnknown(err) {
						l.abandon(got.token, hold, false)
					}
					cancel()
				}
			}
		}
		if err != nil {
			// A waiter that gives up may have taken a wake-up meant to
			// hand the lock on: pass it to the next waiter.
			g.WakeOne()
		}
	}()
	bo := backoff{min: 2 * time.Millisecond, max: 250 * time.Millisecond}
	for {
		// Arm the server's invalidation for the key, and catch a release
		// that came between the failed try and now.
		d, err := l.f.napFor(&bo, pttl, func() (bool, error) {
			held, err := l.f.hint(ctx, l.key)
			return err == nil && held == nil, err
		})
		if err != nil {
			return nil, err
		}
		if d > 0 {
			got, delivered, err := l.f.nap(ctx, d, deadline.C, g.One(), lw.got)
			switch {
			case err != nil:
				return nil, err
			case delivered && got != nil:
				handed = true
				return got, nil
			case delivered:
				// The holder lost the lock before it could hand it over:
				// keep this waiter's place and try at once.
				watch.Enqueue(g, lw, true)
			}
		}
		if lease, pttl, err = l.try(ctx, token, hold); lease != nil || err != nil {
			return lease, err
		}
	}
}

// napFor is how long a lock or semaphore waiter sleeps before its next
// try: the backoff, or, with client-side caching, up to 8 times it (capped
// at a second: with invalidations on, the backoff only covers a missed
// one) after arm armed the key's invalidation, and 0 when arm saw the key
// free. It is capped by next, when the first lease ends (-1: unknown). A
// failed arm is an error, unless ctx ended (the nap then says so).
func (f *Fleet) napFor(bo *backoff, next time.Duration, arm func() (free bool, err error)) (time.Duration, error) {
	d := bo.next()
	if f.cache {
		free, err := arm()
		if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
			return 0, err
		}
		if free {
			d = 0
		}
		d = min(d*8, time.Second)
	}
	if next >= 0 && d > next {
		d = next
	}
	return d, nil
}

// nap sleeps d, or until ctx ends (its error), deadline fires
// (ErrNotObtained), the Fleet closes (ErrClosed), one wakes it, or got
// delivers a lock's hand-over (delivered; the lease may be nil). A nil got
// never delivers.
func (f *Fleet) nap(ctx context.Context, d time.Duration, deadline <-chan time.Time, one <-chan struct{}, got <-chan *Lease) (lease *Lease, delivered bool, err error) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return nil, false, ctx.Err()
	case <-deadline:
		return nil, false, ErrNotObtained
	case <-f.done:
		return nil, false, ErrClosed
	case lease = <-got:
		return lease, true, nil
	case <-one:
	case <-t.C:
	}
	return nil, false, nil
}
