package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
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
		return nil, queueErr(op, q.name, err)
	}
	if n < 1 || n > MaxReserve {
		return nil, queueErr(op, q.name, fmt.Errorf("%w: n %d is not in [1, %d]", ErrInvalidArgument, n, MaxReserve))
	}
	if wait < 0 {
		return nil, queueErr(op, q.name, fmt.Errorf("%w: wait %v is negative", ErrInvalidArgument, wait))
	}
	tasks, st, err := q.reserve(ctx, n, false)
	if len(tasks) > 0 || wait == 0 || (err != nil && !transient(err)) {
		return tasks, queueErr(op, q.name, err)
	}
	tasks, err = q.await(ctx, n, wait, st, err)
	return tasks, queueErr(op, q.name, err)
}

// transient reports whether err may go away by itself (a connection that
// broke, a server that restarts).
func transient(err error) bool {
	return errors.Is(err, ErrUnavailable) || (classify(err) == ErrUnavailable && !errors.Is(err, ErrClosed))
}

// reserveState is what a reserve call learned about the queue.
type reserveState struct {
	drained   bool          // nothing was left pending (asked for with wantLeft)
	nextReady time.Duration // until the next scheduled task is due; -1: none
	limited   time.Duration // the rate limit has no token until then (queue_limit.go); 0: none
}

// await waits for tasks; see Reserve.
func (q *Queue[T]) await(ctx context.Context, n int, wait time.Duration, st reserveState, lastErr error) ([]*Task[T], error) {
	f := q.f
	end := time.NewTimer(wait)
	defer end.Stop()
	g := f.watch.join(q.k.Pending)
	defer f.watch.leave(q.k.Pending, g)
	bo := backoff{min: 2 * time.Millisecond, max: time.Second}
	tryNow, retried := false, false
	for {
		if tryNow {
			tasks, s, err := q.reserve(ctx, n, false)
			if len(tasks) > 0 {
				// Pass the wake on: another local waiter takes what is
				// left, or re-arms the invalidation that this pop used up.
				poke(g.one)
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
			l, err := f.client.DoCache(ctx, f.client.B().Llen().Key(q.k.Pending).Cache(), f.cacheTTL).AsInt64()
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
		case <-g.one:
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

// reserveOnce runs the reserve script once and decodes what it returns
// (reserve in queue_limit.go applies the rate limit around it). When
// the call ends without a reply (ctx ended, or the connection broke) the
// script may still run, or have run: abandonReserve then hands back what
// it took.
func (q *Queue[T]) reserveOnce(ctx context.Context, n int, wantLeft bool) ([]*Task[T], reserveState, error) {
	st := reserveState{nextReady: -1}
	if !q.published.Load() {
		// A consumer stores its policy once; after that only submits keep
		// the registration (so a reserve never waits on another round trip).
		if err := q.register(ctx); err != nil {
			return nil, st, err
		}
	}
	prefix := newToken() + "."
	sent := monoNow()
	res, err := queueReserveScript.Exec(ctx, q.f.client,
		[]string{q.k.Pending, q.k.Processing, q.k.Body, q.k.Lease, q.k.Scheduled, q.k.Dead, q.k.Call + prefix, q.k.Policy},
		[]string{strconv.Itoa(n), millis(q.opts.Lease), prefix, "1000", strconv.Itoa(q.opts.DeadMax), boolArg(wantLeft)}).ToArray()
	if err != nil {
		if outcomeUnknown(err) {
			q.abandonReserve(prefix)
		}
		return nil, st, err
	}
	if len(res) < 4 || (len(res)-4)%3 != 0 {
		return nil, st, fmt.Errorf("fleet: reserve: unexpected reply of %d elements", len(res))
	}
	nowStr, _ := res[0].ToString()
	now, _ := strconv.ParseInt(nowStr, 10, 64)
	left, _ := res[1].AsInt64()
	st.drained = left == 0
	if next, _ := res[2].ToString(); next != "" {
		if s, err := strconv.ParseFloat(next, 64); err == nil {
			st.nextReady = max(time.Duration(s*1000-float64(now))*time.Millisecond, 0)
		}
	}
	tasks := make([]*Task[T], 0, (len(res)-4)/3)
	var buryErr error
	for i := 4; i < len(res); i += 3 {
		id, _ := res[i].ToString()
		token, _ := res[i+1].ToString()
		body, _ := res[i+2].ToString()
		t := &Task[T]{ID: id, q: q, token: token, body: body}
		t.proven.Store(sent + int64(q.opts.Lease))
		w, err := parseBody(body)
		if err == nil && w.ID != id {
			err = errors.New("body id changed") // cannot happen: the script read it
		}
		if err == nil {
			t.Attempts, t.dedup = w.Attempts, w.Dedup
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
			if berr := t.end(ctx, "bury", w.Attempts, err.Error(), true); berr != nil {
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

func boolArg(b bool) string {
	if b {
		return "1"
	}
	return "0"
}
