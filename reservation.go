package fleet

// A reserved task, untyped, as the root's callers hold it: the engine's
// reservation (internal/engine) and what the root's features add to it.
// Task[T] is one with its decoded payload; its ends wrap the engine's
// with the call's name (opErr).

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/fleet-go/fleet/internal/engine"
)

// reservation is a reserved task, untyped: the engine's reservation (its
// shard's core, id, lease token and clock, what fleet reads of its body,
// and its ends), and the cache of its dependencies' outcomes once read
// (Task.Dependencies). Task[T] holds one; the worker's group commit works
// on them.
type reservation struct {
	r    *engine.Reservation
	core *queueCore // the root's core of the task's shard
	deps atomic.Pointer[[]DependencyState]
	// progressed, when set (worker_one.go), is told each progress value
	// stored.
	progressed func(v []byte)
	// logs is the run's log (log.go), made at its first use.
	logs atomic.Pointer[taskLog]
	// steps is the run's view of its durable steps (step.go), read at
	// its first Step or Sleep.
	steps atomic.Pointer[runSteps]
}

// name is the name of the task's queue, as errors say it.
func (r *reservation) name() string { return r.core.name }

// id is the task's id.
func (r *reservation) id() string { return r.r.ID() }

// Token returns the lease token of this reservation, stored in
// fleet:queue:<name>:processing:lease while it holds.
func (r *reservation) Token() string { return r.r.Token() }

// Deadline returns the end of the lease that this process can prove: the
// time the reserve (or the last successful Extend) was sent, plus the
// lease, on this process's monotonic clock. The server counts the lease
// from when its script ran, a little later, so until Deadline no sweeper
// can have re-queued the task; after it, another worker may be running it.
// Stop working on the task before then, or Extend it.
func (r *reservation) Deadline() time.Time { return r.r.Deadline() }

// Body returns the task's body as stored in Redis.
func (r *reservation) Body() string { return r.r.Body() }

// Metadata returns the task's metadata (SubmitOptions.Metadata), nil when
// it has none. Treat it as read-only.
func (r *reservation) Metadata() map[string]string { return r.r.Metadata() }

// Group returns the task's group (SubmitOptions.Group), "" for none.
func (r *reservation) Group() string { return r.r.Group() }

// Queue returns the name of the task's queue.
func (r *reservation) Queue() string { return r.core.name }

// Lease returns the lease of the task's queue (QueueOptions.Lease): how
// long a reserve made it last, and an Extend by Lease, as a worker's
// keep-alive makes, makes it last again.
func (r *reservation) Lease() time.Duration { return r.core.opts.Lease }

// AfterAck adds fn to what runs once the task is acked (Ack, or a
// worker's ack after its handler returned nil), as soon as Redis's reply
// says the ack took effect: on the goroutine that reads the reply, before
// the acking caller hears of it, and even when that caller's ctx ended
// meanwhile. The funcs run once, in the order they were added. None runs
// when the task is not acked by this reservation: a nack, a dead letter,
// a release, a lease lost, a reply that never came (the ack may then have
// happened). fn must be fast, must not block and must not call into the
// Fleet: hand the work on (fleetsql deletes its completion rows in
// batches from it).
func (r *reservation) AfterAck(fn func()) {
	if fn != nil {
		r.r.AfterAck(fn)
	}
}

// SetResult sets the task's result, kept with its record when it is acked
// on a queue with QueueOptions.Retention (without it, nothing is kept). v
// is encoded as JSON now; a later call replaces it. May return
// ErrInvalidArgument (v does not encode, or is over MaxPayloadBytes).
func (r *reservation) SetResult(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return opErr("set result", r.name(), fmt.Errorf("%w: cannot encode %T as JSON: %w", ErrInvalidArgument, v, err))
	}
	if max := r.core.opts.MaxPayloadBytes; len(b) > max {
		return opErr("set result", r.name(), fmt.Errorf("%w: result of %d bytes, more than MaxPayloadBytes %d", ErrInvalidArgument, len(b), max))
	}
	if b, err = seal(r.core.opts.Sealer, r.name(), sealResult, b); err != nil {
		return opErr("set result", r.name(), err)
	}
	return opErr("set result", r.name(), r.r.SetResult(b))
}

// TraceContext returns the trace context that the task's body carries
// (its optional "trace" field, written at submit by an Observer such as
// fleetotel's; SCHEMA.md), such as {"traceparent": "00-..."}: what a
// handler needs to link work it hands on to the submit's trace. It returns
// nil when the body has none, or when the field is not an object of
// strings. Each call returns a new map.
func (r *reservation) TraceContext() map[string]string { return decodeTrace(r.r.Trace()) }

// Each end (Ack, Nack, DeadLetter, Release, Snooze) first writes the lines
// the run gave the task's logger (Logger), if any, in one call; when that
// write fails, the end goes on and the lines are lost (its own error says
// why, for a lease lost).

// Ack ends the reservation: the task is done and leaves Redis (its body,
// its lease and its dedup key; its dedup key stays held for its unique
// window, SubmitOptions.UniqueFor, and its record for
// QueueOptions.Retention). An ack is a reserve with nothing to take: the
// one ack step of the scripts (ack_all), which a worker's acks run in the
// call that takes their next tasks. The acks (and reserves) that this
// process makes of one queue while a call of it is in flight, a worker's
// and these raw calls alike, go together in the next call
// (internal/engine/callgroup.go), which takes the reserves' tasks after
// the acks; each caller still waits on its own ctx only. May return
// ErrLeaseLost (the deadline passed and the task was re-queued; nothing
// changes), ErrUnavailable.
func (r *reservation) Ack(ctx context.Context) error {
	_ = r.endLog(ctx, true)
	return opErr("ack", r.name(), r.r.Ack(ctx))
}

// Nack ends the reservation as failed with cause: the attempt is counted
// and the task is retried after the backoff (through :scheduled), or goes
// to the dead letters with cause once it has failed MaxAttempts times. The
// attempts and the backoff follow the queue's stored policy (see
// QueuePolicy), the same in every process; but a cause that is a
// RetryAfter sets the delay itself, and else the task's own
// SubmitOptions.Backoff, and else this process's QueueOptions.Backoff.Func,
// go before the stored policy's backoff. A task that Queue.Cancel asked
// to stop goes to the dead letters at once, as cancelled (ErrCanceled's
// text, then cause), never retried. The ends (Nack, DeadLetter, Release,
// Snooze) that concurrent callers make of one queue while a call of it is
// in flight go together in the next call (internal/engine/callgroup.go), each
// caller waiting on its own ctx only. May return ErrLeaseLost (nothing
// changes), ErrUnavailable.
func (r *reservation) Nack(ctx context.Context, cause error) error {
	_ = r.endLog(ctx, false)
	if d, ok := r.core.retryDelay(r.r.Attempts()+1, cause, r.r.Body()); ok {
		return opErr("nack", r.name(), r.r.NackAfter(ctx, cause, d))
	}
	return opErr("nack", r.name(), r.r.Nack(ctx, cause))
}

// DeadLetter ends the reservation and moves the task to the dead letters at
// once, with cause: for failures that no retry can fix. A dead letter can be
// re-queued (Queue.RequeueDead), unlike a pool item marked bad. May return
// ErrLeaseLost (nothing changes), ErrUnavailable.
func (r *reservation) DeadLetter(ctx context.Context, cause error) error {
	_ = r.endLog(ctx, false)
	return opErr("dead-letter", r.name(), r.r.DeadLetter(ctx, cause))
}

// Release ends the reservation without counting an attempt: the task goes
// back, unchanged, to the head of the queue, where the next Reserve takes
// it. It is for work that was interrupted rather than failed (a worker
// shutting down); use Nack for a failure. A task that Queue.Cancel asked
// to stop goes to the dead letters instead, as cancelled, and Release says
// ErrCanceled: it never runs again. May return ErrLeaseLost (nothing
// changes), ErrCanceled, ErrWrongType, ErrUnavailable.
func (r *reservation) Release(ctx context.Context) error {
	_ = r.endLog(ctx, false)
	return opErr("release", r.name(), r.r.Release(ctx))
}

// Snooze ends the reservation without counting an attempt: the task goes,
// unchanged, to :scheduled, due after (server clock; a negative after
// counts as zero). It is what a batch worker does for a handler that
// returned RateLimited. When the task is due (within a minute), this
// process's workers and Reserve calls on the queue are woken to take it.
// A task that Queue.Cancel asked to stop goes to the dead letters instead,
// as cancelled, and Snooze says ErrCanceled. May return ErrLeaseLost
// (nothing changes), ErrCanceled, ErrWrongType, ErrUnavailable.
func (r *reservation) Snooze(ctx context.Context, after time.Duration) error {
	_ = r.endLog(ctx, false)
	return opErr("snooze", r.name(), r.r.Snooze(ctx, after))
}

// Suspend ends the reservation as a worker does when its handler returns
// err, a suspension: a *SleepError (Sleep, WaitSignal) parks the task,
// uncounted, until its time, and a signal it waits for (Queue.Signal)
// makes it ready at once; a *RateLimitedError snoozes it for its
// RetryAfter. It is for the holder of a task of its own Reserve. Any other
// err is ErrInvalidArgument, and the reservation stays. May return what
// Snooze does.
func (r *reservation) Suspend(ctx context.Context, err error) error {
	if _, ok := suspendedFor(err); !ok {
		return opErr("suspend", r.name(), fmt.Errorf("%w: %v is not a suspension (a *SleepError, a *RateLimitedError)", ErrInvalidArgument, err))
	}
	_ = r.endLog(ctx, false)
	return opErr("suspend", r.name(), snoozeWait(ctx, r.r, err))
}

// Extend sets the lease to run out lease from now (server clock), and moves
// Deadline to lease after the call was sent. A lease whose deadline passed
// can still be extended while the sweeper has not re-queued the task.
//
// May return ErrInvalidArgument for lease <= 0, ErrLeaseLost (nothing
// changes), ErrUnavailable, and ErrCanceled when Queue.Cancel asked for the
// task to stop: the lease was extended all the same, so that the holder
// can wind down, and the task should end (a worker dead-letters it).
func (r *reservation) Extend(ctx context.Context, lease time.Duration) error {
	return opErr("extend", r.name(), r.r.Extend(ctx, lease))
}

// taskKey is the key of the task that a handler's ctx carries
// (withTask), for ResultOf and Logger.
type taskKey struct{}

// withTask returns ctx carrying r, for its handler: Logger finds the
// task's logger there, and, when r waited for others, ResultOf reads its
// dependencies' results from its own record.
func withTask(ctx context.Context, r *reservation) context.Context {
	if r == nil {
		return ctx
	}
	return context.WithValue(ctx, taskKey{}, r)
}
