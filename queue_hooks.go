package fleet

import "context"

// queueHooks is how the queue engine (queue_core.go, queue_end.go) tells
// the layers above it what became of the tasks it ended, without knowing
// them: the flows (flow_drive.go) pass a tracked task's end on, and the
// history and the Observer count it (history.go, observe.go). Open wires
// them (open.go: Fleet.hooks); a nil hook is skipped. Every end of a
// task's run reaches them through this one place.
type queueHooks struct {
	// acked is told of the acks an ack step made, as its reply comes
	// (before the caller hears of it, and even when the caller's ctx
	// ended meanwhile): codes[i] is acks[i]'s, endDone when acked; codes
	// is nil when the reply said nothing of them. It runs on the call's
	// goroutine and must not block.
	acked func(acks []*reservation, codes []endCode)
	// ended is told of each end of a task's run that a caller of this
	// process made (an ack, a retry, a dead letter), with the caller's
	// ctx, once the caller knows how it went: ok when it took effect.
	ended func(ctx context.Context, r *reservation, outcome TaskOutcome, ok bool)
}

// acked calls the acked hook.
func (q *queueCore) acked(acks []*reservation, codes []endCode) {
	if h := q.fleet.hooks.acked; h != nil && len(acks) > 0 {
		h(acks, codes)
	}
}

// ended calls the ended hook.
func (q *queueCore) ended(ctx context.Context, r *reservation, outcome TaskOutcome, ok bool) {
	if h := q.fleet.hooks.ended; h != nil {
		h(ctx, r, outcome, ok)
	}
}
