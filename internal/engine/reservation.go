package engine

// A reserved task, untyped (Task[T] is one with its payload), and what
// its ends are told of it; the ends themselves are end.go's.

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/fleet-go/fleet/internal/lease"
	"github.com/fleet-go/fleet/internal/mono"
)

// Reservation is a reserved task, untyped: what the holder needs to end
// it (its shard's core, id, lease token and clock), and what fleet reads
// of its body. The root's Task[T] is a Reservation and its decoded
// payload; the worker's group commit works on Reservations.
type Reservation struct {
	core    *Queue // the core of the task's shard
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
	gpermit     string                 // the token of the sharded queue's fleet-wide permit it holds (permit.go); "" for none
	clock       lease.Clock            // the lease: from the send of the reserve or last extend (internal/lease)
	result      atomic.Pointer[[]byte] // SetResult's, as JSON
	// What the end steps pass on (lib_flow_end.lua): track is the body's
	// "track", how long the task's end stays recorded (ms; 0: not
	// tracked); progressed says it set a progress value (MarkProgressed).
	track      int64
	progressed atomic.Bool
	// indexed says the body has "mx": its submit added it to the queue's
	// metadata index (QueueOptions.IndexMeta), which its ack removes it
	// from unless its record is kept (ackFlags).
	indexed bool
	// logged says the task may have a log (the root's log.go): its body
	// has "lg" (queue_log.lua wrote one while an earlier reservation held
	// it) or this reservation wrote one (MarkLogged). With its attempts
	// (a failed run may have written one) it tells the ack to delete the
	// log, or keep it as long as the record (ackFlags).
	logged atomic.Bool
	// log is the run's log entry that its ack appends, "<runs>:<entry>"
	// (SetLog); nil for none.
	log atomic.Pointer[string]
	// afterAck is what AfterAck asked to run once an ack step acked the
	// task (hooks.go); nil for none.
	afterAck atomic.Pointer[func()]
}

// ErrExpired is why a task whose SubmitOptions.ExpiresAt passed before
// it started goes to the dead letters.
var ErrExpired = errors.New("expired")

// Queue returns the core of the task's shard.
func (r *Reservation) Queue() *Queue { return r.core }

// ID returns the task's id.
func (r *Reservation) ID() string { return r.id }

// Attempts returns the body's attempts: the earlier runs that failed.
func (r *Reservation) Attempts() int { return r.attempts }

// TakePayload returns the body's payload, once: the reservation lets go
// of it, as the caller decodes it.
func (r *Reservation) TakePayload() json.RawMessage {
	p := r.payload
	r.payload = nil
	return p
}

// Trace returns the body's "trace" field, nil when it has none.
func (r *Reservation) Trace() json.RawMessage { return r.trace }

// Timeout returns the task's own timeout (SubmitOptions.Timeout); 0: the
// worker's.
func (r *Reservation) Timeout() time.Duration { return r.timeout }

// Tracked returns how long the task's end stays recorded, in ms (the
// body's "track"); 0: it is not tracked.
func (r *Reservation) Tracked() int64 { return r.track }

// Clock returns the reservation's lease clock (internal/lease).
func (r *Reservation) Clock() *lease.Clock { return &r.clock }

// AfterAck adds fn to what runs once an ack step acked the task, as the
// reply that says so comes in, on the goroutine that reads it (before the
// acking caller hears of it, and even when that caller's ctx ended
// meanwhile). The funcs run in the order they were added, once at most;
// none runs when the task is not acked (a nack, a lease lost, a reply
// that never came). fn must be fast and must not block.
func (r *Reservation) AfterAck(fn func()) {
	for {
		old := r.afterAck.Load()
		all := fn
		if old != nil {
			prev := *old
			all = func() { prev(); fn() }
		}
		if r.afterAck.CompareAndSwap(old, &all) {
			return
		}
	}
}

// MarkLogged records that the task's log is written to, before the
// write: its ack must delete it or give it the record's lifetime.
func (r *Reservation) MarkLogged() { r.logged.Store(true) }

// SetLog gives r's ack the run's log entry to append to the task's log,
// which keeps its newest runs entries (the root's log.go): for an ack that
// keeps the record, in the ack's own script call. It marks r as logged.
func (r *Reservation) SetLog(runs int, entry []byte) {
	s := strconv.Itoa(runs) + ":" + string(entry)
	r.log.Store(&s)
	r.logged.Store(true)
}

// mayHaveLog reports whether the task may have a log or recorded steps
// (the root's step.go): written while this or an earlier reservation held
// it, or by a run that failed.
func (r *Reservation) mayHaveLog() bool { return r.logged.Load() || r.attempts > 0 }

// MayHaveSteps reports whether the task may have recorded steps (the
// root's step.go): false only for a task that no run marked (its body
// has no "lg", it failed no run), whose steps are known to be none
// without a read.
func (r *Reservation) MayHaveSteps() bool { return r.mayHaveLog() }

// Retention is how long r's ack keeps its record (retention): 0 for
// none.
func (r *Reservation) Retention() time.Duration { return r.retention() }

// MarkProgressed records that the task set a progress value, before the
// value is written: its end step deletes it.
func (r *Reservation) MarkProgressed() { r.progressed.Store(true) }

// Token returns the lease token of this reservation, stored in
// fleet:queue:<name>:processing:lease while it holds.
func (r *Reservation) Token() string { return r.token }

// prefix returns the token prefix of the reserve call that took r (its
// token is prefix..i: prefix_of in lib_queue.lua).
func (r *Reservation) prefix() string {
	return r.token[:strings.LastIndexByte(r.token, '.')+1]
}

// Deadline returns the end of the lease that this process can prove: the
// time the reserve (or the last successful Extend) was sent, plus the
// lease, on this process's monotonic clock. The server counts the lease
// from when its script ran, a little later, so until Deadline no sweeper
// can have re-queued the task; after it, another worker may be running it.
// Stop working on the task before then, or Extend it.
func (r *Reservation) Deadline() time.Time { return r.clock.Deadline() }

// Body returns the task's body as stored in Redis.
func (r *Reservation) Body() string { return r.body }

// Metadata returns the task's metadata (SubmitOptions.Metadata), nil when
// it has none. Treat it as read-only.
func (r *Reservation) Metadata() map[string]string { return r.meta }

// Group returns the task's group (SubmitOptions.Group), "" for none.
func (r *Reservation) Group() string { return r.group }

// Expired reports whether the task's ExpiresAt passed: it must not start.
func (r *Reservation) Expired() bool { return r.expires != 0 && mono.Now() >= r.expires }

// keeps reports whether r's ack does more than a plain one: its dedup key
// held for a unique window, its record kept (QueueOptions.Retention), its
// group's or GlobalConcurrency's permit given back, or its end passed on
// (a tracked task, or one that set a progress value: flowFlags).
func (r *Reservation) keeps() bool {
	return (r.unique > 0 && r.dedup != "") || r.core.opts.Retention > 0 || r.group != "" || r.permit || r.track > 0 || r.progressed.Load() || r.indexed || r.mayHaveLog()
}

// retention is how long r's ack keeps its record: the queue's Retention,
// or a tracked task's own, whichever is longer.
func (r *Reservation) retention() time.Duration {
	return max(r.core.opts.Retention, time.Duration(r.track)*time.Millisecond)
}

// flowFlags is what the end steps are told of r (flow_ended,
// lib_flow_end.lua): "p" when it set a progress value, then "t<ms>" when
// it is tracked; "" for neither.
func (r *Reservation) flowFlags() string {
	s := ""
	if r.progressed.Load() {
		s = "p"
	}
	if r.track > 0 {
		s += "t" + strconv.FormatInt(r.track, 10)
	}
	return s
}

// ackFlags is what an ack step is told of r (ack_all, lib_queue.lua):
// "m" first when the ack drops it from the metadata index (it is indexed
// and its ack keeps no record, which Lookup and FindByMeta would show),
// then "l" when it may have a log (deleted, or kept as long as the
// record), then flowFlags.
func (r *Reservation) ackFlags() string {
	s := ""
	if r.indexed && r.retention() == 0 {
		s = "m"
	}
	if r.mayHaveLog() {
		s += "l"
	}
	return s + r.flowFlags()
}

// SetResult sets the task's result, kept with its record when it is acked
// with a retention (Options.Retention, or a tracked task's own). b is the
// result as JSON (as stored: sealed, when the queue seals); a later call
// replaces it. The caller bounds it (the root: by MaxPayloadBytes before
// sealing).
func (r *Reservation) SetResult(b []byte) error {
	r.result.Store(&b)
	return nil
}

// WithToken returns a reservation of r's task that holds token instead of
// r's lease token (and no lease clock): a holder whose reservation is not
// the one that exists, as the root's tests of lost leases make one.
func (r *Reservation) WithToken(token string) *Reservation {
	return &Reservation{core: r.core, id: r.id, token: token, body: r.body, dedup: r.dedup}
}
