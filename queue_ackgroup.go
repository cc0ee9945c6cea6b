package fleet

// This file group-commits the acks of Task.Ack outside a worker: the acks
// that callers of one queue (or shard) make while an ack of it is in
// flight go together in the next call, as a batch worker's do (acker).

import (
	"context"
	"slices"
	"sync"
	"time"
)

// maxCommit bounds the tasks one group commit acks (and takes), a
// worker's (worker_commit.go) or Task.Ack's: a call stays a few hundred
// arguments whatever the slot count.
const maxCommit = 256

// groupAckTimeout bounds a group call, which no caller's ctx bounds: each
// caller waits on its own ctx instead.
const groupAckTimeout = 30 * time.Second

// ackGroup is a queue core's raw acks waiting for a call. A lone ack is
// sent at once, in its caller's goroutine and with its ctx, as before.
// Acks that come while one is in flight wait; when it returns, one
// goroutine (spawned, so Close waits for it) sends them in batches of up
// to maxCommit, one ack script each, until none wait. A caller whose ctx
// ends while its ack waits leaves the group, and its ack is never sent; one
// whose ack was sent returns ctx's error, the ack's outcome unknown to it
// (as any call whose ctx ends in flight). No caller waits on another's ctx.
type ackGroup struct {
	mu      sync.Mutex
	busy    bool        // a call is in flight, or about to be made
	pending []*groupAck // waiting for a call, in arrival order
}

// groupAck is one caller's ack in the group, and its outcome.
type groupAck struct {
	r    *reservation
	sent bool // taken into a call (under ackGroup.mu)
	code endCode
	err  error
	done chan struct{}
}

// groupAck acks r, alone or with the acks that wait beside it, and returns
// its code (endDone, or endLost: not the caller's) or the call's error.
func (q *queueCore) groupAck(ctx context.Context, r *reservation) (endCode, error) {
	g := &q.acks
	g.mu.Lock()
	if !g.busy {
		g.busy = true
		g.mu.Unlock()
		codes, err := q.ackBatch(ctx, []*reservation{r})
		q.handOffAcks()
		return codes[0], err
	}
	a := &groupAck{r: r, done: make(chan struct{})}
	g.pending = append(g.pending, a)
	g.mu.Unlock()
	select {
	case <-a.done:
		return a.code, a.err
	case <-ctx.Done():
		select {
		case <-a.done: // the outcome came as ctx ended: it is known
			return a.code, a.err
		default:
		}
	}
	g.mu.Lock()
	if !a.sent {
		g.pending = slices.DeleteFunc(g.pending, func(x *groupAck) bool { return x == a })
	}
	g.mu.Unlock()
	return endLost, ctx.Err()
}

// ackBatch runs the ack step for rs (queue_ack.lua, through take): each
// ack's code, endLost for all when the call failed.
func (q *queueCore) ackBatch(ctx context.Context, rs []*reservation) ([]endCode, error) {
	res, err := q.take(ctx, reserveReq{acks: rs})
	codes := make([]endCode, len(rs))
	for i := range codes {
		codes[i] = endLost
		if err == nil && i < len(res.acks) {
			codes[i] = res.acks[i]
		}
	}
	return codes, err
}

// handOffAcks ends a call: the acks that came meanwhile are sent by a
// goroutine of their own (flushAcks), or the group goes idle.
func (q *queueCore) handOffAcks() {
	g := &q.acks
	g.mu.Lock()
	if len(g.pending) == 0 {
		g.busy = false
		g.mu.Unlock()
		return
	}
	g.mu.Unlock()
	if q.f.spawn(q.flushAcks) {
		return
	}
	// Close has begun: nothing more is sent.
	g.mu.Lock()
	waiting := g.pending
	g.pending, g.busy = nil, false
	g.mu.Unlock()
	for _, a := range waiting {
		a.code, a.err = endLost, ErrClosed
		close(a.done)
	}
}

// flushAcks sends the waiting acks in batches until none wait.
func (q *queueCore) flushAcks() {
	g := &q.acks
	for {
		g.mu.Lock()
		if len(g.pending) == 0 {
			g.busy = false
			g.mu.Unlock()
			return
		}
		n := min(len(g.pending), maxCommit)
		batch := slices.Clone(g.pending[:n])
		g.pending = slices.Delete(g.pending, 0, n)
		for _, a := range batch {
			a.sent = true
		}
		g.mu.Unlock()
		rs := make([]*reservation, len(batch))
		for i, a := range batch {
			rs[i] = a.r
		}
		ctx, cancel := context.WithTimeout(q.f.doneCtx(), groupAckTimeout)
		codes, err := q.ackBatch(ctx, rs)
		cancel()
		for i, a := range batch {
			a.code, a.err = codes[i], err
			close(a.done)
		}
	}
}
