package fleet

import (
	"context"
	"errors"
	"testing"
	"time"
)

// The ctx of work under a lease (a handler's, Lock.Do's) reports a lease
// that ran out at once, with cause ErrLeaseLost, though no timer has
// fired: a process resumed from a pause (SIGSTOP, a frozen VM) runs its
// goroutines before its timers.
func TestLeaseCtxErrLooksAtTheClock(t *testing.T) {
	var clock leaseClock
	clock.prove(monoNow(), time.Hour)
	base, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	c := &leaseCtx{Context: base, clock: &clock, margin: time.Second, cancel: cancel}
	if err := c.Err(); err != nil {
		t.Fatalf("Err with an hour left = %v", err)
	}
	clock.prove(monoNow(), 500*time.Millisecond) // within the margin
	if err := c.Err(); !errors.Is(err, context.Canceled) || !errors.Is(context.Cause(c), ErrLeaseLost) {
		t.Fatalf("Err within the margin = %v, cause %v", err, context.Cause(c))
	}
	select {
	case <-c.Done():
	default:
		t.Fatal("Done not closed once Err saw the lease end")
	}
}
