package lease

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fleet-go/fleet/internal/fault"
	"github.com/fleet-go/fleet/internal/mono"
)

// The ctx of work under a lease (a handler's, Lock.Do's) reports a lease
// that ran out at once, with cause fault.LeaseLost, though no timer has
// fired: a process resumed from a pause (SIGSTOP, a frozen VM) runs its
// goroutines before its timers.
func TestLeaseCtxErrLooksAtTheClock(t *testing.T) {
	var clock Clock
	clock.Prove(mono.Now(), time.Hour)
	base, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	l := &Kept{k: Keep{Clock: &clock, Margin: time.Second}, ctx: base, cancel: cancel}
	c := l.Wrap(base)
	if err := c.Err(); err != nil {
		t.Fatalf("Err with an hour left = %v", err)
	}
	clock.Prove(mono.Now(), 500*time.Millisecond) // within the margin
	if err := c.Err(); !errors.Is(err, context.Canceled) || !errors.Is(context.Cause(c), fault.LeaseLost) {
		t.Fatalf("Err within the margin = %v, cause %v", err, context.Cause(c))
	}
	select {
	case <-c.Done():
	default:
		t.Fatal("Done not closed once Err saw the lease end")
	}
}

// A handler's timeout on the lease's timer (Keep.StopAt) ends the
// ctx as a deadline's ctx would: Err is context.DeadlineExceeded, the cause
// is the stop's, Deadline is the stop's; Err sees it without the timer.
func TestLeaseCtxStop(t *testing.T) {
	var clock Clock
	clock.Prove(mono.Now(), time.Hour)
	stop := errors.New("timed out")
	base, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	at := mono.Now() + int64(50*time.Millisecond)
	l := &Kept{k: Keep{Clock: &clock, Margin: time.Second, StopAt: at, StopCause: stop}, ctx: base, cancel: cancel}
	c := l.Wrap(base)
	if d, ok := c.Deadline(); !ok || time.Until(d) > 50*time.Millisecond || time.Until(d) < 0 {
		t.Fatalf("Deadline = %v, %v; want the stop, within 50ms", d, ok)
	}
	if err := c.Err(); err != nil {
		t.Fatalf("Err before the stop = %v", err)
	}
	for mono.Now() < at {
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

// The margin is a tenth of the lease, within 5ms and a second.
func TestMargin(t *testing.T) {
	for _, c := range []struct{ lease, want time.Duration }{
		{10 * time.Millisecond, 5 * time.Millisecond},
		{time.Second, 100 * time.Millisecond},
		{time.Hour, time.Second},
	} {
		if got := Margin(c.lease); got != c.want {
			t.Errorf("Margin(%v) = %v, want %v", c.lease, got, c.want)
		}
	}
}

// Lose ends the lease now, and never moves an end that passed.
func TestClockLose(t *testing.T) {
	var clock Clock
	if clock.Usable(0) {
		t.Fatal("the zero Clock is usable")
	}
	clock.Prove(mono.Now(), time.Hour)
	if !clock.Usable(time.Minute) || time.Until(clock.Deadline()) < 59*time.Minute {
		t.Fatalf("an hour's lease: usable %v, deadline in %v", clock.Usable(time.Minute), time.Until(clock.Deadline()))
	}
	clock.Lose()
	if clock.Usable(0) || time.Until(clock.Deadline()) > 0 {
		t.Fatalf("a lost lease: usable %v, deadline in %v", clock.Usable(0), time.Until(clock.Deadline()))
	}
	past := mono.Now() - int64(time.Hour)
	clock.Prove(past, time.Minute)
	clock.Lose()
	if got := clock.end.Load(); got != past+int64(time.Minute) {
		t.Fatalf("Lose moved an end that passed: %d, want %d", got, past+int64(time.Minute))
	}
}

// A kept lease's ctx ends on the timer: with fault.LeaseLost when no
// extension keeps the lease (Lost), or when an extension says it is lost
// (and the clock loses it too); with fault.Canceled when an extension says
// so; an extension that fails otherwise is told to Failed, and the lease
// lasts.
func TestStart(t *testing.T) {
	wait := func(t *testing.T, k *Kept) {
		t.Helper()
		select {
		case <-k.Ctx().Done():
		case <-time.After(5 * time.Second):
			t.Fatal("the ctx did not end")
		}
	}
	t.Run("unextended", func(t *testing.T) {
		var clock Clock
		clock.Prove(mono.Now(), 50*time.Millisecond)
		k := Start(context.Background(), Keep{Clock: &clock, Margin: 10 * time.Millisecond})
		defer k.Cancel(nil)
		wait(t, k)
		k.Stop()
		if !k.Lost() {
			t.Fatalf("cause = %v, want fault.LeaseLost", context.Cause(k.Ctx()))
		}
	})
	t.Run("lost", func(t *testing.T) {
		var clock Clock
		clock.Prove(mono.Now(), time.Hour)
		k := Start(context.Background(), Keep{Clock: &clock, Margin: time.Second, Every: time.Millisecond,
			Extend: func(context.Context) error { return fault.LeaseLost }})
		defer k.Cancel(nil)
		wait(t, k)
		k.Stop()
		if !k.Lost() || clock.Usable(0) {
			t.Fatalf("cause = %v, usable %v; want fault.LeaseLost and a lost clock", context.Cause(k.Ctx()), clock.Usable(0))
		}
	})
	t.Run("canceled", func(t *testing.T) {
		var clock Clock
		clock.Prove(mono.Now(), time.Hour)
		k := Start(context.Background(), Keep{Clock: &clock, Margin: time.Second, Every: time.Millisecond,
			Extend: func(context.Context) error { return fault.Canceled }})
		defer k.Cancel(nil)
		wait(t, k)
		k.Stop()
		if k.Lost() || context.Cause(k.Ctx()) != fault.Canceled {
			t.Fatalf("cause = %v, want fault.Canceled", context.Cause(k.Ctx()))
		}
	})
	t.Run("failed", func(t *testing.T) {
		var clock Clock
		clock.Prove(mono.Now(), time.Hour)
		failed := make(chan error, 1)
		oops := errors.New("oops")
		k := Start(context.Background(), Keep{Clock: &clock, Margin: time.Second, Every: time.Millisecond,
			Extend: func(context.Context) error { return oops },
			Failed: func(err error) {
				select {
				case failed <- err:
				default:
				}
			}})
		defer k.Cancel(nil)
		select {
		case err := <-failed:
			if err != oops {
				t.Fatalf("Failed got %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Failed was never told")
		}
		k.Stop()
		if err := k.Ctx().Err(); err != nil {
			t.Fatalf("the ctx ended after a failed extension: %v", err)
		}
	})
}
