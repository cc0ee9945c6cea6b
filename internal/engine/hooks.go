package engine

import "context"

// Hooks is how the engine (queue.go, end.go) tells the layers above it
// what became of the tasks it ended, without knowing them: in the root,
// the flows (the root's flow_drive.go) pass a tracked task's end on, and the history
// and the Observer count it (history.go, observe.go). The root's Open
// wires them (Env.Hooks); a nil hook is skipped. Every end of a task's run
// reaches them through this one place.
type Hooks struct {
	// Acked is told of each task that an ack step acked, as its reply
	// comes (before the caller hears of it, and even when the caller's
	// ctx ended meanwhile). It runs on the call's goroutine and must not
	// block. It takes one reservation, not the call's slice of them: a
	// slice handed to a func value would escape, an allocation per call.
	Acked func(r *Reservation)
	// Ended is told of each end of a task's run that a caller of this
	// process made (an ack, a retry, a dead letter), with the caller's
	// ctx, once the caller knows how it went: ok when it took effect.
	Ended func(ctx context.Context, r *Reservation, outcome Outcome, ok bool)
}

// acked calls the acked hook, and the reservation's own AfterAck funcs,
// for each of acks that its code (codes[i], nil when the reply said
// nothing of them) says was acked; first it gives back the fleet-wide
// permits of a sharded queue that acks held, whatever their codes
// (permit.go).
func (q *Queue) acked(acks []*Reservation, codes []EndCode) {
	freePermits(q.env.Life, acks...)
	h := q.env.Hooks.Acked
	for i, r := range acks {
		if i < len(codes) && codes[i] == EndDone {
			if fn := r.afterAck.Load(); fn != nil {
				(*fn)()
			}
			if h != nil {
				h(r)
			}
		}
	}
}

// ended calls the ended hook.
func (q *Queue) ended(ctx context.Context, r *Reservation, outcome Outcome, ok bool) {
	if h := q.env.Hooks.Ended; h != nil {
		h(ctx, r, outcome, ok)
	}
}

// Outcome is how a run of a task ended, as the Ended hook is told.
type Outcome uint8

// The outcomes of a run.
const (
	// Processed: acked.
	Processed Outcome = iota + 1
	// Retried: nacked, and scheduled for a retry.
	Retried
	// DeadLettered: moved to the dead letters.
	DeadLettered
)
