package engine

// When a queue's reserves look, in this process: at :scheduled (schedLook,
// so that a reserve reads it only when something may be due), and at the
// pending list and signal while they wait (listen; WakeLocal when
// invalidations are off).

import (
	"context"
	"sync/atomic"
	"time"
)

// schedLookEvery is how often a process's reserves of one queue look at
// its :scheduled zset when they know of nothing due: a task scheduled by
// another process, or one whose time came, is moved onto the queue within
// this (or by the sweeper), at no cost to the reserves between.
const schedLookEvery = 100 * time.Millisecond

// schedLook is when the reserves of one queue (in this process) next look
// at :scheduled: after schedLookEvery since the last look, when the
// earliest task that look saw falls due, or at once after this process
// scheduled a task (lookSoon).
type schedLook struct {
	next   atomic.Int64 // mono.Now at which the next reserve looks
	due    atomic.Int64 // mono.Now at which the earliest task seen falls due; 0: none seen
	signal atomic.Int64 // the queue's signal as the last reserve saw it (CachedPending)
}

func (f *Env) schedLook(name string) *schedLook {
	if l, ok := f.looks.Load(name); ok {
		return l.(*schedLook)
	}
	l, _ := f.looks.LoadOrStore(name, &schedLook{})
	return l.(*schedLook)
}

// now reports whether a reserve starting at now looks at :scheduled.
func (l *schedLook) now(now int64) bool { return now >= l.next.Load() }

// looked records a look at now that saw the earliest scheduled task due in
// nextReady (-1: none).
func (l *schedLook) looked(now int64, nextReady time.Duration) {
	next, due := now+int64(schedLookEvery), int64(0)
	if nextReady >= 0 {
		due = max(now+int64(nextReady), 1)
		next = min(next, due)
	}
	l.due.Store(due)
	l.next.Store(next)
}

// soon makes the next reserve look: this process just scheduled a task.
func (l *schedLook) soon() { l.next.Store(0) }

// LookSoon makes the next reserve of q's shard look at :scheduled: this
// process just scheduled a task there.
func (q *Queue) LookSoon() { q.sched.soon() }

// PendingWait is what a waiting reserve listens to.
type PendingWait struct {
	Wake    <-chan struct{}                            // a push (or its invalidation) wakes it
	Signal  <-chan struct{}                            // the queue's signal moved (grouped or prioritized work); nil for none
	Taken   func()                                     // called after tasks were taken
	Pending func(context.Context, bool) (int64, error) // what may be pending (CachedPending), through the local cache, which arms the invalidations
	Stop    func()                                     // stops listening
}

// Listen returns the wait point of the queue's pending list and signal:
// for a sharded queue, every shard's (one channel for all: ListenPending,
// which grows with the shard count), read in one pipelined look at the
// local cache (CachedPending).
func (q *Queue) Listen(ctx context.Context) PendingWait {
	f := q.env
	pending := func(ctx context.Context, signalOnly bool) (int64, error) {
		l, _, err := q.CachedPending(ctx, signalOnly)
		return l, err
	}
	if q.knownSpan() > 1 {
		ch, stop := q.ListenPending(ctx)
		return PendingWait{Wake: ch, Taken: func() {}, Stop: stop, Pending: pending}
	}
	g := f.Watch.Join(q.key.Pending)
	sig, stopSig := f.Watch.Listen(q.key.Signal)
	return PendingWait{Wake: g.One(), Signal: sig, Pending: pending,
		Stop: func() { f.Watch.Leave(q.key.Pending, g); stopSig() },
		// Pass the wake on: another local waiter takes what is left, or
		// re-arms the invalidation that this pop used up.
		Taken: g.WakeOne}
}

// WakeLocal wakes a local waiter after a push when invalidations are off.
func (q *Queue) WakeLocal() {
	if !q.env.Cache {
		if q.knownSpan() > 1 {
			q.env.Watch.PokeAll(q.key.Pending) // sharded waiters listen (ListenPending)
			return
		}
		q.env.Watch.WakeOne(q.key.Pending)
	}
}
