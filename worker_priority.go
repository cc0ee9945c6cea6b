package fleet

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"time"
)

// WeightedQueue is one queue of a priority worker (NewPriorityWorker) with
// its weight: under PriorityWeighted its share of the tasks, under
// PriorityStrict its rank (higher first).
type WeightedQueue[P any] struct {
	// Queue is the queue.
	Queue *Queue[P]
	// Weight is the queue's share (PriorityWeighted: a queue of weight 6
	// gets twice the tasks of one of weight 3 while both have tasks) or
	// rank (PriorityStrict). At least 1.
	Weight int
}

// PriorityMode says how a priority worker chooses among its queues.
type PriorityMode string

// The priority modes.
const (
	// PriorityWeighted shares the tasks among the queues that have some,
	// by weight, as asynq's Queues map does: a smooth weighted round robin,
	// so the shares hold over any stretch of tasks, not only on average.
	PriorityWeighted PriorityMode = "weighted"
	// PriorityStrict takes from the queue of the highest weight that has
	// tasks: a lower queue gets a task only when every higher one is empty.
	PriorityStrict PriorityMode = "strict"
)

// NewPriorityWorker returns a batch worker whose slots handle the tasks of
// several queues of one payload type with a, choosing among the queues by
// mode. It never polls the queues in turn: a queue found empty is left
// alone until the server's invalidation of its key says something came
// (or, without caching, until a push of this process or a fallback poll
// every ConfigPoll), and a paused queue (Queue.Pause) until it is resumed.
// Each reserve takes from one queue, so each queue keeps its own
// atomicity, leases and policy; queues may live on different cluster
// nodes. Everything else is as NewBatchWorker. Bad arguments are kept and
// returned by Start (see Err): no queue, a nil queue, a weight below 1, a
// queue twice, a queue of another Fleet, an unknown mode.
func NewPriorityWorker[C, O, P any](f *Fleet, opts WorkerOptions, mode PriorityMode, queues []WeightedQueue[P], a BatchAutomation[C, O, P]) *Worker {
	var first *Queue[P]
	if len(queues) > 0 {
		first = queues[0].Queue
	}
	w := NewBatchWorker(f, opts, first, a)
	if f == nil {
		return w
	}
	qs, ws, err := checkPriority(f, mode, queues)
	if err != nil && (w.err == nil || first == nil) {
		w.err = err
	}
	if w.err != nil {
		return w
	}
	spawn := w.spawn // NewBatchWorker's: builds the slots and the fetcher
	w.spawn = func(run, soft context.Context) bool {
		w.newFetcher = func(bb any) func() {
			b := bb.(*batch[C, O, P])
			p := &prio[C, O, P]{b: b, qs: qs, weights: ws, strict: mode == PriorityStrict, index: map[string]int{},
				current: make([]int, len(qs)), empty: make([]bool, len(qs)), paused: make([]bool, len(qs))}
			for i, q := range qs {
				p.index[q.name] = i
			}
			b.takes = p
			for _, q := range qs[1:] {
				w.startCancels(run, q.name, b.cancels)
			}
			return func() { p.fetch(run, soft) }
		}
		return spawn(run, soft)
	}
	return w
}

// checkPriority checks NewPriorityWorker's arguments.
func checkPriority[P any](f *Fleet, mode PriorityMode, queues []WeightedQueue[P]) ([]*Queue[P], []int, error) {
	var err error
	switch {
	case len(queues) == 0:
		err = fmt.Errorf("%w: NewPriorityWorker needs at least one queue", ErrInvalidArgument)
	case mode != PriorityWeighted && mode != PriorityStrict:
		err = fmt.Errorf("%w: priority mode %q is not %q or %q", ErrInvalidArgument, mode, PriorityWeighted, PriorityStrict)
	}
	seen := map[string]bool{}
	qs := make([]*Queue[P], len(queues))
	ws := make([]int, len(queues))
	for i, wq := range queues {
		switch {
		case err != nil:
		case wq.Queue == nil:
			err = fmt.Errorf("%w: queue %d is nil", ErrInvalidArgument, i)
		case wq.Queue.f != f:
			err = fmt.Errorf("%w: queue %q belongs to another Fleet", ErrInvalidArgument, wq.Queue.name)
		case wq.Queue.err != nil:
			err = wq.Queue.err
		case wq.Weight < 1:
			err = fmt.Errorf("%w: queue %q has weight %d; it must be at least 1", ErrInvalidArgument, wq.Queue.name, wq.Weight)
		case seen[wq.Queue.name]:
			err = fmt.Errorf("%w: queue %q is listed twice", ErrInvalidArgument, wq.Queue.name)
		}
		if wq.Queue != nil {
			seen[wq.Queue.name] = true
		}
		qs[i], ws[i] = wq.Queue, wq.Weight
	}
	return qs, ws, err
}

// prio is the fetcher of a priority worker.
type prio[C, O, P any] struct {
	b       *batch[C, O, P]
	qs      []*Queue[P]
	weights []int
	strict  bool
	index   map[string]int // queue name -> its place in qs

	mu      sync.Mutex // guards what follows: the fetcher and the slots (takeFrom) share it
	current []int      // smooth weighted round robin state
	empty   []bool     // the queue was found empty; its key's invalidation clears it
	paused  []bool     // the queue was paused at the fetcher's last look
	chosen  int        // the last pick
}

// taker is what a batch worker's slots ask before they take their next
// task with their ack (batch.finish) when the fetcher is not batch.fetch.
type taker[P any] interface {
	// takeNext picks, and counts as taken, the queue that the next task
	// should come from by the priorities; nil when none is known to have
	// tasks.
	takeNext() *Queue[P]
	// tookNone says that a take found queue empty.
	tookNone(ctx context.Context, queue string)
}

// takeNext picks the queue of the next task by the priorities, as the
// fetcher does for one free slot: under PriorityStrict, the highest queue
// not known to be empty; under PriorityWeighted, the round robin's next
// pick (counted).
func (p *prio[C, O, P]) takeNext() *Queue[P] {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.pick(1, -1) {
		return nil
	}
	return p.qs[p.chosen]
}

// tookNone marks queue empty, and arms its key's invalidation.
func (p *prio[C, O, P]) tookNone(ctx context.Context, queue string) {
	if i, ok := p.index[queue]; ok {
		p.arm(ctx, i)
	}
}

// arm marks queue i empty and arms the invalidation of its key; it
// reports false when the queue turned out to hold tasks after all.
func (p *prio[C, O, P]) arm(ctx context.Context, i int) bool {
	p.mu.Lock()
	p.empty[i] = true
	p.mu.Unlock()
	f := p.b.w.f
	if !f.cache {
		return true
	}
	l, _, err := p.qs[i].cachedPending(ctx) // every shard of a sharded queue
	if err == nil && l > 0 {
		p.mu.Lock()
		p.empty[i] = false
		p.mu.Unlock()
		return false
	}
	return true
}

// candidates reports whether a queue is neither known empty nor paused.
func (p *prio[C, O, P]) candidates() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := range p.qs {
		if !p.empty[i] && !p.paused[i] {
			return true
		}
	}
	return false
}

// pick chooses the queue for the next free tasks among those neither
// known empty nor paused, and counts the choice when only is -1 or the
// choice is only; it returns whether a queue was chosen (and is only, when
// only >= 0). p.mu is held.
func (p *prio[C, O, P]) pick(free, only int) bool {
	best, total := -1, 0
	for i := range p.qs {
		if p.empty[i] || p.paused[i] {
			continue
		}
		total += p.weights[i]
		switch {
		case best < 0:
			best = i
		case p.strict && p.weights[i] > p.weights[best]:
			best = i
		case !p.strict && p.current[best]+p.weights[best]*free < p.current[i]+p.weights[i]*free:
			best = i
		}
	}
	if best < 0 || (only >= 0 && best != only) {
		return false
	}
	p.chosen = best
	if !p.strict {
		for i := range p.qs {
			if !p.empty[i] && !p.paused[i] {
				p.current[i] += p.weights[i] * free
			}
		}
		p.current[best] -= total * free
	}
	return true
}

// fetch reserves tasks for the free slots from the queues, by priority,
// until Stop begins (soft); see batch.fetch.
func (p *prio[C, O, P]) fetch(run, soft context.Context) {
	b, f := p.b, p.b.w.f
	defer close(b.tasks)
	n := len(p.qs)
	readyAt := make([]time.Time, n)
	gates := make([]*pauseGate, n)
	cases := make([]reflect.SelectCase, 0, 2*n+2)
	for i, q := range p.qs {
		ch, stop := q.listenPending(run)
		defer stop()
		gates[i] = newPauseGate(f, q.k.Paused, b.w.opts.ConfigPoll)
		defer gates[i].stop()
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ch)})
	}
	for _, g := range gates {
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(g.ch)})
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	cases = append(cases,
		reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(soft.Done())},
		reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(timer.C)})
	errBo := backoff{min: 50 * time.Millisecond, max: 5 * time.Second}
	bo := backoff{min: 2 * time.Millisecond, max: time.Second}
	owner := b.w.name()
	for {
		select {
		case <-soft.Done():
			return
		case <-b.free:
		}
		free := 1
	more:
		for free < cap(b.free) {
			select {
			case <-b.free:
				free++
			default:
				break more
			}
		}
		now := time.Now()
		paused := make([]bool, n)
		for i, g := range gates {
			paused[i] = g.check(run)
		}
		plan := make([]int, n)
		p.mu.Lock()
		for i := range p.qs {
			if p.empty[i] && !readyAt[i].IsZero() && !now.Before(readyAt[i]) {
				p.empty[i], readyAt[i] = false, time.Time{}
			}
		}
		copy(p.paused, paused)
		if p.pick(free, -1) {
			plan[p.chosen] = free
		}
		p.mu.Unlock()
		got, failed := 0, false
		for i, k := range plan {
			if k == 0 {
				continue
			}
			q := p.qs[i]
			tasks, st, err := q.reserveTasks(run, reserveReq{n: k, wantLeft: true, owner: owner})
			readyAt[i] = time.Time{}
			if st.nextReady >= 0 {
				readyAt[i] = time.Now().Add(st.nextReady)
			}
			for _, t := range tasks {
				b.tasks <- t // never blocks: one buffer place per slot
			}
			got += len(tasks)
			switch {
			case err != nil:
				if run.Err() != nil || errors.Is(err, ErrClosed) {
					for range free - got {
						b.free <- struct{}{}
					}
					return
				}
				b.w.log.Warn("fleet: worker reserve failed", "queue", q.name, "err", err)
				failed = true
			case len(tasks) == 0 || st.drained:
				p.arm(run, i)
			}
		}
		for range free - got {
			b.free <- struct{}{}
		}
		if got > 0 {
			bo.n, errBo.n = 0, 0
			continue
		}
		if !failed && p.candidates() {
			continue // the queue chosen was empty: try the next at once
		}
		// Nothing came: sleep until a queue's key changes, a pause flag
		// changes, a scheduled task is due, or the fallback poll.
		sleep := b.w.opts.ConfigPoll
		if failed {
			sleep = errBo.next()
		} else if !f.cache {
			sleep = bo.next()
		}
		for i := range p.qs {
			if !readyAt[i].IsZero() {
				sleep = min(sleep, max(time.Until(readyAt[i]), time.Millisecond))
			}
		}
		timer.Reset(sleep)
		chosen, _, _ := reflect.Select(cases)
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		switch {
		case chosen < n:
			p.mu.Lock()
			p.empty[chosen] = false
			p.mu.Unlock()
		case chosen < 2*n:
			gates[chosen-n].read = time.Time{}
		case chosen == 2*n:
			return
		default:
			p.mu.Lock()
			for i := range p.empty {
				p.empty[i] = false // the fallback poll: look at every queue again
			}
			p.mu.Unlock()
		}
	}
}
