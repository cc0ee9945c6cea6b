package fleet

// This file holds a batch worker's machinery: the fetcher that reserves
// tasks for the free slots, and the slots' loop.

import (
	"context"
	"errors"
	"sync/atomic"
	"time"
)

// batch is the machinery of one batch worker: one fetcher that reserves
// tasks for the free slots, and the slots.
type batch[C, O, P any] struct {
	w     *Worker
	q     *Queue[P]
	a     BatchAutomation[C, O, P]
	free  chan struct{} // one token per free slot
	tasks chan *Task[P] // reserved tasks for the slots; closed by fetch
	// more: the last reserve left tasks pending, so a slot that finishes a
	// task acks it and takes the next in one call (finish). drained: the
	// last reserve or take found the queue empty, so the fetcher arms the
	// queue key's invalidation before it reserves blind.
	more, drained atomic.Bool

	cancels *cancelWatch // the handlers that Queue.Cancel may cancel
	takes   taker[P]     // NewPriorityWorker's pick of the queue a slot takes from; nil: b.more decides
	acks    *acker[P]    // group-commits the slots' acks (worker_commit.go)
}

// fetch reserves tasks while slots are free, until Stop begins (soft). Its
// Redis calls use run, which only ends at a hard stop, so a reservation is
// never cut off halfway by a graceful one.
func (b *batch[C, O, P]) fetch(run, soft context.Context) {
	defer close(b.tasks)
	q, f := b.q, b.w.f
	ch, stop := q.listenPending(run) // every shard of a sharded queue
	defer stop()
	pause := newPauseGate(f, q.k.Paused, b.w.opts.ConfigPoll) // Queue.Pause
	defer pause.stop()
	bo := backoff{min: 2 * time.Millisecond, max: time.Second}
	errBo := backoff{min: 50 * time.Millisecond, max: 5 * time.Second}
	timer := time.NewTimer(0)
	<-timer.C
	defer timer.Stop()
	// readyAt: when the earliest scheduled task is due (zero: none).
	readyAt := time.Time{}
	wait := func(sleep time.Duration) bool {
		if !readyAt.IsZero() {
			sleep = min(sleep, max(time.Until(readyAt), time.Millisecond))
		}
		timer.Reset(sleep)
		select {
		case <-soft.Done():
			return false
		case <-ch:
			if !timer.Stop() {
				<-timer.C
			}
		case <-timer.C:
		}
		return true
	}
	for {
		// Wait for a free slot, then take every free one.
		select {
		case <-soft.Done():
			return
		case <-b.free:
		}
		n := 1
	more:
		for n < cap(b.free) {
			select {
			case <-b.free:
				n++
			default:
				break more
			}
		}
		if !pause.hold(run, soft) {
			return
		}
		if b.drained.Swap(false) && f.cache {
			// The queue was empty at the last reserve: arm the invalidation
			// of the queue key and look, before reserving blind.
			l, _, err := q.cachedPending(run)
			if err == nil && l == 0 && (readyAt.IsZero() || time.Now().Before(readyAt)) {
				for range n {
					b.free <- struct{}{}
				}
				if !wait(b.w.opts.ConfigPoll) {
					return
				}
				continue
			}
		}
		var sleep time.Duration
		err := q.ready(run)
		var tasks []*Task[P]
		st := reserved{nextReady: -1}
		if err == nil {
			tasks, st, err = q.reserveTasks(run, reserveReq{n: n, wantLeft: f.cache, owner: b.w.name()})
		}
		readyAt = time.Time{}
		if st.nextReady >= 0 {
			readyAt = time.Now().Add(st.nextReady)
		}
		for _, t := range tasks {
			b.tasks <- t // never blocks: one buffer place per slot
		}
		for range n - len(tasks) {
			b.free <- struct{}{}
		}
		switch {
		case len(tasks) > 0:
			bo.n, errBo.n = 0, 0
			b.drained.Store(st.drained)
			b.more.Store(!st.drained)
			continue
		case err != nil:
			if run.Err() != nil || errors.Is(err, ErrClosed) {
				return
			}
			b.w.log.Warn("fleet: worker reserve failed", "queue", q.name, "err", err)
			sleep = errBo.next()
		case st.limited > 0:
			sleep = st.limited // the queue's rate limit: no token before then (queue_limit.go)
		case f.cache:
			// Arm the invalidation of the queue key, and catch a push that
			// came between the reserve and now.
			l, _, err := q.cachedPending(run)
			if err == nil && l > 0 {
				continue
			}
			sleep = b.w.opts.ConfigPoll // the fallback poll: covers a lost invalidation
		default:
			sleep = bo.next()
		}
		if !wait(sleep) {
			return
		}
	}
}

// slot runs the tasks handed to it until the fetcher is done and no task is
// left. After a hard stop (run ended) it releases what it gets unrun.
func (b *batch[C, O, P]) slot(run, soft context.Context, s *Slot[C, O]) {
	for t := range b.tasks {
		for t != nil {
			if run.Err() != nil {
				err := run.Err()
				if cerr := b.release(t.reservation); cerr != nil {
					err = cerr
				}
				if b.w.opts.OnTaskEnd != nil {
					b.w.opts.OnTaskEnd(t.ID, err)
				}
				break
			}
			t = b.handle(run, soft, s, t)
		}
		select {
		case b.free <- struct{}{}:
		default:
		}
	}
}

// release puts an interrupted task back without counting an attempt.
func (b *batch[C, O, P]) release(t *reservation) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := t.Release(ctx)
	if errors.Is(err, ErrCanceled) {
		return err // Queue.Cancel asked it to stop: buried instead, as it should be
	}
	if err != nil {
		b.w.log.Warn("fleet: worker could not release a task", "task", t.id, "err", err)
	}
	return nil
}
