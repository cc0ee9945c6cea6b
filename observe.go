package fleet

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/fleet-go/fleet/internal/keys"
)

// Observer is told what a Fleet does, for metrics and tracing: set it in
// Options.Observer (the fleetotel package builds one over OpenTelemetry).
// Each field is a hook that the Fleet calls when it is set; a nil field
// costs nothing, and so does a nil Observer. Hooks run in the caller's
// goroutine, on the hot path: they must be fast and safe for concurrent
// use, and must not call back into the Fleet. New hooks are added as new
// fields, so an Observer built today keeps compiling.
//
// Handler runs (their duration, their trace spans) are seen through
// WorkerOptions.Middleware, whose TaskInfo carries the task's trace
// context.
type Observer struct {
	// Submit is called once per Submit, SubmitMany, SubmitWith and
	// SubmitJSON, after the payloads validated and before the tasks are
	// written. It returns the trace context to carry in each new task's
	// body, as the optional "trace" object (SCHEMA.md); nil or empty writes
	// no field. It may return a func that the submit calls once with its
	// outcome: how many tasks it wrote (a duplicate of a live dedup key
	// writes none) and its error. A scheduler (RunScheduler) reports the
	// tasks of a schedule's ticks the same way, with SubmitEvent.Schedule
	// set: each process that runs a scheduler tries each tick, and the one
	// whose try wrote the task reports written 1, the others 0.
	Submit func(ctx context.Context, e SubmitEvent) (trace map[string]string, done func(written int, err error))
	// TaskEnded is called for each task that a call of this Fleet ended:
	// acked (Task.Ack, or a worker's ack), retried or dead-lettered
	// (Task.Nack, Task.DeadLetter, a cancel, a poisoned body at reserve). A
	// lease that runs out is ended by a sweeper, and reported to Swept.
	TaskEnded func(ctx context.Context, e TaskEndEvent)
	// Swept is called after a sweep (RunSweeper, Sweep) of a queue changed
	// something, with what it did: the leases that ran out, re-queued or
	// dead-lettered, and the scheduled tasks it moved and the dead letters
	// it trimmed. Counts, not ids: a sweep handles tasks in batches.
	Swept func(ctx context.Context, e SweepEvent)
	// LockWaited is called when Lock.Acquire (and so Lock.Do) returns,
	// with how long it took.
	LockWaited func(ctx context.Context, e LockWaitEvent)
	// ClaimWaited is called when a pool's Claim (and so Do) returns, with
	// how long it took.
	ClaimWaited func(ctx context.Context, e ClaimWaitEvent)
}

// SubmitEvent is what Observer.Submit sees of a submit.
type SubmitEvent struct {
	// Queue is the queue's name.
	Queue string
	// IDs are the ids of the new tasks, in order.
	IDs []string
	// NotBefore is SubmitOptions.NotBefore (zero: ready at once).
	NotBefore time.Time
	// DedupKey is SubmitOptions.DedupKey.
	DedupKey string
	// Schedule names the schedule (AddSchedule) whose ticks these tasks
	// are, when a scheduler submits them; "" for a Submit call.
	Schedule string
}

// SweepEvent is what Observer.Swept sees of a sweep of one queue.
type SweepEvent struct {
	// Queue is the queue's name.
	Queue string
	// Requeued counts the reservations whose lease ran out that went back
	// on the queue for another attempt.
	Requeued int
	// DeadLettered counts the reservations whose lease ran out that went
	// to the dead letters (no attempts left, or a body that is not a task).
	DeadLettered int
	// Moved counts the due scheduled tasks moved onto the queue.
	Moved int
	// Trimmed counts the dead letters dropped by the queue's bounds.
	Trimmed int
}

// TaskOutcome is how a task's run ended.
type TaskOutcome int

// The outcomes of Observer.TaskEnded.
const (
	// TaskProcessed: acked, done.
	TaskProcessed TaskOutcome = iota + 1
	// TaskRetried: failed, and scheduled for another attempt.
	TaskRetried
	// TaskDeadLettered: failed for good, moved to the dead letters.
	TaskDeadLettered
)

// String names the outcome: "processed", "retried" or "dead_lettered".
func (o TaskOutcome) String() string {
	switch o {
	case TaskProcessed:
		return "processed"
	case TaskRetried:
		return "retried"
	case TaskDeadLettered:
		return "dead_lettered"
	}
	return "unknown"
}

// TaskEndEvent is what Observer.TaskEnded sees of a task's end.
type TaskEndEvent struct {
	// Queue is the queue's name.
	Queue string
	// ID is the task's id.
	ID string
	// Outcome says how the run ended.
	Outcome TaskOutcome
}

// LockWaitEvent is what Observer.LockWaited sees of an acquire.
type LockWaitEvent struct {
	// Lock is the lock's name.
	Lock string
	// Wait is how long Acquire took.
	Wait time.Duration
	// Obtained says whether it took the lock.
	Obtained bool
	// Err is Acquire's error: ErrNotObtained when the wait ran out.
	Err error
}

// ClaimWaitEvent is what Observer.ClaimWaited sees of a claim.
type ClaimWaitEvent struct {
	// Pool is the pool's name.
	Pool string
	// Wait is how long Claim took.
	Wait time.Duration
	// Claimed says whether it claimed an item (none is not an error).
	Claimed bool
	// Err is Claim's error.
	Err error
}

// swept tells the Observer what a sweep of queue did, when it did
// anything.
func (f *Fleet) swept(ctx context.Context, e SweepEvent) {
	if f.obs != nil && f.obs.Swept != nil && e.Requeued+e.DeadLettered+e.Moved+e.Trimmed > 0 {
		f.obs.Swept(ctx, e)
	}
}

// TraceContext returns the trace context that the task's body carries
// (its optional "trace" field, written at submit by an Observer such as
// fleetotel's; SCHEMA.md), such as {"traceparent": "00-..."}: what a
// handler needs to link work it hands on to the submit's trace. It returns
// nil when the body has none, or when the field is not an object of
// strings. Each call returns a new map.
func (t *Task[T]) TraceContext() map[string]string { return decodeTrace(t.trace) }

// obsStart returns the time to measure a wait from: 0 without an
// Observer, so that nothing reads the clock when none is installed.
func (f *Fleet) obsStart() int64 {
	if f.obs == nil {
		return 0
	}
	return monoNow()
}

// observeSubmit tells the Observer of a submit of ids to queue, adds the
// trace context it returns to bodies (in place) and returns the func to
// call with the outcome (never nil). Without an Observer it does nothing.
func (f *Fleet) observeSubmit(ctx context.Context, queue string, ids, bodies []string, notBefore time.Time, dedup string) submitDone {
	if f.obs == nil { // inlined: without an Observer, this check is all
		return nil
	}
	return f.observeSubmitSlow(ctx, SubmitEvent{Queue: queue, IDs: ids, NotBefore: notBefore, DedupKey: dedup}, bodies)
}

// observeSubmitSlow tells the Observer of submit e, and adds the trace
// context it returns to bodies (in place).
func (f *Fleet) observeSubmitSlow(ctx context.Context, e SubmitEvent, bodies []string) submitDone {
	if f.obs.Submit == nil {
		return nil
	}
	tr, done := f.obs.Submit(ctx, e)
	if field := traceField(tr); field != "" {
		for i, b := range bodies {
			bodies[i] = b[:len(b)-1] + field + "}"
		}
	}
	return done
}

// observeSubmitOne is observeSubmit for one task, whose body it rewrites
// in place.
func (f *Fleet) observeSubmitOne(ctx context.Context, queue, id string, body *string, notBefore time.Time, dedup string) submitDone {
	if f.obs == nil {
		return nil
	}
	return f.observeSubmitOneSlow(ctx, queue, id, body, notBefore, dedup)
}

func (f *Fleet) observeSubmitOneSlow(ctx context.Context, queue, id string, body *string, notBefore time.Time, dedup string) submitDone {
	if f.obs.Submit == nil {
		return nil
	}
	bodies := []string{*body}
	done := f.observeSubmitSlow(ctx, SubmitEvent{Queue: queue, IDs: []string{id}, NotBefore: notBefore, DedupKey: dedup}, bodies)
	*body = bodies[0]
	return done
}

// boolInt is 1 for true, 0 for false.
func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// submitDone reports a submit's outcome to the Observer; nil does nothing.
type submitDone func(written int, err error)

func (d submitDone) call(written int, err error) {
	if d != nil {
		d(written, err)
	}
}

// traceField spells the body field `,"trace":{...}` for a trace context,
// or "" for none. Keys are sorted, as encoding/json sorts them.
func traceField(tr map[string]string) string {
	if len(tr) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString(`,"trace":{`)
	if len(tr) == 1 { // the usual traceparent alone: nothing to sort
		for k, v := range tr {
			writeJSONString(&b, k)
			b.WriteByte(':')
			writeJSONString(&b, v)
		}
		b.WriteByte('}')
		return b.String()
	}
	for i, k := range slices.Sorted(maps.Keys(tr)) {
		if i > 0 {
			b.WriteByte(',')
		}
		writeJSONString(&b, k)
		b.WriteByte(':')
		writeJSONString(&b, tr[k])
	}
	b.WriteByte('}')
	return b.String()
}

// writeJSONString writes s as a JSON string: as it is when it is printable
// ASCII without quotes or backslashes (a traceparent always is), else as
// encoding/json spells it.
func writeJSONString(b *strings.Builder, s string) {
	if htmlSafeASCII(s) {
		b.WriteByte('"')
		b.WriteString(s)
		b.WriteByte('"')
		return
	}
	q, _ := json.Marshal(s) // a string always encodes
	b.Write(q)
}

// htmlSafeASCII reports whether s needs no escaping in a JSON string, nor
// any in encoding/json's HTML-safe form.
func htmlSafeASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}

// decodeTrace reads a body's "trace" field: nil when it is missing or is
// not an object of strings.
func decodeTrace(raw json.RawMessage) map[string]string {
	if len(raw) == 0 {
		return nil
	}
	m, ok := decodeFlat(raw)
	if !ok && json.Unmarshal(raw, &m) != nil {
		return nil
	}
	if len(m) == 0 {
		return nil
	}
	return m
}

// decodeFlat reads {"k":"v",...} spelled as traceField spells it: no white
// space, no escapes, ASCII. Anything else is not ok, for encoding/json to
// read (or refuse).
func decodeFlat(b []byte) (map[string]string, bool) {
	if len(b) < 2 || b[0] != '{' || b[len(b)-1] != '}' {
		return nil, false
	}
	b = b[1 : len(b)-1]
	m := make(map[string]string, 2)
	for len(b) > 0 {
		k, rest, ok := flatString(b)
		if !ok || len(rest) == 0 || rest[0] != ':' {
			return nil, false
		}
		v, rest, ok := flatString(rest[1:])
		if !ok {
			return nil, false
		}
		m[k] = v
		if len(rest) == 0 {
			break
		}
		if rest[0] != ',' || len(rest) == 1 {
			return nil, false
		}
		b = rest[1:]
	}
	return m, true
}

// flatString reads a JSON string without escapes at the start of b.
func flatString(b []byte) (string, []byte, bool) {
	if len(b) < 2 || b[0] != '"' {
		return "", nil, false
	}
	for i := 1; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			return string(b[1:i]), b[i+1:], true
		case c == '\\' || c < 0x20 || c > 0x7e:
			return "", nil, false
		}
	}
	return "", nil, false
}

// taskEnded tells the Observer that task id of queue ended with outcome,
// if it did (ok).
func (f *Fleet) taskEnded(ctx context.Context, queue, id string, outcome TaskOutcome, ok bool) {
	if ok && f.obs != nil && f.obs.TaskEnded != nil {
		f.obs.TaskEnded(ctx, TaskEndEvent{Queue: queue, ID: id, Outcome: outcome})
	}
}

// nackOutcome is the outcome that queue_nack.lua's delay reply spells: -1
// when the task went to the dead letters.
func nackOutcome(delay int64) TaskOutcome {
	if delay < 0 {
		return TaskDeadLettered
	}
	return TaskRetried
}

// lockWaited tells the Observer how an acquire of lock that began at start
// (obsStart) went.
func (f *Fleet) lockWaited(ctx context.Context, lock string, start int64, obtained bool, err error) {
	if f.obs != nil {
		f.lockWaitedSlow(ctx, lock, start, obtained, err)
	}
}

func (f *Fleet) lockWaitedSlow(ctx context.Context, lock string, start int64, obtained bool, err error) {
	if f.obs.LockWaited == nil {
		return
	}
	f.obs.LockWaited(ctx, LockWaitEvent{Lock: lock, Wait: time.Duration(monoNow() - start), Obtained: obtained, Err: err})
}

// claimWaited tells the Observer how a claim on pool that began at start
// (obsStart) went.
func (f *Fleet) claimWaited(ctx context.Context, pool string, start int64, claimed bool, err error) {
	if f.obs != nil {
		f.claimWaitedSlow(ctx, pool, start, claimed, err)
	}
}

func (f *Fleet) claimWaitedSlow(ctx context.Context, pool string, start int64, claimed bool, err error) {
	if f.obs.ClaimWaited == nil {
		return
	}
	f.obs.ClaimWaited(ctx, ClaimWaitEvent{Pool: pool, Wait: time.Duration(monoNow() - start), Claimed: claimed, Err: err})
}

// QueueNames returns the names of the queues in the fleet-wide registry
// (fleet:queues), sorted; names that fleet could not have made are left
// out. May return ErrWrongType, ErrUnavailable.
func (f *Fleet) QueueNames(ctx context.Context) ([]string, error) {
	if err := f.alive(ctx); err != nil {
		return nil, opErr("queue names", "", err)
	}
	c := f.client
	names, err := c.Do(ctx, c.B().Smembers().Key(f.keys.Queues()).Build()).AsStrSlice()
	if err != nil {
		return nil, opErr("queue names", f.keys.Queues(), err)
	}
	names = slices.DeleteFunc(names, func(n string) bool { return keys.Check(keys.KindQueue, n) != nil })
	slices.Sort(names)
	return names, nil
}

// copyObserver returns a copy of o (nil for nil), so that a caller's later
// writes to o do not race with the hooks.
func copyObserver(o *Observer) *Observer {
	if o == nil {
		return nil
	}
	c := *o
	return &c
}
