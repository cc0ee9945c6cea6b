// Package fault holds fleet's one sentinel type, and the sentinels that
// the engine's packages raise themselves. The root package aliases these
// in errors.go (ErrLeaseLost = fault.LeaseLost), so that errors.Is works
// with either name, and makes all its other sentinels with New, so that
// every sentinel of fleet is a *Sentinel.
package fault

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"

	"github.com/redis/rueidis"
)

// Sentinels the engine raises.
var (
	// LeaseLost says a lease ended before its holder ended it: it could no
	// longer be proven, or Redis said it is not held. It is
	// fleet.ErrLeaseLost.
	LeaseLost = New("lease lost", nil)
	// Canceled is the cause of a task's ctx when Queue.Cancel cancelled it.
	// It is fleet.ErrCanceled.
	Canceled = New("task canceled", nil)
	// Closed is returned by calls after the Fleet closed. It is
	// fleet.ErrClosed.
	Closed = New("closed", nil)
	// InvalidArgument is an argument out of range. It is
	// fleet.ErrInvalidArgument.
	InvalidArgument = New("invalid argument", nil)
	// WrongType is a key that holds another kind of value than the call
	// expects. It is fleet.ErrWrongType.
	WrongType = New("key holds the wrong kind of value", nil)
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

// UnexpectedReply is the error of a reply of n elements to what: a defect,
// or a server that runs other scripts under fleet's names.
func UnexpectedReply(what string, n int) error {
	return fmt.Errorf("unexpected reply of %d elements to %s", n, what)
}

// Unreachable reports whether err says Redis could not be reached or the
// connection broke: a network error, an EOF, a refused or reset connection.
func Unreachable(err error) bool {
	var ne net.Error
	// rueidis.ErrClosing also means "unable to connect": a Fleet's own
	// Close is caught before any call (alive) and says ErrClosed.
	return errors.As(err, &ne) || errors.Is(err, rueidis.ErrClosing) || errors.Is(err, rueidis.ErrNoAddr) ||
		errors.Is(err, rueidis.ErrDoCacheAborted) || errors.Is(err, rueidis.ErrNoSlot) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, net.ErrClosed)
}

// OutcomeUnknown reports whether a script that failed with err may have
// run (or may still run) on the server: ctx ended, or the connection broke,
// while it was in flight. A reply (an error reply too) is a known outcome.
func OutcomeUnknown(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || Unreachable(err)
}
