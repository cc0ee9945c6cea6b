package fleet

// The queue's side of retry policies (backoff.go): the delay this process
// chooses for a nack or a lease that ran out, by a task's own Backoff, the
// queue's Func, or the stored policy.

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/fleet-go/fleet/internal/taskbody"
)

// errLeaseRanOut is the error a Backoff.Func is given for a lease that
// ran out.
var errLeaseRanOut = fmt.Errorf("%w: lease ran out", ErrLeaseLost)

// retryDelay returns the delay of the retry of a task whose attempt
// counted (1 for the first failure) failed with cause, body its body,
// when this process chooses it: cause's RetryAfter, the task's own
// Backoff, the queue's Backoff.Func. ok false: the stored policy's,
// which queue_end.lua applies.
func (q *queueCore) retryDelay(attempt int, cause error, body string) (d time.Duration, ok bool) {
	var ra *RetryAfterError
	if errors.As(cause, &ra) {
		return max(ra.After, 0), true
	}
	if b, ok := taskBackoff(body, q.opts); ok {
		return b.delay(attempt, cause, rand.Float64()), true
	}
	if f := q.opts.Backoff.Func; f != nil {
		return max(f(attempt, cause), 0), true
	}
	return 0, false
}

// taskBackoff returns the task's own Backoff (SubmitOptions.Backoff, the
// body's "backoff"), if body has one that reads, its defaults the queue's
// o.
func taskBackoff(body string, o QueueOptions) (Backoff, bool) {
	if !strings.Contains(body, `"backoff":`) {
		return Backoff{}, false
	}
	w, err := taskbody.Parse(body)
	if err != nil || w.Backoff == "" {
		return Backoff{}, false
	}
	b, err := ParseBackoff(w.Backoff)
	if err == nil {
		b, err = b.check("", o.BackoffBase, o.BackoffMax)
	}
	return b, err == nil
}

// expiredDelay returns the delay of the retry of a task whose lease ran
// out, on attempt (counted), body its body, by o (the stored policy over
// this process's options, as the sweeper reads them): the task's own
// Backoff, else the queue's declared one; ok false when neither is
// declared: the task goes back at once.
func (o QueueOptions) expiredDelay(attempt int, body string) (time.Duration, bool) {
	b, ok := taskBackoff(body, o)
	if !ok {
		if o.Backoff.IsZero() {
			return 0, false
		}
		b = o.Backoff
	}
	return b.delay(attempt, errLeaseRanOut, rand.Float64()), true
}

// RetryBackoff returns the retry policy that p stores: its kind (the
// default, exponential with jitter, when the queue declares none), base
// and max. Its String is what ParseBackoff reads, as fleetctl policy and
// the dashboard show it.
func (p QueuePolicy) RetryBackoff() Backoff {
	kind := p.Backoff
	if kind == "" {
		kind = BackoffExponential
	}
	return Backoff{Kind: kind, Base: time.Duration(p.BackoffBaseMS) * time.Millisecond, Max: time.Duration(p.BackoffMaxMS) * time.Millisecond}
}
