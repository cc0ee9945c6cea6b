package fleet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"syscall"

	"github.com/redis/rueidis"

	"github.com/fleet-go/fleet/internal/keys"
)

// Errors that errors.Is can test. Calls wrap them with what went wrong, and
// keep the cause (a Redis error, a network error, ctx.Err()) in the chain too.
var (
	// ErrClosed is returned by calls on a Fleet after Close.
	ErrClosed = errors.New("fleet: closed")
	// ErrInvalidName is returned for a name that is empty, too long, or holds
	// '{', '}', white space, a control character, or a separator its place
	// in a key forbids. The message names the bad name.
	ErrInvalidName = keys.ErrInvalidName
	// ErrInvalidArgument is returned for an argument out of range, such as a
	// lock hold <= 0 or a negative TTL.
	ErrInvalidArgument = errors.New("fleet: invalid argument")
	// ErrInvalidOptions is returned by Open for options it cannot use.
	ErrInvalidOptions = errors.New("fleet: invalid options")
	// ErrLayout is returned by Open when the asked key layout cannot work on
	// the server (compat on a Redis Cluster).
	ErrLayout = errors.New("fleet: key layout not usable here")
	// ErrWrongType is returned when a key holds a value of another kind than
	// the call expects (a hash where a KV string should be, text in a counter).
	// Nothing is changed.
	ErrWrongType = errors.New("fleet: key holds the wrong kind of value")
	// ErrUnavailable is returned when Redis could not be reached or the
	// connection broke during the call. The call may or may not have taken
	// effect on the server.
	ErrUnavailable = errors.New("fleet: redis unavailable")
	// ErrAuth is returned by Open when the server refuses the credentials.
	ErrAuth = errors.New("fleet: authentication refused")
	// ErrDecode is returned when a stored value cannot be decoded into the
	// type asked for.
	ErrDecode = errors.New("fleet: cannot decode stored value")
	// ErrNotObtained is returned by Lock.Acquire when the lock is held by
	// another and the wait ran out, and by Semaphore.Acquire when every
	// permit is held and the wait ran out.
	ErrNotObtained = errors.New("fleet: lock not obtained")
	// ErrPayloadTooLarge is returned for a payload whose JSON is longer than
	// the limit: by Queue.Submit, SubmitMany and Fleet.SubmitJSON
	// (QueueOptions.MaxPayloadBytes) and by Pool.Put
	// (PoolOptions.MaxPayloadBytes). Nothing is written. An HTTP front end
	// maps it to 413.
	ErrPayloadTooLarge = errors.New("fleet: payload too large")
	// ErrLeaseLost says the caller no longer holds what it held under a
	// lease: a lock (Lease.Release, Extend; the cause of Lock.Do's ctx), a
	// pool claim (Claim.Release, Extend, MarkBad; the cause of Pool.Do's
	// ctx), a queue reservation (Task.Ack, Nack, DeadLetter, Extend; the
	// cause of a batch handler's ctx) or a semaphore permit. Its lease ran
	// out (and perhaps another took the thing), or it already ended.
	// Nothing is changed. The message says which thing it was. It is one
	// error for all of them, so that one errors.Is check covers every
	// lease.
	ErrLeaseLost = errors.New("fleet: lease lost")
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
	ErrNotDurable = errors.New("fleet: write not confirmed by enough replicas")
)

// opErr wraps err, the failure of op on name, with the sentinel that
// classifies it. ctx errors pass through unchanged in the chain.
func opErr(op, name string, err error) error {
	if err == nil {
		return nil
	}
	if kind := classify(err); kind != nil {
		return fmt.Errorf("fleet: %s %q: %w: %w", op, name, kind, err)
	}
	return fmt.Errorf("fleet: %s %q: %w", op, name, err)
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

// unreachable reports whether err says Redis could not be reached or the
// connection broke: a network error, an EOF, a refused or reset connection.
func unreachable(err error) bool {
	var ne net.Error
	// rueidis.ErrClosing also means "unable to connect": a Fleet's own
	// Close is caught before any call (alive) and says ErrClosed.
	return errors.As(err, &ne) || errors.Is(err, rueidis.ErrClosing) || errors.Is(err, rueidis.ErrNoAddr) ||
		errors.Is(err, rueidis.ErrDoCacheAborted) || errors.Is(err, rueidis.ErrNoSlot) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, net.ErrClosed)
}
