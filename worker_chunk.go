package fleet

// This file is the face of the chunk worker (NewChunkWorker): a handler
// that takes many tasks of a queue at once, and the marks it gives each
// one. Its machinery is in worker_chunk_run.go.

import (
	"context"
	"fmt"
	"sync"

	"github.com/fleet-go/fleet/internal/lease"
)

// ChunkAutomation is an automation that handles the tasks of a Queue[P]
// many at a time per slot (a Chunk), with a config of type C, and may emit
// outputs of type O.
type ChunkAutomation[C, O, P any] interface {
	// HandleChunk runs the tasks of c, which holds at least one. It may
	// mark each task's outcome (Chunk.Ack, Chunk.Fail); the tasks it did
	// not mark are acked when it returns nil, and failed with its error
	// otherwise (a panic is recovered and counts as an error). A failed
	// task is ended as a BatchAutomation's would be: nacked (retried with
	// backoff, dead-lettered after MaxAttempts), dead-lettered at once for
	// an error that wraps ErrPermanent, snoozed for RateLimited. ctx is
	// cancelled when the worker's stop runs out of grace (the tasks not
	// marked are then released, uncounted), and when
	// WorkerOptions.TaskTimeout passes (cause ErrTaskTimeout: the tasks not
	// marked are nacked). Each task's lease is kept alive while the
	// handler runs; a task whose lease is lost (Chunk.Context(i) ends with
	// cause ErrLeaseLost) has its end refused, and the others go on.
	HandleChunk(ctx context.Context, s *Slot[C, O], c *Chunk[P]) error
}

// ChunkFunc adapts a function to a ChunkAutomation.
type ChunkFunc[C, O, P any] func(ctx context.Context, s *Slot[C, O], c *Chunk[P]) error

// HandleChunk calls fn.
func (fn ChunkFunc[C, O, P]) HandleChunk(ctx context.Context, s *Slot[C, O], c *Chunk[P]) error {
	return fn(ctx, s, c)
}

// Chunk is the tasks a chunk worker hands its handler at once, and the
// outcome the handler gives each. Its methods are safe for concurrent use.
type Chunk[P any] struct {
	// Tasks are the chunk's tasks, in the order they were reserved
	// (between ChunkOptions.MinSize and MaxSize of them, or fewer once
	// MaxWait passed; never none). Their Ack, Nack and other ends are the
	// worker's: mark them with the Chunk's methods instead.
	Tasks []*Task[P]

	keeps []*chunkHeld // each task's lease, kept alive (worker_chunk_run.go)
	mu    sync.Mutex   // guards what follows
	marks []chunkMark
	ended bool // the handler returned: the marks are final
}

// chunkMark is the outcome the handler gave one task.
type chunkMark struct {
	set bool
	err error // nil: ack
}

// chunkHeld is one task in a chunk worker's hands: its lease, kept alive
// while it waits for a handler and while the handler runs, and what
// unregisters it from the worker's cancels.
type chunkHeld struct {
	kept    *lease.Kept
	ctx     context.Context // kept.Wrap(kept.Ctx())
	unwatch func()
}

// Ack marks task i (an index of Tasks) to be acked when the handler
// returns, whatever the handler returns. A later mark of the same task
// replaces it. It returns ErrInvalidArgument for an i out of range, or
// once the handler returned.
func (c *Chunk[P]) Ack(i int) error { return c.mark(i, nil) }

// Fail marks task i (an index of Tasks) as failed with err when the
// handler returns, whatever the handler returns: nacked (retried with
// backoff, dead-lettered after MaxAttempts), dead-lettered at once when
// err wraps ErrPermanent, snoozed when it is RateLimited's. A later mark
// of the same task replaces it. It returns ErrInvalidArgument for an i out
// of range, a nil err, or once the handler returned.
func (c *Chunk[P]) Fail(i int, err error) error {
	if err == nil {
		return fmt.Errorf("%w: Chunk.Fail needs an error", ErrInvalidArgument)
	}
	return c.mark(i, err)
}

func (c *Chunk[P]) mark(i int, err error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case i < 0 || i >= len(c.marks):
		return fmt.Errorf("%w: task index %d is not in [0, %d)", ErrInvalidArgument, i, len(c.marks))
	case c.ended:
		return fmt.Errorf("%w: the chunk's handler returned: its marks are final", ErrInvalidArgument)
	}
	c.marks[i] = chunkMark{set: true, err: err}
	return nil
}

// Context returns task i's own ctx: it ends when the task's lease is lost
// or can no longer be proven (cause ErrLeaseLost), when Queue.Cancel
// cancels the task (cause ErrCanceled), or when the worker's stop runs out
// of grace. For an i out of range it returns a ctx that has ended, with
// cause ErrInvalidArgument.
func (c *Chunk[P]) Context(i int) context.Context {
	if i < 0 || i >= len(c.keeps) {
		ctx, cancel := context.WithCancelCause(context.Background())
		cancel(fmt.Errorf("%w: task index %d is not in [0, %d)", ErrInvalidArgument, i, len(c.keeps)))
		return ctx
	}
	return c.keeps[i].ctx
}

// outcomes closes the marks and returns each task's outcome: its mark, or
// err for a task not marked.
func (c *Chunk[P]) outcomes(err error) []error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ended = true
	out := make([]error, len(c.marks))
	for i, m := range c.marks {
		out[i] = err
		if m.set {
			out[i] = m.err
		}
	}
	return out
}

// NewChunkWorker returns a worker whose opts.Slots slots each hand the
// tasks of q to a many at once: chunks of between co.MinSize and
// co.MaxSize tasks, or fewer once co.MaxWait passed since the first task
// of the chunk came. The tasks are reserved as a batch worker's are (one
// fetcher that sleeps on the invalidation of the queue key); each task's
// lease is kept alive from its reserve to its end, and each counts once
// against its group's limit and the queue's GlobalConcurrency. The acks of
// a chunk go in one script call (per shard of a sharded queue). At Stop,
// the chunks gathered go to the slots if they hold MinSize tasks, and
// are released (uncounted) otherwise. WorkerOptions.Middleware, which
// wraps the run of one task, does not apply. Bad options (ErrInvalidOptions,
// naming the field) or arguments are kept and returned by Start (see Err),
// and nothing starts.
func NewChunkWorker[C, O, P any](f *Fleet, opts WorkerOptions, q *Queue[P], co ChunkOptions, a ChunkAutomation[C, O, P]) *Worker {
	w := newWorker(f, opts, "batch")
	w.fixedSlots = "a chunk worker's" // SetSlots: not yet
	if w.err == nil {
		switch {
		case q == nil || a == nil:
			w.err = fmt.Errorf("%w: NewChunkWorker needs a queue and an automation", ErrInvalidArgument)
		case q.fleet != f:
			w.err = fmt.Errorf("%w: the queue belongs to another Fleet", ErrInvalidArgument)
		case q.err != nil:
			w.err = q.err
		default:
			w.err = co.check()
		}
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
	w.chunk = &co // registered in :hardware (Hardware.Chunk)
	w.spawn = func(run, soft context.Context) bool { return spawnChunks(w, q, co, a, stream, run, soft) }
	return w
}
