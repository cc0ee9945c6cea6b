package fleet

// When a queue's reserves look, in this process: at :scheduled (schedLook,
// so that a reserve reads it only when something may be due), and at the
// pending list and signal while they wait (listen; wakeLocal when
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
	signal atomic.Int64 // the queue's signal as the last reserve saw it (cachedPending)
}

func (f *Fleet) schedLook(name string) *schedLook {
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

// pendingWait is what a waiting reserve listens to.
type pendingWait struct {
	wake    <-chan struct{}                            // a push (or its invalidation) wakes it
	signal  <-chan struct{}                            // the queue's signal moved (grouped or prioritized work); nil for none
	taken   func()                                     // called after tasks were taken
	pending func(context.Context, bool) (int64, error) // what may be pending (cachedPending), through the local cache, which arms the invalidations
	stop    func()                                     // stops listening
}

// listen returns the wait point of the queue's pending list and signal:
// for a sharded queue, every shard's (one channel for all: listenPending,
// which grows with the shard count), read in one pipelined look at the
// local cache (cachedPending).
func (q *queueCore) listen(ctx context.Context) pendingWait {
	f := q.fleet
	pending := func(ctx context.Context, signalOnly bool) (int64, error) {
		l, _, err := q.cachedPending(ctx, signalOnly)
		return l, err
	}
	if q.knownSpan() > 1 {
		ch, stop := q.listenPending(ctx)
		return pendingWait{wake: ch, taken: func() {}, stop: stop, pending: pending}
	}
	g := f.watch.Join(q.key.Pending)
	sig, stopSig := f.watch.Listen(q.key.Signal)
	return pendingWait{wake: g.One(), signal: sig, pending: pending,
		stop: func() { f.watch.Leave(q.key.Pending, g); stopSig() },
		// Pass the wake on: another local waiter takes what is left, or
		// re-arms the invalidation that this pop used up.
		taken: g.WakeOne}
}

// wakeLocal wakes a local waiter after a push when invalidations are off.
func (q *queueCore) wakeLocal() {
	if !q.fleet.cache {
		if q.knownSpan() > 1 {
			q.fleet.watch.PokeAll(q.key.Pending) // sharded waiters listen (listenPending)
			return
		}
		q.fleet.watch.WakeOne(q.key.Pending)
	}
}
