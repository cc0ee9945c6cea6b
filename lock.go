package fleet

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"time"

	"github.com/fleet-go/fleet/internal/keys"
)

var (
	lockAcquireScript = retryableScript("lock_acquire.lua")
	lockReleaseScript = script("lock_release.lua")
	lockExtendScript  = retryableScript("lock_extend.lua")
)

// Lock is a fleet-wide mutex (fleet:lock:<name>): the holder's random token
// with a TTL of hold. Only the holder can release or extend it: a holder
// whose lease ran out, and whose lock another then took, gets ErrNotHeld and
// changes nothing. A Lock is safe for concurrent use.
type Lock struct {
	f     *Fleet
	name  string
	key   string
	fence string
	err   error
}

// LockOptions says how to take a lock.
type LockOptions struct {
	// Hold is the lease: a crashed holder's lock frees itself after Hold.
	// Required, > 0; set it a little above the expected work, no more than
	// you can afford to wait on a dead holder.
	Hold time.Duration
	// Wait bounds how long Acquire blocks while another holds the lock. Zero
	// fails at once when the lock is held. Waiters wake when the holder
	// releases (client-side caching invalidation), with a capped, jittered
	// backoff as the fallback. ctx bounds the wait too.
	Wait time.Duration
	// KeepAlive makes Do extend the lease every Hold/3 while its function
	// runs, and cancel the function's context if the lock is lost.
	KeepAlive bool
}

// Lock returns the lock name. A bad name makes every call return
// ErrInvalidName.
func (f *Fleet) Lock(name string) *Lock {
	return &Lock{f: f, name: name, key: f.keys.Lock(name), fence: f.keys.LockFence(name), err: keys.Check(keys.KindLock, name)}
}

// Lease is a held lock. Its methods are safe for concurrent use.
type Lease struct {
	lock  *Lock
	token string
	fence int64
}

// Token returns the random token stored in the lock key while held.
func (l *Lease) Token() string { return l.token }

// Fence returns the fencing token of this acquisition: it is larger than
// that of every earlier acquisition of the same lock name, so a protected
// resource that remembers the largest fence it saw can refuse a stale holder.
func (l *Lease) Fence() int64 { return l.fence }

func newToken() string {
	var b [18]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return base64.RawURLEncoding.EncodeToString(b[:])
}

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
// another holds it. It returns ErrNotObtained when the wait runs out,
// ErrInvalidArgument for Hold <= 0 or Wait < 0, and ctx's error when ctx
// ends first. A ctx that ends while an acquire script is on its way to the
// server cannot stop the script: Acquire then releases the lock should the
// script have taken it, but a script still queued behind that release can
// take it later and keep it until Hold runs out. Bound an Acquire with
// opts.Wait rather than a short ctx deadline when that matters.
func (l *Lock) Acquire(ctx context.Context, opts LockOptions) (_ *Lease, err error) {
	if err := l.check(ctx, opts.Hold); err != nil {
		return nil, opErr("lock acquire", l.name, err)
	}
	if opts.Wait < 0 {
		return nil, opErr("lock acquire", l.name, fmt.Errorf("%w: wait %v is negative", ErrInvalidArgument, opts.Wait))
	}
	token := newToken()
	defer func() {
		if err != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
			// ctx ended while an acquire script was on its way: it may have
			// taken the lock for token after all. Free it if so.
			l.abandon(ctx, token, opts.Hold)
		}
	}()
	lease, pttl, err := l.try(ctx, token, opts.Hold)
	if lease != nil || err != nil {
		return lease, opErr("lock acquire", l.name, err)
	}
	if opts.Wait == 0 {
		return nil, opErr("lock acquire", l.name, ErrNotObtained)
	}
	lease, err = l.wait(ctx, token, opts, pttl)
	return lease, opErr("lock acquire", l.name, err)
}

// abandon releases the lock if token holds it (and changes nothing if not),
// on a context of its own bounded by hold.
func (l *Lock) abandon(ctx context.Context, token string, hold time.Duration) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), hold)
	defer cancel()
	_ = (&Lease{lock: l, token: token}).Release(rctx)
}

// try runs the acquire script once. It returns the lease, or the holder's
// time left (-1 when the holder set no TTL).
func (l *Lock) try(ctx context.Context, token string, hold time.Duration) (*Lease, time.Duration, error) {
	res, err := lockAcquireScript.Exec(ctx, l.f.client, []string{l.key, l.fence},
		[]string{token, millis(hold)}).ToArray()
	if err != nil {
		return nil, 0, err
	}
	if len(res) != 2 {
		return nil, 0, fmt.Errorf("fleet: lock acquire: unexpected reply of %d elements", len(res))
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
	return &Lease{lock: l, token: token, fence: n}, 0, nil
}

// Release frees the lock. It returns ErrNotHeld, changing nothing, when the
// lease ran out (and perhaps another holds the lock now).
func (l *Lease) Release(ctx context.Context) error {
	lk := l.lock
	if err := lk.f.alive(ctx); err != nil {
		return opErr("lock release", lk.name, err)
	}
	// A waiter of this process takes the lock straight from the holder, in
	// one round trip instead of a release and an acquire.
	if lw := lk.f.watch.pickWaiter(lk.key); lw != nil {
		passed, err := l.handover(ctx, lw)
		if err != nil {
			return opErr("lock release", lk.name, err)
		}
		if !passed {
			return opErr("lock release", lk.name, ErrNotHeld)
		}
		return nil
	}
	n, err := lockReleaseScript.Exec(ctx, lk.f.client, []string{lk.key}, []string{l.token}).AsInt64()
	if err != nil {
		return opErr("lock release", lk.name, err)
	}
	if n != 1 {
		return opErr("lock release", lk.name, ErrNotHeld)
	}
	// Wake a waiter of this process at once. Waiters of other processes are
	// woken by the invalidation of the key, which they armed when their try
	// failed.
	lk.f.watch.wakeOne(lk.key)
	return nil
}

// Extend sets the lease to hold from now. It returns ErrNotHeld, changing
// nothing, when the lease already ran out.
func (l *Lease) Extend(ctx context.Context, hold time.Duration) error {
	lk := l.lock
	if err := lk.check(ctx, hold); err != nil {
		return opErr("lock extend", lk.name, err)
	}
	n, err := lockExtendScript.Exec(ctx, lk.f.client, []string{lk.key}, []string{l.token, millis(hold)}).AsInt64()
	if err != nil {
		return opErr("lock extend", lk.name, err)
	}
	if n != 1 {
		return opErr("lock extend", lk.name, ErrNotHeld)
	}
	return nil
}

// ErrLockLost is the cause of the context that Do hands its function when
// the lock is lost while the function runs (with KeepAlive).
var ErrLockLost = errors.New("fleet: lock lost")

// Do acquires the lock, runs fn, and always releases the lock, even when fn
// panics (the panic goes on after the release). It returns ErrNotObtained
// when the lock could not be taken within opts.Wait, else fn's error joined
// with a failed release's. With opts.KeepAlive the lease is extended every
// Hold/3 while fn runs, and fn's context is cancelled, with cause
// ErrLockLost, if an extension finds the lock lost.
func (l *Lock) Do(ctx context.Context, opts LockOptions, fn func(ctx context.Context, lease *Lease) error) (err error) {
	lease, err := l.Acquire(ctx, opts)
	if err != nil {
		return err
	}
	fctx, cancel := context.WithCancelCause(ctx)
	stop := make(chan struct{})
	kept := make(chan struct{})
	if opts.KeepAlive {
		go lease.keepAlive(fctx, cancel, opts.Hold, stop, kept)
	} else {
		close(kept)
	}
	defer func() {
		close(stop)
		<-kept
		lost := errors.Is(context.Cause(fctx), ErrLockLost)
		cancel(nil)
		// Release with a context of its own: ctx may be the reason fn ended.
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), opts.Hold)
		defer rcancel()
		if rerr := lease.Release(rctx); rerr != nil && !(lost && errors.Is(rerr, ErrNotHeld)) {
			err = errors.Join(err, rerr)
		}
		if lost {
			err = errors.Join(err, opErr("lock do", l.name, ErrLockLost))
		}
	}()
	return fn(fctx, lease)
}

// keepAlive extends the lease every hold/3 until stop closes. A transient
// failure is retried at the next tick; ErrNotHeld, or the lease running out
// without a successful extension, cancels fn's context with ErrLockLost.
func (l *Lease) keepAlive(ctx context.Context, cancel context.CancelCauseFunc, hold time.Duration, stop, kept chan struct{}) {
	defer close(kept)
	every := max(hold/3, time.Millisecond)
	expires := time.Now().Add(hold)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		case <-t.C:
		}
		ectx, ecancel := context.WithTimeout(ctx, every)
		start := time.Now()
		err := l.Extend(ectx, hold)
		ecancel()
		switch {
		case err == nil:
			expires = start.Add(hold)
		case errors.Is(err, ErrNotHeld) || time.Now().After(expires):
			cancel(ErrLockLost)
			return
		}
	}
}

// Err returns the error every call of the Lock would return for its name
// (ErrInvalidName), or nil.
func (l *Lock) Err() error { return l.err }
