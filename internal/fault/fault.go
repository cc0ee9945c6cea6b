// Package fault holds fleet's one sentinel type, and the sentinels that
// the engine's packages raise themselves. The root package aliases these
// in errors.go (ErrLeaseLost = fault.LeaseLost), so that errors.Is works
// with either name, and makes all its other sentinels with New, so that
// every sentinel of fleet is a *Sentinel.
package fault

// Sentinels the engine raises.
var (
	// LeaseLost says a lease ended before its holder ended it: it could no
	// longer be proven, or Redis said it is not held. It is
	// fleet.ErrLeaseLost.
	LeaseLost = New("lease lost", nil)
	// Canceled is the cause of a task's ctx when Queue.Cancel cancelled it.
	// It is fleet.ErrCanceled.
	Canceled = New("task canceled", nil)
)

// Sentinel is the type of fleet's sentinel errors: its text starts with
// "fleet: ", and a sentinel with a parent is also its parent (errors.Is),
// as every Err<Noun>NotFound is ErrNotFound.
type Sentinel struct {
	msg    string
	parent error
}

// New returns a sentinel whose text is "fleet: " + what, and which is also
// parent (errors.Is) when parent is not nil.
func New(what string, parent error) error {
	return &Sentinel{msg: "fleet: " + what, parent: parent}
}

// Error is the sentinel's text.
func (e *Sentinel) Error() string { return e.msg }

// Is reports whether target is the sentinel's parent.
func (e *Sentinel) Is(target error) bool { return e.parent != nil && target == e.parent }
