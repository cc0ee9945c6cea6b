package fleet

import (
	"context"
	"encoding/json"
	"time"
)

// Observer is told what a Fleet does, for metrics and tracing: set it in
// Options.Observer (the fleetotel package builds one over OpenTelemetry).
// Each field is a hook that the Fleet calls when it is set; a nil field
// costs nothing, and so does a nil Observer. Hooks run in the caller's
// goroutine, on the hot path: they must be fast and safe for concurrent
// use, and must not call back into the Fleet. New hooks are added as new
// fields, so an Observer built today keeps compiling.
//
// Handler runs (their duration, their trace spans) are seen through
// WorkerOptions.Middleware, whose TaskInfo carries the task's trace
// context.
type Observer struct {
	// Submit is called once per Submit, SubmitMany, SubmitWith and
	// SubmitJSON, after the payloads validated and before the tasks are
	// written. It returns the trace context to carry in each new task's
	// body, as the optional "trace" object (SCHEMA.md); nil or empty writes
	// no field. It may return a func that the submit calls once with its
	// outcome: how many tasks it wrote (a duplicate of a live dedup key
	// writes none) and its error. A scheduler (RunScheduler) reports the
	// tasks of a schedule's ticks the same way, with SubmitEvent.Schedule
	// set: each process that runs a scheduler tries each tick, and the one
	// whose try wrote the task reports written 1, the others 0.
	Submit func(ctx context.Context, e SubmitEvent) (trace map[string]string, done func(written int, err error))
	// TaskEnded is called for each task that a call of this Fleet ended:
	// acked (Task.Ack, or a worker's ack), retried or dead-lettered
	// (Task.Nack, Task.DeadLetter, a cancel, a poisoned body at reserve). A
	// lease that runs out is ended by a sweeper, and reported to Swept.
	TaskEnded func(ctx context.Context, e TaskEndEvent)
	// Swept is called after a sweep (RunSweeper, Sweep) of a queue changed
	// something, with what it did: the leases that ran out, re-queued or
	// dead-lettered, and the scheduled tasks it moved and the dead letters
	// it trimmed. Counts, not ids: a sweep handles tasks in batches.
	Swept func(ctx context.Context, e SweepEvent)
	// LockWaited is called when Lock.Acquire (and so Lock.Do) returns,
	// with how long it took.
	LockWaited func(ctx context.Context, e LockWaitEvent)
	// ClaimWaited is called when a pool's Claim (and so Do) returns, with
	// how long it took.
	ClaimWaited func(ctx context.Context, e ClaimWaitEvent)
	// Limited is called for each decision of a Limiter (Allow, Wait, and
	// the reserves of a queue with a RateLimit): one call per round trip
	// to the limiter, once its reply is in.
	Limited func(ctx context.Context, e LimitEvent)
	// SemaphoreWaited is called when Semaphore.Acquire returns, with how
	// long it took.
	SemaphoreWaited func(ctx context.Context, e SemaphoreWaitEvent)
	// Released is called for each task that a call of this Fleet released
	// from its dependencies onto its queue (docs/FLOWS.md): the step that
	// passed on its last dependency's end, or the commit of its submit.
	// A release happens once; a call whose reply was lost reports none.
	Released func(ctx context.Context, e ReleaseEvent)
	// Progressed is called after Task.Progress stored a task's progress
	// value, with the ctx of that call (a handler's, in a worker: its
	// span, if a tracer put one there).
	Progressed func(ctx context.Context, e ProgressEvent)
	// Step is called for each durable step (fleet.Step) of a run, before
	// its fn runs, with the ctx of that call (a handler's: its span, if a
	// tracer put one there). It may return the ctx fn runs under (a span
	// of the step's own), nil for ctx, and a func that Step calls once
	// with the step's outcome: fn's error, or the record's (nil once it is
	// recorded). A step whose recorded result Step returns without running
	// fn is reported too, with StepEvent.Memoized set, and its func called
	// at once with nil.
	Step func(ctx context.Context, e StepEvent) (context.Context, func(err error))
}

// StepEvent is what Observer.Step sees of a durable step.
type StepEvent struct {
	// Queue and ID are the task's.
	Queue, ID string
	// Name and Index are the step's name and its place in the run.
	Name  string
	Index int
	// Attempt counts the runs of the step's fn, this one included; for a
	// memoized step, the runs it took.
	Attempt int
	// Memoized says the step was recorded by an earlier run: its result
	// is returned and fn does not run.
	Memoized bool
}

// ProgressEvent is a progress value that Task.Progress stored: what
// Observer.Progressed sees, and what the queue's progress topic carries
// (fleet:progress:<queue>; Queue.WatchProgress).
type ProgressEvent struct {
	// Queue is the task's queue.
	Queue string `json:"queue"`
	// ID is the task's id.
	ID string `json:"id"`
	// Progress is the value (JSON). Through WatchProgress, a sealed
	// queue's value is opened when this process has its Sealer, and stays
	// sealed otherwise (seal.go).
	Progress json.RawMessage `json:"progress"`
}

// ReleaseEvent is what Observer.Released sees of a release.
type ReleaseEvent struct {
	// Queue is the task's queue.
	Queue string
	// ID is the task's id.
	ID string
}

// SubmitEvent is what Observer.Submit sees of a submit.
type SubmitEvent struct {
	// Queue is the queue's name.
	Queue string
	// IDs are the ids of the new tasks, in order.
	IDs []string
	// NotBefore is SubmitOptions.NotBefore (zero: ready at once).
	NotBefore time.Time
	// DedupKey is SubmitOptions.DedupKey.
	DedupKey string
	// Schedule names the schedule (AddSchedule) whose ticks these tasks
	// are, when a scheduler submits them; "" for a Submit call.
	Schedule string
}

// SweepEvent is what Observer.Swept sees of a sweep of one queue.
type SweepEvent struct {
	// Queue is the queue's name.
	Queue string
	// Requeued counts the reservations whose lease ran out that went back
	// on the queue for another attempt.
	Requeued int
	// DeadLettered counts the reservations whose lease ran out that went
	// to the dead letters (no attempts left, or a body that is not a task).
	DeadLettered int
	// Moved counts the due scheduled tasks moved onto the queue.
	Moved int
	// Trimmed counts the dead letters dropped by the queue's bounds.
	Trimmed int
}

// TaskOutcome is how a task's run ended.
type TaskOutcome int

// The outcomes of Observer.TaskEnded.
const (
	// TaskProcessed: acked, done.
	TaskProcessed TaskOutcome = iota + 1
	// TaskRetried: failed, and scheduled for another attempt.
	TaskRetried
	// TaskDeadLettered: failed for good, moved to the dead letters.
	TaskDeadLettered
)

// String names the outcome: "processed", "retried" or "dead_lettered".
func (o TaskOutcome) String() string {
	switch o {
	case TaskProcessed:
		return "processed"
	case TaskRetried:
		return "retried"
	case TaskDeadLettered:
		return "dead_lettered"
	}
	return "unknown"
}

// TaskEndEvent is what Observer.TaskEnded sees of a task's end.
type TaskEndEvent struct {
	// Queue is the queue's name.
	Queue string
	// ID is the task's id.
	ID string
	// Outcome says how the run ended.
	Outcome TaskOutcome
}

// LockWaitEvent is what Observer.LockWaited sees of an acquire.
type LockWaitEvent struct {
	// Lock is the lock's name.
	Lock string
	// Wait is how long Acquire took.
	Wait time.Duration
	// Obtained says whether it took the lock.
	Obtained bool
	// Err is Acquire's error: ErrNotObtained when the wait ran out.
	Err error
}

// ClaimWaitEvent is what Observer.ClaimWaited sees of a claim.
type ClaimWaitEvent struct {
	// Pool is the pool's name.
	Pool string
	// Wait is how long Claim took.
	Wait time.Duration
	// Claimed says whether it claimed an item (none is not an error).
	Claimed bool
	// Err is Claim's error.
	Err error
}

// LimitEvent is what Observer.Limited sees of one decision of a Limiter.
type LimitEvent struct {
	// Limiter is the limiter's name.
	Limiter string
	// Tokens is how many tokens the call asked for.
	Tokens int
	// Taken is how many it took (or booked ahead): 0 when it was denied.
	Taken int
	// Delay is how long until the tokens taken can be used (0: at once),
	// or, when none were taken, until they could be.
	Delay time.Duration
}

// Outcome names the decision: "allowed" (tokens taken for now),
// "delayed" (booked ahead: the caller waits Delay) or "denied" (none).
func (e LimitEvent) Outcome() string {
	switch {
	case e.Taken == 0:
		return "denied"
	case e.Delay > 0:
		return "delayed"
	}
	return "allowed"
}

// SemaphoreWaitEvent is what Observer.SemaphoreWaited sees of an acquire.
type SemaphoreWaitEvent struct {
	// Semaphore is the semaphore's name.
	Semaphore string
	// Wait is how long Acquire took.
	Wait time.Duration
	// Obtained says whether it took a permit.
	Obtained bool
	// Err is Acquire's error: ErrNotObtained when the wait ran out.
	Err error
}

// copyObserver returns a copy of o (nil for nil), so that a caller's later
// writes to o do not race with the hooks.
func copyObserver(o *Observer) *Observer {
	if o == nil {
		return nil
	}
	c := *o
	return &c
}
