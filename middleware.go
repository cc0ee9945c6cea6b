package fleet

import (
	"context"
	"time"
)

// TaskInfo is what middleware sees of the task a batch handler runs: enough
// to log it, count it, trace it, without knowing its payload type.
type TaskInfo struct {
	// Queue is the name of the task's queue.
	Queue string
	// ID is the task's id.
	ID string
	// Attempts counts the earlier runs of the task that failed.
	Attempts int
	// Type and Worker name the worker that runs it (WorkerOptions.Type and
	// ID).
	Type, Worker string
	// Slot is the index of the slot that runs it.
	Slot int
	// Deadline is the lease the worker could prove when the handler began
	// (Task.Deadline); the worker extends it while the handler runs.
	Deadline time.Time
	// Payload is the task's decoded payload (a P of the worker's queue).
	Payload any
	// Trace is the trace context that the task's body carries (its
	// optional "trace" field, written at submit by an Observer; SCHEMA.md),
	// such as {"traceparent": "00-..."}; nil when the body has none or
	// it is not an object of strings.
	Trace map[string]string
	// Metadata is the task's metadata (SubmitOptions.Metadata); nil when it
	// has none. Treat it as read-only.
	Metadata map[string]string
	// Progress stores a progress value of the task, as Task.Progress does,
	// so that a middleware can report progress too. The values a handler
	// stores are published on the queue's progress topic
	// (Queue.WatchProgress).
	Progress func(ctx context.Context, v any) error
}

// Handler runs one task; the innermost Handler of a chain calls the
// worker's BatchAutomation. Its error decides the task's outcome as
// BatchAutomation.Handle's does.
type Handler func(ctx context.Context, t TaskInfo) error

// Middleware wraps a Handler with behaviour of its own (logging, metrics,
// tracing, panic handling): it returns a Handler that does its part and
// calls next, or does not call it to skip the task's handler (its error
// then stands for the handler's).
type Middleware func(next Handler) Handler

// chain wraps h in mws: mws[0] is the outermost, so it runs first and sees
// the final outcome last. A panic anywhere in the chain is recovered by the
// worker (a *PanicError) after every middleware's deferred calls ran, so a
// middleware that recovers panics itself sees the handler's first.
func chain(h Handler, mws []Middleware) Handler {
	for i := len(mws) - 1; i >= 0; i-- {
		if mws[i] != nil {
			h = mws[i](h)
		}
	}
	return h
}
