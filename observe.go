package fleet

import (
	"context"
	"time"

	"github.com/fleet-go/fleet/internal/mono"
)

// swept tells the Observer what a sweep of queue did, when it did
// anything.
func (f *Fleet) swept(ctx context.Context, e SweepEvent) {
	if f.obs != nil && f.obs.Swept != nil && e.Requeued+e.DeadLettered+e.Moved+e.Trimmed > 0 {
		f.obs.Swept(ctx, e)
	}
}

// limited tells the Observer of a decision of limiter.
func (f *Fleet) limited(ctx context.Context, limiter string, tokens, taken int, delay time.Duration) {
	if f.obs != nil && f.obs.Limited != nil {
		f.obs.Limited(ctx, LimitEvent{Limiter: limiter, Tokens: tokens, Taken: taken, Delay: delay})
	}
}

// semaphoreWaited tells the Observer how an acquire of sem that began at
// start (obsStart) went.
func (f *Fleet) semaphoreWaited(ctx context.Context, sem string, start int64, obtained bool, err error) {
	if f.obs != nil && f.obs.SemaphoreWaited != nil {
		f.obs.SemaphoreWaited(ctx, SemaphoreWaitEvent{Semaphore: sem, Wait: time.Duration(mono.Now() - start), Obtained: obtained, Err: err})
	}
}

// obsStart returns the time to measure a wait from: 0 without an
// Observer, so that nothing reads the clock when none is installed.
func (f *Fleet) obsStart() int64 {
	if f.obs == nil {
		return 0
	}
	return mono.Now()
}

// observeSubmit tells the Observer of a submit of ids to queue, adds the
// trace context it returns to bodies (in place) and returns the func to
// call with the outcome (never nil). Without an Observer it does nothing.
func (f *Fleet) observeSubmit(ctx context.Context, queue string, ids, bodies []string, notBefore time.Time, dedup string) submitDone {
	if f.obs == nil { // inlined: without an Observer, this check is all
		return nil
	}
	return f.observeSubmitSlow(ctx, SubmitEvent{Queue: queue, IDs: ids, NotBefore: notBefore, DedupKey: dedup}, bodies)
}

// observeSubmitSlow tells the Observer of submit e, and adds the trace
// context it returns to bodies (in place).
func (f *Fleet) observeSubmitSlow(ctx context.Context, e SubmitEvent, bodies []string) submitDone {
	if f.obs.Submit == nil {
		return nil
	}
	tr, done := f.obs.Submit(ctx, e)
	if field := traceField(tr); field != "" {
		for i, b := range bodies {
			bodies[i] = b[:len(b)-1] + field + "}"
		}
	}
	return done
}

// observeSubmitOne is observeSubmit for one task, whose body it rewrites
// in place.
func (f *Fleet) observeSubmitOne(ctx context.Context, queue, id string, body *string, notBefore time.Time, dedup string) submitDone {
	if f.obs == nil {
		return nil
	}
	return f.observeSubmitOneSlow(ctx, queue, id, body, notBefore, dedup)
}

func (f *Fleet) observeSubmitOneSlow(ctx context.Context, queue, id string, body *string, notBefore time.Time, dedup string) submitDone {
	if f.obs.Submit == nil {
		return nil
	}
	bodies := []string{*body}
	done := f.observeSubmitSlow(ctx, SubmitEvent{Queue: queue, IDs: []string{id}, NotBefore: notBefore, DedupKey: dedup}, bodies)
	*body = bodies[0]
	return done
}

// submitDone reports a submit's outcome to the Observer; nil does nothing.
type submitDone func(written int, err error)

func (d submitDone) call(written int, err error) {
	if d != nil {
		d(written, err)
	}
}

// taskEnded tells the Observer that task id of queue ended with outcome,
// if it did (ok).
func (f *Fleet) taskEnded(ctx context.Context, queue, id string, outcome TaskOutcome, ok bool) {
	if ok && f.obs != nil && f.obs.TaskEnded != nil {
		f.obs.TaskEnded(ctx, TaskEndEvent{Queue: queue, ID: id, Outcome: outcome})
	}
}

// lockWaited tells the Observer how an acquire of lock that began at start
// (obsStart) went.
func (f *Fleet) lockWaited(ctx context.Context, lock string, start int64, obtained bool, err error) {
	if f.obs != nil {
		f.lockWaitedSlow(ctx, lock, start, obtained, err)
	}
}

func (f *Fleet) lockWaitedSlow(ctx context.Context, lock string, start int64, obtained bool, err error) {
	if f.obs.LockWaited == nil {
		return
	}
	f.obs.LockWaited(ctx, LockWaitEvent{Lock: lock, Wait: time.Duration(mono.Now() - start), Obtained: obtained, Err: err})
}

// claimWaited tells the Observer how a claim on pool that began at start
// (obsStart) went.
func (f *Fleet) claimWaited(ctx context.Context, pool string, start int64, claimed bool, err error) {
	if f.obs != nil {
		f.claimWaitedSlow(ctx, pool, start, claimed, err)
	}
}

func (f *Fleet) claimWaitedSlow(ctx context.Context, pool string, start int64, claimed bool, err error) {
	if f.obs.ClaimWaited == nil {
		return
	}
	f.obs.ClaimWaited(ctx, ClaimWaitEvent{Pool: pool, Wait: time.Duration(mono.Now() - start), Claimed: claimed, Err: err})
}
