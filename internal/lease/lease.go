// Package lease is the one lease mechanism of every primitive that holds
// something under a lease: locks, semaphore permits, pool claims and task
// reservations. It knows no primitive. A lease's end is counted on this
// process's monotonic clock (internal/mono) from the send of the call that
// took it or last extended it (Clock), so it is never later than the end
// the server counts. Work under a lease gets a ctx (Start) that ends, with
// cause fault.LeaseLost, at that end less a margin, on a timer and
// whenever the ctx's Err is asked, whether or not Redis answers; while the
// work runs, the lease is extended on the same timer.
package lease

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fleet-go/fleet/internal/fault"
	"github.com/fleet-go/fleet/internal/mono"
)

// Margin is how long before the end of a lease that this process can
// prove (Task.Deadline, Lease.Deadline, Claim.Deadline) the lease counts as
// over, and the work under it is cancelled: room for the work to notice,
// and for clocks that run at slightly different rates.
func Margin(lease time.Duration) time.Duration {
	return min(max(lease/10, 5*time.Millisecond), time.Second)
}

// Clock is the end of a lease that this process can prove, as mono.Now:
// the send time of the call that took or last extended it, plus the
// lease. Its zero value is a lease that ended; its methods are safe for
// concurrent use.
type Clock struct{ end atomic.Int64 }

// Prove records a lease of d taken or extended by a call sent at sent (a
// mono.Now reading from before the send).
func (c *Clock) Prove(sent int64, d time.Duration) { c.end.Store(sent + int64(d)) }

// Lose ends the lease now, unless it ended already: Redis said it is not
// held, or it was given back.
func (c *Clock) Lose() {
	now := mono.Now()
	for {
		e := c.end.Load()
		if e <= now || c.end.CompareAndSwap(e, now) {
			return
		}
	}
}

// Deadline is the lease's end as a time.Time on the monotonic clock.
func (c *Clock) Deadline() time.Time { return mono.Time(c.end.Load()) }

// Usable reports whether more than margin of the lease is left.
func (c *Clock) Usable(margin time.Duration) bool {
	return mono.Now() < c.end.Load()-int64(margin)
}

// Keep says how Start keeps one lease.
type Keep struct {
	// Clock is the lease's clock, which Extend proves anew.
	Clock *Clock
	// Margin is how long before the lease's end the work's ctx ends
	// (usually Margin of the lease).
	Margin time.Duration
	// Every is how often the lease is extended while the work runs; 0
	// never: the work's ctx then ends at the lease's end, less Margin.
	Every time.Duration
	// Extend extends the lease and proves Clock anew; its ctx ends at the
	// lease's end less Margin, so that a frozen connection cannot hold an
	// extension past it. fault.LeaseLost and fault.Canceled (a task that
	// Queue.Cancel asked to stop) end the work's ctx with that cause.
	Extend func(ctx context.Context) error
	// Failed is told of an extension that failed otherwise (the next tick
	// tries again, while the lease lasts); nil: nobody.
	Failed func(err error)
	// StopAt, when not 0, is a mono.Now at which the work's ctx ends with
	// StopCause whatever the lease (a batch handler's timeout), on the
	// same timer: its Err is then context.DeadlineExceeded and its
	// Deadline that time, as for a ctx of context.WithDeadlineCause.
	StopAt    int64
	StopCause error
}

// Kept is a lease kept alive while its work runs, from a timer: no
// goroutine of its own while nothing is due. At each tick it extends the
// lease when an extension is due, and it ends the work's ctx when the
// lease it can prove runs out (less the margin) before an extension was
// confirmed: Redis unreachable, or too slow to answer. From then on
// another may hold what the lease held, so the work must stop.
type Kept struct {
	k      Keep
	ctx    context.Context
	cancel context.CancelCauseFunc

	mu      sync.Mutex // held while a tick runs, so that Stop waits for it
	stopped bool
	timer   *time.Timer
	next    int64 // mono.Now at which the next extension is due
}

// Start starts keeping the lease of k for work under parent. Its ctx
// (Ctx) ends with the cause the lease ended with; Cancel ends it sooner
// with a cause of the caller's. Give the work Wrap(Ctx()), or Wrap of a
// ctx derived from it: its Err looks at the clock too. Stop ends the
// keeping.
func Start(parent context.Context, k Keep) *Kept {
	l := &Kept{k: k}
	l.ctx, l.cancel = context.WithCancelCause(parent)
	l.next = mono.Now() + int64(k.Every)
	if k.Every <= 0 {
		l.next = 1<<63 - 1
	}
	l.mu.Lock()
	l.timer = time.AfterFunc(l.wait(), l.tick)
	l.mu.Unlock()
	return l
}

// Ctx is the work's ctx, before Wrap: it ends with the cause the lease
// ended with, or with Cancel's.
func (l *Kept) Ctx() context.Context { return l.ctx }

// Cancel ends the work's ctx with cause (nil: context.Canceled), unless it
// ended already.
func (l *Kept) Cancel(cause error) { l.cancel(cause) }

// CancelFunc is Cancel as the func it calls, for a caller that hands it
// on: unlike the method value l.Cancel, it allocates nothing.
func (l *Kept) CancelFunc() context.CancelCauseFunc { return l.cancel }

// Wrap returns ctx (Ctx or one derived from it, such as one with a
// timeout) with an Err that also looks at the clock: a lease that ran out
// (less the margin) cancels Ctx at once, with fault.LeaseLost, even before
// the timer fired. A process resumed after a pause (SIGSTOP, a frozen VM)
// runs its goroutines before its timers; without this, the work's next
// ctx.Err() could still say nil past the lease. It must be the outermost
// ctx the work sees.
func (l *Kept) Wrap(ctx context.Context) context.Context {
	return &leaseCtx{Context: ctx, l: l}
}

// wait is how long until the next tick: the next extension, the end of
// the proven lease or the stop, whichever comes first.
func (l *Kept) wait() time.Duration {
	end := l.k.Clock.end.Load() - int64(l.k.Margin)
	if l.k.StopAt != 0 {
		end = min(end, l.k.StopAt)
	}
	return time.Duration(min(l.next, end) - mono.Now())
}

// stopDue ends the ctx with StopCause when StopAt has come, and reports
// whether it did.
func (l *Kept) stopDue(now int64) bool {
	if l.k.StopAt == 0 || now < l.k.StopAt {
		return false
	}
	l.cancel(l.k.StopCause)
	return true
}

func (l *Kept) tick() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped || l.ctx.Err() != nil {
		return
	}
	now := mono.Now()
	if l.stopDue(now) {
		return
	}
	if now >= l.k.Clock.end.Load()-int64(l.k.Margin) {
		l.cancel(fmt.Errorf("%w: no extension confirmed before the lease ran out", fault.LeaseLost))
		return
	}
	if now >= l.next {
		l.next = now + int64(l.k.Every)
		ectx, ecancel := context.WithDeadline(l.ctx, l.k.Clock.Deadline().Add(-l.k.Margin))
		err := l.k.Extend(ectx)
		ecancel()
		switch {
		case errors.Is(err, fault.LeaseLost):
			l.k.Clock.Lose()
			l.cancel(err)
			return
		case errors.Is(err, fault.Canceled):
			l.cancel(fault.Canceled)
			return
		case err != nil && l.ctx.Err() == nil && l.k.Failed != nil:
			l.k.Failed(err)
		}
	}
	l.timer.Reset(l.wait())
}

// Stop ends the keeping; it waits for a tick in progress (an extension in
// flight, bounded by the lease) to end. The ctx stays as it is.
func (l *Kept) Stop() {
	l.mu.Lock()
	l.stopped = true
	l.timer.Stop()
	l.mu.Unlock()
}

// Lost reports whether the lease ended the work's ctx: it can no longer be
// proven, or Redis said it is lost.
func (l *Kept) Lost() bool { return errors.Is(context.Cause(l.ctx), fault.LeaseLost) }

// leaseCtx is Kept.Wrap's ctx.
type leaseCtx struct {
	context.Context
	l *Kept
}

func (c *leaseCtx) Err() error {
	if err := c.Context.Err(); err != nil {
		return c.stopped(err)
	}
	if now := mono.Now(); !c.l.stopDue(now) && !c.l.k.Clock.Usable(c.l.k.Margin) {
		c.l.cancel(fmt.Errorf("%w: the lease ran out before an extension was confirmed", fault.LeaseLost))
	}
	return c.stopped(c.Context.Err())
}

// stopped says context.DeadlineExceeded for a ctx that its StopAt ended,
// as a deadline's ctx would.
func (c *leaseCtx) stopped(err error) error {
	if err != nil && c.l.k.StopAt != 0 && context.Cause(c.l.ctx) == c.l.k.StopCause {
		return context.DeadlineExceeded
	}
	return err
}

// Deadline is the stop's, when it comes before the parent's.
func (c *leaseCtx) Deadline() (time.Time, bool) {
	d, ok := c.Context.Deadline()
	if c.l.k.StopAt == 0 {
		return d, ok
	}
	stop := time.Now().Add(time.Duration(c.l.k.StopAt - mono.Now()))
	if !ok || stop.Before(d) {
		return stop, true
	}
	return d, ok
}
