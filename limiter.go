package fleet

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/fleet-go/fleet/internal/keys"
)

// The limiter scripts are not retryable: a retry of a take whose reply was
// lost would take its tokens twice.
var (
	limitAllowScript  = newScript("limit_allow.lua")
	limitRefundScript = newScript("limit_refund.lua")
)

// Defaults of LimitOptions.
const (
	// DefaultLimitPer is the period that LimitOptions.Rate counts in.
	DefaultLimitPer = time.Second
	// DefaultBurst is how many tokens may go at once after a rest: 1 spaces
	// every token evenly.
	DefaultBurst = 1
)

// maxBurstSpan bounds Burst x the emission interval (about 35 years in
// µs), so that the script's arithmetic stays exact in a double.
const maxBurstSpan = 1 << 50

// LimitOptions says how fast a Limiter lets work through.
type LimitOptions struct {
	// Rate is how many tokens come back per Per. Required, > 0; Per/Rate
	// may not be below a microsecond.
	Rate int
	// Per is the period Rate counts in. Defaults to DefaultLimitPer.
	Per time.Duration
	// Burst is how many tokens may be taken at once after a rest, and so
	// the most any one Allow or Wait may ask for. In any window of length
	// w, at most Burst + w*Rate/Per tokens are taken. Defaults to
	// DefaultBurst.
	Burst int
}

// Limiter is a fleet-wide rate limiter (fleet:limit:<name>): GCRA, the
// algorithm of redis-cell and go-redis/redis_rate, in one script on the
// server's clock, so every process of the fleet draws from the same
// tokens whatever their own clocks say. Its only key holds the limiter's
// theoretical arrival time and expires once the limiter is full again, so
// an idle limiter leaves nothing behind. Every process that limits the
// same work must use the same name and options. A Limiter is safe for
// concurrent use.
type Limiter struct {
	f    *Fleet
	name string
	key  string
	opts LimitOptions
	iv   int64 // emission interval, µs
	err  error
}

// LimitResult is the outcome of Limiter.Allow.
type LimitResult struct {
	// Allowed reports whether the tokens were taken.
	Allowed bool
	// Remaining is how many tokens are left now.
	Remaining int
	// RetryAfter is how long until the tokens asked for could be taken
	// (on the server's clock); zero when Allowed.
	RetryAfter time.Duration
	// ResetAfter is how long until the limiter is full again (Burst
	// tokens), and its key expires.
	ResetAfter time.Duration
}

// Limiter returns the limiter name. Bad options or a bad name make every
// call return ErrInvalidArgument (see Err), naming the field; nothing is
// stored.
func (f *Fleet) Limiter(name string, opts LimitOptions) *Limiter {
	l := &Limiter{f: f, name: name, key: f.keys.Limit(name)}
	l.opts, l.iv, l.err = opts.withDefaults()
	if err := keys.Check(keys.KindLimiter, name); err != nil {
		l.err = fmt.Errorf("%w: name: %w", ErrInvalidArgument, err)
	}
	return l
}

func (o LimitOptions) withDefaults() (LimitOptions, int64, error) {
	switch {
	case o.Rate <= 0:
		return o, 0, fmt.Errorf("%w: LimitOptions.Rate %d must be > 0", ErrInvalidArgument, o.Rate)
	case o.Per < 0:
		return o, 0, fmt.Errorf("%w: LimitOptions.Per %v is negative", ErrInvalidArgument, o.Per)
	case o.Burst < 0:
		return o, 0, fmt.Errorf("%w: LimitOptions.Burst %d is negative", ErrInvalidArgument, o.Burst)
	}
	if o.Per == 0 {
		o.Per = DefaultLimitPer
	}
	if o.Burst == 0 {
		o.Burst = DefaultBurst
	}
	iv := math.Round(float64(o.Per) / float64(time.Microsecond) / float64(o.Rate))
	if iv < 1 {
		return o, 0, fmt.Errorf("%w: LimitOptions.Rate %d per %v is finer than one token per µs", ErrInvalidArgument, o.Rate, o.Per)
	}
	if iv*float64(o.Burst) > maxBurstSpan {
		return o, 0, fmt.Errorf("%w: LimitOptions.Burst %d of one token per %v spans too long", ErrInvalidArgument, o.Burst, time.Duration(iv)*time.Microsecond)
	}
	return o, int64(iv), nil
}

// Name returns the limiter's name.
func (l *Limiter) Name() string { return l.name }

// Options returns the options in force, defaults filled in.
func (l *Limiter) Options() LimitOptions { return l.opts }

// Err returns the error every call of the Limiter would return for its
// name or options (ErrInvalidArgument), or nil.
func (l *Limiter) Err() error { return l.err }

func (l *Limiter) check(ctx context.Context, n int) error {
	if l.err != nil {
		return l.err
	}
	if n < 1 || n > l.opts.Burst {
		return fmt.Errorf("%w: n %d is not in [1, Burst %d]", ErrInvalidArgument, n, l.opts.Burst)
	}
	return l.f.alive(ctx)
}

// Allow takes n tokens if there are n, in one round trip, and says how
// many are left, and else how long until there would be. It never waits.
// May return ErrInvalidArgument (n < 1 or n > Burst, bad options or name;
// nothing stored changes), ErrWrongType (the key holds something else:
// nothing changes), ErrUnavailable, ErrClosed. When ctx ends or the
// connection breaks while the call is in flight, the tokens may have been
// taken.
func (l *Limiter) Allow(ctx context.Context, n int) (LimitResult, error) {
	if err := l.check(ctx, n); err != nil {
		return LimitResult{}, opErr("limiter allow", l.name, err)
	}
	got, rem, wait, reset, err := l.take(ctx, n, modeNow)
	if err != nil {
		return LimitResult{}, opErr("limiter allow", l.name, err)
	}
	r := LimitResult{Allowed: got > 0, Remaining: rem, ResetAfter: reset}
	if !r.Allowed {
		r.RetryAfter = wait
	}
	return r, nil
}

// Wait takes n tokens, sleeping until they can be used, or until ctx ends
// or the Fleet closes. It costs one round trip: when the tokens are not
// there yet, it books them ahead (the limiter counts them as taken from
// now on, so waiters line up instead of racing, and one that wakes late
// loses nothing) and sleeps until they are due on the server's clock. A
// Wait that gives up gives its booked tokens back. It returns nil once the
// tokens are taken, else ctx's error or ErrClosed, and what Allow returns.
func (l *Limiter) Wait(ctx context.Context, n int) error {
	if err := l.check(ctx, n); err != nil {
		return opErr("limiter wait", l.name, err)
	}
	_, _, wait, _, err := l.take(ctx, n, modeBookAll)
	if err != nil {
		return opErr("limiter wait", l.name, err)
	}
	if wait == 0 {
		return nil
	}
	if err := l.f.sleep(ctx, wait); err != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), refundTimeout)
		_ = l.refund(rctx, n) // a refund that fails only slows the limiter down for a while
		cancel()
		return opErr("limiter wait", l.name, err)
	}
	return nil
}

// The modes of the allow script (limit_allow.lua).
const (
	modeNow     = "0" // n now or none
	modeUpTo    = "1" // up to n now, else book one ahead
	modeBookAll = "2" // n now, else book n ahead
)

// take runs the allow script in mode. It returns the tokens taken (or
// booked), the tokens left, how long until the tokens taken can be used
// (0: now) or, when none were, until they could be taken, and how long
// until the limiter is full again.
func (l *Limiter) take(ctx context.Context, n int, mode string) (got, remaining int, wait, reset time.Duration, err error) {
	res, err := limitAllowScript.Exec(ctx, l.f.client, []string{l.key},
		[]string{strconv.Itoa(n), strconv.FormatInt(l.iv, 10), strconv.Itoa(l.opts.Burst), mode}).AsIntSlice()
	if err != nil {
		return 0, 0, 0, 0, err
	}
	if len(res) != 4 {
		return 0, 0, 0, 0, unexpectedReply("limiter", len(res))
	}
	if res[2] >= 0 {
		wait = max(time.Duration(res[2])*time.Microsecond, time.Microsecond)
	}
	l.f.limited(ctx, l.name, n, int(res[0]), wait)
	return int(res[0]), int(res[1]), wait, time.Duration(res[3]) * time.Microsecond, nil
}

// book takes as many tokens as there are now, up to n (n is cut to
// Burst), or else books one ahead: it returns how many it took, and how
// long until they can be used (0: now).
func (l *Limiter) book(ctx context.Context, n int) (int, time.Duration, error) {
	got, _, wait, _, err := l.take(ctx, min(n, l.opts.Burst), modeUpTo)
	return got, wait, err
}

// refund gives back k tokens taken and not used.
func (l *Limiter) refund(ctx context.Context, k int) error {
	if k <= 0 {
		return nil
	}
	return limitRefundScript.Exec(ctx, l.f.client, []string{l.key},
		[]string{strconv.Itoa(k), strconv.FormatInt(l.iv, 10)}).Error()
}

// sleep waits d, or until ctx ends (its error) or the Fleet closes
// (ErrClosed).
func (f *Fleet) sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-f.done:
		return ErrClosed
	case <-t.C:
		return nil
	}
}

// refundTimeout bounds giving back the tokens a limited reserve took and
// did not use.
const refundTimeout = time.Second
