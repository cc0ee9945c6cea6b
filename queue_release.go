package fleet

import (
	"context"
	"fmt"
)

var queueReleaseScript = newScript("queue_release.lua")

// Release ends the reservation without counting an attempt: the task goes
// back, unchanged, to the head of the queue, where the next Reserve takes
// it. It is for work that was interrupted rather than failed (a worker
// shutting down); use Nack for a failure. A task that Queue.Cancel asked
// to stop goes to the dead letters instead, as cancelled, and Release says
// ErrCanceled: it never runs again. May return ErrLeaseLost (nothing
// changes), ErrCanceled, ErrWrongType, ErrUnavailable.
func (t *Task[T]) Release(ctx context.Context) error {
	q := t.q
	if err := q.ready(ctx); err != nil {
		return opErr("release", q.name, err)
	}
	keys := []string{q.k.Pending, q.k.Processing, q.k.Body, q.k.Lease, q.k.Dead, q.k.Dedup}
	n, err := withCanceledEntry(func(entry string) (int64, error) {
		return queueReleaseScript.Exec(ctx, q.f.client, keys, []string{t.ID, t.token, entry, t.dedup}).AsInt64()
	}, func(n int64) bool { return n == 3 }, func() string { return t.canceledEntry("released before it ended") })
	switch {
	case err != nil:
	case n == 1:
		q.wakeLocal()
	case n == 2:
		err = t.buriedCanceled(ctx)
	default:
		err = fmt.Errorf("%w: task %s", ErrLeaseLost, t.ID)
	}
	return opErr("release", q.name, err)
}

// withCanceledEntry runs an ending script (release, snooze, nack) through
// call with no cancelled dead letter (""), the usual case, and once more
// with entry() when its reply says the task is cancelled and the script
// needs one (needs): the dead letter, a copy of the body, is made and sent
// only then.
func withCanceledEntry[R any](call func(entry string) (R, error), needs func(R) bool, entry func() string) (R, error) {
	r, err := call("")
	if err == nil && needs(r) {
		r, err = call(entry())
	}
	return r, err
}

// canceledEntry is t's dead letter should Queue.Cancel have asked it to
// stop (without "dead_at", which the script adds): why, after
// ErrCanceled's text, so that Lookup says canceled.
func (t *Task[T]) canceledEntry(why string) string {
	return deadEntry(t.body, t.Attempts, ErrCanceled.Error()+": "+why)
}

// buriedCanceled reports a task that a script buried, as cancelled,
// instead of handing it back (Release, Snooze).
func (t *Task[T]) buriedCanceled(ctx context.Context) error {
	t.q.f.taskEnded(ctx, t.q.name, t.ID, TaskDeadLettered, true)
	return fmt.Errorf("%w: task %s went to the dead letters instead (Queue.Cancel asked it to stop)", ErrCanceled, t.ID)
}
