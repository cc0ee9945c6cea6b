package fleet

// This file holds a batch worker's machinery (runner), and the slots' loop.

import (
	"context"
	"errors"
	"time"

	"github.com/fleet-go/fleet/internal/engine"
)

// runner is the machinery of one batch worker (NewBatchWorker): one fetcher that reserves
// tasks for the free slots (worker_fetch.go), and the slots, whose acks go
// through their queues' group commit (finish, worker_task.go).
type runner[C, O, P any] struct {
	w     *Worker
	q     *Queue[P] // the first of its queues (payloads decode with it)
	a     BatchAutomation[C, O, P]
	free  chan struct{} // one token per free slot
	tasks chan *Task[P] // reserved tasks for the slots; closed by the fetcher

	cancels *cancelWatch      // the handlers that Queue.Cancel may cancel
	fetch   *fetcher[C, O, P] // reserves for the free slots; picks the queue a slot takes from
	// commitCtx is what the slots' acks wait on (finish): run without its
	// end, made once for the runner.
	commitCtx context.Context
	owner     string // the worker's name, which its tasks' tokens carry (Worker.name)
}

// slot runs the tasks handed to it until the fetcher is done and no task is
// left. After a hard stop (run ended) it releases what it gets unrun.
func (b *runner[C, O, P]) slot(run, soft context.Context, s *Slot[C, O]) {
	for t := range b.tasks {
		for t != nil {
			if run.Err() != nil {
				err := run.Err()
				if cerr := b.release(t.r); cerr != nil {
					err = cerr
				}
				if b.w.opts.OnTaskEnd != nil {
					b.w.opts.OnTaskEnd(t.ID, err)
				}
				break
			}
			t, _ = b.handle(run, soft, s, t)
		}
		select {
		case b.free <- struct{}{}:
		default:
		}
	}
}

// release puts an interrupted task back without counting an attempt.
func (b *runner[C, O, P]) release(t *engine.Reservation) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := opErr("release", t.Queue().Name(), t.Release(ctx))
	if errors.Is(err, ErrCanceled) {
		return err // Queue.Cancel asked it to stop: buried instead, as it should be
	}
	if err != nil {
		b.w.log.Warn("fleet: worker could not release a task", "task", t.ID(), "err", err)
	}
	return nil
}
