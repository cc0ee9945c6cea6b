package fleet

// This file group-commits a batch worker's Acks: the slots that finish
// tasks while a call is in flight have them acked, and their next tasks
// taken, together in the next call.

import (
	"context"
	"sync"

	"github.com/fleet-go/fleet/internal/engine"
)

// maxInFlight is how many group calls of one worker may be in flight at
// once (acker.max defaults to it): a slot that finishes while fewer are
// makes a call at once; past it, the acks wait for a call to end and go
// together in the next. One makes the calls largest and the Redis work per
// task least; two measured no faster on one machine (a higher limit may
// pay where the round trip is long).
const maxInFlight = 1

// acker group-commits the plain acks of one batch (or priority) worker. A
// slot that finished a task hands it over (with whether it wants its next
// task from the same call). A slot that finds fewer than max calls in
// flight makes one at once, for its task and every task waiting: one
// queue_reserve.lua call acks them all and takes a task for each slot that
// wants one. When a call returns, the first slot that handed a task over
// meanwhile makes the next call, for all that wait. So a lone slot's ack
// goes at once, as before, while on a busy worker the acks of many slots
// share one round trip and one script, whose commands do not grow with the
// tasks it acks or takes. No goroutine of its own: the calls are made by
// the slots.
type acker[P any] struct {
	max      int // calls in flight at most; 0: maxInFlight
	mu       sync.Mutex
	pending  []*ackReq[P] // handed over, waiting for a call
	inFlight int          // calls in flight, or about to be made
}

// ackReq is one slot's task handed over to the acker, and the outcome.
type ackReq[P any] struct {
	t     *Task[P]
	take  *Queue[P]      // the queue the slot's next task comes from; nil: none
	next  *Task[P]       // the task taken for it, if any
	acked engine.EndCode // engine.EndDone or engine.EndLost, when replied
	// replied says the call's reply said how the ack went (acked); when
	// not, err says why.
	replied bool
	err     error // the call's error
	lead    bool  // set before ready closes: this slot makes the next call
	ready   chan struct{}
}

// commit hands r over and returns when its outcome is known, making a
// call itself (for r and what waits) when fewer than max are in flight, or
// when a call that ends hands it the lead.
func (a *acker[P]) commit(r *ackReq[P], call func([]*ackReq[P])) {
	limit := a.max
	if limit <= 0 {
		limit = maxInFlight
	}
	a.mu.Lock()
	if a.inFlight >= limit {
		r.ready = make(chan struct{})
		a.pending = append(a.pending, r)
		a.mu.Unlock()
		<-r.ready
		if !r.lead {
			return
		}
		a.mu.Lock() // the call that handed r the lead took r out of pending
	} else {
		a.inFlight++
	}
	n := min(len(a.pending), engine.MaxCommit-1)
	batch := make([]*ackReq[P], 0, n+1)
	batch = append(append(batch, r), a.pending[:n]...)
	a.pending = a.pending[n:]
	if len(a.pending) == 0 {
		a.pending = nil
	}
	a.mu.Unlock()
	call(batch)
	for _, o := range batch[1:] {
		close(o.ready)
	}
	a.mu.Lock()
	if len(a.pending) > 0 {
		next := a.pending[0]
		a.pending = a.pending[1:]
		next.lead = true
		close(next.ready)
	} else {
		a.inFlight--
	}
	a.mu.Unlock()
}

// commitCall is the acker's call: for each queue (or shard) of reqs, one
// reserve (queue_reserve.lua) acks the tasks of that queue and takes a task
// for each request that takes from it; it fills in each request's outcome.
// The calls of several queues (a priority worker's, a sharded queue's
// shards) go at once, and commitCall returns when all have.
func (b *batch[C, O, P]) commitCall(ctx context.Context, reqs []*ackReq[P]) {
	type group struct {
		c     *queueCore
		q     *Queue[P] // the queue the takes decode with
		acks  []*ackReq[P]
		takes []*ackReq[P]
	}
	var groups []*group
	of := func(c *queueCore) *group {
		for _, g := range groups {
			if g.c == c {
				return g
			}
		}
		g := &group{c: c}
		groups = append(groups, g)
		return g
	}
	for _, r := range reqs {
		g := of(r.t.core)
		g.acks = append(g.acks, r)
		if r.take != nil {
			g := of(r.take.queueCore)
			g.q = r.take
			g.takes = append(g.takes, r)
		}
	}
	var wg sync.WaitGroup
	for _, g := range groups[1:] {
		wg.Go(func() { b.commitQueue(ctx, g.c, g.q, g.acks, g.takes) })
	}
	b.commitQueue(ctx, groups[0].c, groups[0].q, groups[0].acks, groups[0].takes)
	wg.Wait()
}

// commitQueue is commitCall for core c: it acks the tasks of acks and takes
// a task for each request of takes (decoded with q).
func (b *batch[C, O, P]) commitQueue(ctx context.Context, c *queueCore, q *Queue[P], acks, takes []*ackReq[P]) {
	rs := make([]*engine.Reservation, len(acks))
	for i, r := range acks {
		rs[i] = r.t.r
	}
	n := len(takes)
	res, err := c.e.Reserve(ctx, engine.Req{N: n, Owner: b.w.name(), Acks: rs})
	got := len(res.Tasks)
	for i, r := range acks {
		r.replied, r.err = i < len(res.Acks), err
		if r.replied {
			r.acked = res.Acks[i]
		}
	}
	tasks := res.Tasks
	for _, r := range takes {
		if len(tasks) == 0 {
			break
		}
		next, _ := q.decode(ctx, tasks[0]) // a poison payload is buried: no next task
		r.next, tasks = next, tasks[1:]
	}
	switch {
	case err != nil && n > 0 && (len(acks) == 0 || res.Acks != nil):
		// The acks are done (or there were none); only the take failed:
		// the fetcher takes over.
		b.w.log.Warn("fleet: worker reserve failed", "queue", c.name, "err", err)
		b.fetch.tookNone(ctx, c.name, res)
	case err == nil && got < n:
		// Fewer tasks than asked for: the queue is empty now.
		b.fetch.tookNone(ctx, c.name, res)
	}
	for _, r := range tasks {
		_ = b.release(r) // cannot happen: the script took at most n
	}
}

// finish acks a task that succeeded, through the worker's acker, which
// puts the acks of the slots that finish together, and their next tasks,
// in one call. While the queue has more, it takes the slot's next task in
// that call (takeQueue), so that a busy slot never waits on the fetcher.
// The call is bounded by endTimeout (a ctx made by the slot that makes
// it, once per call rather than per task); run bounds the cached read of
// the pause flag. The ack then ends as Task.Ack's does (engine.Reservation.Acked).
func (b *batch[C, O, P]) finish(run, soft context.Context, t *Task[P]) (*Task[P], error) {
	r := &ackReq[P]{t: t, take: b.takeQueue(run, soft, t)}
	b.acks.commit(r, func(reqs []*ackReq[P]) {
		ctx, cancel := context.WithTimeout(context.Background(), endTimeout)
		defer cancel()
		b.commitCall(ctx, reqs)
	})
	return r.next, opErr("ack", t.core.name, t.r.Acked(run, r.acked, r.replied, r.err))
}
