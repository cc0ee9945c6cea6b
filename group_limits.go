package fleet

import (
	"fmt"
	"time"
)

// GroupLimits are the limits of one group of a queue: the queue's, for
// every group without limits of its own (QueueOptions.Groups), or one
// group's own (Queue.SetGroupLimit). Both are fleet-wide, kept on the
// server. The zero value limits nothing.
type GroupLimits struct {
	// Concurrency is how many of the group's tasks may run at once. Each
	// running task holds a permit until it ends; a crashed worker's task
	// keeps its permit until the sweeper re-queues it, once its lease ran
	// out, so no two of its runs overlap. 1 makes the group sequential:
	// its tasks run one at a time in submit order, and a task that is
	// retried or snoozed goes back first and holds the group until it is
	// due (River Pro's sequences). 0: no bound.
	Concurrency int
	// Rate is how fast the group's tasks may start: the GCRA of Limiter
	// (LimitOptions), one key per group that expires when the group rests,
	// with one difference: a reserve that comes up to half an emission
	// interval late for a token keeps the pace (the token's time is not
	// lost to the wake-up and the round trip, as a strict GCRA's would be),
	// so a busy group runs at Rate, and at rest the burst is as given. A
	// zero Rate: no bound.
	Rate LimitOptions
}

// storedLimits is GroupLimits as Redis holds them (a group's entry in
// :gstate's neighbour :glimits, or the policy's group_* fields): the
// reserves read c, iv and b; r and per_ms keep the rate as given.
type storedLimits struct {
	C   int   `json:"c"`
	R   int   `json:"r,omitempty"`
	Per int64 `json:"per_ms,omitempty"`
	IV  int64 `json:"iv,omitempty"`
	B   int   `json:"b,omitempty"`
}

// check validates l (field names it in errors) and spells it as stored.
func (l GroupLimits) check(field string) (storedLimits, error) {
	s := storedLimits{C: l.Concurrency}
	switch r := l.Rate; {
	case l.Concurrency < 0:
		return s, fmt.Errorf("%w: %s.Concurrency %d is negative", ErrInvalidArgument, field, l.Concurrency)
	case r.Rate < 0:
		return s, fmt.Errorf("%w: %s.Rate.Rate %d is negative", ErrInvalidArgument, field, r.Rate)
	case r.Rate == 0 && (r.Per != 0 || r.Burst != 0):
		return s, fmt.Errorf("%w: %s.Rate has a Per or a Burst but no Rate", ErrInvalidArgument, field)
	case r.Rate == 0:
		return s, nil
	}
	o, iv, err := l.Rate.withDefaults()
	if err != nil {
		return s, within(field+".Rate", err)
	}
	s.R, s.Per, s.IV, s.B = o.Rate, o.Per.Milliseconds(), iv, o.Burst
	return s, nil
}

// limits is s as GroupLimits.
func (s storedLimits) limits() GroupLimits {
	l := GroupLimits{Concurrency: s.C}
	if s.R > 0 && s.IV > 0 {
		l.Rate = LimitOptions{Rate: s.R, Per: time.Duration(s.Per) * time.Millisecond, Burst: max(s.B, 1)}
	}
	return l
}
