package fleet

// A reserved task, untyped (Task[T] is one with its payload), and what
// its ends are told of it; the ends themselves are queue_end.go's.

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/fleet-go/fleet/internal/lease"
	"github.com/fleet-go/fleet/internal/mono"
)

// reservation is a reserved task, untyped: what the holder needs to end
// it (its shard's core, id, lease token and clock), and what fleet reads
// of its body. Task[T] is a reservation and its decoded payload; the
// worker's group commit works on reservations.
type reservation struct {
	core    *queueCore // the core of the task's shard
	id      string
	token   string
	body    string          // as stored in :processing:body
	payload json.RawMessage // the body's payload, until decoded
	// attempts, dedup, unique and trace are the body's "attempts",
	// "dedup", "unique_ms" (SubmitOptions.UniqueFor) and "trace".
	attempts int
	dedup    string
	unique   int64
	trace    json.RawMessage
	// The per-task options of the body (SubmitOptions): maxAttempts and
	// timeout (0: the queue's, the worker's), meta, group, and expires,
	// mono.Now past which the task must not start (0: never).
	maxAttempts int
	timeout     time.Duration
	meta        map[string]string
	group       string
	expires     int64
	permit      bool                   // the task holds a GlobalConcurrency permit (its reserve said so): its ack gives it back
	clock       lease.Clock            // the lease: from the send of the reserve or last extend (internal/lease)
	result      atomic.Pointer[[]byte] // SetResult's, as JSON
	// The task's part in flows (flow.go): track is the body's "track", how
	// long its end stays recorded (ms; 0: not tracked); progressed says it
	// set a progress value (progress.go); deps caches its dependencies'
	// outcomes once read (Task.Dependencies).
	track      int64
	progressed atomic.Bool
	deps       atomic.Pointer[[]DependencyState]
}

// Token returns the lease token of this reservation, stored in
// fleet:queue:<name>:processing:lease while it holds.
func (r *reservation) Token() string { return r.token }

// prefix returns the token prefix of the reserve call that took r (its
// token is prefix..i: prefix_of in lib_queue.lua).
func (r *reservation) prefix() string {
	return r.token[:strings.LastIndexByte(r.token, '.')+1]
}

// Deadline returns the end of the lease that this process can prove: the
// time the reserve (or the last successful Extend) was sent, plus the
// lease, on this process's monotonic clock. The server counts the lease
// from when its script ran, a little later, so until Deadline no sweeper
// can have re-queued the task; after it, another worker may be running it.
// Stop working on the task before then, or Extend it.
func (r *reservation) Deadline() time.Time { return r.clock.Deadline() }

// Body returns the task's body as stored in Redis.
func (r *reservation) Body() string { return r.body }

// Metadata returns the task's metadata (SubmitOptions.Metadata), nil when
// it has none. Treat it as read-only.
func (r *reservation) Metadata() map[string]string { return r.meta }

// Group returns the task's group (SubmitOptions.Group), "" for none.
func (r *reservation) Group() string { return r.group }

// expired reports whether the task's ExpiresAt passed: it must not start.
func (r *reservation) expired() bool { return r.expires != 0 && mono.Now() >= r.expires }

// keeps reports whether r's ack does more than a plain one: its dedup key
// held for a unique window, its record kept (QueueOptions.Retention), its
// group's or GlobalConcurrency's permit given back, or its end passed on
// (a tracked task, or one that set a progress value: flowFlags).
func (r *reservation) keeps() bool {
	return (r.unique > 0 && r.dedup != "") || r.core.opts.Retention > 0 || r.group != "" || r.permit || r.track > 0 || r.progressed.Load()
}

// retention is how long r's ack keeps its record: the queue's Retention,
// or a tracked task's own, whichever is longer.
func (r *reservation) retention() time.Duration {
	return max(r.core.opts.Retention, time.Duration(r.track)*time.Millisecond)
}

// flowFlags is what the end steps are told of r (flow_ended,
// lib_flow_end.lua): "p" when it set a progress value, then "t<ms>" when
// it is tracked; "" for neither.
func (r *reservation) flowFlags() string {
	s := ""
	if r.progressed.Load() {
		s = "p"
	}
	if r.track > 0 {
		s += "t" + strconv.FormatInt(r.track, 10)
	}
	return s
}

// SetResult sets the task's result, kept with its record when it is acked
// on a queue with QueueOptions.Retention (without it, nothing is kept). v
// is encoded as JSON now; a later call replaces it. May return
// ErrInvalidArgument (v does not encode, or is over MaxPayloadBytes).
func (r *reservation) SetResult(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return opErr("set result", r.core.name, fmt.Errorf("%w: cannot encode %T as JSON: %w", ErrInvalidArgument, v, err))
	}
	if len(b) > r.core.opts.MaxPayloadBytes {
		return opErr("set result", r.core.name, fmt.Errorf("%w: result of %d bytes, more than MaxPayloadBytes %d", ErrInvalidArgument, len(b), r.core.opts.MaxPayloadBytes))
	}
	r.result.Store(&b)
	return nil
}

// TraceContext returns the trace context that the task's body carries
// (its optional "trace" field, written at submit by an Observer such as
// fleetotel's; SCHEMA.md), such as {"traceparent": "00-..."}: what a
// handler needs to link work it hands on to the submit's trace. It returns
// nil when the body has none, or when the field is not an object of
// strings. Each call returns a new map.
func (r *reservation) TraceContext() map[string]string { return decodeTrace(r.trace) }
