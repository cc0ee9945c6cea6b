package fleet

import (
	"context"
	"fmt"
	"time"

	"github.com/fleet-go/fleet/internal/engine"
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
// Reserve never returns a task whose lease it cannot prove: when the reply
// comes back after the lease, less a small margin (Lease/10, at most 1 s),
// ran out on this process's clock (counted from the send: a reply held
// back, a stalled server, a paused process), another consumer may get the
// task any moment, so the tasks go back to the head of the queue,
// uncounted, and Reserve returns none (or waits on, within wait), as a
// worker does.
//
// The reserves and acks (Task.Ack) that goroutines of one Fleet make of
// one queue while one of its calls is in flight share the next script
// call: the acks first, then each reserve takes its share of the tasks, in
// arrival order (internal/engine/callgroup.go). A lone reserve goes at once, as
// before, and each caller waits on its own ctx only: a reserve whose ctx
// ends while it waits leaves without being sent, and one whose ctx ends
// while its call is in flight returns ctx's error, its tasks handed back to
// the head of the queue, uncounted, as an ungrouped reserve's are. On a
// sharded queue, or one with a RateLimit, each reserve makes its own call.
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
	tasks, st, err := q.reserveTasks(ctx, engine.Req{N: n, Shared: true})
	if len(tasks) > 0 || wait == 0 || (err != nil && !transient(err)) {
		return tasks, opErr(op, q.name, err)
	}
	w := q.e.Listen(ctx)
	defer w.Stop()
	tasks, err = q.await(ctx, n, wait, st, err, w)
	return tasks, opErr(op, q.name, err)
}

// reserveTasks is one reserve (engine.Queue.Reserve), its tasks decoded.
func (q *Queue[T]) reserveTasks(ctx context.Context, req engine.Req) ([]*Task[T], engine.Reserved, error) {
	res, err := q.e.Reserve(ctx, req)
	if len(res.Tasks) == 0 {
		return nil, res, err
	}
	tasks, berr := q.decodeAll(ctx, res.Tasks)
	return tasks, res, berr
}

// await waits for tasks on w; see Reserve.
func (q *Queue[T]) await(ctx context.Context, n int, wait time.Duration, st engine.Reserved, lastErr error, w engine.PendingWait) ([]*Task[T], error) {
	f := q.fleet
	end := time.NewTimer(wait)
	defer end.Stop()
	bo := backoff{min: 2 * time.Millisecond, max: time.Second}
	tryNow, retried := false, false
	for {
		if tryNow {
			tasks, s, err := q.reserveTasks(ctx, engine.Req{N: n, Shared: true})
			if len(tasks) > 0 {
				w.Taken()
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
		if st.Limited > 0 {
			sleep = st.Limited // the rate limit: no token before then
		} else if f.cache && lastErr == nil {
			l, err := w.Pending(ctx, st.Capped)
			if err == nil {
				if l > 0 && !retried {
					tryNow, retried = true, true
					continue
				}
				sleep = time.Second // only covers a lost invalidation
			}
		}
		retried = false
		if st.Blocked > 0 && st.Blocked < sleep {
			sleep = st.Blocked // a group's limit, or GlobalConcurrency
		}
		if st.NextReady >= 0 && st.NextReady < sleep {
			sleep = max(st.NextReady, time.Millisecond)
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
		case <-w.Wake:
			// With caching, the loop re-arms first and tries when the list
			// holds anything; without, a local push woke us: try.
			tryNow = !f.cache || lastErr != nil || st.Limited > 0
			retried = false
		case <-w.Signal:
			tryNow = !f.cache || lastErr != nil || st.Limited > 0
			retried = false
		case <-t.C:
			tryNow = true
		}
		t.Stop()
	}
}
