package fleet

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/redis/rueidis"
)

var lockHandoverScript = newScript("lock_handover.lua")

// maxHandovers bounds how many times in a row a lock passes straight from a
// holder to a waiter of the same process; then a plain release lets the
// waiters of other processes have their turn.
const maxHandovers = 8

// lockWaiter is one Acquire waiting on a lock in this process. A releasing
// holder of the same process may pick it (assigned) and pass it the lock
// with one script: got then receives the new lease, or nil when the hand
// over failed and the waiter must try for itself.
type lockWaiter struct {
	token    string
	hold     time.Duration
	assigned bool // guarded by watcher.mu
	queued   bool // guarded by watcher.mu
	got      chan *Lease
}

// enqueue puts w at the back (or, when it lost a hand-over, the front) of
// the gate's waiters.
func (w *watcher) enqueue(g *gate, lw *lockWaiter, front bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if lw.queued {
		return
	}
	lw.queued, lw.assigned = true, false
	if front {
		g.handoff = append([]any{lw}, g.handoff...)
	} else {
		g.handoff = append(g.handoff, lw)
	}
}

// dequeue takes lw out of the gate's waiters and reports whether a holder
// had already picked it, in which case a delivery on lw.got is coming.
func (w *watcher) dequeue(g *gate, lw *lockWaiter) (assigned bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if lw.queued {
		for i, x := range g.handoff {
			if x == any(lw) {
				g.handoff = append(g.handoff[:i], g.handoff[i+1:]...)
				break
			}
		}
		lw.queued = false
	}
	return lw.assigned
}

// pickWaiter takes the first waiter of key for a hand-over, or returns nil
// when there is none or the lock was handed over maxHandovers times in a
// row (which resets the count).
func (w *watcher) pickWaiter(key string) *lockWaiter {
	w.mu.Lock()
	defer w.mu.Unlock()
	g := w.gates[key]
	if g == nil || len(g.handoff) == 0 {
		return nil
	}
	if g.handovers >= maxHandovers {
		g.handovers = 0
		return nil
	}
	g.handovers++
	lw := g.handoff[0].(*lockWaiter)
	g.handoff = g.handoff[1:]
	lw.queued, lw.assigned = false, true
	return lw
}

// handover passes the lease's lock to lw in one script and delivers the
// outcome to lw. It reports whether the lock was passed.
func (l *Lease) handover(ctx context.Context, lw *lockWaiter) (bool, error) {
	lk := l.lock
	sent := monoNow() // the waiter's lease counts from here
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
	g := watch.join(l.key)
	defer watch.leave(l.key, g)
	lw := &lockWaiter{token: token, hold: hold, got: make(chan *Lease, 1)}
	watch.enqueue(g, lw, false)
	handed := false // the lease came by a hand-over: its delivery is consumed
	defer func() {
		if watch.dequeue(g, lw) && !handed {
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
			poke(g.one)
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
			got, delivered, err := l.f.nap(ctx, d, deadline.C, g.one, lw.got)
			switch {
			case err != nil:
				return nil, err
			case delivered && got != nil:
				handed = true
				return got, nil
			case delivered:
				// The holder lost the lock before it could hand it over:
				// keep this waiter's place and try at once.
				watch.enqueue(g, lw, true)
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
