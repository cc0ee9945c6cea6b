package fleet

import (
	"fmt"
	"strconv"
	"time"
)

// Replacing a waiting task by its dedup key: SubmitOptions.Replace and
// SubmitOptions.Debounce, which queue_submit.lua applies in the submit's
// own script, atomic with the key.

// Debounce coalesces a burst of submits with one DedupKey into one run
// (SubmitOptions.Debounce). The first submit schedules the task Window
// from now; each later submit while it waits replaces its payload and
// options (as Replace does) and pushes its start out to Window from that
// submit: the window runs from the LAST submit, so the task starts once
// the submits stop for Window, with the last payload. It never starts
// later than MaxWait after the first submit (the time of the task's id),
// however long the burst lasts. Times are the Redis server's, but for the
// first submit's, which is the submitting process's clock.
type Debounce struct {
	// Window is how long the task waits after the last submit. More than
	// 0, at least a millisecond. (In JSON, as TaskRecord shows it:
	// nanoseconds.)
	Window time.Duration `json:"window"`
	// MaxWait bounds the wait from the first submit: a burst longer than
	// it still runs by then. At least Window.
	MaxWait time.Duration `json:"max_wait"`
}

// checkReplace checks SubmitOptions.Replace and Debounce (d), beside its
// DedupKey and NotBefore. (It takes the fields, not SubmitOptions, so
// that this file depends on no other of the submit.)
func checkReplace(replace bool, d *Debounce, dedupKey string, notBefore time.Time) error {
	switch {
	case replace && dedupKey == "":
		return fmt.Errorf("%w: SubmitOptions.Replace needs a DedupKey (the key names the task to replace)", ErrInvalidArgument)
	case d == nil:
		return nil
	case dedupKey == "":
		return fmt.Errorf("%w: SubmitOptions.Debounce needs a DedupKey (the key names the task to debounce)", ErrInvalidArgument)
	case d.Window < time.Millisecond:
		return fmt.Errorf("%w: SubmitOptions.Debounce.Window %v is under a millisecond", ErrInvalidArgument, d.Window)
	case d.MaxWait < d.Window:
		return fmt.Errorf("%w: SubmitOptions.Debounce.MaxWait %v is less than its Window %v", ErrInvalidArgument, d.MaxWait, d.Window)
	case !notBefore.IsZero():
		return fmt.Errorf("%w: SubmitOptions.NotBefore is not with Debounce (the debounce sets the ready time)", ErrInvalidArgument)
	}
	return nil
}

// submitMode spells the mode of a task in queue_submit.lua's ARGV: empty
// for a plain submit, 'r' for Replace, 'd<window ms>:<max wait ms>' for
// Debounce.
func submitMode(replace bool, d *Debounce) string {
	switch {
	case d != nil:
		return "d" + strconv.FormatInt(d.Window.Milliseconds(), 10) + ":" + strconv.FormatInt(d.MaxWait.Milliseconds(), 10)
	case replace:
		return "r"
	}
	return ""
}

// replaceOutcome reads queue_submit.lua's reply for one task: an id, or
// for a task with a mode "\xffp<holder>" (the holder was replaced) or
// "\xffr<holder>" (the holder is running: ErrTaskRunning), for a task
// with dedupKey, debounced or not.
func replaceOutcome(got, dedupKey string, debounced bool) (id string, replaced bool, refused error) {
	if len(got) < 2 || got[0] != 0xff {
		return got, false, nil
	}
	id = got[2:]
	if got[1] == 'p' {
		return id, true, nil
	}
	what := "replace"
	if debounced {
		what = "debounce"
	}
	return id, false, fmt.Errorf("%w: key %q is held by task %s, which is running: nothing to %s (retry later)", ErrTaskRunning, dedupKey, id, what)
}
