package fleet

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// BackoffKind is how a Backoff's delay grows from one retry to the next.
type BackoffKind string

// The kinds of Backoff.
const (
	// BackoffExponential: retry k waits Base*2^(k-1), capped by Max, with
	// jitter (between half and all of it). The default.
	BackoffExponential BackoffKind = "exponential"
	// BackoffFixed: every retry waits Base, no jitter.
	BackoffFixed BackoffKind = "fixed"
	// BackoffLinear: retry k waits k*Base, capped by Max, no jitter.
	BackoffLinear BackoffKind = "linear"
)

// Backoff is a retry policy: how long a failed task waits before it runs
// again. A queue has one (QueueOptions.Backoff), and a task may carry its
// own (SubmitOptions.Backoff), which goes before the queue's. Its zero
// value sets nothing: the queue's exponential backoff of BackoffBase and
// BackoffMax, as before there was a Backoff. ParseBackoff reads one from
// text (a config file, a flag).
//
// A declared policy applies to every failure of the task: a nack, and a
// lease that ran out, which the sweeper then schedules by the policy as a
// nack would be (without one, a lease that ran out goes back at once).
type Backoff struct {
	// Kind is how the delay grows. Defaults to BackoffExponential.
	Kind BackoffKind
	// Base is the first retry's delay (exponential), every retry's
	// (fixed), or the step each retry adds (linear). At least a
	// millisecond. Defaults to QueueOptions.BackoffBase.
	Base time.Duration
	// Max caps the delay (exponential, linear; a fixed delay has no cap).
	// At least Base. Defaults to QueueOptions.BackoffMax.
	Max time.Duration
	// Func, when set, chooses each retry's delay in this process from the
	// attempt (1 for the first failure) and the handler's error (for a
	// lease that ran out, one that errors.Is ErrLeaseLost); a negative
	// delay counts as zero. It must be fast and safe for concurrent use
	// (nacks and the sweeper call it from their goroutines). A func cannot
	// be stored in Redis: what the
	// queue's stored policy holds is Kind, Base and Max, which a process
	// whose QueueOptions have no Func applies, its nacks and its sweeper
	// alike; so give the Kind, Base and Max that such a process should
	// fall back to. QueueOptions only: a task's own Backoff cannot carry
	// one (ErrInvalidArgument).
	Func func(attempt int, err error) time.Duration
}

// IsZero reports whether b sets nothing.
func (b Backoff) IsZero() bool {
	return b.Kind == "" && b.Base == 0 && b.Max == 0 && b.Func == nil
}

// String spells b as ParseBackoff reads it: "exponential:1s:10m0s",
// "fixed:30s", "linear:5s:1m0s"; "" for the zero Backoff. A Func is not
// spelled.
func (b Backoff) String() string {
	if b.IsZero() {
		return ""
	}
	kind := b.Kind
	if kind == "" {
		kind = BackoffExponential
	}
	s := string(kind)
	switch {
	case b.Base != 0:
		s += ":" + b.Base.String()
	case b.Max != 0:
		s += ":" // the queue's base
	}
	if kind != BackoffFixed && b.Max != 0 {
		s += ":" + b.Max.String()
	}
	return s
}

// ParseBackoff reads a Backoff from text, for a config file or a flag:
// "exponential:<base>:<max>", "fixed:<delay>" or "linear:<step>:<max>",
// each duration as time.ParseDuration reads it ("30s", "1m30s"); a
// duration of exponential and linear may be left out ("linear::1m",
// "exponential:2s"), and then comes from the queue's BackoffBase or
// BackoffMax. Anything
// else, or a duration under a millisecond, or a max below the base, is
// an ErrInvalidArgument that names the part at fault.
func ParseBackoff(s string) (Backoff, error) {
	parts := strings.Split(s, ":")
	b := Backoff{Kind: BackoffKind(parts[0])}
	switch {
	case b.Kind != BackoffExponential && b.Kind != BackoffFixed && b.Kind != BackoffLinear:
		return Backoff{}, fmt.Errorf("%w: backoff %q: the kind %q is not exponential, fixed or linear", ErrInvalidArgument, s, parts[0])
	case b.Kind == BackoffFixed && len(parts) != 2:
		return Backoff{}, fmt.Errorf("%w: backoff %q: fixed takes one delay (fixed:30s)", ErrInvalidArgument, s)
	case len(parts) > 3:
		return Backoff{}, fmt.Errorf("%w: backoff %q: %s takes a base and a max at most (%s:1s:10m)", ErrInvalidArgument, s, b.Kind, b.Kind)
	}
	for i, p := range parts[1:] {
		name := [...]string{"base", "max"}[i]
		if p == "" && b.Kind != BackoffFixed {
			continue // the queue's
		}
		d, err := time.ParseDuration(p)
		if err != nil {
			return Backoff{}, fmt.Errorf("%w: backoff %q: the %s %q is not a duration", ErrInvalidArgument, s, name, p)
		}
		if d < time.Millisecond {
			return Backoff{}, fmt.Errorf("%w: backoff %q: the %s %v is under a millisecond", ErrInvalidArgument, s, name, d)
		}
		if i == 0 {
			b.Base = d
		} else {
			b.Max = d
		}
	}
	if b.Max != 0 && b.Max < b.Base {
		return Backoff{}, fmt.Errorf("%w: backoff %q: the max %v is below the base %v", ErrInvalidArgument, s, b.Max, b.Base)
	}
	return b, nil
}

// check checks b as field (e.g. "QueueOptions.Backoff") of options whose
// BackoffBase and BackoffMax are base and bmax (0: unset), and returns it
// with its defaults filled in (the queue's: pass the defaulted base and
// max), Base and Max in whole milliseconds. The zero Backoff stays zero.
func (b Backoff) check(field string, base, bmax time.Duration) (Backoff, error) {
	if b.IsZero() {
		return b, nil
	}
	switch {
	case b.Kind == "":
		b.Kind = BackoffExponential
	case b.Kind != BackoffExponential && b.Kind != BackoffFixed && b.Kind != BackoffLinear:
		return b, fmt.Errorf("%w: %s.Kind %q is not exponential, fixed or linear", ErrInvalidOptions, field, b.Kind)
	}
	switch {
	case b.Base < 0:
		return b, fmt.Errorf("%w: %s.Base %v is negative", ErrInvalidArgument, field, b.Base)
	case b.Max < 0:
		return b, fmt.Errorf("%w: %s.Max %v is negative", ErrInvalidArgument, field, b.Max)
	case b.Base != 0 && b.Base < time.Millisecond:
		return b, fmt.Errorf("%w: %s.Base %v is under a millisecond", ErrInvalidArgument, field, b.Base)
	case b.Kind == BackoffFixed && b.Base == 0:
		return b, fmt.Errorf("%w: %s.Base is needed by a fixed backoff", ErrInvalidArgument, field)
	}
	if b.Base == 0 {
		b.Base = base
	}
	if b.Max == 0 {
		b.Max = bmax
	}
	b.Base = b.Base.Truncate(time.Millisecond)
	b.Max = b.Max.Truncate(time.Millisecond)
	if b.Kind == BackoffFixed {
		b.Max = b.Base // no cap
	}
	if b.Max != 0 && b.Max < b.Base {
		return b, fmt.Errorf("%w: %s.Max %v is below its Base %v", ErrInvalidArgument, field, b.Max, b.Base)
	}
	return b, nil
}

// delay returns the delay of b (checked, not zero) for attempt (1 for the
// first failure) failed with err, jitter a number in [0, 1): Func's when
// set, else by Kind, as queue_end.lua computes it.
func (b Backoff) delay(attempt int, err error, jitter float64) time.Duration {
	if b.Func != nil {
		return max(b.Func(attempt, err), 0)
	}
	n := max(attempt, 1)
	switch b.Kind {
	case BackoffFixed:
		return b.Base
	case BackoffLinear:
		if n > int(b.Max/max(b.Base, 1)) {
			return b.Max
		}
		return min(time.Duration(n)*b.Base, b.Max)
	}
	d := float64(b.Base.Milliseconds()) * math.Pow(2, float64(min(n-1, 40)))
	d = min(d, float64(b.Max.Milliseconds()))
	return time.Duration(math.Floor(d/2+jitter*d/2)) * time.Millisecond
}

// RetryAfterError is a handler's way to say when its task should run
// again: the attempt failed (with Err), and its retry is due After from
// the end, in place of the backoff. Build it with RetryAfter.
type RetryAfterError struct {
	// After is how long the retry waits (on the server's clock); a
	// negative one counts as zero.
	After time.Duration
	// Err is the failure.
	Err error
}

// Error says the failure and when it is retried.
func (e *RetryAfterError) Error() string {
	msg := "failed"
	if e.Err != nil {
		msg = e.Err.Error()
	}
	return fmt.Sprintf("%s (retry after %v)", msg, e.After)
}

// Unwrap returns the failure.
func (e *RetryAfterError) Unwrap() error { return e.Err }

// RetryAfter returns the error a handler returns for a failure whose
// retry should be due after d (a remote side's Retry-After, a resource
// known to come back at a time): the task is nacked as for any error, so
// the attempt counts, and once its attempts are spent (MaxAttempts) it
// goes to the dead letters as any failure does; but the retry waits d,
// not the backoff. Compare Task.Snooze and RateLimited, which put the
// task back after a delay without counting an attempt: for waits that
// are not failures. err is the failure (errors.Is and errors.As see
// through); nil reads as "failed". With Task.Nack, the same error does
// the same.
func RetryAfter(d time.Duration, err error) error {
	return &RetryAfterError{After: d, Err: err}
}
