package fleet

// One lease mechanism for every primitive that holds something under a
// lease: locks, semaphore permits, pool claims and task reservations. A
// lease's end is counted on this process's monotonic clock from the send
// of the call that took it or last extended it (leaseClock), so it is
// never later than the end the server counts. Work under a lease gets a
// ctx (keepLease) that ends, with cause ErrLeaseLost, at that end less a
// margin, on a timer and whenever the ctx's Err is asked, whether or not
// Redis answers; while the work runs, the lease is extended on the same
// timer. Lock and Semaphore share one acquire loop (acquireLease), and
// Lock.Do, Semaphore.Do and Query.Do one runner (runLeased).

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// leaseMargin is how long before the end of a lease that this process can
// prove (Task.Deadline, Lease.Deadline, Claim.Deadline) the lease counts as
// over, and the work under it is cancelled: room for the work to notice,
// and for clocks that run at slightly different rates.
func leaseMargin(lease time.Duration) time.Duration {
	return min(max(lease/10, 5*time.Millisecond), time.Second)
}

// leaseClock is the end of a lease that this process can prove, as
// monoNow: the send time of the call that took or last extended it, plus
// the lease. Its methods are safe for concurrent use.
type leaseClock struct{ end atomic.Int64 }

// prove records a lease of d taken or extended by a call sent at sent (a
// monoNow reading from before the send).
func (c *leaseClock) prove(sent int64, d time.Duration) { c.end.Store(sent + int64(d)) }

// lose ends the lease now, unless it ended already: Redis said it is not
// held, or it was given back.
func (c *leaseClock) lose() {
	now := monoNow()
	for {
		e := c.end.Load()
		if e <= now || c.end.CompareAndSwap(e, now) {
			return
		}
	}
}

// deadline is the lease's end as a time.Time on the monotonic clock.
func (c *leaseClock) deadline() time.Time { return monoTime(c.end.Load()) }

// usable reports whether more than margin of the lease is left.
func (c *leaseClock) usable(margin time.Duration) bool {
	return monoNow() < c.end.Load()-int64(margin)
}

// leaseKeep says how keepLease keeps one lease.
type leaseKeep struct {
	clock  *leaseClock
	margin time.Duration
	// every is how often the lease is extended while the work runs; 0
	// never: the work's ctx then ends at the lease's end, less margin.
	every time.Duration
	// extend extends the lease and proves clock anew; its ctx ends at the
	// lease's end less margin, so that a frozen connection cannot hold an
	// extension past it. ErrLeaseLost and ErrCanceled (a task that
	// Queue.Cancel asked to stop) end the work's ctx with that cause.
	extend func(ctx context.Context) error
	// failed is told of an extension that failed otherwise (the next tick
	// tries again, while the lease lasts); nil: nobody.
	failed func(err error)
	// stopAt, when not 0, is a monoNow at which the work's ctx ends with
	// stopCause whatever the lease (a batch handler's timeout), on the
	// same timer: its Err is then context.DeadlineExceeded and its
	// Deadline that time, as for a ctx of context.WithDeadlineCause.
	stopAt    int64
	stopCause error
}

// keptLease is a lease kept alive while its work runs, from a timer: no
// goroutine of its own while nothing is due. At each tick it extends the
// lease when an extension is due, and it ends the work's ctx when the
// lease it can prove runs out (less the margin) before an extension was
// confirmed: Redis unreachable, or too slow to answer. From then on
// another may hold what the lease held, so the work must stop.
type keptLease struct {
	k      leaseKeep
	ctx    context.Context
	cancel context.CancelCauseFunc

	mu      sync.Mutex // held while a tick runs, so that stop waits for it
	stopped bool
	timer   *time.Timer
	next    int64 // monoNow at which the next extension is due
}

// keepLease starts keeping the lease of k for work under parent. Its ctx
// (ctx) ends with the cause the lease ended with; cancel ends it sooner
// with a cause of the caller's. Give the work wrap(ctx), or wrap of a ctx
// derived from it: its Err looks at the clock too. stop ends the keeping.
func keepLease(parent context.Context, k leaseKeep) *keptLease {
	l := &keptLease{k: k}
	l.ctx, l.cancel = context.WithCancelCause(parent)
	l.next = monoNow() + int64(k.every)
	if k.every <= 0 {
		l.next = 1<<63 - 1
	}
	l.mu.Lock()
	l.timer = time.AfterFunc(l.wait(), l.tick)
	l.mu.Unlock()
	return l
}

// wrap returns ctx (l.ctx or one derived from it, such as one with a
// timeout) with an Err that also looks at the clock: a lease that ran out
// (less the margin) cancels l.ctx at once, with ErrLeaseLost, even before
// the timer fired. A process resumed after a pause (SIGSTOP, a frozen VM)
// runs its goroutines before its timers; without this, the work's next
// ctx.Err() could still say nil past the lease. It must be the outermost
// ctx the work sees.
func (l *keptLease) wrap(ctx context.Context) context.Context {
	return &leaseCtx{Context: ctx, l: l}
}

// wait is how long until the next tick: the next extension, the end of
// the proven lease or the stop, whichever comes first.
func (l *keptLease) wait() time.Duration {
	end := l.k.clock.end.Load() - int64(l.k.margin)
	if l.k.stopAt != 0 {
		end = min(end, l.k.stopAt)
	}
	return time.Duration(min(l.next, end) - monoNow())
}

// stopDue ends the ctx with stopCause when stopAt has come, and reports
// whether it did.
func (l *keptLease) stopDue(now int64) bool {
	if l.k.stopAt == 0 || now < l.k.stopAt {
		return false
	}
	l.cancel(l.k.stopCause)
	return true
}

func (l *keptLease) tick() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped || l.ctx.Err() != nil {
		return
	}
	now := monoNow()
	if l.stopDue(now) {
		return
	}
	if now >= l.k.clock.end.Load()-int64(l.k.margin) {
		l.cancel(fmt.Errorf("%w: no extension confirmed before the lease ran out", ErrLeaseLost))
		return
	}
	if now >= l.next {
		l.next = now + int64(l.k.every)
		ectx, ecancel := context.WithDeadline(l.ctx, l.k.clock.deadline().Add(-l.k.margin))
		err := l.k.extend(ectx)
		ecancel()
		switch {
		case errors.Is(err, ErrLeaseLost):
			l.k.clock.lose()
			l.cancel(err)
			return
		case errors.Is(err, ErrCanceled):
			l.cancel(ErrCanceled)
			return
		case err != nil && l.ctx.Err() == nil && l.k.failed != nil:
			l.k.failed(err)
		}
	}
	l.timer.Reset(l.wait())
}

// stop ends the keeping; it waits for a tick in progress (an extension in
// flight, bounded by the lease) to end. The ctx stays as it is.
func (l *keptLease) stop() {
	l.mu.Lock()
	l.stopped = true
	l.timer.Stop()
	l.mu.Unlock()
}

// lost reports whether the lease ended the work's ctx: it can no longer be
// proven, or Redis said it is lost.
func (l *keptLease) lost() bool { return errors.Is(context.Cause(l.ctx), ErrLeaseLost) }

// leaseCtx is keptLease.wrap's ctx.
type leaseCtx struct {
	context.Context
	l *keptLease
}

func (c *leaseCtx) Err() error {
	if err := c.Context.Err(); err != nil {
		return c.stopped(err)
	}
	if now := monoNow(); !c.l.stopDue(now) && !c.l.k.clock.usable(c.l.k.margin) {
		c.l.cancel(fmt.Errorf("%w: the lease ran out before an extension was confirmed", ErrLeaseLost))
	}
	return c.stopped(c.Context.Err())
}

// stopped says context.DeadlineExceeded for a ctx that its stopAt ended,
// as a deadline's ctx would.
func (c *leaseCtx) stopped(err error) error {
	if err != nil && c.l.k.stopAt != 0 && context.Cause(c.l.ctx) == c.l.k.stopCause {
		return context.DeadlineExceeded
	}
	return err
}

// Deadline is the stop's, when it comes before the parent's.
func (c *leaseCtx) Deadline() (time.Time, bool) {
	d, ok := c.Context.Deadline()
	if c.l.k.stopAt == 0 {
		return d, ok
	}
	stop := time.Now().Add(time.Duration(c.l.k.stopAt - monoNow()))
	if !ok || stop.Before(d) {
		return stop, true
	}
	return d, ok
}

// leased is what runLeased runs fn under: the lease, how to end it (end
// runs with a ctx of its own, bounded by the hold: the caller's ctx may be
// why fn ended), and how to give it up in the background when it was lost
// (the connection may be what failed, and the server may still hold it for
// us).
type leased struct {
	op, name string
	keep     leaseKeep
	hold     time.Duration
	end      func(ctx context.Context) error
	abandon  func()
}

// runLeased runs fn with a ctx kept by l.keep (see keepLease), and always
// ends the lease afterwards, even when fn panics (the panic goes on after
// the end): by l.end, or, when the lease was lost, by l.abandon. It returns
// fn's error, joined with a failed end's, or with ErrLeaseLost when the
// lease was lost while fn ran.
func runLeased(ctx context.Context, l leased, fn func(ctx context.Context) error) (err error) {
	kept := keepLease(ctx, l.keep)
	defer func() {
		kept.stop()
		lost := kept.lost()
		kept.cancel(nil)
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
	return fn(kept.wrap(kept.ctx))
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
// than leaseMargin(hold) left: one whose reply came back too late (a
// paused server, a slow network) is given back and tried again within the
// wait. It returns ErrNotObtained when the wait runs out.
func acquireLease(ctx context.Context, a acquirer, hold, wait time.Duration) (*Lease, error) {
	until := time.Now().Add(wait)
	for {
		token := newToken()
		lease, next, err := a.try(ctx, token, hold)
		if lease == nil && err == nil {
			if wait == 0 {
				return nil, ErrNotObtained
			}
			lease, err = a.wait(ctx, token, hold, until, next)
		}
		if err != nil {
			return nil, err
		}
		if lease.clock.usable(leaseMargin(hold)) {
			return lease, nil
		}
		// Expired on arrival: the reply came back too late to use the
		// lease. Give it back (another may hold it already, which the
		// release leaves alone) and try again within the wait.
		if err := lease.Release(ctx); err != nil && !errors.Is(err, ErrLeaseLost) {
			a.abandon(lease.token, hold, false)
		}
		if !time.Now().Before(until) {
			return nil, ErrNotObtained
		}
	}
}
