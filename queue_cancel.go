package fleet

import (
	"context"
	"fmt"

	"github.com/redis/rueidis"
)

var queueCancelScript = newScript("queue_cancel.lua")

// Cancel cancels task id of the queue.
//
// A pending or scheduled task is removed at once (its dedup key freed):
// no worker will get it. A running task is cancelled on whichever worker
// runs it: Cancel publishes the id on the event topic fleet:cancel:<queue>
// (docs/SCHEMA.md), the worker cancels the handler's ctx with cause
// ErrCanceled (usually within a millisecond or two), and when the handler
// returns an error the task ends for good, never retried: it goes to the
// dead letters with the error ErrCanceled (a handler that returns nil
// despite the cancel finished its task, which is acked). A worker that
// reserved the task but has not started its handler yet cancels it as it
// starts, if the cancel came in the last minute. Cancel returns once the
// cancel is published; it does not wait for the handler.
//
// Pub/sub keeps nothing, so Cancel also flags the task's lease entry (when
// fleet made the reservation): a worker that missed the message (cut off
// from Redis at that moment) hears of the cancel at its next lease
// extension (Task.Extend returns ErrCanceled; every third of the lease by
// default), and a sweeper that finds the lease run out dead-letters the
// task as cancelled instead of re-queuing it. So a task cancelled while it
// ran never runs again, whatever its worker missed.
//
// May return ErrTaskNotFound (no pending, scheduled, running or dead task
// has the id, nor a retained result: a task that was acked without
// QueueOptions.Retention is not known any more), ErrTaskFinished (the task
// is in the dead letters, or done with its result retained: nothing
// changes), ErrUnavailable. A Cancel cut off in flight (ctx ended, the
// connection broke) removed its waiting task entirely or not at all; call
// it again: ErrTaskNotFound then says it was removed. Finding a waiting task reads the queue in one
// script, O(N) in the tasks that wait: a call for operators, not for
// every task.
func (q *queueCore) Cancel(ctx context.Context, id string) error {
	const op = "cancel"
	if err := q.ready(ctx); err != nil {
		return opErr(op, q.name, err)
	}
	if id == "" || len(id) > 1024 {
		return opErr(op, q.name, fmt.Errorf("%w: task id of %d bytes", ErrInvalidArgument, len(id)))
	}
	// A sharded queue: every shard is asked at once (internal/engine/shard.go); the
	// task is in one of them at most.
	shards := q.shardsOf(ctx)
	execs := make([]rueidis.LuaExec, len(shards))
	for i, s := range shards {
		execs[i] = rueidis.LuaExec{Keys: s.keys(s.key.Result + id), Args: []string{id, ErrCanceled.Error()}}
	}
	var n int64
	var err error
	var in *queueCore // the shard that holds the task
	for i, rr := range queueCancelScript.ExecMulti(ctx, q.fleet.client, execs...) {
		m, e := rr.AsInt64()
		if e != nil && err == nil {
			err = e
		}
		if m != 0 && n == 0 {
			n, in = m, shards[i]
		}
	}
	if n != 0 {
		err = nil // found, and dealt with, in its shard
	}
	switch {
	case err != nil:
	case n == 0:
		err = fmt.Errorf("%w: %s", ErrTaskNotFound, id)
	case n == 1:
		q.fleet.passOn(in, id) // a tracked task's end waits in its outbox: pass it on
	case n == 2:
		err = q.fleet.Publish(ctx, q.fleet.keys.CancelTopic(q.name), id)
	case n == 3:
		err = fmt.Errorf("%w: task %s is in the dead letters", ErrTaskFinished, id)
	case n == 4:
		err = fmt.Errorf("%w: task %s is done", ErrTaskFinished, id)
	}
	return opErr(op, q.name, err)
}
