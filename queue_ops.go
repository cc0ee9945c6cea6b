package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

var (
	queueDeadRequeueScript = script("queue_dead_requeue.lua")
	queueDeadPurgeScript   = script("queue_dead_purge.lua")
)

// QueueStats counts a queue's tasks by state.
type QueueStats struct {
	// Pending tasks wait on the queue (fleet:queue:<name>).
	Pending int64
	// InFlight tasks are reserved (fleet:queue:<name>:processing).
	InFlight int64
	// Scheduled tasks wait for a retry or a delayed start
	// (fleet:queue:<name>:scheduled).
	Scheduled int64
	// Dead letters (fleet:queue:<name>:dead).
	Dead int64
}

// Stats counts the queue's tasks, in one round trip. May return
// ErrWrongType, ErrUnavailable.
func (q *Queue[T]) Stats(ctx context.Context) (QueueStats, error) {
	var s QueueStats
	if err := q.ready(ctx); err != nil {
		return s, queueErr("stats", q.name, err)
	}
	c := q.f.client
	res := c.DoMulti(ctx,
		c.B().Llen().Key(q.k.Pending).Build(),
		c.B().Zcard().Key(q.k.Processing).Build(),
		c.B().Zcard().Key(q.k.Scheduled).Build(),
		c.B().Llen().Key(q.k.Dead).Build(),
	)
	for i, p := range []*int64{&s.Pending, &s.InFlight, &s.Scheduled, &s.Dead} {
		n, err := res[i].AsInt64()
		if err != nil {
			return QueueStats{}, queueErr("stats", q.name, err)
		}
		*p = n
	}
	return s, nil
}

// DeadLetter is one entry of a queue's dead letters.
type DeadLetter struct {
	// ID is the task's id; empty for poison that had none.
	ID string
	// Payload is the task's payload as stored (JSON).
	Payload json.RawMessage
	// Attempts counts the failed runs.
	Attempts int
	// Error says why the task died: its last error, or why it is poison.
	Error string
	// DeadAt is when it died (zero when unknown).
	DeadAt time.Time
	// Raw is the entry exactly as stored: the task's body with "error" and
	// "dead_at" added, or {"body": <raw body>, "error", "dead_at"} for
	// poison that was not a task.
	Raw string
}

// Poison reports whether the entry is poison that cannot be re-queued.
func (d DeadLetter) Poison() bool { return d.ID == "" }

func parseDead(raw string) DeadLetter {
	d := DeadLetter{Raw: raw}
	var w struct {
		ID       string          `json:"id"`
		Payload  json.RawMessage `json:"payload"`
		Attempts int             `json:"attempts"`
		Error    string          `json:"error"`
		DeadAt   float64         `json:"dead_at"`
	}
	if json.Unmarshal([]byte(raw), &w) != nil {
		// Written by another client, perhaps: keep what we can.
		if b, err := parseBody(raw); err == nil {
			d.ID, d.Payload, d.Attempts = b.ID, b.Payload, b.Attempts
		}
		return d
	}
	d.ID, d.Payload, d.Attempts, d.Error = w.ID, w.Payload, w.Attempts, w.Error
	if w.DeadAt > 0 {
		d.DeadAt = time.UnixMilli(int64(w.DeadAt * 1000))
	}
	return d
}

// DeadLetters lists up to count dead letters from offset, oldest first.
// May return ErrInvalidArgument, ErrWrongType, ErrUnavailable.
func (q *Queue[T]) DeadLetters(ctx context.Context, offset, count int) ([]DeadLetter, error) {
	if err := q.ready(ctx); err != nil {
		return nil, queueErr("dead letters", q.name, err)
	}
	if offset < 0 || count < 0 {
		return nil, queueErr("dead letters", q.name, fmt.Errorf("%w: offset %d and count %d may not be negative", ErrInvalidArgument, offset, count))
	}
	if count == 0 {
		return nil, nil
	}
	raws, err := q.deadRange(ctx, offset, offset+count-1)
	if err != nil {
		return nil, queueErr("dead letters", q.name, err)
	}
	out := make([]DeadLetter, len(raws))
	for i, r := range raws {
		out[i] = parseDead(r)
	}
	return out, nil
}

func (q *Queue[T]) deadRange(ctx context.Context, from, to int) ([]string, error) {
	c := q.f.client
	return c.Do(ctx, c.B().Lrange().Key(q.k.Dead).Start(int64(from)).Stop(int64(to)).Build()).AsStrSlice()
}

// revived returns the body that a dead letter goes back on the queue as:
// attempts reset, "error" and "dead_at" dropped, the rest as it was.
func revived(d DeadLetter) (string, bool) {
	if d.Poison() {
		return "", false
	}
	b, err := rewriteBody(d.Raw, map[string]any{"attempts": 0, "error": nil, "dead_at": nil})
	return b, err == nil
}

// RequeueDead puts the dead letter of task id back at the tail of the queue,
// with its attempts reset. May return ErrNotDead (no such dead letter, or
// poison that cannot be re-queued), ErrWrongType, ErrUnavailable.
func (q *Queue[T]) RequeueDead(ctx context.Context, id string) error {
	if err := q.ready(ctx); err != nil {
		return queueErr("requeue dead", q.name, err)
	}
	raws, err := q.deadRange(ctx, 0, -1)
	if err != nil {
		return queueErr("requeue dead", q.name, err)
	}
	for _, r := range raws {
		d := parseDead(r)
		if d.ID != id {
			continue
		}
		body, ok := revived(d)
		if !ok {
			break
		}
		n, err := queueDeadRequeueScript.Exec(ctx, q.f.client, []string{q.k.Dead, q.k.Pending}, []string{r, body}).AsInt64()
		if err != nil {
			return queueErr("requeue dead", q.name, err)
		}
		if n == 1 {
			q.wakeLocal()
			return nil
		}
	}
	return queueErr("requeue dead", q.name, fmt.Errorf("%w: task %q", ErrNotDead, id))
}

// RequeueAllDead puts every dead letter that is a task back on the queue,
// oldest first, attempts reset; poison stays. It returns how many moved.
// May return ErrWrongType, ErrUnavailable.
func (q *Queue[T]) RequeueAllDead(ctx context.Context) (int, error) {
	if err := q.ready(ctx); err != nil {
		return 0, queueErr("requeue dead", q.name, err)
	}
	raws, err := q.deadRange(ctx, 0, -1)
	if err != nil {
		return 0, queueErr("requeue dead", q.name, err)
	}
	moved := 0
	var args []string
	flush := func() error {
		if len(args) == 0 {
			return nil
		}
		n, err := queueDeadRequeueScript.Exec(ctx, q.f.client, []string{q.k.Dead, q.k.Pending}, args).AsInt64()
		moved += int(n)
		args = args[:0]
		return err
	}
	for _, r := range raws {
		if body, ok := revived(parseDead(r)); ok {
			args = append(args, r, body)
		}
		if len(args) >= 1000 {
			if err := flush(); err != nil {
				return moved, queueErr("requeue dead", q.name, err)
			}
		}
	}
	if err := flush(); err != nil {
		return moved, queueErr("requeue dead", q.name, err)
	}
	if moved > 0 {
		q.wakeLocal()
	}
	return moved, nil
}

// PurgeDead deletes every dead letter and returns how many there were. May
// return ErrWrongType, ErrUnavailable.
func (q *Queue[T]) PurgeDead(ctx context.Context) (int64, error) {
	if err := q.ready(ctx); err != nil {
		return 0, queueErr("purge dead", q.name, err)
	}
	n, err := queueDeadPurgeScript.Exec(ctx, q.f.client, []string{q.k.Dead}, nil).AsInt64()
	return n, queueErr("purge dead", q.name, err)
}
