package fleet

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/fleet-go/fleet/internal/runone"
)

// LoopAutomation is an automation that runs in each slot until stopped,
// emitting outputs of type O, with a config of type C.
type LoopAutomation[C, O any] interface {
	// Run runs in one slot until ctx ends (Stop began, or the worker's
	// Start ctx ended). An error or a panic is recorded (last_error, state
	// ERROR) and Run is called again after a backoff (1 s doubling to 30
	// s); returning nil before ctx ends ends the slot.
	Run(ctx context.Context, s *Slot[C, O]) error
}

// LoopFunc adapts a function to a LoopAutomation.
type LoopFunc[C, O any] func(ctx context.Context, s *Slot[C, O]) error

// Run calls fn.
func (fn LoopFunc[C, O]) Run(ctx context.Context, s *Slot[C, O]) error { return fn(ctx, s) }

// BatchAutomation is an automation that handles the tasks of a Queue[P] one
// at a time per slot, with a config of type C, and may emit outputs of
// type O.
type BatchAutomation[C, O, P any] interface {
	// Handle runs one task. A nil error acks the task; an error nacks it
	// (retried with backoff, dead-lettered after MaxAttempts); an error
	// that wraps ErrPermanent buries it at once; RateLimited(d) puts it
	// back, due after d, with no attempt counted; a panic is recovered,
	// nacked and recorded. ctx is cancelled when the task's lease is lost
	// or can no longer be proven (context.Cause is then ErrLeaseLost: Redis
	// said so, or no extension was confirmed before the lease ran out on
	// this process's clock; the task goes back uncounted if it still can),
	// when WorkerOptions.TaskTimeout passes (cause ErrTaskTimeout: the task
	// is nacked), when Queue.Cancel cancels the task (cause ErrCanceled: it
	// is dead-lettered), or when a stop's grace ran out (the task is
	// released uncounted). Return soon after ctx ends: past the lease another worker
	// may run the same task.
	Handle(ctx context.Context, s *Slot[C, O], t *Task[P]) error
}

// BatchFunc adapts a function to a BatchAutomation.
type BatchFunc[C, O, P any] func(ctx context.Context, s *Slot[C, O], t *Task[P]) error

// Handle calls fn.
func (fn BatchFunc[C, O, P]) Handle(ctx context.Context, s *Slot[C, O], t *Task[P]) error {
	return fn(ctx, s, t)
}

// Slot is what an automation sees of the slot it runs in: its config, its
// output stream, its metrics, and the Fleet. Its methods are safe for
// concurrent use.
type Slot[C, O any] struct {
	w      *Worker
	st     *slotState
	stream *Stream[O]
}

// Config returns the config currently in force (updated live: each call
// returns the latest gen applied). Treat it as read-only: slots share it.
func (s *Slot[C, O]) Config() C {
	c, _ := s.w.cfg.Load().val.(C)
	return c
}

// Gen returns the gen of the config currently in force.
func (s *Slot[C, O]) Gen() int64 { return s.w.Gen() }

// ConfigChanged returns a channel that receives after each new config is
// applied (wake-ups coalesce: read Config after one).
func (s *Slot[C, O]) ConfigChanged() <-chan struct{} { return s.st.changed }

// Emit pushes v to stream:<type> and publishes it on event:<type>.emit (see
// Stream.Emit), and counts it in the stats.
func (s *Slot[C, O]) Emit(ctx context.Context, v O) (string, error) {
	id, pushed, err := s.stream.emit(ctx, v)
	if pushed {
		s.w.emitted.Add(1)
	}
	if err == nil && s.w.kind == "loop" {
		s.w.succeed()
	}
	return id, err
}

// Metric sets the gauge name of this slot to v, reported in the stats.
func (s *Slot[C, O]) Metric(name string, v float64) {
	s.st.mu.Lock()
	s.st.metrics[name] = v
	s.st.mu.Unlock()
}

// Count adds delta to the counter name of this slot, reported in the stats.
func (s *Slot[C, O]) Count(name string, delta float64) {
	s.st.mu.Lock()
	s.st.metrics[name] += delta
	s.st.mu.Unlock()
}

// Index returns the slot's index, from 0.
func (s *Slot[C, O]) Index() int { return s.st.index }

// Fleet returns the Fleet, for the primitives: KV, counters, locks, pools,
// other queues, Publish.
func (s *Slot[C, O]) Fleet() *Fleet { return s.w.f }

// Worker returns the worker the slot belongs to.
func (s *Slot[C, O]) Worker() *Worker { return s.w }

// Logger returns the worker's logger, with the slot's index.
func (s *Slot[C, O]) Logger() *slog.Logger { return s.w.log.With("slot", s.st.index) }

// NewLoopWorker returns a worker that runs a in each of opts.Slots slots
// until stopped. Bad options are kept and returned by Start (see Err).
func NewLoopWorker[C, O any](f *Fleet, opts WorkerOptions, a LoopAutomation[C, O]) *Worker {
	w := newWorker(f, opts, "loop")
	if w.err == nil && a == nil {
		w.err = fmt.Errorf("%w: NewLoopWorker needs an automation", ErrInvalidArgument)
	}
	if f == nil {
		return w
	}
	stream := NewStream[O](f, w.opts.Type, w.opts.Stream)
	if w.err == nil {
		w.err = stream.Err()
	}
	w.decode = func(raw []byte) (any, error) { return decodeConfig[C](raw) }
	w.catalog = DescribeLoop[C, O](w.opts.Type)
	w.spawn = func(run, soft context.Context) bool {
		for _, st := range w.slotStates() {
			s := &Slot[C, O]{w: w, st: st, stream: stream}
			if !w.goSlot(func() { loopSlot(soft, s, a) }) {
				return false
			}
		}
		return true
	}
	return w
}

func loopSlot[C, O any](ctx context.Context, s *Slot[C, O], a LoopAutomation[C, O]) {
	w := s.w
	s.st.busy.Store(true)
	defer s.st.busy.Store(false)
	bo := backoff{min: time.Second, max: 30 * time.Second}
	for {
		err := protect(func() error { return a.Run(ctx, s) })
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			return
		}
		s.st.failed.Add(1)
		w.failed.Add(1)
		w.fail(within("slot "+strconv.Itoa(s.st.index), err), true)
		t := time.NewTimer(bo.next())
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// protect runs fn and turns a panic into a *PanicError.
func protect(fn func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &PanicError{Value: r, Stack: debug.Stack()}
		}
	}()
	return fn()
}

// NewBatchWorker returns a worker whose opts.Slots slots each handle one
// task of q at a time with a. One goroutine reserves tasks for the free
// slots, so an idle worker costs Redis about one command every few seconds
// whatever its slot count: it sleeps on the invalidation of the queue key.
// Bad options are kept and returned by Start (see Err).
func NewBatchWorker[C, O, P any](f *Fleet, opts WorkerOptions, q *Queue[P], a BatchAutomation[C, O, P]) *Worker {
	var err error
	switch {
	case q == nil || a == nil:
		err = fmt.Errorf("%w: NewBatchWorker needs a queue and an automation", ErrInvalidArgument)
	case q.fleet != f:
		err = fmt.Errorf("%w: the queue belongs to another Fleet", ErrInvalidArgument)
	case q.err != nil:
		err = q.err
	}
	return newBatchWorker(f, opts, []*Queue[P]{q}, []int{1}, false, a, err)
}

// newBatchWorker is NewBatchWorker and NewPriorityWorker: a batch worker
// over qs, picked by weights (strict: by rank), with err its arguments'
// error if any.
func newBatchWorker[C, O, P any](f *Fleet, opts WorkerOptions, qs []*Queue[P], weights []int, strict bool, a BatchAutomation[C, O, P], err error) *Worker {
	w := newWorker(f, opts, "batch")
	if w.err == nil {
		w.err = err
	}
	if f == nil {
		return w
	}
	stream := NewStream[O](f, w.opts.Type, w.opts.Stream)
	if w.err == nil {
		w.err = stream.Err()
	}
	w.decode = func(raw []byte) (any, error) { return decodeConfig[C](raw) }
	w.catalog = Describe[C, O, P](w.opts.Type)
	if w.err != nil {
		return w
	}
	w.one = func(ctx context.Context) (runone.Report, error) { return runOne(ctx, w, qs[0], a, stream) }
	w.spawn = func(run, soft context.Context) bool {
		w.sizeMu.Lock()
		defer w.sizeMu.Unlock()
		b := &runner[C, O, P]{w: w, q: qs[0], a: a, free: make(chan struct{}, max(MaxSlots, w.opts.Slots)), tasks: make(chan *Task[P], w.target),
			cancels: newCancelWatch(), commitCtx: context.WithoutCancel(run), owner: w.name()}
		b.fetch = newFetcher(b, qs, weights, strict)
		for _, q := range qs {
			w.startCancels(run, q.name, b.cancels)
		}
		b.spawnSlot = func(st *slotState) bool {
			s := &Slot[C, O]{w: w, st: st, stream: stream}
			return w.goSlot(func() { b.slot(run, soft, s) })
		}
		// The fetcher first: while it runs, slots may be added (resize).
		if !w.goSlot(func() { b.fetch.fetch(run, soft) }) {
			return false
		}
		b.resize(w.target, w.allSlots())
		w.resize = b.resize
		b.mu.Lock() // a slot may retire meanwhile: read under the runner's lock
		defer b.mu.Unlock()
		return !b.unspawned
	}
	return w
}
