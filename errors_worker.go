package fleet

import (
	"errors"
	"fmt"
)

// Errors of workers and their configs, for errors.Is.
var (
	// ErrStaleGen is returned by PushConfig when the pushed gen is not above
	// the stored one. The error is a *StaleGenError that tells both gens.
	ErrStaleGen = errors.New("fleet: stale config gen")
	// ErrInvalidConfig is returned for a config (or a config patch) that is
	// not a JSON object, and for a config that does not decode into the
	// worker's config type or fails its validate tags. A worker that gets
	// one keeps its config and records the error in last_error.
	ErrInvalidConfig = errors.New("fleet: invalid worker config")
	// ErrUnknownWorker is returned by UpdateConfig for a type and id that no
	// worker registered (wkr:<type>:<id>:gen is missing): a typo would
	// otherwise create the keys of a worker that never reads them. Nothing
	// is written.
	ErrUnknownWorker = errors.New("fleet: unknown worker")
	// ErrWorkerStarted is returned by Worker.Start on a worker that was
	// already started (a Worker runs once: make a new one to run again).
	ErrWorkerStarted = errors.New("fleet: worker already started")
	// ErrWorkerNotStarted is returned by Worker.Stop on a worker that was
	// never started.
	ErrWorkerNotStarted = errors.New("fleet: worker not started")
	// ErrTaskTimeout is the cause of a batch handler's ctx when the run took
	// longer than WorkerOptions.TaskTimeout; the task is nacked with it.
	ErrTaskTimeout = errors.New("fleet: task timed out")
)

// StaleGenError is returned by PushConfig when the pushed gen is not above
// the stored one; nothing was written. errors.Is(err, ErrStaleGen) is true.
type StaleGenError struct {
	// Type and ID name the worker.
	Type, ID string
	// Pushed is the refused gen; Current is the stored one.
	Pushed, Current int64
}

// Error says which gens were compared.
func (e *StaleGenError) Error() string {
	return fmt.Sprintf("fleet: push config %s|%s: %s: gen %d is not above the current %d", e.Type, e.ID, ErrStaleGen.Error()[len("fleet: "):], e.Pushed, e.Current)
}

// Is reports true for ErrStaleGen.
func (e *StaleGenError) Is(target error) bool { return target == ErrStaleGen }

// workerErr is opErr for worker and config calls: fleet's worker and queue
// sentinels pass through as they are, anything else is classified as opErr
// does.
func workerErr(op, name string, err error) error {
	if err == nil {
		return nil
	}
	for _, s := range []error{ErrStaleGen, ErrInvalidConfig, ErrUnknownWorker, ErrWorkerStarted, ErrWorkerNotStarted, ErrInvalidPayload, ErrLeaseLost} {
		if errors.Is(err, s) {
			return fmt.Errorf("fleet: %s %q: %w", op, name, err)
		}
	}
	return opErr(op, name, err)
}
