package fleet

import (
	"context"
	"fmt"
)

var queueReleaseScript = script("queue_release.lua")

// Release ends the reservation without counting an attempt: the task goes
// back, unchanged, to the head of the queue, where the next Reserve takes
// it. It is for work that was interrupted rather than failed (a worker
// shutting down); use Nack for a failure. May return ErrLeaseLost (nothing
// changes), ErrWrongType, ErrUnavailable.
func (t *Task[T]) Release(ctx context.Context) error {
	q := t.q
	if err := q.ready(ctx); err != nil {
		return queueErr("release", q.name, err)
	}
	n, err := queueReleaseScript.Exec(ctx, q.f.client, []string{q.k.Pending, q.k.Processing, q.k.Body, q.k.Lease},
		[]string{t.ID, t.token}).AsInt64()
	if err == nil && n != 1 {
		err = fmt.Errorf("%w: task %s", ErrLeaseLost, t.ID)
	}
	if err == nil {
		q.wakeLocal()
	}
	return queueErr("release", q.name, err)
}
