package fleet

// This file holds a batch worker's machinery (runner), and the slots' loop.

import (
	"context"
	"errors"
	"sync"
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
	free  chan struct{} // one token per free permit (cap MaxSlots at least: worker_resize.go)
	tasks chan *Task[P] // reserved tasks for the slots; closed by the fetcher (endFetch)

	cancels *cancelWatch      // the handlers that Queue.Cancel may cancel
	fetch   *fetcher[C, O, P] // reserves for the free slots; picks the queue a slot takes from
	// commitCtx is what the slots' acks wait on (finish): run without its
	// end, made once for the runner.
	commitCtx context.Context
	owner     string // the worker's name, which its tasks' tokens carry (Worker.name)

	// spawnSlot starts the goroutine of a slot (worker_resize.go).
	spawnSlot func(st *slotState) bool

	mu      sync.Mutex // guards what follows, and slotState.live (worker_resize.go)
	target  int        // the slot count in force (Worker.SetSlots)
	held    int        // permits: free tokens, and tasks reserved for the slots or in their hands
	running int        // tasks that admit let start and that have not ended
	live    int        // slots whose goroutine runs
	// unspawned says a slot goroutine could not start (the worker stops).
	unspawned bool
	ended     bool // the fetcher returned
}

// slot runs the tasks handed to it until the fetcher is done and no task is
// left, or until the slot count falls to its index or below (it then ends
// once its task ended). A task starts only if admit lets it (a shrink may
// have come since it was reserved); one that may not is put back at once.
// After a hard stop (run ended) it releases what it gets unrun.
func (b *runner[C, O, P]) slot(run, soft context.Context, s *Slot[C, O]) {
	for {
		var t *Task[P]
		select {
		case next, ok := <-b.tasks:
			if !ok {
				b.retire(s.st, true)
				return
			}
			t = next
		case <-s.st.retire:
			if b.retire(s.st, false) {
				return
			}
			continue
		}
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
			if !b.admit(s.st) {
				b.putBack(t)
				break
			}
			t, _ = b.handle(run, soft, s, t)
			b.ran()
		}
		b.giveBack(1)
		if b.retire(s.st, false) {
			return
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
