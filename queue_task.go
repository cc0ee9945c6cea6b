package fleet

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/fleet-go/fleet/internal/engine"
)

// Task is a reserved task: the payload and the lease that only its holder
// can end. End it with exactly one of Ack, Nack, DeadLetter, Release or
// Snooze before Deadline, or Extend the lease. Reserve and the workers make
// Tasks; the zero Task is not one. Its methods are safe for concurrent use.
type Task[T any] struct {
	// ID is the task's id, stable across retries.
	ID string
	// Payload is the task's payload.
	Payload T
	// Attempts counts the earlier runs of the task that failed (nacks, and
	// leases that ran out): 0 on the first delivery.
	Attempts int

	reservation // the lease, and the end of the reservation (reservation.go)
}

// decode makes the typed task of r: its payload decoded into T and
// validated (opened first, when it is sealed). A payload that does not is
// poison, which decode buries under
// r's lease, uncounted (so that it never loops), returning nil and what
// the burial returned.
func (q *Queue[T]) decode(ctx context.Context, r *engine.Reservation) (*Task[T], error) {
	t := &Task[T]{ID: r.ID(), Attempts: r.Attempts(), reservation: reservation{r: r, core: q.sub(r.Queue().Shard())}}
	payload, err := open(q.opts.Sealer, q.name, sealPayload, r.TakePayload())
	if len(payload) == 0 && err == nil {
		payload = json.RawMessage("null")
	}
	if err != nil {
		// A key this process lacks, or an altered body: it would fail in
		// every run, so it is poison too.
		err = fmt.Errorf("payload does not open: %w", err)
	} else if err = json.Unmarshal(payload, &t.Payload); err != nil {
		err = fmt.Errorf("payload does not decode into %T: %w", t.Payload, err)
	} else if err = q.validate(t.Payload); err != nil {
		err = within("payload no longer validates", err)
	}
	if err != nil {
		return nil, r.Bury(ctx, err.Error())
	}
	return t, nil
}

// decodeAll decodes rs (decode): the tasks, and the last burial's error
// when none was left.
func (q *Queue[T]) decodeAll(ctx context.Context, rs []*engine.Reservation) ([]*Task[T], error) {
	tasks := make([]*Task[T], 0, len(rs))
	var buryErr error
	for _, r := range rs {
		t, err := q.decode(ctx, r)
		if t != nil {
			tasks = append(tasks, t)
		} else if err != nil {
			buryErr = err
		}
	}
	if len(tasks) > 0 {
		buryErr = nil
	}
	return tasks, buryErr
}
