package fleet

import (
	"errors"
	"fmt"
)

// Errors of task queues, for errors.Is.
var (
	// ErrInvalidPayload is returned by Submit, SubmitMany and SubmitJSON for
	// a payload that fails validation (the message lists the failing fields)
	// or does not encode as JSON. Nothing is written. An HTTP front end maps
	// it to 422. (A payload over QueueOptions.MaxPayloadBytes is
	// ErrPayloadTooLarge.)
	ErrInvalidPayload = errors.New("fleet: invalid task payload")
	// ErrInvalidJSON is returned by SubmitJSON for bytes that are not one JSON
	// value of the queue's payload type (an empty body, syntax, unknown
	// field, wrong type, trailing data). Nothing is written. An HTTP front end maps it to 400.
	ErrInvalidJSON = errors.New("fleet: bad task JSON")
	// ErrUnknownQueue is returned by SubmitJSON for a queue that no NewQueue
	// of this process made. An HTTP front end maps it to 404.
	ErrUnknownQueue = errors.New("fleet: unknown queue")
	// ErrNoDeadLetter is returned by Queue.RequeueDead when no dead letter has
	// the id, or the one that has it cannot be re-queued (a poison body).
	ErrNoDeadLetter = errors.New("fleet: no such dead letter")
	// ErrDuplicate is returned by Queue.RequeueDead when the dead task's
	// dedup key is held by another live task: re-queueing it would make the
	// duplicate that the key exists to prevent. Nothing changes.
	ErrDuplicate = errors.New("fleet: dedup key held by another task")
)

// queueErr is opErr for queue calls: fleet's queue sentinels pass through
// as they are, anything else is classified as opErr does.
func queueErr(op, name string, err error) error {
	if err == nil {
		return nil
	}
	for _, s := range []error{ErrInvalidPayload, ErrPayloadTooLarge, ErrInvalidJSON, ErrUnknownQueue, ErrLeaseLost, ErrNoDeadLetter, ErrDuplicate} {
		if errors.Is(err, s) {
			return fmt.Errorf("fleet: %s %q: %w", op, name, err)
		}
	}
	return opErr(op, name, err)
}
