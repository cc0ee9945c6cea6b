package fleet

import (
	"context"
	"fmt"
	"time"

	"github.com/fleet-go/fleet/internal/keys"
	"github.com/fleet-go/fleet/internal/lease"
	"github.com/fleet-go/fleet/internal/mono"
	"github.com/fleet-go/fleet/internal/script"
)

// The lock scripts need no type-check helper (each refuses a wrong type
// with its first read), so they load without lib_types.lua: one closure
// less to build on every call of the hottest scripts.
var (
	lockAcquireScript = newScript("lock_acquire.lua", script.Retryable)
	lockReleaseScript = newScript("lock_release.lua")
	lockExtendScript  = newScript("lock_extend.lua", script.Retryable)
	lockAbandonScript = newScript("lock_abandon.lua", script.Retryable)
)

const (
	// fenceLife is the least lifetime of a fence key: it gets
	// max(hold, fenceLife) when it is seeded, and keeps that TTL.
	fenceLife = 24 * time.Hour
	// lockTombMargin is how much longer than hold the tombstone of an
	// abandoned acquire holds: the script it stops may arrive that late.
	lockTombMargin = 2 * time.Second
)

// Lock is a fleet-wide mutex (fleet:lock:<name>): the holder's random token
// with a TTL of hold. Only the holder can release or extend it: a holder
// whose lease ran out, and whose lock another then took, gets ErrLeaseLost and
// changes nothing. A Lock is safe for concurrent use.
type Lock struct {
	f     *Fleet
	name  string
	key   string
	fence string
	tomb  string
	err   error
}

// LockOptions says how to take a lock.
type LockOptions struct {
	// Hold is the lease: a crashed holder's lock frees itself after Hold.
	// Required, > 0; set it a little above the expected work, no more than
	// you can afford to wait on a dead holder. The lease is counted from
	// just before the acquire was sent (see Lease.Deadline).
	Hold time.Duration
	// Wait bounds how long Acquire blocks while another holds the lock. Zero
	// fails at once when the lock is held. Waiters wake when the holder
	// releases (client-side caching invalidation), with a capped, jittered
	// backoff as the fallback. ctx bounds the wait too.
	Wait time.Duration
	// KeepAlive makes Do extend the lease every Hold/3 while its function
	// runs. Without it, the lease ends at its deadline and so does the
	// function's context.
	KeepAlive bool
}

// Lock returns the lock name. A bad name makes every call return
// ErrInvalidName.
func (f *Fleet) Lock(name string) *Lock {
	return &Lock{f: f, name: name, key: f.keys.Lock(name), fence: f.keys.LockFence(name), tomb: f.keys.LockTomb(name), err: keys.Check(keys.KindLock, name)}
}

// Lease is a held lock, or a held permit of a Semaphore. Its methods are
// safe for concurrent use.
type Lease struct {
	lock  *Lock
	sem   *Semaphore // a permit's semaphore (semaphore.go); lock is nil then
	token string
	fence int64
	clock lease.Clock
}

// newLease is a lease of l taken by a call sent at sent (mono.Now) for hold.
func newLease(l *Lock, token string, fence, sent int64, hold time.Duration) *Lease {
	lease := &Lease{lock: l, token: token, fence: fence}
	lease.clock.Prove(sent, hold)
	return lease
}

// Token returns the random token stored in the lock key (or, for a
// permit, the semaphore's key) while held.
func (l *Lease) Token() string { return l.token }

// Fence returns the fencing token of this acquisition: it is larger than
// that of every earlier acquisition of the same lock name, so a protected
// resource that remembers the largest fence it saw can refuse a stale holder.
// A permit of a Semaphore has none: 0.
func (l *Lease) Fence() int64 { return l.fence }

// Deadline returns when the lease ends, on this process's clock: Hold after
// the acquire (or the last successful Extend) was sent, so no later than the
// server lets the key expire. A lease that Extend found lost ends at once.
// Past the deadline another may hold the lock.
func (l *Lease) Deadline() time.Time { return l.clock.Deadline() }

func (l *Lock) check(ctx context.Context, hold time.Duration) error {
	if l.err != nil {
		return l.err
	}
	if hold <= 0 {
		return fmt.Errorf("%w: hold %v must be > 0", ErrInvalidArgument, hold)
	}
	return l.f.alive(ctx)
}

// Acquire takes the lock for opts.Hold, waiting up to opts.Wait while
// another holds it. The lease it returns has more than a small margin
// (Hold/10, at most 1 s) left before its Deadline: one whose reply came
// back too late (a paused server, a slow network) is released and tried
// again within opts.Wait. It returns ErrNotObtained when the wait runs out,
// ErrInvalidArgument for Hold <= 0 or Wait < 0, and ctx's error when ctx
// ends first. A ctx that ends while an acquire script is in flight leaves
// nothing held: in the background, the lock is freed if the script took it,
// and else a tombstone (fleet:locktomb:<name>, for Hold plus 2 s) makes the
// script give the lock up should it still arrive.
func (l *Lock) Acquire(ctx context.Context, opts LockOptions) (*Lease, error) {
	if err := l.check(ctx, opts.Hold); err != nil {
		return nil, opErr("lock acquire", l.name, err)
	}
	if opts.Wait < 0 {
		return nil, opErr("lock acquire", l.name, fmt.Errorf("%w: wait %v is negative", ErrInvalidArgument, opts.Wait))
	}
	start := l.f.obsStart()
	lease, err := acquireLease(ctx, l, opts.Hold, opts.Wait)
	l.f.lockWaited(ctx, l.name, start, lease != nil, err)
	return lease, opErr("lock acquire", l.name, err)
}

// abandon undoes, in the background, a call of token whose outcome is
// unknown: it frees the lock if token holds it, and with tomb leaves a
// tombstone that makes a late acquire script of token give the lock up. It
// runs the abandon script until one run answers, hold plus a margin has
// passed, or the Fleet closes. Each run is idempotent; a run that times out
// may still land, which does no harm.
func (l *Lock) abandon(token string, hold time.Duration, tomb bool) {
	tombMs := "0"
	if tomb {
		tombMs = millis(hold + lockTombMargin)
	}
	keys, args := []string{l.key, l.fence, l.tomb}, []string{token, tombMs}
	l.f.abandon("lock "+l.name, hold+lockTombMargin, func(ctx context.Context) error {
		return lockAbandonScript.Exec(ctx, l.f.client, keys, args).Error()
	})
}

// try runs the acquire script once. It returns the lease (its deadline
// counted from just before the send), or the holder's time left (-1 when
// unknown: the holder set no TTL, or token was abandoned). When the
// script's outcome is unknown (ctx ended or the connection broke while it
// was in flight), it abandons token.
func (l *Lock) try(ctx context.Context, token string, hold time.Duration) (*Lease, time.Duration, error) {
	sent := mono.Now()
	res, err := lockAcquireScript.Exec(ctx, l.f.client, []string{l.key, l.fence, l.tomb},
		[]string{token, millis(hold), millis(max(hold, fenceLife))}).ToArray()
	if err != nil {
		if outcomeUnknown(err) {
			l.abandon(token, hold, true)
		}
		return nil, 0, err
	}
	if len(res) != 2 {
		return nil, 0, unexpectedReply("lock acquire", len(res))
	}
	ok, _ := res[0].AsInt64()
	n, err := res[1].AsInt64()
	if err != nil {
		return nil, 0, err
	}
	if ok != 1 {
		if n < 0 {
			return nil, -1, nil
		}
		return nil, time.Duration(n) * time.Millisecond, nil
	}
	return newLease(l, token, n, sent, hold), 0, nil
}

// Release frees the lock (or gives the permit back). It returns
// ErrLeaseLost, changing nothing, when the lease ran out (and perhaps
// another holds the lock now).
func (l *Lease) Release(ctx context.Context) error {
	if l.sem != nil {
		return l.sem.release(ctx, l)
	}
	lk := l.lock
	if err := lk.f.alive(ctx); err != nil {
		return opErr("lock release", lk.name, err)
	}
	// A waiter of this process takes the lock straight from the holder, in
	// one round trip instead of a release and an acquire.
	if lw := pickWaiter(lk.f.watch, lk.key); lw != nil {
		passed, err := l.handover(ctx, lw)
		if err != nil {
			return opErr("lock release", lk.name, err)
		}
		if !passed {
			return opErr("lock release", lk.name, ErrLeaseLost)
		}
		return nil
	}
	n, err := lockReleaseScript.Exec(ctx, lk.f.client, []string{lk.key}, []string{l.token}).AsInt64()
	if err != nil {
		return opErr("lock release", lk.name, err)
	}
	if n != 1 {
		return opErr("lock release", lk.name, ErrLeaseLost)
	}
	// Wake a waiter of this process at once. Waiters of other processes are
	// woken by the invalidation of the key, which they armed when their try
	// failed.
	lk.f.watch.WakeOne(lk.key)
	return nil
}

// Extend sets the lease to hold from now, and its Deadline to hold from
// just before the call was sent. It returns ErrLeaseLost, changing nothing,
// when the lease already ran out (the Deadline is then past).
func (l *Lease) Extend(ctx context.Context, hold time.Duration) error {
	if l.sem != nil {
		return l.sem.extend(ctx, l, hold)
	}
	lk := l.lock
	if err := lk.check(ctx, hold); err != nil {
		return opErr("lock extend", lk.name, err)
	}
	sent := mono.Now()
	n, err := lockExtendScript.Exec(ctx, lk.f.client, []string{lk.key}, []string{l.token, millis(hold)}).AsInt64()
	if err != nil {
		return opErr("lock extend", lk.name, err)
	}
	if n != 1 {
		l.clock.Lose()
		return opErr("lock extend", lk.name, ErrLeaseLost)
	}
	l.clock.Prove(sent, hold)
	return nil
}

// Do acquires the lock, runs fn, and always releases the lock, even when fn
// panics (the panic goes on after the release). It returns ErrNotObtained
// when the lock could not be taken within opts.Wait, else fn's error joined
// with a failed release's. fn's context ends, with cause ErrLeaseLost, a
// small margin (Hold/10, at most 1 s) before the lease's Deadline, on a
// timer; Do then returns ErrLeaseLost too. With opts.KeepAlive the lease is
// extended every Hold/3 while fn runs, each extension bounded by the
// deadline, so fn's context ends only when extensions fail for a whole
// lease (Redis unreachable) or one finds the lock taken.
func (l *Lock) Do(ctx context.Context, opts LockOptions, fn func(ctx context.Context, lease *Lease) error) error {
	lease, err := l.Acquire(ctx, opts)
	if err != nil {
		return err
	}
	return runLeased(ctx, lease.leased("lock do", l.name, opts.Hold, opts.KeepAlive),
		func(ctx context.Context) error { return fn(ctx, lease) })
}

// leased is what runLeased needs to run work under the lease (a lock's,
// or a semaphore permit's), extended every hold/3 with keepAlive.
func (l *Lease) leased(op, name string, hold time.Duration, keepAlive bool) leased {
	keep := lease.Keep{Clock: &l.clock, Margin: lease.Margin(hold),
		Extend: func(ctx context.Context) error { return l.Extend(ctx, hold) }}
	if keepAlive {
		keep.Every = max(hold/3, time.Millisecond)
	}
	abandon := func() { l.lock.abandon(l.token, hold, false) }
	if l.sem != nil {
		abandon = func() { l.sem.abandon(l.token, hold, false) }
	}
	return leased{op: op, name: name, keep: keep, hold: hold, end: l.Release, abandon: abandon}
}

// Err returns the error every call of the Lock would return for its name
// (ErrInvalidName), or nil.
func (l *Lock) Err() error { return l.err }
