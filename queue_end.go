package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/fleet-go/fleet/internal/taskbody"
)

// The end of a reservation: a reserved task (reservation, which Task[T]
// is with its payload), and the one end-of-reservation family that every
// holder goes through: Ack (a reserve with nothing to take, queue_core.go:
// the ack step of queue_reserve.lua, alone in queue_ack.lua), Nack,
// DeadLetter, Release and Snooze (queue_end.lua), and Extend
// (queue_extend.lua).

// reservation is a reserved task, untyped: what the holder needs to end
// it (its shard's core, id, lease token and clock), and what fleet reads
// of its body. Task[T] is a reservation and its decoded payload; the
// worker's group commit works on reservations.
type reservation struct {
	c       *queueCore // the core of the task's shard
	id      string
	token   string
	body    string          // as stored in :processing:body
	payload json.RawMessage // the body's payload, until decoded
	// attempts, dedup, unique and trace are the body's "attempts",
	// "dedup", "unique_ms" (SubmitOptions.UniqueFor) and "trace".
	attempts int
	dedup    string
	unique   int64
	trace    json.RawMessage
	// The per-task options of the body (SubmitOptions): maxAttempts and
	// timeout (0: the queue's, the worker's), meta, group, and expires,
	// monoNow past which the task must not start (0: never).
	maxAttempts int
	timeout     time.Duration
	meta        map[string]string
	group       string
	expires     int64
	permit      bool                   // the task holds a GlobalConcurrency permit (its reserve said so): its ack gives it back
	clock       leaseClock             // the lease: from the send of the reserve or last extend (lease.go)
	result      atomic.Pointer[[]byte] // SetResult's, as JSON
	// The task's part in flows (flow.go): track is the body's "track", how
	// long its end stays recorded (ms; 0: not tracked); progressed says it
	// set a progress value (progress.go); deps caches its dependencies'
	// outcomes once read (Task.Dependencies).
	track      int64
	progressed atomic.Bool
	deps       atomic.Pointer[[]DependencyState]
}

// Token returns the lease token of this reservation, stored in
// fleet:queue:<name>:processing:lease while it holds.
func (r *reservation) Token() string { return r.token }

// prefix returns the token prefix of the reserve call that took r (its
// token is prefix..i: prefix_of in lib_queue.lua).
func (r *reservation) prefix() string {
	return r.token[:strings.LastIndexByte(r.token, '.')+1]
}

// Deadline returns the end of the lease that this process can prove: the
// time the reserve (or the last successful Extend) was sent, plus the
// lease, on this process's monotonic clock. The server counts the lease
// from when its script ran, a little later, so until Deadline no sweeper
// can have re-queued the task; after it, another worker may be running it.
// Stop working on the task before then, or Extend it.
func (r *reservation) Deadline() time.Time { return r.clock.deadline() }

// Body returns the task's body as stored in Redis.
func (r *reservation) Body() string { return r.body }

// Metadata returns the task's metadata (SubmitOptions.Metadata), nil when
// it has none. Treat it as read-only.
func (r *reservation) Metadata() map[string]string { return r.meta }

// Group returns the task's group (SubmitOptions.Group), "" for none.
func (r *reservation) Group() string { return r.group }

// expired reports whether the task's ExpiresAt passed: it must not start.
func (r *reservation) expired() bool { return r.expires != 0 && monoNow() >= r.expires }

// keeps reports whether r's ack does more than a plain one: its dedup key
// held for a unique window, its record kept (QueueOptions.Retention), its
// group's or GlobalConcurrency's permit given back, or its end passed on
// (a tracked task, or one that set a progress value: flowFlags).
func (r *reservation) keeps() bool {
	return (r.unique > 0 && r.dedup != "") || r.c.opts.Retention > 0 || r.group != "" || r.permit || r.track > 0 || r.progressed.Load()
}

// Ack ends the reservation: the task is done and leaves Redis (its body,
// its lease and its dedup key; its dedup key stays held for its unique
// window, SubmitOptions.UniqueFor, and its record for
// QueueOptions.Retention). An ack is a reserve with nothing to take
// (queueCore.take): the one ack step of the scripts (ack_all), which a
// worker's acks run in the call that takes their next tasks. The acks
// (and reserves) that concurrent callers make of one queue while a call of
// it is in flight go together in the next call (queue_callgroup.go),
// which takes the reserves' tasks after the acks; each caller still waits
// on its own ctx only. May return
// ErrLeaseLost (the deadline passed and the task was re-queued; nothing
// changes), ErrUnavailable.
func (r *reservation) Ack(ctx context.Context) error {
	q := r.c
	err := q.ready(ctx)
	if err == nil {
		var code endCode
		code, err = q.groupAck(ctx, r)
		if err == nil && code != endDone {
			err = fmt.Errorf("%w: task %s", ErrLeaseLost, r.id)
		}
		q.f.recordEnd(ctx, q.name, r.id, TaskProcessed, err == nil)
	}
	return opErr("ack", q.name, err)
}

// Nack ends the reservation as failed with cause: the attempt is counted
// and the task is retried after the backoff (through :scheduled), or goes
// to the dead letters with cause once it has failed MaxAttempts times. The
// attempts and the backoff follow the queue's stored policy (see
// QueuePolicy), the same in every process. A task that Queue.Cancel asked
// to stop goes to the dead letters at once, as cancelled (ErrCanceled's
// text, then cause), never retried. The ends (Nack, DeadLetter, Release,
// Snooze) that concurrent callers make of one queue while a call of it is
// in flight go together in the next call (queue_callgroup.go), each
// caller waiting on its own ctx only. May return ErrLeaseLost (nothing
// changes), ErrUnavailable.
func (r *reservation) Nack(ctx context.Context, cause error) error {
	msg := "nacked"
	if cause != nil {
		msg = cause.Error()
	}
	return opErr("nack", r.c.name, r.finish(ctx, endNack, msg, 0, true, false))
}

// DeadLetter ends the reservation and moves the task to the dead letters at
// once, with cause: for failures that no retry can fix. A dead letter can be
// re-queued (Queue.RequeueDead), unlike a pool item marked bad. May return
// ErrLeaseLost (nothing changes), ErrUnavailable.
func (r *reservation) DeadLetter(ctx context.Context, cause error) error {
	msg := "dead-lettered"
	if cause != nil {
		msg = cause.Error()
	}
	return opErr("dead-letter", r.c.name, r.finish(ctx, endBury, msg, 0, true, false))
}

// bury dead-letters the reservation with cause, now, counting no attempt:
// poison, which never ran (a body that is not a task, a payload that does
// not decode), or a task that expired. It goes alone, never through the
// group: a take buries what it finds (queueCore.reservations), and that
// take may be the group's own call.
func (r *reservation) bury(ctx context.Context, cause string) error {
	return r.finish(ctx, endBury, cause, 0, false, true)
}

// Release ends the reservation without counting an attempt: the task goes
// back, unchanged, to the head of the queue, where the next Reserve takes
// it. It is for work that was interrupted rather than failed (a worker
// shutting down); use Nack for a failure. A task that Queue.Cancel asked
// to stop goes to the dead letters instead, as cancelled, and Release says
// ErrCanceled: it never runs again. May return ErrLeaseLost (nothing
// changes), ErrCanceled, ErrWrongType, ErrUnavailable.
func (r *reservation) Release(ctx context.Context) error {
	return opErr("release", r.c.name, r.finish(ctx, endRelease, "released before it ended", 0, false, false))
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
	after = max(after, 0)
	err := r.finish(ctx, endSnooze, "snoozed before it ended", after, false, false)
	if err == nil && after <= snoozeWake {
		// Wake this process's reserves when the task is due: an idle
		// fetcher would otherwise only find it at its next poll.
		q := r.c
		time.AfterFunc(after+time.Millisecond, func() {
			q.look.soon() // the next reserve looks at :scheduled
			q.f.watch.PokeAll(q.k.Pending)
		})
	}
	return opErr("snooze", r.c.name, err)
}

// finish ends the reservation by mode (queue_end.lua): "nack" (cause is
// the failure), "bury" (cause is why), "release", or "snooze" (after the
// delay); for those two, cause is what a cancelled task's dead letter
// records. counted counts the run as an attempt. alone sends the end in
// a call of its own, else it goes through the group (groupEnd). The
// cancelled dead letter, a copy of the body, is made and sent only when
// the script says the task is cancelled and needs one (endNeedEntry).
func (r *reservation) finish(ctx context.Context, mode endMode, cause string, after time.Duration, counted, alone bool) error {
	q := r.c
	if err := q.ready(ctx); err != nil {
		return err
	}
	attempts := r.attempts
	if counted {
		attempts++
	}
	var body, entry string
	switch mode {
	case endNack, endBury:
		var err error
		body, err = taskbody.Rewrite(r.body, map[string]any{"attempts": attempts, "error": cause, "dead_at": nil})
		if err != nil || body == "{}" {
			body, mode = taskbody.DeadEntry(r.body, attempts, cause), endBury // not a task: it can only be buried
		}
		if strings.HasPrefix(cause, ErrCanceled.Error()) {
			entry = "-" // body says it: the cause is a cancel
		} else {
			cause = ErrCanceled.Error() + ": " + cause
		}
	case endSnooze:
		cause = ErrCanceled.Error() + ": " + cause
	default:
		cause = ErrCanceled.Error() + ": " + cause
	}
	end := &endArgs{mode: mode, id: r.id, token: r.token, dedup: r.dedup, entry: entry, body: body, after: after,
		attempts: attempts, jitter: newJitter(), maxAttempts: r.maxAttempts, group: r.group, flags: r.flowFlags()}
	run := q.groupEnd
	if alone {
		run = q.endAlone
	}
	code, err := run(ctx, end)
	if err == nil && code == endNeedEntry {
		end.entry = taskbody.DeadEntry(r.body, attempts, cause)
		code, err = run(ctx, end)
	}
	if err != nil {
		return err
	}
	switch code {
	case endLost:
		return fmt.Errorf("%w: task %s", ErrLeaseLost, r.id)
	case endCanceled:
		q.f.recordEnd(ctx, q.name, r.id, TaskDeadLettered, true)
		q.f.flowEnded(r)
		if mode == endRelease || mode == endSnooze {
			return fmt.Errorf("%w: task %s went to the dead letters instead (Queue.Cancel asked it to stop)", ErrCanceled, r.id)
		}
	case endBuried:
		q.f.recordEnd(ctx, q.name, r.id, TaskDeadLettered, true)
		q.f.flowEnded(r)
	case endDone:
		switch mode {
		case endNack:
			q.f.recordEnd(ctx, q.name, r.id, TaskRetried, true)
			q.look.soon() // a retry waits in :scheduled now
		case endRelease:
			q.wakeLocal()
		}
	default:
		return unexpectedReply(string(mode), int(code))
	}
	return nil
}

// runEnds runs queue_end.lua once for ends, and reads their codes, in
// order.
func (q *queueCore) runEnds(ctx context.Context, ends []*endArgs) ([]endCode, error) {
	o := q.opts
	args := endPolicy{maxAttempts: o.MaxAttempts, backoffBase: o.BackoffBase, backoffMax: o.BackoffMax, deadMax: o.DeadMax}.appendTo(make([]string, 0, 4+len(ends)*endArity))
	for _, e := range ends {
		args = e.appendTo(args)
	}
	reply, err := queueEndScript.Exec(ctx, q.f.client, q.keys(), args).AsIntSlice()
	if err != nil {
		return nil, err
	}
	return readEndReply(reply, len(ends), ends[0].mode)
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
	q := r.c
	if err := q.ready(ctx); err != nil {
		return opErr("extend", q.name, err)
	}
	if lease <= 0 {
		return opErr("extend", q.name, fmt.Errorf("%w: lease %v must be > 0", ErrInvalidArgument, lease))
	}
	sent := monoNow()
	reply, err := queueExtendScript.Exec(ctx, q.f.client, q.keys(), extendArgs{id: r.id, token: r.token, lease: lease}.args()).AsIntSlice()
	var code endCode
	if err == nil {
		code, err = readExtendReply(reply)
	}
	switch {
	case err != nil:
	case code == endLost:
		r.clock.lose()
		err = fmt.Errorf("%w: task %s", ErrLeaseLost, r.id)
	default:
		r.clock.prove(sent, lease)
		if code == endCanceled {
			err = fmt.Errorf("%w: task %s was cancelled (Queue.Cancel); its lease was extended", ErrCanceled, r.id)
		}
	}
	return opErr("extend", q.name, err)
}

// SetResult sets the task's result, kept with its record when it is acked
// on a queue with QueueOptions.Retention (without it, nothing is kept). v
// is encoded as JSON now; a later call replaces it. May return
// ErrInvalidArgument (v does not encode, or is over MaxPayloadBytes).
func (r *reservation) SetResult(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return opErr("set result", r.c.name, fmt.Errorf("%w: cannot encode %T as JSON: %w", ErrInvalidArgument, v, err))
	}
	if len(b) > r.c.opts.MaxPayloadBytes {
		return opErr("set result", r.c.name, fmt.Errorf("%w: result of %d bytes, more than MaxPayloadBytes %d", ErrInvalidArgument, len(b), r.c.opts.MaxPayloadBytes))
	}
	r.result.Store(&b)
	return nil
}

var (
	queueEndScript    = newScript("queue_end.lua")
	queueExtendScript = newScript("queue_extend.lua")
)

// TraceContext returns the trace context that the task's body carries
// (its optional "trace" field, written at submit by an Observer such as
// fleetotel's; SCHEMA.md), such as {"traceparent": "00-..."}: what a
// handler needs to link work it hands on to the submit's trace. It returns
// nil when the body has none, or when the field is not an object of
// strings. Each call returns a new map.
func (r *reservation) TraceContext() map[string]string { return decodeTrace(r.trace) }
