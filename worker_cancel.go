package fleet

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// A batch worker's side of Queue.Cancel: the handlers it runs by task id,
// the queue's cancel topic it listens to, and the end of a cancelled task.

// cancelWatch is a batch worker's side of Cancel: the handlers it runs, by
// task id, and the cancels it heard lately (for a task whose handler had
// not started yet).
type cancelWatch struct {
	mu      sync.Mutex
	running map[string]context.CancelCauseFunc
	heard   map[string]time.Time
}

// cancelMemory is how long a worker remembers a cancel for a task it does
// not run (yet); cancelMemoryMax bounds how many it remembers.
const (
	cancelMemory    = time.Minute
	cancelMemoryMax = 10_000
)

func newCancelWatch() *cancelWatch {
	return &cancelWatch{running: map[string]context.CancelCauseFunc{}, heard: map[string]time.Time{}}
}

// start registers the handler of task id, and cancels it at once when a
// cancel for it came already. The returned func unregisters it.
func (cw *cancelWatch) start(id string, cancel context.CancelCauseFunc) func() {
	cw.mu.Lock()
	cw.running[id] = cancel
	_, heard := cw.heard[id]
	delete(cw.heard, id)
	cw.mu.Unlock()
	if heard {
		cancel(ErrCanceled)
	}
	return func() {
		cw.mu.Lock()
		delete(cw.running, id)
		cw.mu.Unlock()
	}
}

// cancel cancels the handler of task id, or remembers the cancel.
func (cw *cancelWatch) cancel(id string) {
	cw.mu.Lock()
	c, ok := cw.running[id]
	if !ok {
		now := time.Now()
		if len(cw.heard) >= cancelMemoryMax {
			for k, at := range cw.heard {
				if now.Sub(at) > cancelMemory || len(cw.heard) >= cancelMemoryMax {
					delete(cw.heard, k)
				}
			}
		}
		cw.heard[id] = now
	}
	cw.mu.Unlock()
	if ok {
		c(ErrCanceled)
	}
}

// startCancels makes the batch worker listen for its queue's cancels until
// run ends: subscribed before it returns when Redis answers (so a Cancel
// after Start reaches the worker), else in the background.
func (w *Worker) startCancels(run context.Context, queue string, cw *cancelWatch) {
	topic := w.f.keys.CancelTopic(queue)
	sub, _ := Subscribe[string](run, w.f, topic, SubscribeOptions{Buffer: 256})
	w.aux.Add(1)
	if !w.f.spawn(func() { defer w.aux.Done(); w.listenCancels(run, topic, cw, sub) }) {
		w.aux.Done()
		if sub != nil {
			sub.Close()
		}
	}
}

// listenCancels delivers the queue's cancels to cw until ctx ends,
// subscribing again after a failure. It runs on the worker's aux
// WaitGroup, which the worker waits for before it counts as stopped.
func (w *Worker) listenCancels(ctx context.Context, topic string, cw *cancelWatch, sub *Subscription[string]) {
	bo := backoff{min: 50 * time.Millisecond, max: 5 * time.Second}
	for ctx.Err() == nil {
		var err error
		if sub == nil {
			sub, err = Subscribe[string](ctx, w.f, topic, SubscribeOptions{Buffer: 256})
		}
		if err != nil {
			if ctx.Err() == nil && !w.f.closed.Load() {
				w.log.Warn("fleet: worker cannot listen for cancels", "err", err)
			}
			t := time.NewTimer(bo.next())
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-w.f.done:
				t.Stop()
				return
			case <-t.C:
			}
			continue
		}
		for id := range sub.C() {
			cw.cancel(id)
		}
		<-sub.Done()
		return
	}
}

// endCanceled ends a task whose handler Queue.Cancel cancelled and which
// returned err: buried with ErrCanceled, never retried.
func (b *runner[C, O, P]) endCanceled(ctx context.Context, t *Task[P], err error) error {
	err = fmt.Errorf("%w: %w", ErrCanceled, err)
	if berr := t.DeadLetter(ctx, err); berr != nil {
		b.w.log.Warn("fleet: worker could not end a canceled task", "task", t.ID, "err", berr)
	}
	return within("task "+t.ID, err)
}
