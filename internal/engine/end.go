package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/fleet-go/fleet/internal/fault"
	"github.com/fleet-go/fleet/internal/mono"
	"github.com/fleet-go/fleet/internal/taskbody"
)

// The end of a reservation (reservation.go): the one end-of-reservation
// family that every holder goes through: Ack (a reserve with nothing to take, queue.go:
// the ack step of queue_reserve.lua, alone in queue_ack.lua), Nack,
// DeadLetter, Release and Snooze (queue_end.lua), and Extend
// (queue_extend.lua).

// Ack ends the reservation: the task is done and leaves Redis (its body,
// its lease and its dedup key; its dedup key stays held for its unique
// window, SubmitOptions.UniqueFor, and its record for
// QueueOptions.Retention). An ack is a reserve with nothing to take
// (Queue.take): the one ack step of the scripts (ack_all), which a
// worker's acks run in the call that takes their next tasks. The acks
// (and reserves) that concurrent callers make of one queue while a call of
// it is in flight go together in the next call (callgroup.go),
// which takes the reserves' tasks after the acks; each caller still waits
// on its own ctx only. May return
// fault.LeaseLost (the deadline passed and the task was re-queued; nothing
// changes), ErrUnavailable.
func (r *Reservation) Ack(ctx context.Context) error {
	if err := r.core.ready(ctx); err != nil {
		return err
	}
	code, err := r.core.groupAck(ctx, r)
	return r.Acked(ctx, code, err == nil, err)
}

// Acked ends an ack whose call returned, on every path an ack takes
// (Ack, and a worker slot's, AckTake): it applies the ack's side
// effects in this process (Hooks.Ended) and says how it went.
// replied says the call's reply gave code; when not, err says why. A
// tracked task's end was passed on as the ack step's reply came
// (Hooks.Acked).
func (r *Reservation) Acked(ctx context.Context, code EndCode, replied bool, err error) error {
	q := r.core
	switch {
	case replied && code == EndDone:
		err = nil // a take that failed after the ack is its caller's to tell
	case replied:
		err = fmt.Errorf("%w: task %s", fault.LeaseLost, r.id)
	case err == nil:
		err = errors.New("no reply for the ack") // cannot happen
	}
	q.ended(ctx, r, Processed, err == nil)
	return err
}

// Nack ends the reservation as failed with cause: the attempt is counted
// and the task is retried after the backoff (through :scheduled), or goes
// to the dead letters with cause once it has failed MaxAttempts times. The
// attempts and the backoff follow the queue's stored policy (see
// QueuePolicy), the same in every process. A task that Queue.Cancel asked
// to stop goes to the dead letters at once, as cancelled (fault.Canceled's
// text, then cause), never retried. The ends (Nack, DeadLetter, Release,
// Snooze) that concurrent callers make of one queue while a call of it is
// in flight go together in the next call (callgroup.go), each
// caller waiting on its own ctx only. May return fault.LeaseLost (nothing
// changes), ErrUnavailable.
func (r *Reservation) Nack(ctx context.Context, cause error) error {
	msg := "nacked"
	if cause != nil {
		msg = cause.Error()
	}
	return r.finish(ctx, endNack, msg, -1, true, false, false)
}

// NackAfter is Nack with the retry due after (server clock; a negative
// after counts as zero) in place of the policy's backoff: the caller chose
// it (the root's RetryAfter, a task's own Backoff, a Backoff func). The
// attempt counts all the same, and past the task's max attempts it goes to
// the dead letters as with Nack.
func (r *Reservation) NackAfter(ctx context.Context, cause error, after time.Duration) error {
	msg := "nacked"
	if cause != nil {
		msg = cause.Error()
	}
	return r.finish(ctx, endNack, msg, max(after, 0), true, false, false)
}

// DeadLetter ends the reservation and moves the task to the dead letters at
// once, with cause: for failures that no retry can fix. A dead letter can be
// re-queued (Queue.RequeueDead), unlike a pool item marked bad. May return
// fault.LeaseLost (nothing changes), ErrUnavailable.
func (r *Reservation) DeadLetter(ctx context.Context, cause error) error {
	msg := "dead-lettered"
	if cause != nil {
		msg = cause.Error()
	}
	return r.finish(ctx, endBury, msg, 0, true, false, false)
}

// bury dead-letters the reservation with cause, now, counting no attempt:
// poison, which never ran (a body that is not a task, a payload that does
// not decode), or a task that expired. It goes alone, never through the
// group: a take buries what it finds (Queue.reservations), and that
// take may be the group's own call.
func (r *Reservation) Bury(ctx context.Context, cause string) error {
	return r.finish(ctx, endBury, cause, 0, false, true, false)
}

// Release ends the reservation without counting an attempt: the task goes
// back, unchanged, to the head of the queue, where the next Reserve takes
// it. It is for work that was interrupted rather than failed (a worker
// shutting down); use Nack for a failure. A task that Queue.Cancel asked
// to stop goes to the dead letters instead, as cancelled, and Release says
// fault.Canceled: it never runs again. May return fault.LeaseLost (nothing
// changes), fault.Canceled, fault.WrongType, ErrUnavailable.
func (r *Reservation) Release(ctx context.Context) error {
	return r.finish(ctx, endRelease, "released before it ended", 0, false, false, false)
}

// Snooze ends the reservation without counting an attempt: the task goes,
// unchanged, to :scheduled, due after (server clock; a negative after
// counts as zero). It is what a batch worker does for a handler that
// returned RateLimited. When the task is due (within a minute), this
// process's workers and Reserve calls on the queue are woken to take it.
// A task that Queue.Cancel asked to stop goes to the dead letters instead,
// as cancelled, and Snooze says fault.Canceled. May return fault.LeaseLost
// (nothing changes), fault.Canceled, fault.WrongType, ErrUnavailable.
func (r *Reservation) Snooze(ctx context.Context, after time.Duration) error {
	return r.snooze(ctx, after, false)
}

// Park is Snooze for a durable task that suspends itself (a Sleep, a
// WaitSignal): its body is kept in its steps, for a signal to find it and
// make it ready at once (queue_signal.lua), and a task whose awaited
// signal came while it ran is ready at once instead of after.
func (r *Reservation) Park(ctx context.Context, after time.Duration) error {
	return r.snooze(ctx, after, true)
}

func (r *Reservation) snooze(ctx context.Context, after time.Duration, park bool) error {
	after = max(after, 0)
	err := r.finish(ctx, endSnooze, "snoozed before it ended", after, false, false, park)
	if err == nil && park {
		// A parked task whose awaited signal came while it ran is ready
		// now (queue_end.lua): this process's idle reserves look.
		r.core.WakeLocal()
	}
	if err == nil && after <= snoozeWake {
		// Wake this process's reserves when the task is due: an idle
		// fetcher would otherwise only find it at its next poll.
		q := r.core
		time.AfterFunc(after+time.Millisecond, func() {
			q.sched.soon() // the next reserve looks at :scheduled
			q.env.Watch.PokeAll(q.key.Pending)
		})
	}
	return err
}

// finish ends the reservation by mode (queue_end.lua): "nack" (cause is
// the failure), "bury" (cause is why), "release", or "snooze" (after the
// delay); for those two, cause is what a cancelled task's dead letter
// records. A nack's after is its retry's delay, chosen by the caller (>=
// 0), or -1 for the stored policy's backoff. counted counts the run as an
// attempt. alone sends the end in
// a call of its own, else it goes through the group (groupEnd). park
// parks a snoozed durable task (Park). The
// cancelled dead letter, a copy of the body, is made and sent only when
// the script says the task is cancelled and needs one (EndNeedEntry).
func (r *Reservation) finish(ctx context.Context, mode endMode, cause string, after time.Duration, counted, alone, park bool) error {
	q := r.core
	if err := q.ready(ctx); err != nil {
		return err
	}
	defer freePermits(ctx, r) // the run is over, however its end went (permit.go)
	attempts := r.attempts
	if counted {
		attempts++
	}
	var body, entry string
	switch mode {
	case endNack, endBury:
		set := map[string]any{"attempts": attempts, "error": cause, "dead_at": nil}
		if r.logged.Load() {
			set["lg"] = 1 // as markedBody: in the same rewrite
		}
		var err error
		body, err = taskbody.Rewrite(r.body, set)
		if err != nil {
			body, mode = taskbody.DeadEntry(r.body, attempts, cause), endBury // not a task: it can only be buried
		}
		if strings.HasPrefix(cause, fault.Canceled.Error()) {
			entry = "-" // body says it: the cause is a cancel
		} else {
			cause = fault.Canceled.Error() + ": " + cause
		}
	case endSnooze:
		cause = fault.Canceled.Error() + ": " + cause
	default:
		cause = fault.Canceled.Error() + ": " + cause
	}
	end := &endArgs{mode: mode, id: r.id, token: r.token, dedup: r.dedup, entry: entry, body: body, after: after,
		attempts: attempts, jitter: newJitter(), maxAttempts: r.maxAttempts, group: r.group, flags: r.flowFlags()}
	if mode == endNack && after >= 0 {
		end.retry, end.chosen = after, true
	}
	end.park = park
	run := q.groupEnd
	if alone {
		run = q.endAlone
	}
	code, err := run(ctx, end)
	if err == nil && code == EndNeedEntry {
		end.entry = taskbody.DeadEntry(r.markedBody(), attempts, cause)
		code, err = run(ctx, end)
	}
	if err != nil {
		return err
	}
	switch code {
	case EndLost:
		return fmt.Errorf("%w: task %s", fault.LeaseLost, r.id)
	case EndCanceled:
		q.ended(ctx, r, DeadLettered, true)
		if mode == endRelease || mode == endSnooze {
			return fmt.Errorf("%w: task %s went to the dead letters instead (Queue.Cancel asked it to stop)", fault.Canceled, r.id)
		}
	case EndBuried:
		q.ended(ctx, r, DeadLettered, true)
	case EndDone:
		switch mode {
		case endNack:
			q.ended(ctx, r, Retried, true)
			q.sched.soon() // a retry waits in :scheduled now
		case endRelease:
			q.WakeLocal()
		}
	default:
		return fault.UnexpectedReply(string(mode), int(code))
	}
	return nil
}

// markedBody is r's body, with "lg" when its log or steps were written
// (queue_log.lua, queue_step.lua): a retry's or a dead letter's body says
// so to the runs to come.
func (r *Reservation) markedBody() string {
	if r.logged.Load() {
		if b, err := taskbody.Rewrite(r.body, map[string]any{"lg": 1}); err == nil {
			return b
		}
	}
	return r.body
}

// runEnds runs queue_end.lua once for ends, and reads their codes, in
// order.
func (q *Queue) runEnds(ctx context.Context, ends []*endArgs) ([]EndCode, error) {
	o := q.opts
	args := endPolicy{maxAttempts: o.MaxAttempts, backoffBase: o.BackoffBase, backoffMax: o.BackoffMax, deadMax: o.DeadMax}.appendTo(make([]string, 0, 4+len(ends)*endArity))
	for _, e := range ends {
		args = e.appendTo(args)
	}
	reply, err := queueEndScript.Exec(ctx, q.env.Client, q.Keys(), args).AsIntSlice()
	if err != nil {
		return nil, err
	}
	return readEndReply(reply, len(ends), ends[0].mode)
}

// Extend sets the lease to run out lease from now (server clock), and moves
// Deadline to lease after the call was sent. A lease whose deadline passed
// can still be extended while the sweeper has not re-queued the task.
//
// May return fault.InvalidArgument for lease <= 0, fault.LeaseLost (nothing
// changes), ErrUnavailable, and fault.Canceled when Queue.Cancel asked for the
// task to stop: the lease was extended all the same, so that the holder
// can wind down, and the task should end (a worker dead-letters it).
func (r *Reservation) Extend(ctx context.Context, lease time.Duration) error {
	q := r.core
	if err := q.ready(ctx); err != nil {
		return err
	}
	if lease <= 0 {
		return fmt.Errorf("%w: lease %v must be > 0", fault.InvalidArgument, lease)
	}
	sent := mono.Now()
	reply, err := queueExtendScript.Exec(ctx, q.env.Client, q.Keys(), extendArgs{id: r.id, token: r.token, lease: lease}.args()).AsIntSlice()
	var code EndCode
	if err == nil {
		code, err = readExtendReply(reply)
	}
	switch {
	case err != nil:
	case code == EndLost:
		r.clock.Lose()
		err = fmt.Errorf("%w: task %s", fault.LeaseLost, r.id)
	default:
		if ok, perr := r.extendPermit(ctx, lease); perr != nil {
			return perr
		} else if !ok {
			// The fleet-wide permit ran out: another task may run under it.
			r.clock.Lose()
			return fmt.Errorf("%w: task %s: its GlobalConcurrency permit's lease ran out", fault.LeaseLost, r.id)
		}
		r.clock.Prove(sent, lease)
		if code == EndCanceled {
			err = fmt.Errorf("%w: task %s was cancelled (Queue.Cancel); its lease was extended", fault.Canceled, r.id)
		}
	}
	return err
}
