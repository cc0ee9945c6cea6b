package fleet

import "context"

// queueHooks is how the queue engine (queue_core.go, queue_end.go) tells
// the layers above it what became of the tasks it ended, without knowing
// them: the flows (flow_drive.go) pass a tracked task's end on, and the
// history and the Observer count it (history.go, observe.go). Open wires
// them (open.go: Fleet.hooks); a nil hook is skipped. Every end of a
// task's run reaches them through this one place.
type queueHooks struct {
	// acked is told of each task that an ack step acked, as its reply
	// comes (before the caller hears of it, and even when the caller's
	// ctx ended meanwhile). It runs on the call's goroutine and must not
	// block. It takes one reservation, not the call's slice of them: a
	// slice handed to a func value would escape, an allocation per call.
	acked func(r *reservation)
	// ended is told of each end of a task's run that a caller of this
	// process made (an ack, a retry, a dead letter), with the caller's
	// ctx, once the caller knows how it went: ok when it took effect.
	ended func(ctx context.Context, r *reservation, outcome TaskOutcome, ok bool)
}

// acked calls the acked hook for each of acks that its code (codes[i],
// nil when the reply said nothing of them) says was acked.
func (q *queueCore) acked(acks []*reservation, codes []endCode) {
	h := q.fleet.hooks.acked
	if h == nil {
		return
	}
	for i, r := range acks {
		if i < len(codes) && codes[i] == endDone {
			h(r)
		}
	}
}

// ended calls the ended hook.
func (q *queueCore) ended(ctx context.Context, r *reservation, outcome TaskOutcome, ok bool) {
	if h := q.fleet.hooks.ended; h != nil {
		h(ctx, r, outcome, ok)
	}
}
