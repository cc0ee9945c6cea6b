package fleet

import "context"

// TaskFunc adapts a plain function of a task's payload into a batch
// automation that takes no config and emits no output, the common case:
//
//	w := fleet.NewBatchWorker(f, opts, q, fleet.TaskFunc(func(ctx context.Context, p Page) error {
//		return fetch(ctx, p.URL)
//	}))
//
// It returns the BatchAutomation interface, so NewBatchWorker infers every
// type argument from it. fn's error means what a BatchFunc's does: nil
// acks, an error nacks (retried with backoff), one wrapping ErrPermanent
// dead-letters at once; ctx is cancelled as a BatchFunc's is. Use
// BatchFunc for a handler that needs the slot (a config, Emit, metrics)
// or the Task (its id, attempts, Extend).
func TaskFunc[P any](fn func(ctx context.Context, payload P) error) BatchAutomation[struct{}, struct{}, P] {
	return payloadFunc[P](fn)
}

// payloadFunc is the BatchAutomation of TaskFunc.
type payloadFunc[P any] func(ctx context.Context, payload P) error

// Handle calls fn with the task's payload.
func (fn payloadFunc[P]) Handle(ctx context.Context, _ *Slot[struct{}, struct{}], t *Task[P]) error {
	return fn(ctx, t.Payload)
}

// BatchResultFunc adapts a function that returns a typed result to a
// BatchAutomation: on success its result is set with Task.SetResult (and
// kept when the queue has QueueOptions.Retention).
type BatchResultFunc[C, O, P, R any] func(ctx context.Context, s *Slot[C, O], t *Task[P]) (R, error)

// Handle calls fn and sets its result.
func (fn BatchResultFunc[C, O, P, R]) Handle(ctx context.Context, s *Slot[C, O], t *Task[P]) error {
	r, err := fn(ctx, s, t)
	if err != nil {
		return err
	}
	return t.SetResult(r)
}
