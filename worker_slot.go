package fleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
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
	// is nacked), or when a stop's grace ran out (the task is released
	// uncounted). Return soon after ctx ends: past the lease another worker
	// may run the same task.
	Handle(ctx context.Context, s *Slot[C, O], t *Task[P]) error
}

// BatchFunc adapts a function to a BatchAutomation.
type BatchFunc[C, O, P any] func(ctx context.Context, s *Slot[C, O], t *Task[P]) error

// Handle calls fn.
func (fn BatchFunc[C, O, P]) Handle(ctx context.Context, s *Slot[C, O], t *Task[P]) error {
	return fn(ctx, s, t)
}

// ErrPermanent marks a handler's error as one that no retry can fix: wrap
// it (fmt.Errorf("...: %w", fleet.ErrPermanent)) and the task goes to the
// dead letters at once instead of being retried.
var ErrPermanent = errors.New("fleet: permanent failure")

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
		for _, st := range w.slots {
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
		w.fail(fmt.Errorf("slot %d: %w", s.st.index, err), true)
		t := time.NewTimer(bo.next())
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// PanicError is the error of a recovered panic in an automation.
type PanicError struct {
	// Value is what was passed to panic.
	Value any
	// Stack is the goroutine's stack at the panic.
	Stack []byte
}

// Error says what panicked.
func (e *PanicError) Error() string { return fmt.Sprintf("panic: %v", e.Value) }

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
	w := newWorker(f, opts, "batch")
	switch {
	case w.err != nil:
	case q == nil || a == nil:
		w.err = fmt.Errorf("%w: NewBatchWorker needs a queue and an automation", ErrInvalidArgument)
	case q.f != f:
		w.err = fmt.Errorf("%w: the queue belongs to another Fleet", ErrInvalidArgument)
	case q.err != nil:
		w.err = q.err
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
	w.spawn = func(run, soft context.Context) bool {
		b := &batch[C, O, P]{w: w, q: q, a: a, free: make(chan struct{}, len(w.slots)), tasks: make(chan *Task[P], len(w.slots)), cancels: newCancelWatch()}
		w.startCancels(run, q.name, b.cancels)
		for range w.slots {
			b.free <- struct{}{}
		}
		for _, st := range w.slots {
			s := &Slot[C, O]{w: w, st: st, stream: stream}
			if !w.goSlot(func() { b.slot(run, soft, s) }) {
				return false
			}
		}
		fetch := func() { b.fetch(run, soft) }
		if w.newFetcher != nil {
			fetch = w.newFetcher(b) // NewPriorityWorker's
		}
		return w.goSlot(fetch)
	}
	return w
}

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
	takes   taker        // NewPriorityWorker's say on ack-and-take; nil: b.more decides
}

// fetch reserves tasks while slots are free, until Stop begins (soft). Its
// Redis calls use run, which only ends at a hard stop, so a reservation is
// never cut off halfway by a graceful one.
func (b *batch[C, O, P]) fetch(run, soft context.Context) {
	defer close(b.tasks)
	q, f := b.q, b.w.f
	ch, stop := f.watch.listen(q.k.Pending)
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
			l, err := f.client.DoCache(run, f.client.B().Llen().Key(q.k.Pending).Cache(), f.cacheTTL).AsInt64()
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
		st := reserveState{nextReady: -1}
		if err == nil {
			tasks, st, err = q.reserveAs(run, n, f.cache, b.w.name(), nil)
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
			l, err := f.client.DoCache(run, f.client.B().Llen().Key(q.k.Pending).Cache(), f.cacheTTL).AsInt64()
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
				b.release(t)
				if b.w.opts.OnTaskEnd != nil {
					b.w.opts.OnTaskEnd(t.ID, run.Err())
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
func (b *batch[C, O, P]) release(t *Task[P]) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := t.Release(ctx); err != nil {
		b.w.log.Warn("fleet: worker could not release a task", "task", t.ID, "err", err)
	}
}

// handle runs one task with its lease kept alive, and ends it by its
// outcome. It returns the next task when the ack took one (finish).
func (b *batch[C, O, P]) handle(run, soft context.Context, s *Slot[C, O], t *Task[P]) *Task[P] {
	next, end := b.handleTask(run, soft, s, t)
	if b.w.opts.OnTaskEnd != nil {
		b.w.opts.OnTaskEnd(t.ID, end)
	}
	return next
}

// finish acks a task that succeeded. While the queue has more, it takes the
// next task in the same call (queue_reserve.lua acks first), so that a busy
// slot makes one round trip per task and never waits on the fetcher. It
// takes nothing when the task's ack is not the plain one (a unique window,
// result retention), when the queue is paused, or when caching is off (the
// pause flag could not be read for free).
func (b *batch[C, O, P]) finish(ctx, soft context.Context, t *Task[P]) (*Task[P], error) {
	q := t.q
	if !b.mayTake(ctx, soft, t) {
		return nil, t.Ack(ctx)
	}
	tasks, st, err := q.reserveAs(ctx, 1, false, b.w.name(), t)
	q.f.taskEnded(ctx, q.name, t.ID, TaskProcessed, st.acked == 1)
	switch {
	case st.acked == 0:
		err = errors.Join(fmt.Errorf("%w: task %s", ErrLeaseLost, t.ID), err)
	case st.acked == 1 && err != nil:
		// Acked; only the take failed: the fetcher takes over.
		b.w.log.Warn("fleet: worker reserve failed", "queue", q.name, "err", err)
		err = nil
	}
	if err != nil {
		err = queueErr("ack", q.name, err)
	}
	if len(tasks) == 0 {
		b.more.Store(false)
		if st.acked == 1 && err == nil && st.limited == 0 {
			b.drained.Store(true)
			if b.takes != nil {
				b.takes.tookNone(ctx, q.name)
			}
		}
		return nil, err
	}
	return tasks[0], err
}

// mayTake reports whether finish may take the next task with t's ack.
func (b *batch[C, O, P]) mayTake(ctx, soft context.Context, t *Task[P]) bool {
	q := t.q
	if soft.Err() != nil || !q.plainAck(t) {
		return false
	}
	if b.takes == nil {
		return b.more.Load() && q == b.q && !b.paused(ctx, q.k.Paused)
	}
	// NewPriorityWorker: only from where its priorities say (last: it
	// counts the pick).
	return !b.paused(ctx, q.k.Paused) && b.takes.takeFrom(q.name)
}

// paused reports whether the queue is paused, read through the client-side
// cache (free while the flag does not change); without caching it says
// true, so that only the fetcher, which polls the flag, reserves.
func (b *batch[C, O, P]) paused(ctx context.Context, key string) bool {
	f := b.w.f
	if !f.cache {
		return true
	}
	v, err := f.client.DoCache(ctx, f.client.B().Get().Key(key).Cache(), f.cacheTTL).ToString()
	if rueidis.IsRedisNil(err) {
		return false
	}
	return err != nil || v != ""
}

func (b *batch[C, O, P]) handleTask(run, soft context.Context, s *Slot[C, O], t *Task[P]) (*Task[P], error) {
	w := b.w
	margin := leaseMargin(t.q.opts.Lease)
	if time.Until(t.Deadline()) < margin {
		// The reserve's reply came too late (held back, a stalled server, a
		// paused process): another worker may get the task any moment.
		// Never start it; hand it back uncounted if it is still ours.
		b.release(t)
		return nil, fmt.Errorf("task %s: %w: its lease ran out before it could start", t.ID, ErrLeaseLost)
	}
	s.st.busy.Store(true)
	defer s.st.busy.Store(false)
	tctx, cancel := context.WithCancelCause(run)
	defer cancel(nil)
	defer b.cancels.start(t.ID, cancel)()
	var hctx context.Context = tctx
	if to := w.opts.TaskTimeout; to > 0 {
		var hcancel context.CancelFunc
		hctx, hcancel = context.WithTimeoutCause(tctx, to, w.timeoutCause)
		defer hcancel()
	}
	hctx = &leaseCtx{Context: hctx, end: t.proven.Load, margin: margin, cancel: cancel} // outermost: its Err is the one called
	k := b.keep(tctx, t, cancel)
	err := protect(func() error { return b.runHandler(hctx, s, t) })
	k.stop()
	cause := context.Cause(hctx)

	ectx, ecancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer ecancel()
	switch {
	case err == nil:
		// Acked even when the lease could not be proven at the end: the
		// ack's owner check refuses it if another took the task meanwhile.
		next, aerr := b.finish(ectx, soft, t)
		if aerr != nil {
			aerr = fmt.Errorf("task %s: ack: %w", t.ID, aerr)
			b.failed(s, aerr)
			return next, aerr
		}
		s.st.done.Add(1)
		w.done.Add(1)
		w.succeed()
		return next, nil
	case errors.Is(cause, ErrCanceled):
		return nil, b.endCanceled(ectx, t, err)
	case errors.Is(cause, ErrLeaseLost):
		// The handler was stopped because the lease could no longer be
		// proven: not the task's fault. Hand it back uncounted if it is
		// still ours (else the sweeper has it, or already gave it away).
		b.release(t)
		err = fmt.Errorf("task %s: %w", t.ID, cause)
		b.failed(s, err)
		return nil, err
	case errors.Is(cause, ErrTaskTimeout):
		err = fmt.Errorf("%w: %w", cause, err)
	case run.Err() != nil:
		// Stop's deadline cut it off: interrupted, not failed.
		b.release(t)
		return nil, err
	case errors.Is(err, ErrRateLimited):
		// Not a failure: the task waits out the limit, uncounted (queue_limit.go).
		if serr := t.snoozeLimited(ectx, err); serr != nil {
			w.log.Warn("fleet: worker could not snooze a rate-limited task", "task", t.ID, "err", serr)
		}
		return nil, err
	}
	var pe *PanicError
	if errors.As(err, &pe) {
		w.log.Error("fleet: task handler panicked", "task", t.ID, "panic", fmt.Sprint(pe.Value), "stack", string(pe.Stack))
	}
	var eerr error
	if errors.Is(err, ErrPermanent) {
		eerr = t.DeadLetter(ectx, err)
	} else {
		eerr = t.Nack(ectx, err)
	}
	if eerr != nil {
		w.log.Warn("fleet: worker could not end a failed task", "task", t.ID, "err", eerr)
	}
	b.failed(s, fmt.Errorf("task %s: %w", t.ID, err))
	return nil, err
}

func (b *batch[C, O, P]) failed(s *Slot[C, O], err error) {
	s.st.failed.Add(1)
	b.w.failed.Add(1)
	b.w.fail(err, true)
}

// leaseCtx is a handler's ctx whose Err also looks at the clock: a lease
// that ran out (less the margin) cancels it at once, with ErrLeaseLost, even
// before keep's timer fired. A process resumed after a pause (SIGSTOP, a
// frozen VM) runs its goroutines before its timers; without this, the
// handler's next ctx.Err() could still say nil past the lease.
type leaseCtx struct {
	context.Context
	end    func() int64 // the proven deadline, as monoNow
	margin time.Duration
	cancel context.CancelCauseFunc
}

func (c *leaseCtx) Err() error {
	if err := c.Context.Err(); err != nil {
		return err
	}
	if monoNow() > c.end()-int64(c.margin) {
		c.cancel(fmt.Errorf("%w: the lease ran out before an extension was confirmed", ErrLeaseLost))
	}
	return c.Context.Err()
}

// keeper keeps one task's lease alive while its handler runs, from a timer:
// no goroutine of its own while nothing is due. Every LeaseExtend (a third
// of the lease by default) it extends the lease. It cancels the handler's
// ctx with ErrLeaseLost when Redis says the lease is lost, and also when
// the lease it can prove runs out (Task.Deadline, less leaseMargin) before
// an extension was confirmed: Redis unreachable, or too slow to answer.
// From then on a sweeper may give the task to another worker, so the
// handler must stop: a task never runs on two workers at once, beyond the
// margin.
type keeper[C, O, P any] struct {
	b      *batch[C, O, P]
	ctx    context.Context
	t      *Task[P]
	cancel context.CancelCauseFunc
	every  time.Duration
	margin time.Duration

	mu      sync.Mutex // held while a tick runs, so that stop waits for it
	stopped bool
	timer   *time.Timer
	extend  int64 // monoNow at which the next extension is due
}

// keep starts the keeper of t.
func (b *batch[C, O, P]) keep(ctx context.Context, t *Task[P], cancel context.CancelCauseFunc) *keeper[C, O, P] {
	lease := t.q.opts.Lease
	k := &keeper[C, O, P]{b: b, ctx: ctx, t: t, cancel: cancel, every: b.w.opts.LeaseExtend, margin: leaseMargin(lease)}
	if k.every == 0 {
		k.every = lease / 3
	}
	k.every = max(k.every, time.Millisecond)
	k.extend = monoNow() + int64(k.every)
	k.mu.Lock()
	k.timer = time.AfterFunc(k.wait(), k.tick)
	k.mu.Unlock()
	return k
}

// wait is how long until the next tick: the next extension, or the end of
// the proven lease, whichever comes first.
func (k *keeper[C, O, P]) wait() time.Duration {
	end := k.t.proven.Load() - int64(k.margin)
	return time.Duration(min(k.extend, end) - monoNow())
}

func (k *keeper[C, O, P]) tick() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.stopped || k.ctx.Err() != nil {
		return
	}
	now := monoNow()
	if now >= k.t.proven.Load()-int64(k.margin) {
		k.cancel(fmt.Errorf("%w: no extension confirmed before the lease ran out", ErrLeaseLost))
		return
	}
	if now >= k.extend {
		k.extend = now + int64(k.every)
		ectx, ecancel := context.WithDeadline(k.ctx, k.t.Deadline().Add(-k.margin))
		err := k.t.Extend(ectx, k.t.q.opts.Lease)
		ecancel()
		switch {
		case errors.Is(err, ErrLeaseLost):
			k.cancel(err)
			return
		case err != nil && k.ctx.Err() == nil:
			k.b.w.log.Warn("fleet: worker could not extend a lease", "task", k.t.ID, "err", err)
		}
	}
	if !k.stopped {
		k.timer.Reset(k.wait())
	}
}

// stop ends the keeper; it waits for a tick in progress (an extension in
// flight) to end.
func (k *keeper[C, O, P]) stop() {
	k.mu.Lock()
	k.stopped = true
	k.timer.Stop()
	k.mu.Unlock()
}
