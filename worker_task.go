package fleet

// This file runs one task of a batch worker: the handler under its lease
// (kept alive by a timer), and the outcome: ack (and take the next),
// nack, dead letter, release.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fleet-go/fleet/internal/lease"
	"github.com/fleet-go/fleet/internal/mono"
)

// handle runs one task with its lease kept alive, and ends it by its
// outcome. It returns the next task when the ack took one (finish), and
// what OnTaskEnd was told.
func (b *runner[C, O, P]) handle(run, soft context.Context, s *Slot[C, O], t *Task[P]) (*Task[P], error) {
	next, end := b.handleTask(run, soft, s, t)
	if b.w.opts.OnTaskEnd != nil {
		b.w.opts.OnTaskEnd(t.ID, end)
	}
	return next, end
}

// takeQueue says which queue the call that acks t takes the slot's next
// task from, nil for none: the queue the fetcher's priorities pick among
// those not known to be empty (a batch worker's one queue while it has
// more), unless another slot is free too
// (then the fetcher reserves for all of them in one call) or the worker is
// stopping. Only a queue that a call with acks may take from
// (takesWithAcks) and that is not paused qualifies; a paused queue, or
// caching off (the pause flag could not be read for free), leaves the
// take to the fetcher.
func (b *runner[C, O, P]) takeQueue(ctx, soft context.Context, t *Task[P]) *Queue[P] {
	if soft.Err() != nil || len(b.free) > 0 {
		return nil
	}
	q := b.fetch.takeNext()
	if q == nil || !q.e.TakesWithAcks(ctx) || b.fetch.pausedNow(ctx, q) {
		return nil
	}
	return q
}

func (b *runner[C, O, P]) handleTask(run, soft context.Context, s *Slot[C, O], t *Task[P]) (*Task[P], error) {
	w := b.w
	margin := lease.Margin(t.core.opts.Lease)
	if err := b.startable(run, t, margin); err != nil {
		return nil, err
	}
	s.st.busy.Store(true)
	defer s.st.busy.Store(false)
	keep := b.leaseKeep(t, margin)
	// The handler's timeout ends its ctx on the lease's timer (one timer
	// and one ctx per task, not two).
	to, toCause := w.opts.TaskTimeout, w.timeoutCause
	if own := t.r.Timeout(); own > 0 {
		to = own // SubmitOptions.Timeout
		toCause = fmt.Errorf("%w after %v (the task's own Timeout)", ErrTaskTimeout, to)
	}
	if to > 0 {
		keep.StopAt, keep.StopCause = mono.Now()+int64(to), toCause
	}
	kept := lease.Start(run, keep)
	defer kept.Cancel(nil)
	defer b.cancels.start(t.ID, kept.CancelFunc())()
	hctx := kept.Wrap(kept.Ctx()) // outermost: its Err is the one called
	err := protect(func() error { return b.runHandler(hctx, s, t) })
	kept.Stop()
	cause := context.Cause(hctx)
	b.writeLog(run, t, err == nil)

	if err == nil {
		// Acked even when the lease could not be proven at the end: the
		// ack's owner check refuses it if another took the task meanwhile.
		next, aerr := b.finish(run, soft, t)
		if aerr != nil {
			aerr = endErr(aerr)
			aerr = within("task "+t.ID+": ack", aerr)
			b.failed(s, aerr)
			return next, aerr
		}
		s.st.done.Add(1)
		w.done.Add(1)
		w.succeed()
		return next, nil
	}
	return nil, b.endFailed(run, s, t, err, cause)
}

// startable checks that t may start: its lease leaves more than margin (else
// it goes back uncounted if still ours), and it has not expired (else it
// is buried). The error says why it never runs.
func (b *runner[C, O, P]) startable(run context.Context, t *Task[P], margin time.Duration) error {
	if time.Until(t.Deadline()) < margin {
		// The reserve's reply came too late (held back, a stalled server, a
		// paused process): another worker may get the task any moment.
		// Never start it; hand it back uncounted if it is still ours.
		if cerr := b.release(t.r); cerr != nil {
			return cerr
		}
		return fmt.Errorf("task %s: %w: its lease ran out before it could start", t.ID, ErrLeaseLost)
	}
	if t.r.Expired() {
		// SubmitOptions.ExpiresAt passed while it waited for its slot: it
		// never runs.
		if berr := t.r.Bury(context.WithoutCancel(run), errExpired.Error()); berr != nil {
			b.w.log.Warn("fleet: worker could not bury an expired task", "task", t.ID, "err", berr)
		}
		return fmt.Errorf("task %s: %w before it could start", t.ID, errExpired)
	}
	return nil
}

// endFailed ends t, whose run failed with err (cause: the cause of the
// ctx it ran under, if it ended), by what failed: a cancel buries it, a
// lease lost or a hard stop hands it back uncounted, a rate limit snoozes
// it, ErrPermanent dead-letters it, anything else nacks it. It returns
// what OnTaskEnd is told.
func (b *runner[C, O, P]) endFailed(run context.Context, s *Slot[C, O], t *Task[P], err, cause error) error {
	w := b.w
	ectx, ecancel := context.WithTimeout(context.Background(), endTimeout)
	defer ecancel()
	switch {
	case errors.Is(cause, ErrCanceled):
		return b.endCanceled(ectx, t, err)
	case errors.Is(cause, ErrLeaseLost):
		// The handler was stopped because the lease could no longer be
		// proven: not the task's fault. Hand it back uncounted if it is
		// still ours (else the sweeper has it, or already gave it away).
		if cerr := b.release(t.r); cerr != nil {
			return cerr
		}
		err = within("task "+t.ID, cause)
		b.failed(s, err)
		return err
	case errors.Is(cause, ErrTaskTimeout):
		err = fmt.Errorf("%w: %w", cause, err)
	case run.Err() != nil:
		// Stop's deadline cut it off: interrupted, not failed.
		if cerr := b.release(t.r); cerr != nil {
			return cerr
		}
		return err
	case errors.Is(err, ErrRateLimited) || errors.Is(err, ErrSuspended):
		// Not a failure: the task waits out the limit (internal/engine/limit.go)
		// or its sleep (sleep.go), uncounted.
		if serr := opErr("snooze", t.core.name, snoozeWait(ectx, t.r, err)); errors.Is(serr, ErrCanceled) {
			return serr // Queue.Cancel asked it to stop: buried instead
		} else if serr != nil {
			w.log.Warn("fleet: worker could not snooze a rate-limited or sleeping task", "task", t.ID, "err", serr)
		}
		return err
	}
	var pe *PanicError
	if errors.As(err, &pe) {
		w.log.Error("fleet: task handler panicked", "task", t.ID, "panic", fmt.Sprint(pe.Value), "stack", string(pe.Stack))
	}
	var eerr error
	if errors.Is(err, ErrPermanent) {
		eerr = t.DeadLetter(ectx, err)
	} else {
		eerr = t.Nack(ectx, err)
	}
	if eerr != nil {
		w.log.Warn("fleet: worker could not end a failed task", "task", t.ID, "err", eerr)
	}
	b.failed(s, within("task "+t.ID, err))
	return err
}

// writeLog writes the lines that t's run gave its logger (log.go), if any,
// before its end: acked says the end is an ack (which writes none unless
// it keeps a record). A lease lost is said by the end; any other failure
// drops the lines, with a warning, and the end goes on.
func (b *runner[C, O, P]) writeLog(run context.Context, t *Task[P], acked bool) {
	if t.logs.Load() == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(run), endTimeout)
	defer cancel()
	if err := t.endLog(ctx, acked); err != nil && !errors.Is(err, ErrLeaseLost) {
		b.w.log.Warn("fleet: worker could not write a task's log", "task", t.ID, "err", err)
	}
}

// endTimeout bounds the call that ends a task once its handler returned
// (an ack, a nack, a release): the worker's own deadline, not the
// handler's, so that Stop and Close never wait longer on a server that
// does not answer.
const endTimeout = 10 * time.Second

// endErr reports an end call that ran out of endTimeout as what it is:
// Redis did not answer in time, and the call may or may not have applied
// (ErrUnavailable, as for a connection cut mid-call). The deadline may be
// another slot's: a grouped ack rides on the call of the slot that made
// it (worker_commit.go).
func endErr(err error) error {
	if errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, ErrUnavailable) {
		return fmt.Errorf("%w: no reply in time, so the outcome is unknown: %w", ErrUnavailable, err)
	}
	return err
}

func (b *runner[C, O, P]) failed(s *Slot[C, O], err error) {
	s.st.failed.Add(1)
	b.w.failed.Add(1)
	b.w.fail(err, true)
}

// leaseKeep is how a slot keeps t's lease while its handler runs
// (lease.Start): extended every WorkerOptions.LeaseExtend (a third of the
// lease by default), the handler's ctx ending when the lease can no longer
// be proven, when Redis says it is lost, or when an extension says
// Queue.Cancel asked the task to stop (a cancel whose message this worker
// missed). A task never runs on two workers at once, beyond the margin.
func (b *runner[C, O, P]) leaseKeep(t *Task[P], margin time.Duration) lease.Keep {
	hold := t.core.opts.Lease
	every := b.w.opts.LeaseExtend
	if every == 0 {
		every = hold / 3
	}
	return lease.Keep{Clock: t.r.Clock(), Margin: margin, Every: max(every, time.Millisecond),
		Extend: func(ctx context.Context) error { return t.Extend(ctx, hold) },
		Failed: func(err error) { b.w.log.Warn("fleet: worker could not extend a lease", "task", t.ID, "err", err) }}
}

// runHandler runs the handler of task t through the worker's middleware.
func (b *runner[C, O, P]) runHandler(ctx context.Context, s *Slot[C, O], t *Task[P]) error {
	ctx = withTask(ctx, &t.reservation) // ResultOf reads a task's dependencies (flow_task.go)
	mws := b.w.opts.Middleware
	if len(mws) == 0 {
		return b.a.Handle(ctx, s, t)
	}
	inner := func(ctx context.Context, _ TaskInfo) error { return b.a.Handle(ctx, s, t) }
	info := TaskInfo{Queue: t.core.name, ID: t.ID, Attempts: t.Attempts, Type: b.w.opts.Type, Worker: b.w.opts.ID,
		Slot: s.st.index, Deadline: t.Deadline(), Payload: t.Payload, Trace: decodeTrace(t.r.Trace()), Metadata: t.Metadata(),
		Progress: t.Progress}
	return chain(inner, mws)(ctx, info)
}

// finish acks a task that succeeded through its queue's group commit
// (internal/engine/callgroup.go), which puts the acks that this process's
// slots (and its raw calls) make together while a call is in flight, and
// their next tasks, in one call. While the queue has more, it takes the
// slot's next task in that call (takeQueue), so that a busy slot never
// waits on the fetcher; from another queue than the task's (a priority
// worker's), in a call of that queue's group after the ack. The slot
// waits for the outcome whatever run does (b.commitCtx never ends: the
// call is bounded by the engine); run bounds the cached read of the pause
// flag. The ack then ends as Task.Ack's does (engine.Reservation.Acked).
func (b *runner[C, O, P]) finish(run, soft context.Context, t *Task[P]) (*Task[P], error) {
	ctx := b.commitCtx
	q := b.takeQueue(run, soft, t)
	n := 0
	if q != nil && q.e == t.r.Queue() {
		n = 1
	}
	code, replied, res, err := t.r.Queue().AckTake(ctx, t.r, n, b.owner)
	if q != nil && n == 0 && replied {
		n = 1
		_, _, res, err = q.e.AckTake(ctx, nil, 1, b.owner)
		replied = true // the ack's outcome is known; err is the take's
	}
	var next *Task[P]
	if len(res.Tasks) > 0 {
		next, _ = q.decode(ctx, res.Tasks[0]) // a poison payload is buried: no next task
	}
	switch {
	case n == 0:
	case err != nil && replied:
		// The ack is done; only the take failed: the fetcher takes over.
		b.w.log.Warn("fleet: worker reserve failed", "queue", q.name, "err", err)
		b.fetch.tookNone(run, q.name, res)
	case err == nil && len(res.Tasks) < n:
		// No task for the slot: the queue is empty now.
		b.fetch.tookNone(run, q.name, res)
	}
	return next, opErr("ack", t.core.name, t.r.Acked(run, code, replied, err))
}
