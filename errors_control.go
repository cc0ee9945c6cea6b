package fleet

import (
	"errors"
	"fmt"
)

// Errors of task control (schedules, cancel, lookup, pause), for errors.Is.
var (
	// ErrScheduleNotFound is returned by PauseSchedule, ResumeSchedule and
	// RemoveSchedule for a name that no schedule has.
	ErrScheduleNotFound = errors.New("fleet: no such schedule")
	// ErrTaskNotFound is returned by Queue.Cancel and Queue.Lookup for an id
	// that no task of the queue has (or none that is still known).
	ErrTaskNotFound = errors.New("fleet: no such task")
	// ErrTaskFinished is returned by Queue.Cancel for a task that already
	// ended (dead-lettered, or done and retained): there is nothing left to
	// cancel. Nothing changes.
	ErrTaskFinished = errors.New("fleet: task already finished")
	// ErrCanceled is the cause of a handler's ctx when Queue.Cancel
	// cancelled its task (context.Cause), and the error recorded with the
	// task in the dead letters.
	ErrCanceled = errors.New("fleet: task canceled")
)

// DuplicateError is returned by Queue.SubmitWith with UniqueFor set when
// another task holds the dedup key, live or within its unique window.
// errors.Is(err, ErrDuplicate) holds.
type DuplicateError struct {
	// Key is the dedup key.
	Key string
	// ID is the id of the task that holds it.
	ID string
}

// Error names the key and its holder.
func (e *DuplicateError) Error() string {
	return fmt.Sprintf("%v: key %q is held by task %s", ErrDuplicate, e.Key, e.ID)
}

// Is makes errors.Is(err, ErrDuplicate) hold.
func (e *DuplicateError) Is(target error) bool { return target == ErrDuplicate }
