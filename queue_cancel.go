package fleet

import (
	"context"
	"fmt"
	"sync"
	"time"

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
func (q *Queue[T]) Cancel(ctx context.Context, id string) error {
	const op = "cancel"
	if err := q.ready(ctx); err != nil {
		return opErr(op, q.name, err)
	}
	if id == "" || len(id) > 1024 {
		return opErr(op, q.name, fmt.Errorf("%w: task id of %d bytes", ErrInvalidArgument, len(id)))
	}
	// A sharded queue: every shard is asked at once (queue_shard.go); the
	// task is in one of them at most.
	shards := q.shardsOf(ctx)
	execs := make([]rueidis.LuaExec, len(shards))
	for i, s := range shards {
		execs[i] = rueidis.LuaExec{Keys: []string{s.k.Pending, s.k.Scheduled, s.k.Processing, s.k.Dedup, s.k.Dead, s.k.Result + id, s.k.Lease},
			Args: []string{id}}
	}
	var n int64
	var err error
	for _, rr := range queueCancelScript.ExecMulti(ctx, q.f.client, execs...) {
		m, e := rr.AsInt64()
		if e != nil && err == nil {
			err = e
		}
		if m != 0 && n == 0 {
			n = m
		}
	}
	if n != 0 {
		err = nil // found, and dealt with, in its shard
	}
	switch {
	case err != nil:
	case n == 0:
		err = fmt.Errorf("%w: %s", ErrTaskNotFound, id)
	case n == 2:
		err = q.f.Publish(ctx, q.f.keys.CancelTopic(q.name), id)
	case n == 3:
		err = fmt.Errorf("%w: task %s is in the dead letters", ErrTaskFinished, id)
	case n == 4:
		err = fmt.Errorf("%w: task %s is done", ErrTaskFinished, id)
	}
	return opErr(op, q.name, err)
}

// cancelWatch is a batch worker's side of Cancel: the handlers it runs, by
// task id, and the cancels it heard lately (for a task whose handler had
// not started yet).
type cancelWatch struct {
	mu      sync.Mutex
	running map[string]context.CancelCauseFunc
	heard   map[string]time.Time
}

// cancelMemory is how long a worker remembers a cancel for a task it does
// not run (yet); cancelMemoryMax bounds how many it remembers.
const (
	cancelMemory    = time.Minute
	cancelMemoryMax = 10_000
)

func newCancelWatch() *cancelWatch {
	return &cancelWatch{running: map[string]context.CancelCauseFunc{}, heard: map[string]time.Time{}}
}

// start registers the handler of task id, and cancels it at once when a
// cancel for it came already. The returned func unregisters it.
func (cw *cancelWatch) start(id string, cancel context.CancelCauseFunc) func() {
	cw.mu.Lock()
	cw.running[id] = cancel
	_, heard := cw.heard[id]
	delete(cw.heard, id)
	cw.mu.Unlock()
	if heard {
		cancel(ErrCanceled)
	}
	return func() {
		cw.mu.Lock()
		delete(cw.running, id)
		cw.mu.Unlock()
	}
}

// cancel cancels the handler of task id, or remembers the cancel.
func (cw *cancelWatch) cancel(id string) {
	cw.mu.Lock()
	c, ok := cw.running[id]
	if !ok {
		now := time.Now()
		if len(cw.heard) >= cancelMemoryMax {
			for k, at := range cw.heard {
				if now.Sub(at) > cancelMemory || len(cw.heard) >= cancelMemoryMax {
					delete(cw.heard, k)
				}
			}
		}
		cw.heard[id] = now
	}
	cw.mu.Unlock()
	if ok {
		c(ErrCanceled)
	}
}

// startCancels makes the batch worker listen for its queue's cancels until
// run ends: subscribed before it returns when Redis answers (so a Cancel
// after Start reaches the worker), else in the background.
func (w *Worker) startCancels(run context.Context, queue string, cw *cancelWatch) {
	topic := w.f.keys.CancelTopic(queue)
	sub, _ := Subscribe[string](run, w.f, topic, SubscribeOptions{Buffer: 256})
	w.aux.Add(1)
	if !w.f.spawn(func() { defer w.aux.Done(); w.listenCancels(run, topic, cw, sub) }) {
		w.aux.Done()
		if sub != nil {
			sub.Close()
		}
	}
}

// listenCancels delivers the queue's cancels to cw until ctx ends,
// subscribing again after a failure. It runs on the worker's aux
// WaitGroup, which the worker waits for before it counts as stopped.
func (w *Worker) listenCancels(ctx context.Context, topic string, cw *cancelWatch, sub *Subscription[string]) {
	bo := backoff{min: 50 * time.Millisecond, max: 5 * time.Second}
	for ctx.Err() == nil {
		var err error
		if sub == nil {
			sub, err = Subscribe[string](ctx, w.f, topic, SubscribeOptions{Buffer: 256})
		}
		if err != nil {
			if ctx.Err() == nil && !w.f.closed.Load() {
				w.log.Warn("fleet: worker cannot listen for cancels", "err", err)
			}
			t := time.NewTimer(bo.next())
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-w.f.done:
				t.Stop()
				return
			case <-t.C:
			}
			continue
		}
		for id := range sub.C() {
			cw.cancel(id)
		}
		<-sub.Done()
		return
	}
}

// endCanceled ends a task whose handler Queue.Cancel cancelled and which
// returned err: buried with ErrCanceled, never retried.
func (b *batch[C, O, P]) endCanceled(ctx context.Context, t *Task[P], err error) error {
	err = fmt.Errorf("%w: %w", ErrCanceled, err)
	if berr := t.DeadLetter(ctx, err); berr != nil {
		b.w.log.Warn("fleet: worker could not end a canceled task", "task", t.ID, "err", berr)
	}
	return within("task "+t.ID, err)
}
