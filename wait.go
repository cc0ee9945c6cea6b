package fleet

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/rueidis"
)

// Waiting for a task to end (docs/FLOWS.md, "Waiting for a task"):
// Queue.Wait, and ResultOf with Await; and for a flow or batch to be done:
// WaitFlow.

// waitRecheck is how often a waiter looks again at a task whose end may
// be recorded nowhere (not tracked, acked on a queue without Retention):
// only such a task's disappearance is noticed this way.
const waitRecheck = 5 * time.Second

// Wait blocks until task id of the queue ends, and returns its record:
// done (with its result), dead, or canceled. It wakes on the task's end
// record (fleet:queue:<name>:result:<id>) through client-side caching's
// invalidation, so within a round trip of the end, whichever process ended
// it; it looks again after a reconnect (a Redis restart, a failover),
// since the server's tracking is reset then. A task that ended and whose
// end is recorded returns at once; a tracked task (a flow's or batch's),
// once its end was also passed on to its dependents and its flow or batch
// (the step that deletes its flow record, fleet:queue:<name>:flow:<id>),
// so that a FlowStatus read after Wait counts it: after a flow's last task,
// FlowStatus says done. That pass-on follows the end at once in the
// process that ended it; after a crash, a sweeper makes it within seconds.
//
// A task's end is recorded when it is tracked (SubmitOptions.Track or
// After, a Flow, a Batch), or, for an ack, when the acking handle has
// QueueOptions.Retention (a dead letter is seen in the dead letters). A
// task whose end is recorded nowhere is seen to be gone at the next look
// (every few seconds), and Wait then returns ErrTaskNotFound. Without
// client-side caching (Options.DisableCache) Wait looks again on a capped
// backoff instead of waiting for an invalidation.
//
// It returns the record with a nil error for a task done, with
// ErrTaskFailed (and the task's last error) for a dead one, with
// ErrCanceled for a cancelled one. May return ErrTaskNotFound,
// ErrInvalidArgument (an empty id), ctx's error, ErrClosed, ErrUnavailable.
func (q *queueCore) Wait(ctx context.Context, id string) (TaskRecord, error) {
	const op = "wait"
	if err := q.ready(ctx); err != nil {
		return TaskRecord{ID: id}, opErr(op, q.name, err)
	}
	if id == "" || len(id) > 1024 {
		return TaskRecord{ID: id}, opErr(op, q.name, fmt.Errorf("%w: task id of %d bytes", ErrInvalidArgument, len(id)))
	}
	f := q.fleet
	shards := q.shardsOf(ctx)
	keys := make([]string, 0, 2*len(shards))
	for _, s := range shards {
		keys = append(keys, s.key.Result+id)
	}
	for _, s := range shards {
		keys = append(keys, s.key.Dead)
	}
	// A tracked task's flow record lives until its end was passed on to its
	// dependents and its flow: listened to as well, so that Wait returns
	// once its flow counts it (passedOn).
	listen := keys
	for _, s := range shards {
		listen = append(listen, s.key.Flow+id)
	}
	wake, quit := make(chan struct{}, 1), make(chan struct{})
	defer close(quit)
	for _, k := range listen {
		ch, stop := f.watch.Listen(k)
		defer stop()
		go func() { // ends with Wait
			for {
				select {
				case <-ch:
					poke(wake)
				case <-quit:
					return
				}
			}
		}()
	}
	bo := backoff{min: 5 * time.Millisecond, max: time.Second}
	for {
		// Arm: read the end records (and the dead letters' length) through
		// the cache, so that the server tells us when they change.
		if f.cache {
			for i, k := range keys {
				if i < len(shards) {
					v, err := f.track(ctx, k)
					if err != nil {
						return TaskRecord{ID: id}, opErr(op, q.name, err)
					}
					if v != nil {
						r := q.record(id, []string{"done", *v})
						if on, err := q.passedOn(ctx, shards, id); err != nil {
							return r, opErr(op, q.name, err)
						} else if !on {
							break // its flow is told next: wait for that
						}
						return r, opErr(op, q.name, waitErr(r))
					}
					continue
				}
				if err := f.client.DoCache(ctx, noTTL(f.client.B().Llen().Key(k).Cache()), hintTTL).Error(); err != nil {
					return TaskRecord{ID: id}, opErr(op, q.name, err)
				}
			}
		}
		r, err := q.Lookup(ctx, id)
		if err != nil {
			return r, err
		}
		switch r.Status {
		case TaskDone, TaskDead, TaskCanceled:
			on, err := q.passedOn(ctx, shards, id)
			if err != nil {
				return r, opErr(op, q.name, err)
			}
			if on {
				return r, opErr(op, q.name, waitErr(r))
			}
		}
		if err := f.waitWake(ctx, wake, &bo); err != nil {
			return r, opErr(op, q.name, err)
		}
	}
}

// waitWake waits for wake (an invalidation the wait listens to), or the
// recheck's time (waitRecheck; bo's next delay without client-side
// caching), whichever comes first: nil; or ctx's error, or ErrClosed.
func (f *Fleet) waitWake(ctx context.Context, wake <-chan struct{}, bo *backoff) error {
	d := waitRecheck
	if !f.cache {
		d = bo.next()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-f.done:
		return ErrClosed
	case <-wake:
	case <-t.C:
	}
	return nil
}

// WaitFlow blocks until flow (or batch) id is done: every task ended and
// was counted, and a batch's callbacks were released (a batch must be
// closed first); it returns the flow's final status. It wakes on the
// flow's record (fleet:flow:<id>) through client-side caching's
// invalidation, so within a round trip of the count of its last task,
// whichever process made it, and looks again after a reconnect and every
// few seconds; without client-side caching (Options.DisableCache) it looks
// again on a capped backoff. A done flow returns at once. This is the read
// to trust for "is the flow finished": FlowStatus is a snapshot, which may
// not count a task that ended a moment ago (see FlowStatus). May return
// ErrFlowNotFound (unknown, or done and past its retention),
// ErrInvalidArgument (a bad id), ctx's error, ErrClosed, ErrUnavailable.
func (f *Fleet) WaitFlow(ctx context.Context, id string) (FlowStatus, error) {
	const op = "wait flow"
	if err := f.alive(ctx); err != nil {
		return FlowStatus{ID: id}, opErr(op, id, err)
	}
	if err := checkFlowID(id); err != nil {
		return FlowStatus{ID: id}, opErr(op, id, err)
	}
	key := f.keys.Flow(id).Record
	wake, stop := f.watch.Listen(key)
	defer stop()
	bo := backoff{min: 5 * time.Millisecond, max: time.Second}
	for {
		if f.cache {
			// Arm: read the record through the cache, so that the server
			// tells us when it changes (each count of a task changes it).
			err := f.client.DoCache(ctx, noTTL(f.client.B().Hget().Key(key).Field("state").Cache()), hintTTL).Error()
			if err != nil && !rueidis.IsRedisNil(err) {
				return FlowStatus{ID: id}, opErr(op, id, err)
			}
		}
		st, fin, err := f.flowStatus(ctx, id)
		if err != nil || fin {
			return st, opErr(op, id, err)
		}
		if err := f.waitWake(ctx, wake, &bo); err != nil {
			return st, opErr(op, id, err)
		}
	}
}

// passedOn reports whether the end of task id, which ended, has been
// passed on to its dependents and its flow or batch (flow_drive.go): its
// flow record (fleet:queue:<name>:flow:<id>) is gone, or it never had one
// (not tracked). Until then a caller that waited for the last task of a
// flow would see the flow's status without it. Read through the cache,
// so that the record's deletion wakes Wait.
func (q *queueCore) passedOn(ctx context.Context, shards []*queueCore, id string) (bool, error) {
	f := q.fleet
	for _, s := range shards {
		k := s.key.Flow + id
		var n int64
		var err error
		if f.cache {
			n, err = f.client.DoCache(ctx, noTTL(f.client.B().Hlen().Key(k).Cache()), hintTTL).AsInt64()
		} else {
			n, err = f.client.Do(ctx, f.client.B().Exists().Key(k).Build()).AsInt64()
		}
		if err != nil {
			return false, err
		}
		if n > 0 {
			return false, nil
		}
	}
	return true, nil
}

// waitErr is Wait's error for an ended task's record: nil when done.
func waitErr(r TaskRecord) error {
	switch r.Status {
	case TaskDead:
		return fmt.Errorf("%w: task %s: %s", ErrTaskFailed, r.ID, r.LastError)
	case TaskCanceled:
		return fmt.Errorf("%w: task %s: %s", ErrCanceled, r.ID, r.LastError)
	}
	return nil
}

// ResultOption is an option of ResultOf.
type ResultOption func(*resultOptions)

type resultOptions struct{ wait bool }

// Await makes ResultOf wait for the task to end (Queue.Wait), instead of
// answering ErrTaskNotFound while it has not.
func Await() ResultOption { return func(o *resultOptions) { o.wait = true } }
