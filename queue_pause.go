package fleet

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/rueidis"

	"github.com/fleet-go/fleet/internal/keys"
)

// Pause pauses the queue: batch workers reserve nothing from it (each
// notices within one wake-up: at once through the invalidation of
// fleet:queue:<name>:paused when the Fleet caches, else within its
// WorkerOptions.ConfigPoll), while submits are still accepted. Tasks
// already reserved run to their end. The flag is stored in Redis, so it
// holds across restarts until Resume. Queue.Reserve, called by your own
// code, is not held back: check Paused there. May return ErrUnavailable.
func (q *Queue[T]) Pause(ctx context.Context) error {
	return opErr("pause", q.name, q.setPaused(ctx, true))
}

// Resume resumes a paused queue (a queue that is not paused stays as it
// is). May return ErrUnavailable.
func (q *Queue[T]) Resume(ctx context.Context) error {
	return opErr("resume", q.name, q.setPaused(ctx, false))
}

// Paused reports whether the queue is paused, read through the client-side
// cache (free while the flag does not change). May return ErrUnavailable.
func (q *Queue[T]) Paused(ctx context.Context) (bool, error) {
	if err := q.ready(ctx); err != nil {
		return false, opErr("paused", q.name, err)
	}
	v, err := q.f.track(ctx, q.k.Paused)
	return v != nil, opErr("paused", q.name, err)
}

func (q *Queue[T]) setPaused(ctx context.Context, paused bool) error {
	if err := q.ready(ctx); err != nil {
		return err
	}
	c := q.f.client
	cmd := c.B().Del().Key(q.k.Paused).Build()
	if paused {
		cmd = c.B().Set().Key(q.k.Paused).Value("1").Build()
	}
	if err := c.Do(ctx, cmd).Error(); err != nil {
		return err
	}
	if !q.f.cache {
		q.f.watch.pokeAll(q.k.Paused)
	}
	return nil
}

// PauseQueue pauses queue name (Queue.Pause, by name). The queue must be
// known: in the registry fleet:queues, or made by NewQueue in this process.
// May return ErrInvalidName, ErrQueueNotFound (nothing is written),
// ErrUnavailable.
func (f *Fleet) PauseQueue(ctx context.Context, name string) error {
	return f.pauseQueue(ctx, "pause", name, true)
}

// ResumeQueue resumes queue name (Queue.Resume, by name). May return
// ErrInvalidName, ErrQueueNotFound, ErrUnavailable.
func (f *Fleet) ResumeQueue(ctx context.Context, name string) error {
	return f.pauseQueue(ctx, "resume", name, false)
}

func (f *Fleet) pauseQueue(ctx context.Context, op, name string, paused bool) error {
	if err := keys.Check(keys.KindQueue, name); err != nil {
		return opErr(op, name, err)
	}
	if err := f.alive(ctx); err != nil {
		return opErr(op, name, err)
	}
	if _, ok := f.queues.Load(name); !ok {
		c := f.client
		known, err := c.Do(ctx, c.B().Sismember().Key(f.keys.Queues()).Member(name).Build()).AsBool()
		if err != nil {
			return opErr(op, name, err)
		}
		if !known {
			return opErr(op, name, fmt.Errorf("%w: %q is not in the queue registry", ErrQueueNotFound, name))
		}
	}
	return opErr(op, name, f.adminQueue(name).setPaused(ctx, paused))
}

// pauseGate is a batch worker's view of its queue's paused flag: read
// through the client-side cache, so checking it before each reserve costs
// Redis nothing while it does not change; without caching it is read at
// most once per ConfigPoll.
type pauseGate struct {
	f      *Fleet
	key    string
	every  time.Duration
	ch     <-chan struct{}
	stop   func()
	paused bool
	read   time.Time
}

func newPauseGate(f *Fleet, key string, every time.Duration) *pauseGate {
	ch, stop := f.watch.listen(key)
	return &pauseGate{f: f, key: key, every: every, ch: ch, stop: stop}
}

// check reports whether the queue is paused now (as far as one can know
// without a round trip, when caching is off).
func (g *pauseGate) check(ctx context.Context) bool {
	if !g.f.cache {
		select {
		case <-g.ch: // this process changed it
			g.read = time.Time{}
		default:
		}
		if time.Since(g.read) < g.every {
			return g.paused
		}
	}
	v, err := g.f.client.DoCache(ctx, g.f.client.B().Get().Key(g.key).Cache(), g.f.cacheTTL).ToString()
	if err != nil && !rueidis.IsRedisNil(err) {
		return g.paused // keep what was known; the reserve reports the failure
	}
	g.paused, g.read = err == nil && v != "", time.Now()
	return g.paused
}

// hold waits while the queue is paused; it returns false when soft ended
// first.
func (g *pauseGate) hold(run, soft context.Context) bool {
	t := time.NewTimer(0)
	<-t.C
	defer t.Stop()
	for g.check(run) {
		t.Reset(g.every)
		select {
		case <-soft.Done():
			return false
		case <-g.ch:
			if !t.Stop() {
				<-t.C
			}
			g.read = time.Time{}
		case <-t.C:
			g.read = time.Time{}
		}
	}
	return true
}
