package engine

// This file is the one group commit of a queue (or shard): the acks (a
// worker slot's, which takes the slot's next task in the same call, and
// Task.Ack's), the reserves (Queue.Reserve's) and the other ends (Nack,
// DeadLetter, Release, Snooze) that callers of this process make while a
// call of it is in flight go together in the next call: one
// queue_end.lua call ends the ends, then one queue_reserve.lua call acks
// the acks and takes the tasks of every reserve, and each caller gets its
// outcome or its share.

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/fleet-go/fleet/internal/argv"
	"github.com/fleet-go/fleet/internal/fault"
)

// MaxCommit bounds the tasks one group call acks (and takes): a call
// stays a few hundred arguments whatever the callers.
const MaxCommit = 256

// InFlight is how many calls of one group may be in flight at once. With
// one, the server idles while each reply is read and the next round is
// made: a busy worker's drain left it about 70% busy here. A second call
// keeps it busy (bench/RESULTS.md, run 10: the drain 1.2x, the full cycle
// 1.05x); three gained nothing more.
const InFlight = 2

// SecondRound is how many calls must wait before a round goes while a call
// is in flight (up to InFlight): a lone call goes only when none is, so
// that at a moderate rate the calls that come during one wait for it and
// share the next, as few and as large as with one in flight, and only a
// burst that would make a large round anyway gets a call of its own at
// once.
const SecondRound = 8

// groupCallTimeout bounds a group call, which no caller's ctx bounds: each
// caller waits on its own ctx instead.
const groupCallTimeout = 30 * time.Second

// callGroup is a queue core's calls waiting for a script call: acks (a
// worker's, with its slot's next take, and Task.Ack's: AckTake), other
// ends (Task.Nack, DeadLetter, Release, Snooze: Reservation.finish) and
// reserves (Queue.Reserve's immediate take, where it is grouped: see
// Queue.Reserve; a worker slot's take from another queue than its ack's).
// A lone call is sent at once, in its caller's goroutine and with its ctx,
// when no call of the group is in flight. Calls that come while one is
// wait; when it returns, one goroutine (spawned, so Close waits for it)
// sends them until none wait, and when SecondRound wait meanwhile (and
// fewer than InFlight calls are in flight), another goroutine sends them
// at once, in the same way; each round ending up to
// MaxCommit ends (one queue_end.lua call, before the take, so that a
// released task can go to the reserves beside it), then acking up to
// MaxCommit and taking the tasks of the reserves that wait, in arrival
// order, up to MaxCommit (a lone reserve may ask for up to MaxReserve):
// queue_reserve.lua acks first, then takes, and each reserve gets its
// share in arrival order (the first ones theirs in full when the queue
// runs short); the reserves of one call take for one owner (a worker's
// name goes before their tokens), so a reserve for another owner waits
// for the next round, as do the reserves behind it. No caller waits on
// another's ctx. A caller whose ctx ends
// while its call waits leaves the group, and its call is never sent. An
// ack or end whose ctx ends once it was sent returns ctx's error, its
// outcome unknown to it (as any call whose ctx ends in flight). A reserve whose
// ctx ends once it was sent returns ctx's error, and its share, when the
// call returns, goes back to the head of the queue uncounted
// (queue_abandon.lua, as an ungrouped reserve's whose ctx ends in flight).
type callGroup struct {
	mu      sync.Mutex
	flying  int          // calls in flight, or about to be made (at most InFlight)
	pending []*groupCall // waiting for a call, in arrival order
}

// groupCall is one caller's call in the group, and its outcome: an end
// (end: its queue_end.lua arguments), or an ack of r, a reserve of up to
// n tasks for owner, or both in one call.
type groupCall struct {
	r     *Reservation
	end   *endArgs
	n     int
	owner string
	sent  bool // taken into a call (under callGroup.mu)
	left  bool // the caller left after its call was sent: its share goes back (under callGroup.mu)
	code  EndCode
	// replied says the reply said how the ack went (code); err is then
	// the take's, which failed after the ack.
	replied bool
	res     Reserved
	err     error
	done    chan struct{} // closed under callGroup.mu once the outcome is set
}

// join runs c in the group: by lone, at once in the caller's goroutine,
// when no call is in flight, else in a round of the group: the next one
// after a call in flight returns, or one that goes at once, from a
// goroutine of its own, when SecondRound calls wait and fewer than
// InFlight are in flight. It reports false when ctx ended first (c left
// the group, or its outcome is lost to the caller); the outcome is then
// ctx's error.
func (q *Queue) join(ctx context.Context, c *groupCall, lone func()) bool {
	g := &q.calls
	g.mu.Lock()
	if g.flying == 0 {
		g.flying++
		g.mu.Unlock()
		lone()
		q.handOff()
		return true
	}
	c.done = make(chan struct{})
	g.pending = append(g.pending, c)
	second := g.flying < InFlight && len(g.pending) >= SecondRound
	if second {
		g.flying++
	}
	g.mu.Unlock()
	if second && !q.env.Spawn(q.flush) {
		q.closeGroup()
	}
	select {
	case <-c.done:
		return true
	case <-ctx.Done():
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-c.done: // the outcome came as ctx ended: it is known
		return true
	default:
	}
	if c.sent {
		c.left = true
	} else {
		g.pending = slices.DeleteFunc(g.pending, func(x *groupCall) bool { return x == c })
	}
	return false
}

// AckTake acks r (nil: none) and takes up to n tasks (0: none) for
// owner (the worker whose name goes before their tokens, "" for none) in
// one call of q's group, alone or with the calls that wait beside it: a
// worker slot's ack of a task that succeeded, which takes the slot's next
// task in the same call (r of q's shard). replied says the reply said how
// the ack went (code); err is the call's, which with replied is the
// take's, failed after the ack was done. A lone call is bounded by
// groupCallTimeout when ctx never ends (a worker's acks wait for their
// outcome). The caller applies the ack's side effects (Reservation.Acked).
func (q *Queue) AckTake(ctx context.Context, r *Reservation, n int, owner string) (code EndCode, replied bool, res Reserved, err error) {
	return q.ackTake(ctx, r, n, owner, ctx.Done() == nil)
}

// ackTake is AckTake; bound bounds a lone call by groupCallTimeout.
func (q *Queue) ackTake(ctx context.Context, r *Reservation, n int, owner string, bound bool) (code EndCode, replied bool, res Reserved, err error) {
	c := &groupCall{r: r, n: n, owner: owner}
	if !q.join(ctx, c, func() { q.lone(ctx, c, bound) }) {
		return EndLost, false, Reserved{NextReady: -1}, ctx.Err()
	}
	return c.code, c.replied, c.res, c.err
}

// lone makes c's call at once, in the caller's goroutine: take with c's
// ack and reserve, bounded by groupCallTimeout when bound.
func (q *Queue) lone(ctx context.Context, c *groupCall, bound bool) {
	if bound {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, groupCallTimeout)
		defer cancel()
	}
	req := Req{N: c.n, Owner: c.owner}
	if c.r != nil {
		req.Acks = []*Reservation{c.r}
	}
	c.code = EndLost
	c.res, c.err = q.take(ctx, req)
	if c.r != nil && len(c.res.Acks) == 1 {
		c.code, c.replied = c.res.Acks[0], true
	}
}

// groupAck acks r, alone or with the calls that wait beside it, and
// returns its code (EndDone, or EndLost: not the caller's) or the call's
// error.
func (q *Queue) groupAck(ctx context.Context, r *Reservation) (EndCode, error) {
	code, replied, _, err := q.ackTake(ctx, r, 0, "", false)
	if replied {
		return code, nil
	}
	if err == nil {
		err = errors.New("no reply for the ack") // cannot happen
	}
	return EndLost, err
}

// groupEnd runs one end (its queue_end.lua arguments, as finish makes
// them), alone or with the calls that wait beside it, and returns its code
// or the call's error.
func (q *Queue) groupEnd(ctx context.Context, end *endArgs) (EndCode, error) {
	c := &groupCall{end: end}
	if !q.join(ctx, c, func() { c.code, c.err = q.endAlone(ctx, end) }) {
		return EndLost, ctx.Err()
	}
	return c.code, c.err
}

// endAlone runs one end in a call of its own (queue_end.lua).
func (q *Queue) endAlone(ctx context.Context, end *endArgs) (EndCode, error) {
	codes, err := q.runEnds(ctx, []*endArgs{end})
	if err != nil {
		return EndLost, err
	}
	return codes[0], nil
}

// groupReserve is take for Queue.Reserve (req.N tasks, no acks, no owner),
// alone or with the calls that wait beside it.
func (q *Queue) groupReserve(ctx context.Context, req Req) (Reserved, error) {
	_, _, res, err := q.ackTake(ctx, nil, req.N, "", false)
	return res, err
}

// handOff ends a call: the calls that came meanwhile are sent by a
// goroutine of their own (flush), or the group goes idle.
func (q *Queue) handOff() {
	g := &q.calls
	g.mu.Lock()
	if len(g.pending) == 0 {
		g.flying--
		g.mu.Unlock()
		return
	}
	g.mu.Unlock()
	if q.env.Spawn(q.flush) {
		return
	}
	q.closeGroup()
}

// closeGroup answers every waiting call with fault.Closed: Close has begun,
// and nothing more is sent.
func (q *Queue) closeGroup() {
	g := &q.calls
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, c := range g.pending {
		c.code, c.res, c.err = EndLost, Reserved{NextReady: -1}, fault.Closed
		close(c.done)
	}
	g.pending = nil
	g.flying--
}

// flush sends the waiting calls until none wait.
func (q *Queue) flush() {
	g := &q.calls
	for {
		if q.env.Closed() {
			q.closeGroup()
			return
		}
		g.mu.Lock()
		if len(g.pending) == 0 {
			g.flying--
			g.mu.Unlock()
			return
		}
		round := q.nextRound()
		g.mu.Unlock()
		q.send(round)
	}
}

// nextRound takes the calls of the next round out of pending, in arrival
// order: ends and acks up to MaxCommit each, and reserves of one owner
// while their tasks stay within MaxCommit (the first one whatever it
// asks); a reserve that does not fit (or is another owner's) waits, and so
// do the reserves behind it. Under callGroup.mu.
func (q *Queue) nextRound() []*groupCall {
	g := &q.calls
	var round []*groupCall
	ends, acks, tasks, full := 0, 0, 0, false
	owner, owned := "", false
	g.pending = slices.DeleteFunc(g.pending, func(c *groupCall) bool {
		switch {
		case c.end != nil:
			if ends >= MaxCommit {
				return false
			}
			ends++
		default:
			if c.r != nil && acks >= MaxCommit {
				return false
			}
			if c.n > 0 {
				if full || (tasks > 0 && tasks+c.n > MaxCommit) || (owned && c.owner != owner) {
					// Later reserves wait behind this one: they keep their order.
					full = true
					return false
				}
				tasks += c.n
				owner, owned = c.owner, true
			}
			if c.r != nil {
				acks++
			}
		}
		c.sent = true
		round = append(round, c)
		return true
	})
	if len(g.pending) == 0 {
		g.pending = nil
	}
	return round
}

// send makes the script calls of round (queue_end.lua for its ends, then
// take for the acks and the tasks of the reserves, for their owner) and
// hands each caller its outcome: each end and ack its code, each reserve
// its share of the tasks, in order. The shares of reserves whose callers
// left go back to the queue (giveBack).
func (q *Queue) send(round []*groupCall) {
	req := Req{}
	var ends []*endArgs
	for _, c := range round {
		if c.end != nil {
			ends = append(ends, c.end)
			continue
		}
		if c.r != nil {
			req.Acks = append(req.Acks, c.r)
		}
		if c.n > 0 {
			req.N += c.n
			req.Owner = c.owner // one owner per round (nextRound)
		}
	}
	ctx, cancel := context.WithTimeout(q.env.Life, groupCallTimeout)
	var codes []EndCode
	var endErr error
	if len(ends) > 0 {
		codes, endErr = q.runEnds(ctx, ends)
	}
	res, err := Reserved{NextReady: -1}, error(nil)
	if len(req.Acks) > 0 || req.N > 0 {
		res, err = q.take(ctx, req)
	}
	cancel()
	endErr, err = closedErr(q, endErr), closedErr(q, err)
	tasks := res.Tasks
	var back []*Reservation
	g := &q.calls
	g.mu.Lock()
	i, e := 0, 0
	for _, c := range round {
		if c.end != nil {
			c.code, c.err = EndLost, endErr
			if endErr == nil {
				c.code = codes[e]
			}
			e++
			close(c.done)
			continue
		}
		c.code, c.replied, c.err = EndLost, false, err
		if c.r != nil {
			if i < len(res.Acks) {
				// The acks are done even when the take then failed.
				c.code, c.replied = res.Acks[i], true
				if c.n == 0 {
					c.err = nil
				}
			}
			i++
		}
		if c.n > 0 {
			share := tasks[:min(c.n, len(tasks))]
			tasks = tasks[len(share):]
			if c.left {
				back = append(back, share...)
				continue
			}
			c.res = res
			c.res.Tasks = share
		}
		close(c.done)
	}
	g.mu.Unlock()
	if len(back) > 0 {
		q.giveBack(back)
	}
}

// closedErr says fault.Closed for err when Close cancelled the call.
func closedErr(q *Queue, err error) error {
	if err != nil && q.env.Closed() && errors.Is(err, context.Canceled) {
		return fault.Closed
	}
	return err
}

// giveBack hands back, in the background, the tasks of a group call's
// share whose caller left while the call was in flight, as abandonReserve
// hands back an ungrouped call's (queue_abandon.lua, given the ids: the
// other shares of the call stay with their callers).
func (q *Queue) giveBack(rs []*Reservation) {
	ks := q.Keys(q.key.Call + rs[0].prefix())
	args := make([]string, 0, 2+len(rs))
	args = append(args, rs[0].prefix(), argv.Millis(q.opts.Lease+time.Minute))
	for _, r := range rs {
		args = append(args, r.id)
	}
	q.env.Abandon("reserve "+q.name, q.opts.Lease, func(ctx context.Context) error {
		n, err := queueAbandonScript.Exec(ctx, q.env.Client, ks, args).AsInt64()
		if err == nil && n > 0 {
			q.WakeLocal()
		}
		return err
	})
}

// GroupState reports how many calls of q's group are in flight, and how
// many wait: what the root's tests of the group commit look at.
func (q *Queue) GroupState() (flying, pending int) {
	g := &q.calls
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.flying, len(g.pending)
}

// HoldGroup plays lone callers whose calls are in flight (as many as
// InFlight allows), for the root's tests of the group commit: the calls
// that come wait in q's group until release hands them to the group's
// goroutines.
func (q *Queue) HoldGroup() (release func()) {
	g := &q.calls
	g.mu.Lock()
	held := InFlight - g.flying
	g.flying = InFlight
	g.mu.Unlock()
	return func() {
		for range held {
			q.handOff()
		}
	}
}
