package fleet

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/fleet-go/fleet/internal/engine"
)

// Progress: a running task's progress value, stored with its reservation
// and published on its queue's progress topic (docs/FLOWS.md, "Progress").

// MaxProgressBytes bounds a progress value as JSON (Task.Progress).
const MaxProgressBytes = 4 << 10

var queueProgressScript = newScript("queue_progress.lua")

// Progress stores v, encoded as JSON (at most MaxProgressBytes), as the
// task's progress: Lookup (TaskRecord.Progress) and fleetctl show the last
// value while this reservation holds the task, and it is published on the
// queue's progress topic for watchers (Queue.WatchProgress). The value
// goes when the task ends. May return ErrInvalidArgument (v does not
// encode, or is too large: nothing is stored), ErrLeaseLost (the
// reservation is not this one any more: nothing is stored),
// ErrUnavailable. A failed publish is not an error: the value is stored.
func (r *reservation) Progress(ctx context.Context, v any) error {
	const op = "progress"
	q := r.core
	if err := q.ready(ctx); err != nil {
		return opErr(op, q.name, err)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return opErr(op, q.name, fmt.Errorf("%w: progress value: cannot encode %T as JSON: %w", ErrInvalidArgument, v, err))
	}
	if len(b) > MaxProgressBytes {
		return opErr(op, q.name, fmt.Errorf("%w: progress value of %d bytes of JSON, more than MaxProgressBytes %d", ErrInvalidArgument, len(b), MaxProgressBytes))
	}
	stored, err := seal(q.opts.Sealer, q.name, sealProgress, b)
	if err != nil {
		return opErr(op, q.name, err)
	}
	r.r.MarkProgressed() // before the write: the end step must delete it
	code, err := queueProgressScript.Exec(ctx, q.fleet.client, q.keys(), []string{r.id(), r.r.Token(), string(stored)}).AsInt64()
	if err != nil {
		return opErr(op, q.name, err)
	}
	if engine.EndCode(code) != engine.EndDone {
		return opErr(op, q.name, fmt.Errorf("%w: task %s", ErrLeaseLost, r.id()))
	}
	if r.progressed != nil {
		r.progressed(b)
	}
	pe := ProgressEvent{Queue: q.name, ID: r.id(), Progress: b}
	if o := q.fleet.obs; o != nil && o.Progressed != nil {
		o.Progressed(ctx, pe)
	}
	pe.Progress = stored // through Redis as stored: sealed on a sealed queue
	ev, _ := json.Marshal(pe)
	_ = q.fleet.publishRaw(ctx, q.fleet.keys.Event(q.fleet.keys.ProgressTopic(q.name)), string(ev))
	return nil
}

// WatchProgress subscribes to the queue's progress topic: every value that
// Task.Progress stores for a task of the queue, in any process, as it is
// stored (pub/sub: values stored while the subscription was away are
// missed; Lookup has the last one). See Subscribe for opts and the
// subscription's life.
func (q *queueCore) WatchProgress(ctx context.Context, opts SubscribeOptions) (*Subscription[ProgressEvent], error) {
	if q.err != nil {
		return nil, opErr("watch progress", q.name, q.err)
	}
	return Subscribe[ProgressEvent](ctx, q.fleet, q.fleet.keys.ProgressTopic(q.name), opts)
}
