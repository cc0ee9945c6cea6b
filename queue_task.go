package fleet

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// Task is a reserved task: the payload and the lease that only its holder
// can end. End it with exactly one of Ack, Nack or DeadLetter before Deadline, or
// Extend the lease. Its methods are safe for concurrent use.
type Task[T any] struct {
	// ID is the task's id, stable across retries.
	ID string
	// Payload is the task's payload.
	Payload T
	// Attempts counts the earlier runs of the task that failed (nacks, and
	// leases that ran out): 0 on the first delivery.
	Attempts int

	q      *Queue[T]
	token  string
	dedup  string
	unique int64                  // the body's "unique_ms": SubmitOptions.UniqueFor
	body   string                 // as stored in :processing:body
	trace  json.RawMessage        // the body's "trace", for TaskInfo.Trace
	clock  leaseClock             // the lease: from the send of the reserve or last extend (lease.go)
	result atomic.Pointer[[]byte] // SetResult's, as JSON
}

// Token returns the lease token of this reservation, stored in
// fleet:queue:<name>:processing:lease while it holds.
func (t *Task[T]) Token() string { return t.token }

// Deadline returns the end of the lease that this process can prove: the
// time the reserve (or the last successful Extend) was sent, plus the
// lease, on this process's monotonic clock. The server counts the lease
// from when its script ran, a little later, so until Deadline no sweeper
// can have re-queued the task; after it, another worker may be running it.
// Stop working on the task before then, or Extend it.
func (t *Task[T]) Deadline() time.Time { return t.clock.deadline() }

// Body returns the task's body as stored in Redis.
func (t *Task[T]) Body() string { return t.body }

// wireBody is the part of a body that fleet reads.
type wireBody struct {
	ID       string          `json:"id"`
	Payload  json.RawMessage `json:"payload"`
	Attempts int             `json:"attempts"`
	Dedup    string          `json:"dedup"`
	UniqueMS int64           `json:"unique_ms"`
	Trace    json.RawMessage `json:"trace"` // the submit's trace context (observe.go)
}

func parseBody(body string) (wireBody, error) {
	var w wireBody
	if err := json.Unmarshal([]byte(body), &w); err != nil {
		return w, fmt.Errorf("body is not a task: %w", err)
	}
	if w.ID == "" {
		return w, errors.New("body has no usable id")
	}
	if w.Attempts < 0 {
		w.Attempts = 0
	}
	return w, nil
}

// rewriteBody returns body with fields set (nil deletes one). Fields that
// fleet does not know are kept; the payload keeps its bytes.
func rewriteBody(body string, set map[string]any) (string, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(body), &m); err != nil {
		return "", err
	}
	for k, v := range set {
		if v == nil {
			delete(m, k)
			continue
		}
		b, err := json.Marshal(v)
		if err != nil {
			return "", err
		}
		m[k] = b
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(m); err != nil {
		return "", err
	}
	return strings.TrimSuffix(buf.String(), "\n"), nil
}

// deadEntry is a body as it goes to the dead letters, but for "dead_at",
// which the script appends from the server's clock: the task's fields,
// attempts counted, plus "error".
func deadEntry(body string, attempts int, cause string) string {
	s, err := rewriteBody(body, map[string]any{"attempts": attempts, "error": cause, "dead_at": nil})
	if err != nil || s == "{}" {
		// Not a JSON object (or an empty one): keep the raw body inside a
		// wrapper, the shape that queue_reserve gives poison.
		b, _ := json.Marshal(map[string]any{"body": body, "error": cause})
		return string(b)
	}
	return s
}

// Ack ends the reservation: the task is done and leaves Redis (its body, its
// lease and its dedup key). May return ErrLeaseLost (the deadline passed
// and the task was re-queued; nothing changes), ErrUnavailable.
func (t *Task[T]) Ack(ctx context.Context) error {
	q := t.q
	if err := q.ready(ctx); err != nil {
		return opErr("ack", q.name, err)
	}
	if !q.plainAck(t) {
		err := t.ackKeep(ctx)
		q.f.taskEnded(ctx, q.name, t.ID, TaskProcessed, err == nil)
		return opErr("ack", q.name, err)
	}
	n, err := queueAckScript.Exec(ctx, q.f.client, []string{q.k.Processing, q.k.Body, q.k.Lease, q.k.Dedup},
		[]string{t.ID, t.token, t.dedup}).AsInt64()
	if err == nil && n != 1 {
		err = fmt.Errorf("%w: task %s", ErrLeaseLost, t.ID)
	}
	q.f.taskEnded(ctx, q.name, t.ID, TaskProcessed, err == nil)
	return opErr("ack", q.name, err)
}

// plainAck reports whether t's ack is the plain one (queue_ack.lua, also
// run by a worker slot's ack-and-take): not when its dedup key is held for
// a window after it, nor when the queue retains done tasks.
func (q *Queue[T]) plainAck(t *Task[T]) bool {
	return (t.unique == 0 || t.dedup == "") && q.opts.Retention <= 0
}

// Nack ends the reservation as failed with cause: the attempt is counted
// and the task is retried after the backoff (through :scheduled), or goes
// to the dead letters with cause once it has failed MaxAttempts times. The
// attempts and the backoff follow the queue's stored policy (see
// QueuePolicy), the same in every process. A task that Queue.Cancel asked
// to stop goes to the dead letters at once, as cancelled (ErrCanceled's
// text, then cause), never retried. May return ErrLeaseLost
// (nothing changes), ErrUnavailable.
func (t *Task[T]) Nack(ctx context.Context, cause error) error {
	msg := "nacked"
	if cause != nil {
		msg = cause.Error()
	}
	return opErr("nack", t.q.name, t.end(ctx, "nack", t.Attempts+1, msg, false))
}

// DeadLetter ends the reservation and moves the task to the dead letters at
// once, with cause: for failures that no retry can fix. A dead letter can be
// re-queued (Fleet.RequeueDead), unlike a pool item marked bad. May return
// ErrLeaseLost (nothing changes), ErrUnavailable.
func (t *Task[T]) DeadLetter(ctx context.Context, cause error) error {
	msg := "dead-lettered"
	if cause != nil {
		msg = cause.Error()
	}
	return opErr("dead-letter", t.q.name, t.end(ctx, "dead-letter", t.Attempts+1, msg, true))
}

func (t *Task[T]) end(ctx context.Context, op string, attempts int, cause string, bury bool) error {
	q := t.q
	if err := q.ready(ctx); err != nil {
		return err
	}
	body, err := rewriteBody(t.body, map[string]any{"attempts": attempts, "error": cause, "dead_at": nil})
	if err != nil || body == "{}" {
		body = deadEntry(t.body, attempts, cause) // not a task: it can only be buried
		bury = true
	}
	flag := "0"
	if bury {
		flag = "1"
	}
	// The dead letter should Queue.Cancel have asked the task to stop: its
	// error says so first (Lookup: canceled). body already does when the
	// cause is a cancel ("-"); else the script asks for it ({2, 0}), and
	// only then is it made.
	already := strings.HasPrefix(cause, ErrCanceled.Error())
	o := q.opts
	keys := []string{q.k.Processing, q.k.Body, q.k.Lease, q.k.Scheduled, q.k.Dead, q.k.Dedup, q.k.Policy}
	args := []string{t.ID, t.token, body, strconv.Itoa(attempts), flag, t.dedup,
		strconv.Itoa(o.MaxAttempts), millis(o.BackoffBase), millis(o.BackoffMax), strconv.Itoa(o.DeadMax),
		strconv.FormatFloat(rand.Float64(), 'f', 6, 64), ""}
	res, err := withCanceledEntry(func(entry string) ([]int64, error) {
		if entry == "" && already {
			entry = "-"
		}
		args[len(args)-1] = entry
		return queueNackScript.Exec(ctx, q.f.client, keys, args).AsIntSlice()
	}, func(res []int64) bool { return len(res) == 2 && res[0] == 2 },
		func() string { return deadEntry(t.body, attempts, ErrCanceled.Error()+": "+cause) })
	if err != nil {
		return err
	}
	if len(res) != 2 {
		return unexpectedReply(op, len(res))
	}
	if res[0] != 1 {
		return fmt.Errorf("%w: task %s", ErrLeaseLost, t.ID)
	}
	q.f.taskEnded(ctx, q.name, t.ID, nackOutcome(res[1]), true)
	if res[1] >= 0 {
		q.look.soon() // a retry waits in :scheduled now
	}
	return nil
}

// Extend sets the lease to run out lease from now (server clock), and moves
// Deadline to lease after the call was sent. A lease whose deadline passed
// can still be extended while the sweeper has not re-queued the task.
//
// May return ErrInvalidArgument for lease <= 0, ErrLeaseLost (nothing
// changes), ErrUnavailable, and ErrCanceled when Queue.Cancel asked for the
// task to stop: the lease was extended all the same, so that the holder
// can wind down, and the task should end (a worker dead-letters it).
func (t *Task[T]) Extend(ctx context.Context, lease time.Duration) error {
	q := t.q
	if err := q.ready(ctx); err != nil {
		return opErr("extend", q.name, err)
	}
	if lease <= 0 {
		return opErr("extend", q.name, fmt.Errorf("%w: lease %v must be > 0", ErrInvalidArgument, lease))
	}
	sent := monoNow()
	d, err := queueExtendScript.Exec(ctx, q.f.client, []string{q.k.Processing, q.k.Lease},
		[]string{t.ID, t.token, millis(lease)}).AsInt64()
	if err == nil && d == 0 {
		err = fmt.Errorf("%w: task %s", ErrLeaseLost, t.ID)
	}
	if err != nil {
		return opErr("extend", q.name, err)
	}
	t.clock.prove(sent, lease)
	if d < 0 {
		return opErr("extend", q.name, fmt.Errorf("%w: task %s was cancelled (Queue.Cancel); its lease was extended", ErrCanceled, t.ID))
	}
	return nil
}
