package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// Reserve takes up to n tasks (1 <= n <= MaxReserve) from the head of the
// queue, each with a lease of QueueOptions.Lease, after moving the due
// scheduled tasks onto the queue, all in one atomic script. When none is
// ready it waits up to wait for one (0: no wait): woken by the server's
// invalidation of the queue key when the Fleet caches (a task submitted to
// an idle queue is picked up within a millisecond or so), with a poll every
// second as the fallback, or polling with a capped backoff without caching.
// It returns no tasks and a nil error when the wait ran out. On a queue
// with QueueOptions.RateLimit it takes no more tasks than the limiter has
// tokens, and waits (within wait) for the next token rather than spin.
//
// A body that is not a JSON object with a string id, or whose payload no
// longer decodes into T or validates, is poison: it goes to the dead letters
// with the reason and is not returned. (The documented original hands an
// id-less body out once, unregistered; a typed worker cannot decode it nor
// end it, so fleet keeps it in :dead for an operator instead.)
//
// May return ErrInvalidArgument, ErrWrongType, ErrUnavailable, ErrClosed,
// and ctx's error.
func (q *Queue[T]) Reserve(ctx context.Context, n int, wait time.Duration) ([]*Task[T], error) {
	const op = "reserve"
	if err := q.ready(ctx); err != nil {
		return nil, opErr(op, q.name, err)
	}
	if n < 1 || n > MaxReserve {
		return nil, opErr(op, q.name, fmt.Errorf("%w: n %d is not in [1, %d]", ErrInvalidArgument, n, MaxReserve))
	}
	if wait < 0 {
		return nil, opErr(op, q.name, fmt.Errorf("%w: wait %v is negative", ErrInvalidArgument, wait))
	}
	tasks, st, err := q.reserve(ctx, n, false)
	if len(tasks) > 0 || wait == 0 || (err != nil && !transient(err)) {
		return tasks, opErr(op, q.name, err)
	}
	w := q.listen(ctx)
	defer w.stop()
	tasks, err = q.await(ctx, n, wait, st, err, w)
	return tasks, opErr(op, q.name, err)
}

// reserveState is what a reserve call learned about the queue.
type reserveState struct {
	drained   bool          // nothing was left pending (asked for with wantLeft)
	nextReady time.Duration // until the next scheduled task is due; -1: none, or not looked at
	acks      string        // a digit per ack done first, in order: '1' done, '0' lease lost
	limited   time.Duration // the rate limit has no token until then (queue_limit.go); 0: none
}

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
	next atomic.Int64 // monoNow at which the next reserve looks
	due  atomic.Int64 // monoNow at which the earliest task seen falls due; 0: none seen
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
	wake    <-chan struct{}                      // a push (or its invalidation) wakes it
	taken   func()                               // called after tasks were taken
	pending func(context.Context) (int64, error) // the pending count through the local cache, which arms the invalidations
	stop    func()                               // stops listening
}

// listen returns the wait point of the queue's pending list: for a sharded
// queue, every shard's (one channel for all: listenPending, which grows
// with the shard count), read in one pipelined look at the local cache.
func (q *Queue[T]) listen(ctx context.Context) pendingWait {
	f := q.f
	if q.knownSpan() > 1 {
		ch, stop := q.listenPending(ctx)
		return pendingWait{wake: ch, taken: func() {}, stop: stop,
			pending: func(ctx context.Context) (int64, error) { l, _, err := q.cachedPending(ctx); return l, err }}
	}
	g := f.watch.join(q.k.Pending)
	return pendingWait{wake: g.one, stop: func() { f.watch.leave(q.k.Pending, g) },
		// Pass the wake on: another local waiter takes what is left, or
		// re-arms the invalidation that this pop used up.
		taken: func() { poke(g.one) },
		pending: func(ctx context.Context) (int64, error) {
			return f.client.DoCache(ctx, f.client.B().Llen().Key(q.k.Pending).Cache(), f.cacheTTL).AsInt64()
		}}
}

// await waits for tasks on w; see Reserve.
func (q *Queue[T]) await(ctx context.Context, n int, wait time.Duration, st reserveState, lastErr error, w pendingWait) ([]*Task[T], error) {
	f := q.f
	end := time.NewTimer(wait)
	defer end.Stop()
	bo := backoff{min: 2 * time.Millisecond, max: time.Second}
	tryNow, retried := false, false
	for {
		if tryNow {
			tasks, s, err := q.reserve(ctx, n, false)
			if len(tasks) > 0 {
				w.taken()
				return tasks, nil
			}
			if err != nil && !transient(err) {
				return nil, err
			}
			lastErr, st = err, s
		}
		// Arm the server's invalidation of the pending list, and catch a push
		// that came between the reserve and now.
		sleep := bo.next()
		if st.limited > 0 {
			sleep = st.limited // the rate limit: no token before then
		} else if f.cache && lastErr == nil {
			l, err := w.pending(ctx)
			if err == nil {
				if l > 0 && !retried {
					tryNow, retried = true, true
					continue
				}
				sleep = time.Second // only covers a lost invalidation
			}
		}
		retried = false
		if st.nextReady >= 0 && st.nextReady < sleep {
			sleep = max(st.nextReady, time.Millisecond)
		}
		t := time.NewTimer(sleep)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-f.done:
			t.Stop()
			return nil, ErrClosed
		case <-end.C:
			t.Stop()
			return nil, lastErr
		case <-w.wake:
			// With caching, the loop re-arms first and tries when the list
			// holds anything; without, a local push woke us: try.
			tryNow = !f.cache || lastErr != nil || st.limited > 0
			retried = false
		case <-t.C:
			tryNow = true
		}
		t.Stop()
	}
}

// reserve is reserveAs with no owner.
func (q *Queue[T]) reserve(ctx context.Context, n int, wantLeft bool) ([]*Task[T], reserveState, error) {
	return q.reserveAs(ctx, n, wantLeft, "")
}

// reserveOnceAs runs the reserve script once and decodes what it returns
// (reserveAs in queue_limit.go applies the rate limit around it), for a
// worker named owner ("type|id"; "" for none), whose name goes before the
// lease tokens (owner/<random>.<i>), so that Lookup can say which worker
// holds a task. When the call ends without a reply (ctx ended, or the connection
// broke) the script may still run, or have run: abandonReserve then hands
// back what it took.
func (q *Queue[T]) reserveOnceAs(ctx context.Context, n int, wantLeft bool, owner string) ([]*Task[T], reserveState, error) {
	if q.root == nil && q.spanOf(ctx) > 1 {
		return q.reserveSpread(ctx, n, wantLeft, owner)
	}
	return q.reserveShardAs(ctx, n, wantLeft, owner, nil)
}

// reserveShardAs is reserveOnceAs on the shard of q's keys, acking acks
// first (tasks of this shard, with a plain ack: a worker's group commit,
// worker_commit.go): st.acks says how each went. n may be 0 when there are
// acks.
func (q *Queue[T]) reserveShardAs(ctx context.Context, n int, wantLeft bool, owner string, acks []*Task[T]) ([]*Task[T], reserveState, error) {
	st := reserveState{nextReady: -1}
	if !q.top().published.Load() {
		// A consumer stores its policy once; after that only submits keep
		// the registration (so a reserve never waits on another round trip).
		if err := q.register(ctx); err != nil {
			return nil, st, err
		}
	}
	prefix := newToken() + "."
	if owner != "" {
		prefix = owner + "/" + prefix
	}
	sent := monoNow()
	look := n > 0 && q.look.now(sent) // an ack alone (n = 0) looks at nothing
	move := "0"
	if look {
		move = "1000"
	}
	args := make([]string, 6, 6+3*len(acks))
	args[0], args[1], args[2], args[3], args[4], args[5] = strconv.Itoa(n), millis(q.opts.Lease), prefix, move, strconv.Itoa(q.opts.DeadMax), boolArg(wantLeft)
	for _, t := range acks {
		args = append(args, t.ID, t.token, t.dedup)
	}
	res, err := queueReserveScript.Exec(ctx, q.f.client,
		[]string{q.k.Pending, q.k.Processing, q.k.Body, q.k.Lease, q.k.Scheduled, q.k.Dead, q.k.Call + prefix, q.k.Policy, q.k.Dedup},
		args).ToArray()
	if err != nil {
		if outcomeUnknown(err) {
			q.abandonReserve(prefix)
		}
		return nil, st, err
	}
	if len(res) < 5 {
		return nil, st, unexpectedReply("reserve", len(res))
	}
	st.acks, _ = res[4].ToString()
	if (len(res)-5)%3 == 1 {
		// The ack was done, and then the reserve failed.
		msg, _ := res[len(res)-1].ToString()
		if strings.HasPrefix(msg, "WRONGTYPE") {
			return nil, st, fmt.Errorf("%w: %s", ErrWrongType, msg)
		}
		return nil, st, errors.New(msg)
	}
	if (len(res)-5)%3 != 0 {
		return nil, st, unexpectedReply("reserve", len(res))
	}
	nowStr, _ := res[0].ToString()
	now, _ := strconv.ParseInt(nowStr, 10, 64)
	left, _ := res[1].AsInt64()
	st.drained = left == 0
	switch next, _ := res[2].ToString(); next {
	case "-": // not looked at: what the last look saw still holds
		if due := q.look.due.Load(); due != 0 {
			st.nextReady = max(time.Duration(due-sent), 0)
		}
	case "":
		q.look.looked(sent, -1)
	default:
		if s, err := strconv.ParseFloat(next, 64); err == nil {
			st.nextReady = max(time.Duration(s*1000-float64(now))*time.Millisecond, 0)
		}
		q.look.looked(sent, st.nextReady)
	}
	tasks := make([]*Task[T], 0, (len(res)-5)/3)
	var buryErr error
	for i := 5; i < len(res); i += 3 {
		id, _ := res[i].ToString()
		token, _ := res[i+1].ToString()
		body, _ := res[i+2].ToString()
		t := &Task[T]{ID: id, q: q, token: token, body: body}
		t.clock.prove(sent, q.opts.Lease)
		w, err := parseBody(body)
		if err == nil && w.ID != id {
			err = errors.New("body id changed") // cannot happen: the script read it
		}
		if err == nil {
			t.Attempts, t.dedup, t.unique, t.trace = w.Attempts, w.Dedup, w.UniqueMS, w.Trace
			payload := w.Payload
			if len(payload) == 0 {
				payload = json.RawMessage("null")
			}
			if err = json.Unmarshal(payload, &t.Payload); err != nil {
				err = fmt.Errorf("payload does not decode into %T: %w", t.Payload, err)
			} else if err = q.validate(t.Payload); err != nil {
				err = fmt.Errorf("payload no longer validates: %w", err)
			}
		}
		if err != nil {
			// Poison: bury it under this very lease, so it never loops.
			if berr := t.end(ctx, "dead-letter", w.Attempts, err.Error(), true); berr != nil {
				buryErr = berr
			}
			continue
		}
		tasks = append(tasks, t)
	}
	if len(tasks) == 0 && buryErr != nil {
		return nil, st, buryErr
	}
	return tasks, st, nil
}

// abandonReserve hands back, in the background, what the reserve call with
// token prefix took, or tombstones the call so that it takes nothing if it
// runs later (queue_abandon.lua), for as long as a lease (after that the
// sweeper has the tasks anyway); see Fleet.abandon.
func (q *Queue[T]) abandonReserve(prefix string) {
	keys := []string{q.k.Pending, q.k.Processing, q.k.Body, q.k.Lease, q.k.Call + prefix}
	args := []string{prefix, millis(q.opts.Lease + time.Minute)}
	q.f.abandon("reserve "+q.name, q.opts.Lease, func(ctx context.Context) error {
		n, err := queueAbandonScript.Exec(ctx, q.f.client, keys, args).AsInt64()
		if err == nil && n > 0 {
			q.wakeLocal()
		}
		return err
	})
}
