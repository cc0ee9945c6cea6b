package fleet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/fleet-go/fleet/internal/engine"
	"github.com/fleet-go/fleet/internal/fault"
	"github.com/fleet-go/fleet/internal/keys"
)

// Every error of fleet lives here: the sentinels that errors.Is can test,
// grouped by primitive, the error types that carry data, and opErr, the one
// wrapper that every call puts around what it returns. A call wraps a
// sentinel with what went wrong and keeps the cause (a Redis error, a
// network error, ctx.Err()) in the chain too. Every "not found" is
// Err<Noun>NotFound, and each of them is also ErrNotFound.

// Errors of every primitive.
var (
	// ErrClosed is returned by calls on a Fleet after Close.
	ErrClosed = fault.Closed
	// ErrInvalidName is returned for a name that is empty, too long, or holds
	// '{', '}', white space, a control character, or a separator its place
	// in a key forbids. The message names the bad name.
	ErrInvalidName = keys.ErrInvalidName
	// ErrInvalidArgument is returned for an argument out of range, such as a
	// lock hold <= 0 or a negative TTL. The message names the argument.
	ErrInvalidArgument = fault.InvalidArgument
	// ErrInvalidOptions is returned for options that cannot be used (by
	// Open, and for a pool's or a queue's options that cannot work
	// together).
	ErrInvalidOptions = newSentinel("invalid options", nil)
	// ErrLayout is returned by Open when the asked key layout cannot work on
	// the server (compat on a Redis Cluster).
	ErrLayout = newSentinel("key layout not usable here", nil)
	// ErrWrongType is returned when a key holds a value of another kind than
	// the call expects (a hash where a KV string should be, text in a counter).
	// Nothing is changed.
	ErrWrongType = fault.WrongType
	// ErrUnavailable is returned when Redis could not be reached or the
	// connection broke during the call. The call may or may not have taken
	// effect on the server.
	ErrUnavailable = newSentinel("redis unavailable", nil)
	// ErrAuth is returned by Open when the server refuses the credentials.
	ErrAuth = newSentinel("authentication refused", nil)
	// ErrDecode is returned when a stored value cannot be decoded into the
	// type asked for.
	ErrDecode = newSentinel("cannot decode stored value", nil)
	// ErrNotFound is what every Err<Noun>NotFound is (errors.Is): the thing
	// named does not exist, or is not known any more.
	ErrNotFound = newSentinel("not found", nil)
	// ErrPayloadTooLarge is returned for a payload whose JSON is longer than
	// the limit: by Queue.Submit, SubmitMany and Fleet.SubmitJSON
	// (QueueOptions.MaxPayloadBytes) and by Pool.Put
	// (PoolOptions.MaxPayloadBytes). Nothing is written. An HTTP front end
	// maps it to 413.
	ErrPayloadTooLarge = newSentinel("payload too large", nil)
	// ErrNotDurable is returned, with Options.MinReplicas (or WithMinReplicas)
	// above 0, by a call whose write fewer replicas than asked confirmed
	// within Options.ReplicaTimeout (Redis WAIT), or whose confirmation could
	// not be read (the connection broke: then ErrUnavailable is in the chain
	// too). The write was made on the master and may still reach the replicas
	// later, or may be lost if the master fails first: the call's outcome is
	// unknown, as after a broken connection. Retry what is safe to retry:
	// Task.Ack, Nack and Release, KV sets and Counter.Set are idempotent
	// (an ack retried after one that landed gets ErrLeaseLost); a Submit or
	// Pool.Put retried after ErrNotDurable may add its task or item twice,
	// so submit with a dedup key (SubmitWith and DedupKey) and make handlers
	// idempotent. Counter.Incr is not idempotent. docs/SCALING.md
	// says more.
	ErrNotDurable = newSentinel("write not confirmed by enough replicas", nil)
	// ErrMarker is returned by Open when the database's layout marker
	// (fleet:meta) names another layout than the one asked for, or a newer
	// schema: writing on would put a second, invisible layout beside the first.
	// Migrate moves a database to another layout; Sync repairs derived keys.
	ErrMarker = newSentinel("database marker does not match", nil)
	// ErrMigrateMismatch is returned by Migrate when, after the copy, the
	// per-family key or element counts of the target differ from the
	// source's. MigrateReport.Mismatches lists the families.
	ErrMigrateMismatch = newSentinel("migrated counts differ", nil)
	// ErrMigrateSource is returned by Migrate when the target holds the
	// progress record of an unfinished migration from another source (or from
	// the same one after it restarted, which makes its SCAN cursors
	// meaningless). MigrateOptions.Restart starts over.
	ErrMigrateSource = newSentinel("target holds another migration's progress", nil)
)

// Errors of leases: locks, semaphore permits, pool claims, task
// reservations.
var (
	// ErrNotObtained is returned by Lock.Acquire when the lock is held by
	// another and the wait ran out, and by Semaphore.Acquire when every
	// permit is held and the wait ran out. The message says which.
	ErrNotObtained = newSentinel("not obtained", nil)
	// ErrLeaseLost says the caller no longer holds what it held under a
	// lease: a lock (Lease.Release, Extend), a semaphore permit (the same),
	// a pool claim (Claim.Release, Extend, MarkBad), or a queue reservation
	// (Task.Ack, Nack, DeadLetter, Release, Snooze, Extend). Its lease ran
	// out (and perhaps another took the thing), or it already ended.
	// Nothing is changed. It is also the cause (context.Cause) of the ctx
	// that Lock.Do, Semaphore.Do and Query.Do give their function, and of a
	// batch handler's ctx, when the lease can no longer be proven (internal/lease).
	// The message says which thing it was. It is one error for all of them,
	// so that one errors.Is check covers every lease.
	ErrLeaseLost = fault.LeaseLost
)

// Errors of task queues.
var (
	// ErrInvalidPayload is returned by Submit, SubmitMany and SubmitJSON for
	// a payload that fails validation (the message lists the failing fields)
	// or does not encode as JSON. Nothing is written. An HTTP front end maps
	// it to 422. (A payload over QueueOptions.MaxPayloadBytes is
	// ErrPayloadTooLarge.)
	ErrInvalidPayload = newSentinel("invalid task payload", nil)
	// ErrInvalidJSON is returned by SubmitJSON for bytes that are not one JSON
	// value of the queue's payload type (an empty body, syntax, unknown
	// field, wrong type, trailing data). Nothing is written. An HTTP front
	// end maps it to 400.
	ErrInvalidJSON = newSentinel("bad task JSON", nil)
	// ErrQueueNotFound is returned by SubmitJSON for a queue that no
	// NewQueue of this process made, and by the calls of Fleet.Queue that
	// need a queue the registry (fleet:queues) knows. An HTTP front end
	// maps it to 404. errors.Is(err, ErrNotFound) holds.
	ErrQueueNotFound = newSentinel("no such queue", ErrNotFound)
	// ErrTaskNotFound is returned by Queue.Cancel and Queue.Lookup for an id
	// that no task of the queue has (or none that is still known).
	// errors.Is(err, ErrNotFound) holds.
	ErrTaskNotFound = newSentinel("no such task", ErrNotFound)
	// ErrDeadLetterNotFound is returned by Queue.RequeueDead when no dead
	// letter has the id, or the one that has it cannot be re-queued (a
	// poison body). errors.Is(err, ErrNotFound) holds.
	ErrDeadLetterNotFound = newSentinel("no such dead letter", ErrNotFound)
	// ErrDuplicate is returned by Queue.RequeueDead when the dead task's
	// dedup key is held by another live task: re-queueing it would make the
	// duplicate that the key exists to prevent. Nothing changes. A
	// *DuplicateError (SubmitWith with UniqueFor) is ErrDuplicate too, and
	// so is Flow.Submit's error for a step whose caller-chosen id
	// (SubmitOptions.ID, or derived from FlowOptions.ID) names a task that
	// lives or whose end is kept (nothing is written).
	ErrDuplicate = newSentinel("dedup key held by another task", nil)
	// ErrTaskRunning is returned by SubmitWith (and SubmitManyWith, per
	// task) with SubmitOptions.Replace or Debounce when the task that holds
	// the dedup key is running (reserved): its payload cannot change under
	// its handler. Nothing changes; the caller may retry later (once the
	// run ends, the key is free or the task waits again for a retry).
	ErrTaskRunning = newSentinel("task is running", nil)
	// ErrTaskFinished is returned by Queue.Cancel for a task that already
	// ended (dead-lettered, or done and retained): there is nothing left to
	// cancel. Nothing changes.
	ErrTaskFinished = newSentinel("task already finished", nil)
	// ErrCanceled is the cause of a handler's ctx when Queue.Cancel
	// cancelled its task (context.Cause), and the error recorded with the
	// task in the dead letters.
	ErrCanceled = fault.Canceled
	// ErrRateLimited is what a RateLimitedError is (errors.Is): a handler
	// that was refused by a rate limit, not a task that failed.
	ErrRateLimited = newSentinel("rate limited", nil)
	// ErrScheduleNotFound is returned by PauseSchedule, ResumeSchedule and
	// RemoveSchedule for a name that no schedule has. errors.Is(err,
	// ErrNotFound) holds.
	ErrScheduleNotFound = newSentinel("no such schedule", ErrNotFound)
)

// Errors of flows and batches (docs/FLOWS.md).
var (
	// ErrDependencyFailed is the error of a task dead-lettered because a
	// task it waited on (under FailDependent) was dead-lettered or
	// cancelled; the error a submit returns when such a dependency failed
	// already (nothing is written); and, under IgnoreFailure, what ResultOf
	// says of a dependency that failed, in the dependent's handler.
	ErrDependencyFailed = newSentinel("dependency failed", nil)
	// ErrTaskFailed is what Queue.Wait (and ResultOf with Await) returns
	// for a task that ended in the dead letters; the message has its last
	// error.
	ErrTaskFailed = newSentinel("task failed", nil)
	// ErrFlowNotFound is returned for a flow or batch id that no flow has
	// (never submitted, or done and past its retention). errors.Is(err,
	// ErrNotFound) holds.
	ErrFlowNotFound = newSentinel("no such flow", ErrNotFound)
	// ErrFlowFinished is returned by CancelFlow for a flow that is done:
	// nothing is left to cancel, and nothing changes.
	ErrFlowFinished = newSentinel("flow already finished", nil)
	// ErrBatchClosed is returned by an add to a batch that was closed (or
	// cancelled), and by a second Close: nothing changes.
	ErrBatchClosed = newSentinel("batch closed", nil)
)

// Errors of pools.
var (
	// ErrUnknownField is returned (through Query.Err, Claim, List) for a
	// filter on a field that the pool's tags type does not have, by its
	// JSON name. (In fleet's own design this is a TypeError.)
	ErrUnknownField = newSentinel("unknown tag field", nil)
	// ErrFilterType is returned for a filter value whose type does not fit
	// the field, or a filter on a field that cannot be matched exactly
	// (not a string, bool or number; a ':' in its name). (In fleet's own
	// design this is a ValueError.)
	ErrFilterType = newSentinel("filter value does not fit the tag field", nil)
	// ErrBadItem is what a BadItemsError is: entries of the pool hash that
	// are not valid items (not JSON, fields missing or of the wrong type, a
	// payload or tags that do not decode into the pool's types). They are
	// never handed out.
	ErrBadItem = newSentinel("bad pool item", nil)
)

// Errors of workers and their configs.
var (
	// ErrStaleGen is returned by PushConfig when the pushed gen is not above
	// the stored one. The error is a *StaleGenError that tells both gens.
	ErrStaleGen = newSentinel("stale config gen", nil)
	// ErrInvalidConfig is returned for a config (or a config patch) that is
	// not a JSON object, and for a config that does not decode into the
	// worker's config type or fails its validate tags. A worker that gets
	// one keeps its config and records the error in last_error.
	ErrInvalidConfig = newSentinel("invalid worker config", nil)
	// ErrWorkerNotFound is returned by UpdateConfig for a type and id that
	// no worker registered (wkr:<type>:<id>:gen is missing): a typo would
	// otherwise create the keys of a worker that never reads them. Nothing
	// is written. errors.Is(err, ErrNotFound) holds.
	ErrWorkerNotFound = newSentinel("no such worker", ErrNotFound)
	// ErrWorkerStarted is returned by Worker.Start on a worker that was
	// already started (a Worker runs once: make a new one to run again).
	ErrWorkerStarted = newSentinel("worker already started", nil)
	// ErrWorkerNotStarted is returned by Worker.Stop on a worker that was
	// never started.
	ErrWorkerNotStarted = newSentinel("worker not started", nil)
	// ErrTaskTimeout is the cause of a batch handler's ctx when the run took
	// longer than WorkerOptions.TaskTimeout; the task is nacked with it.
	ErrTaskTimeout = newSentinel("task timed out", nil)
	// ErrPermanent marks a handler's error as one that no retry can fix: wrap
	// it (fmt.Errorf("...: %w", fleet.ErrPermanent)) and the task goes to the
	// dead letters at once instead of being retried.
	ErrPermanent = newSentinel("permanent failure", nil)
	// ErrNondeterministic is returned by Step and Sleep when a handler's
	// steps differ from those recorded by an earlier run of the same task
	// (another name at the same place, a step become a sleep): the recorded
	// results cannot be trusted for this run. Nothing stored changes. It is
	// also ErrPermanent, so that a worker dead-letters the task instead of
	// retrying it into the same mismatch.
	ErrNondeterministic = newSentinel("steps differ from the recorded run", ErrPermanent)
	// ErrSuspended is what a durable task's handler returns to leave its
	// slot until a time (SleepError, from Sleep): the worker snoozes the
	// task until then, uncounted.
	ErrSuspended = newSentinel("task suspended", nil)
	// ErrWaitTimeout is returned by WaitSignal and AwaitChildren when
	// their timeout passed before the signal came or the children ended.
	// It is recorded: every later run of the task gets it too, so it is
	// also ErrPermanent (a handler that returns it has its task
	// dead-lettered, not retried into the same timeout).
	ErrWaitTimeout = newSentinel("wait timed out", ErrPermanent)
	// ErrSignalSent is returned by Queue.Signal for a signal name that was
	// already sent to the task (each name is delivered once), or whose
	// wait timed out. Nothing changes.
	ErrSignalSent = newSentinel("signal already sent", nil)
)

// Errors that stay inside fleet.
var (
	// errExpired is why a task whose SubmitOptions.ExpiresAt passed before
	// it started is in the dead letters.
	errExpired = engine.ErrExpired
	// errTLSHandshake marks a failed TLS handshake in the chain (connect.go).
	errTLSHandshake = errors.New("TLS handshake failed")
	// errSubscriptionClosed ends a subscription's wait (events.go).
	errSubscriptionClosed = newSentinel("subscription closed", nil)
)

// newSentinel makes a sentinel of fleet (a *fault.Sentinel, the one type
// of them all, the engine's too): its text is "fleet: " + what, and with a
// parent it is also its parent (errors.Is), as every Err<Noun>NotFound is
// ErrNotFound.
func newSentinel(what string, parent error) error { return fault.New(what, parent) }

func (e *DuplicateError) fleetError()     {}
func (e *RateLimitedError) fleetError()   {}
func (e *StaleGenError) fleetError()      {}
func (e *BadItemsError) fleetError()      {}
func (e *StreamDecodeError) fleetError()  {}
func (e *CatalogDecodeError) fleetError() {}
func (e *opError) fleetError()            {}
func (e *PanicError) fleetError()         {}

// fleetErr is what every error of fleet's own is but a sentinel (a
// *fault.Sentinel, see ownError): an error type of this file, or an error
// opErr made.
type fleetErr interface {
	error
	fleetError()
}

// ownError reports whether err is, or wraps, an error of fleet's own: a
// sentinel or a fleetErr.
func ownError(err error) bool {
	return errors.As(err, new(*fault.Sentinel)) || errors.As(err, new(fleetErr))
}

// opError is what opErr makes: the call (op) and what it was on (name), the
// sentinel that classifies the failure when the cause is not one of
// fleet's own (kind: ErrUnavailable, ErrWrongType, ErrAuth), and the cause.
type opError struct {
	op, name string
	kind     error // nil when err is classified already
	err      error
}

// Error spells "fleet: <op> <name>: <kind>: <cause>", with "fleet: " once.
func (e *opError) Error() string {
	var b strings.Builder
	b.WriteString("fleet: ")
	b.WriteString(e.op)
	if e.name != "" {
		b.WriteByte(' ')
		b.WriteString(strconv.Quote(e.name))
	}
	b.WriteString(": ")
	if e.kind != nil {
		b.WriteString(unprefixed(e.kind))
		b.WriteString(": ")
	}
	b.WriteString(unprefixed(e.err))
	return b.String()
}

func (e *opError) Unwrap() []error {
	if e.kind == nil {
		return []error{e.err}
	}
	return []error{e.kind, e.err}
}

// unprefixed is err's text without a leading "fleet: ": the wrapper says
// it once.
func unprefixed(err error) string { return strings.TrimPrefix(err.Error(), "fleet: ") }

// opErr wraps err, the failure of op on name ("" for none), for the caller:
// an error of fleet's own passes through as it is, anything else gets the
// sentinel that classifies it (ErrUnavailable, ErrWrongType, ErrAuth) when
// one does. ctx errors pass through unchanged in the chain. An error that
// opErr already wrapped is returned as it is.
func opErr(op, name string, err error) error {
	if err == nil {
		return nil
	}
	var done *opError
	if errors.As(err, &done) {
		return err
	}
	e := &opError{op: op, name: name, err: err}
	if !ownError(err) && !errors.Is(err, ErrInvalidName) {
		e.kind = classify(err)
	}
	return e
}

// classify returns the sentinel for a Redis or network error, or nil when the
// error already says enough (ctx errors, fleet's own sentinels, anything
// that is not about reaching Redis).
func classify(err error) error {
	// A dial or a read that timed out is a network failure, though the
	// net package's timeout error also says it is context.DeadlineExceeded.
	var oe *net.OpError
	if errors.As(err, &oe) && !errors.Is(err, ErrUnavailable) {
		return ErrUnavailable
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return nil
	}
	if re, ok := rueidis.IsRedisErr(err); ok {
		msg := re.Error()
		switch {
		case strings.HasPrefix(msg, "WRONGTYPE"), strings.Contains(msg, "not an integer"):
			return ErrWrongType
		case strings.HasPrefix(msg, "WRONGPASS"), strings.HasPrefix(msg, "NOAUTH"), strings.HasPrefix(msg, "NOPERM"):
			return ErrAuth
		case strings.HasPrefix(msg, "LOADING"), strings.HasPrefix(msg, "CLUSTERDOWN"), strings.HasPrefix(msg, "TRYAGAIN"),
			strings.HasPrefix(msg, "MASTERDOWN"), strings.HasPrefix(msg, "BUSY"):
			return ErrUnavailable
		}
		return nil
	}
	if unreachable(err) && !errors.Is(err, ErrUnavailable) {
		return ErrUnavailable
	}
	return nil
}

// unreachable is fault.Unreachable; outcomeUnknown, fault.OutcomeUnknown.
var (
	unreachable    = fault.Unreachable
	outcomeUnknown = fault.OutcomeUnknown
	// unexpectedReply is the error of a reply of n elements to what.
	unexpectedReply = fault.UnexpectedReply
)

// transient reports whether err may go away by itself (a connection that
// broke, a server that restarts).
func transient(err error) bool {
	return errors.Is(err, ErrUnavailable) || (classify(err) == ErrUnavailable && !errors.Is(err, ErrClosed))
}

// partError is err said of a part (a payload of a batch, an option, a
// task): the part, then err's text without its "fleet: ", and still err
// for errors.Is and errors.As.
type partError struct {
	part string
	err  error
}

func (e *partError) Error() string { return e.part + ": " + unprefixed(e.err) }
func (e *partError) Unwrap() error { return e.err }

// within says err of part (see partError).
func within(part string, err error) error { return &partError{part: part, err: err} }

// DuplicateError is returned by Queue.SubmitWith with UniqueFor set when
// another task holds the dedup key, live or within its unique window.
// errors.Is(err, ErrDuplicate) holds.
type DuplicateError struct {
	// Key is the dedup key.
	Key string
	// ID is the id of the task that holds it.
	ID string
}

// Error names the key and its holder.
func (e *DuplicateError) Error() string {
	return fmt.Sprintf("%v: key %q is held by task %s", ErrDuplicate, e.Key, e.ID)
}

// Is makes errors.Is(err, ErrDuplicate) hold.
func (e *DuplicateError) Is(target error) bool { return target == ErrDuplicate }

// RateLimitedError is a handler's way to say it was rate limited (by a
// Limiter, or by the remote side: HTTP 429 with Retry-After): a batch
// worker puts the task back in :scheduled, due after RetryAfter, without
// counting an attempt, instead of nacking it. Build it with RateLimited.
type RateLimitedError struct {
	// RetryAfter is how long the task waits before it is due again (on the
	// server's clock); a negative one counts as zero.
	RetryAfter time.Duration
}

// Error says for how long.
func (e *RateLimitedError) Error() string {
	return fmt.Sprintf("%v: retry after %v", ErrRateLimited, e.RetryAfter)
}

// Is makes errors.Is(err, ErrRateLimited) true.
func (e *RateLimitedError) Is(target error) bool { return target == ErrRateLimited }

// RateLimited returns the error a BatchAutomation's Handle returns when it
// was rate limited: the task goes back to :scheduled, due after
// retryAfter, and no attempt is counted (as asynq's IsFailure lets an error
// through uncounted). Use a Limiter's LimitResult.RetryAfter, or the remote
// side's Retry-After.
func RateLimited(retryAfter time.Duration) error {
	return &RateLimitedError{RetryAfter: retryAfter}
}

// PanicError is the error of a recovered panic in an automation.
type PanicError struct {
	// Value is what was passed to panic.
	Value any
	// Stack is the goroutine's stack at the panic.
	Stack []byte
}

// Error says what panicked.
func (e *PanicError) Error() string { return fmt.Sprintf("panic: %v", e.Value) }

// StaleGenError is returned by PushConfig when the pushed gen is not above
// the stored one; nothing was written. errors.Is(err, ErrStaleGen) is true.
type StaleGenError struct {
	// Type and ID name the worker.
	Type, ID string
	// Pushed is the refused gen; Current is the stored one.
	Pushed, Current int64
}

// Error says which gens were compared.
func (e *StaleGenError) Error() string {
	return fmt.Sprintf("fleet: push config %s|%s: %s: gen %d is not above the current %d", e.Type, e.ID, unprefixed(ErrStaleGen), e.Pushed, e.Current)
}

// Is reports true for ErrStaleGen.
func (e *StaleGenError) Is(target error) bool { return target == ErrStaleGen }

// BadItemsError reports the entries of a pool hash that List skipped
// because they are not valid items (another client wrote them, or the
// types changed). errors.Is(err, ErrBadItem) is true for it. The items
// List returns alongside it are all good.
type BadItemsError struct {
	// Pool is the pool's name.
	Pool string
	// IDs lists the bad entries' item ids.
	IDs []string
	// Causes holds why each is bad: Causes[i] is the reason of IDs[i].
	Causes []error
}

// Error lists the bad entries, at most five of them.
func (e *BadItemsError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "fleet: pool %q: %d bad item(s) skipped", e.Pool, len(e.IDs))
	for i, id := range e.IDs {
		if i == 5 {
			b.WriteString("; ...")
			break
		}
		fmt.Fprintf(&b, "; %q: %v", id, e.Causes[i])
	}
	return b.String()
}

// Is reports whether target is ErrBadItem.
func (e *BadItemsError) Is(target error) bool { return target == ErrBadItem }

// BadMember is a stream member that Pop or Peek could not decode: text that
// is not a fleet envelope, or whose data does not decode into the stream's
// type. Raw is the member as stored, so nothing popped is lost unseen.
type BadMember struct {
	// Raw is the member as stored.
	Raw string
	// Score is its score (unix seconds).
	Score float64
	// Err says why it did not decode.
	Err error
}

// StreamDecodeError is returned by Stream.Pop and Stream.Peek when some
// members did not decode. The entries that did decode are returned with it;
// the bad ones are listed here (Pop has removed them from the stream).
// errors.Is(err, ErrDecode) is true.
type StreamDecodeError struct {
	// Stream is the stream's type name.
	Stream string
	// Members lists the members that did not decode, in stream order.
	Members []BadMember
}

// Error names the stream and the first bad member.
func (e *StreamDecodeError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "fleet: stream %q: %d member(s) do not decode", e.Stream, len(e.Members))
	if len(e.Members) > 0 {
		raw := e.Members[0].Raw
		if len(raw) > 64 {
			raw = raw[:64] + "..."
		}
		fmt.Fprintf(&b, "; first %q: %v", raw, e.Members[0].Err)
	}
	return b.String()
}

// Is reports true for ErrDecode.
func (e *StreamDecodeError) Is(target error) bool { return target == ErrDecode }

// CatalogDecodeError is returned by Fleet.Catalog when some stored entries
// are not the JSON of a catalog entry. The entries that decoded are returned
// with it. errors.Is(err, ErrDecode) is true.
type CatalogDecodeError struct {
	// Types maps each bad entry's type to why it did not decode.
	Types map[string]error
}

// Error lists the bad types.
func (e *CatalogDecodeError) Error() string {
	names := make([]string, 0, len(e.Types))
	for t := range e.Types {
		names = append(names, t)
	}
	slices.Sort(names)
	return fmt.Sprintf("fleet: catalog: %d entr(ies) do not decode: %s", len(names), strings.Join(names, ", "))
}

// Is reports true for ErrDecode.
func (e *CatalogDecodeError) Is(target error) bool { return target == ErrDecode }
