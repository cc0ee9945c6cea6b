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
	l := &keptLease{k: leaseKeep{clock: &clock, margin: time.Second}, ctx: base, cancel: cancel}
	c := l.wrap(base)
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

// A handler's timeout on the lease's timer (leaseKeep.stopAt) ends the
// ctx as a deadline's ctx would: Err is context.DeadlineExceeded, the cause
// is the stop's, Deadline is the stop's; Err sees it without the timer.
func TestLeaseCtxStop(t *testing.T) {
	var clock leaseClock
	clock.prove(monoNow(), time.Hour)
	stop := errors.New("timed out")
	base, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	at := monoNow() + int64(50*time.Millisecond)
	l := &keptLease{k: leaseKeep{clock: &clock, margin: time.Second, stopAt: at, stopCause: stop}, ctx: base, cancel: cancel}
	c := l.wrap(base)
	if d, ok := c.Deadline(); !ok || time.Until(d) > 50*time.Millisecond || time.Until(d) < 0 {
		t.Fatalf("Deadline = %v, %v; want the stop, within 50ms", d, ok)
	}
	if err := c.Err(); err != nil {
		t.Fatalf("Err before the stop = %v", err)
	}
	for monoNow() < at {
		time.Sleep(time.Millisecond)
	}
	if err := c.Err(); err != context.DeadlineExceeded || context.Cause(c) != stop {
		t.Fatalf("Err after the stop = %v, cause %v", err, context.Cause(c))
	}
	select {
	case <-c.Done():
	default:
		t.Fatal("Done not closed once Err saw the stop")
	}
}
