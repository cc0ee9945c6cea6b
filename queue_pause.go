package fleet

import (
	"context"
)

// Pause pauses the queue: batch workers reserve nothing from it (each
// notices within one wake-up: at once through the invalidation of
// fleet:queue:<name>:paused when the Fleet caches, else within its
// WorkerOptions.ConfigPoll), while submits are still accepted. Tasks
// already reserved run to their end. The flag is stored in Redis, so it
// holds across restarts until Resume. Queue.Reserve, called by your own
// code, is not held back: check Paused there. On a handle of Fleet.Queue
// for a queue that this process did not make, a name the registry
// (fleet:queues) does not know is refused with ErrQueueNotFound, and
// nothing is written. May return ErrUnavailable.
func (q *queueCore) Pause(ctx context.Context) error {
	return opErr("pause", q.name, q.setPaused(ctx, true))
}

// Resume resumes a paused queue (a queue that is not paused stays as it
// is), with Pause's check of the name. May return ErrQueueNotFound,
// ErrUnavailable.
func (q *queueCore) Resume(ctx context.Context) error {
	return opErr("resume", q.name, q.setPaused(ctx, false))
}

// Paused reports whether the queue is paused, read through the client-side
// cache (free while the flag does not change). May return ErrUnavailable.
func (q *queueCore) Paused(ctx context.Context) (bool, error) {
	if err := q.ready(ctx); err != nil {
		return false, opErr("paused", q.name, err)
	}
	v, err := q.fleet.track(ctx, q.key.Paused)
	return v != nil, opErr("paused", q.name, err)
}

func (q *queueCore) setPaused(ctx context.Context, paused bool) error {
	if err := q.ready(ctx); err != nil {
		return err
	}
	if err := q.known(ctx); err != nil {
		return err
	}
	c := q.fleet.client
	cmd := c.B().Del().Key(q.key.Paused).Build()
	if paused {
		cmd = c.B().Set().Key(q.key.Paused).Value("1").Build()
	}
	if err := c.Do(ctx, cmd).Error(); err != nil {
		return err
	}
	if !q.fleet.cache {
		q.fleet.watch.PokeAll(q.key.Paused)
	}
	return nil
}
