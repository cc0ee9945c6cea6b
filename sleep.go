package fleet

// Durable sleep: a step of a durable task (step.go) that ends its run and
// has it back, uncounted, at a time (docs/DURABLE.md).

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fleet-go/fleet/internal/engine"
)

// SleepError is what Sleep returns while the sleep has not ended: the
// handler returns it (as it is, or wrapped), and the worker snoozes the
// task until Until without counting an attempt; the task then runs from
// the top, its recorded steps returned without running. It holds no slot,
// no lease and no goroutine meanwhile: it waits in the queue's
// :scheduled, and Lookup shows the sleep (TaskRecord.Steps). A holder of
// a task of its own Reserve parks it itself: t.Suspend(ctx, err).
// errors.Is(err, ErrSuspended) holds.
//
// WaitSignal returns one too, with Signal set, while its signal has not
// come: the task is parked until Until (its timeout) and made ready at
// once when the signal is sent (Queue.Signal).
type SleepError struct {
	// Name is the sleep's name (a WaitSignal's: its signal's).
	Name string
	// Until is when it ends (a WaitSignal's: its timeout).
	Until time.Time
	// Signal is the signal a WaitSignal waits for; "" for a sleep.
	Signal string
}

// Error says until when.
func (e *SleepError) Error() string {
	if e.Signal != "" {
		return fmt.Sprintf("%v: wait for signal %q until %s", ErrSuspended, e.Signal, e.Until.UTC().Format(time.RFC3339Nano))
	}
	return fmt.Sprintf("%v: sleep %q until %s", ErrSuspended, e.Name, e.Until.UTC().Format(time.RFC3339Nano))
}

func (e *SleepError) fleetError() {}

// Is makes errors.Is(err, ErrSuspended) true.
func (e *SleepError) Is(target error) bool { return target == ErrSuspended }

// Sleep suspends task t for d, as a step named name: see SleepUntil.
func Sleep(ctx context.Context, t Durable, name string, d time.Duration) error {
	return SleepUntil(ctx, t, name, time.Now().Add(d))
}

// SleepUntil suspends task t until at, as a step named name (which the
// rules of Step's names hold for: the same place in every run). Its first
// run records the wake time and returns a *SleepError, which the handler
// returns: the worker snoozes the task until then (uncounted), and it
// holds no slot or lease while it sleeps. The runs after it find the
// sleep recorded: SleepUntil returns nil once the recorded time passed
// (the task's clock may run up to a few ms early, by the skew between
// the workers' clocks and the server's), or the same *SleepError again
// before. A time already passed records the sleep and returns nil.
func SleepUntil(ctx context.Context, t Durable, name string, at time.Time) error {
	r, err := checkStep(t, name)
	if err != nil {
		return err
	}
	q := r.core
	s, err := r.stepsOf(ctx)
	if err != nil {
		return opErr("sleep", q.name, err)
	}
	rec, ok, i, err := s.place(r.id(), name, StepSleep)
	if err != nil {
		return opErr("sleep", q.name, err)
	}
	if !ok {
		rec = stepRec{I: i, S: StepSleep, At: time.Now().UnixMilli(), W: at.UnixMilli()}
		if err := r.recordStep(ctx, s, name, rec, time.Until(at)+time.Hour); err != nil {
			return opErr("sleep", q.name, err)
		}
	}
	wake := time.UnixMilli(rec.W)
	if !time.Now().Before(wake) {
		return nil
	}
	return &SleepError{Name: name, Until: wake}
}

// suspendedFor returns how long err (a handler's) asks its task to wait,
// uncounted (RateLimited, a Sleep), and whether it asks that.
func suspendedFor(err error) (time.Duration, bool) {
	var rl *RateLimitedError
	if errors.As(err, &rl) {
		return rl.RetryAfter, true
	}
	var se *SleepError
	if errors.As(err, &se) {
		return max(time.Until(se.Until), 0), true
	}
	return 0, false
}

// snoozeWait snoozes r, uncounted, for as long as err (a handler's: a
// RateLimitedError, a SleepError) asks (suspendedFor); a sleeping or
// waiting durable task is parked (Reservation.Park), for a signal to wake.
func snoozeWait(ctx context.Context, r *engine.Reservation, err error) error {
	d, _ := suspendedFor(err)
	var se *SleepError
	if errors.As(err, &se) {
		return r.Park(ctx, d)
	}
	return r.Snooze(ctx, d)
}
