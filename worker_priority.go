package fleet

import (
	"fmt"
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
	var err error
	switch {
	case a == nil:
		err = fmt.Errorf("%w: NewPriorityWorker needs an automation", ErrInvalidArgument)
	case f != nil:
		var qs []*Queue[P]
		var ws []int
		if qs, ws, err = checkPriority(f, mode, queues); err == nil {
			return newBatchWorker(f, opts, qs, ws, mode == PriorityStrict, a, nil)
		}
	}
	return newBatchWorker[C, O, P](f, opts, nil, nil, false, a, err)
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
		case wq.Queue.fleet != f:
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
