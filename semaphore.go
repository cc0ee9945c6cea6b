package fleet

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/fleet-go/fleet/internal/keys"
	"github.com/fleet-go/fleet/internal/mono"
	"github.com/fleet-go/fleet/internal/script"
)

var (
	semAcquireScript = newScript("sem_acquire.lua", script.Retryable)
	semReleaseScript = newScript("sem_release.lua")
	semExtendScript  = newScript("sem_extend.lua", script.Retryable)
	semAbandonScript = newScript("sem_abandon.lua", script.Retryable)
)

// Semaphore is a fleet-wide counting semaphore (fleet:sem:<name>): at most
// limit permits are held at once, each a lease with a random token, judged
// on the server's clock. A crashed holder's permit comes back after its
// Hold; only the holder can release or extend it. For a limit per key ("3
// sessions per account"), use one semaphore per name. Every process must
// use the same limit for a name: each acquire counts against the limit it
// is given. A Semaphore is safe for concurrent use.
type Semaphore struct {
	f     *Fleet
	name  string
	key   string
	tomb  string
	limit int
	err   error
}

// SemaphoreOptions says how to take a permit.
type SemaphoreOptions struct {
	// Hold is the lease: a crashed holder's permit comes back after Hold.
	// Required, > 0. The lease is counted from just before the acquire was
	// sent (see Lease.Deadline).
	Hold time.Duration
	// Wait bounds how long Acquire blocks while every permit is held. Zero
	// fails at once. Waiters wake when a holder releases (client-side
	// caching invalidation), when the first lease ends, or on a capped,
	// jittered backoff as the fallback. ctx bounds the wait too.
	Wait time.Duration
	// KeepAlive makes Do extend the permit's lease every Hold/3 while its
	// function runs. Without it, the lease ends at its deadline and so
	// does the function's context.
	KeepAlive bool
}

// Semaphore returns the semaphore name with limit permits. A bad name or
// limit makes every call return ErrInvalidArgument (see Err), naming the
// field; nothing is stored.
func (f *Fleet) Semaphore(name string, limit int) *Semaphore {
	s := &Semaphore{f: f, name: name, key: f.keys.Sem(name), tomb: f.keys.SemTomb(name), limit: limit}
	if err := keys.Check(keys.KindSemaphore, name); err != nil {
		s.err = fmt.Errorf("%w: name: %w", ErrInvalidArgument, err)
	} else if limit <= 0 {
		s.err = fmt.Errorf("%w: limit %d must be > 0", ErrInvalidArgument, limit)
	}
	return s
}

// Name returns the semaphore's name.
func (s *Semaphore) Name() string { return s.name }

// Limit returns how many permits may be held at once.
func (s *Semaphore) Limit() int { return s.limit }

// Err returns the error every call of the Semaphore would return for its
// name or limit (ErrInvalidArgument), or nil.
func (s *Semaphore) Err() error { return s.err }

func (s *Semaphore) check(ctx context.Context, hold time.Duration) error {
	if s.err != nil {
		return s.err
	}
	if hold <= 0 {
		return fmt.Errorf("%w: hold %v must be > 0", ErrInvalidArgument, hold)
	}
	return s.f.alive(ctx)
}

// Acquire takes one permit for opts.Hold, waiting up to opts.Wait while
// all are held. As with Lock.Acquire, the lease it returns has more than a
// small margin left before its Deadline, and a ctx that ends while the
// script is in flight leaves nothing held (fleet:semtomb:<name> stops a
// late script). It returns ErrNotObtained when the wait runs out,
// ErrInvalidArgument for Hold <= 0 or Wait < 0 (or a bad name or limit),
// ErrWrongType when a key holds something else (nothing changes), and
// ctx's error when ctx ends first.
func (s *Semaphore) Acquire(ctx context.Context, opts SemaphoreOptions) (*Lease, error) {
	if err := s.check(ctx, opts.Hold); err != nil {
		return nil, opErr("semaphore acquire", s.name, err)
	}
	if opts.Wait < 0 {
		return nil, opErr("semaphore acquire", s.name, fmt.Errorf("%w: wait %v is negative", ErrInvalidArgument, opts.Wait))
	}
	start := s.f.obsStart()
	lease, err := acquireLease(ctx, s, opts.Hold, opts.Wait)
	s.f.semaphoreWaited(ctx, s.name, start, lease != nil, err)
	return lease, opErr("semaphore acquire", s.name, err)
}

// Do takes a permit as Acquire does, runs fn, and always gives the permit
// back, even when fn panics (the panic goes on after the release), as
// Lock.Do does with a lock: fn's context ends, with cause ErrLeaseLost, a
// small margin (Hold/10, at most 1 s) before the lease's Deadline, and Do
// then returns ErrLeaseLost too; with opts.KeepAlive the lease is
// extended every Hold/3 while fn runs. It returns ErrNotObtained when no
// permit came within opts.Wait, else fn's error joined with a failed
// release's.
func (s *Semaphore) Do(ctx context.Context, opts SemaphoreOptions, fn func(ctx context.Context, lease *Lease) error) error {
	lease, err := s.Acquire(ctx, opts)
	if err != nil {
		return err
	}
	return runLeased(ctx, lease.leased("semaphore do", s.name, opts.Hold, opts.KeepAlive),
		func(ctx context.Context) error { return fn(ctx, lease) })
}

// try runs the acquire script once. It returns the lease (its deadline
// counted from just before the send), or how long until the first lease
// ends (-1 when unknown). When the script's outcome is unknown it abandons
// token.
func (s *Semaphore) try(ctx context.Context, token string, hold time.Duration) (*Lease, time.Duration, error) {
	sent := mono.Now()
	res, err := semAcquireScript.Exec(ctx, s.f.client, []string{s.key, s.tomb},
		[]string{token, millis(hold), strconv.Itoa(s.limit)}).AsIntSlice()
	if err != nil {
		if outcomeUnknown(err) {
			s.abandon(token, hold, true)
		}
		return nil, 0, err
	}
	if len(res) != 2 {
		return nil, 0, unexpectedReply("semaphore acquire", len(res))
	}
	if res[0] != 1 {
		if res[1] < 0 {
			return nil, -1, nil
		}
		return nil, time.Duration(res[1]) * time.Millisecond, nil
	}
	if res[1] < int64(s.limit) {
		// Permits are left: pass a wake-up on to another local waiter.
		s.f.watch.WakeOne(s.key)
	}
	lease := &Lease{sem: s, token: token}
	lease.clock.Prove(sent, hold)
	return lease, 0, nil
}

// wait blocks until a permit is taken, until comes, ctx ends or the Fleet
// closes. Waiters wake on the invalidation of the key (a release or an
// acquire anywhere), on a release of this process, when the first lease
// ends, or on a capped, jittered backoff as the fallback.
func (s *Semaphore) wait(ctx context.Context, _ string, hold time.Duration, until time.Time, next time.Duration) (lease *Lease, err error) {
	deadline := time.NewTimer(time.Until(until))
	defer deadline.Stop()
	watch := s.f.watch
	g := watch.Join(s.key)
	defer watch.Leave(s.key, g)
	defer func() {
		if err != nil {
			// A waiter that gives up may have taken a wake-up meant for
			// another: pass it on.
			g.WakeOne()
		}
	}()
	bo := backoff{min: 2 * time.Millisecond, max: 250 * time.Millisecond}
	for {
		// Arm the server's invalidation for the key, and catch a release
		// that came between the failed try and now.
		d, err := s.f.napFor(&bo, next, func() (bool, error) {
			n, err := s.f.client.DoCache(ctx, s.f.client.B().Zcard().Key(s.key).Cache(), hintTTL).AsInt64()
			return err == nil && n < int64(s.limit), err
		})
		if err != nil {
			return nil, err
		}
		if d > 0 {
			if _, _, err := s.f.nap(ctx, d, deadline.C, g.One(), nil); err != nil {
				return nil, err
			}
		}
		if lease, next, err = s.try(ctx, newToken(), hold); lease != nil || err != nil {
			return lease, err
		}
	}
}

// abandon undoes, in the background, a call of token whose outcome is
// unknown (Fleet.abandon): it frees the permit if token holds it, and with
// tomb leaves a tombstone that makes a late acquire script of token take
// nothing.
func (s *Semaphore) abandon(token string, hold time.Duration, tomb bool) {
	tombMs := "0"
	if tomb {
		tombMs = millis(hold + lockTombMargin)
	}
	keys, args := []string{s.key, s.tomb}, []string{token, tombMs}
	s.f.abandon("semaphore "+s.name, hold+lockTombMargin, func(ctx context.Context) error {
		return semAbandonScript.Exec(ctx, s.f.client, keys, args).Error()
	})
}

// release gives l's permit back (Lease.Release).
func (s *Semaphore) release(ctx context.Context, l *Lease) error {
	if err := s.f.alive(ctx); err != nil {
		return opErr("semaphore release", s.name, err)
	}
	n, err := semReleaseScript.Exec(ctx, s.f.client, []string{s.key}, []string{l.token}).AsInt64()
	if err != nil {
		return opErr("semaphore release", s.name, err)
	}
	l.clock.Lose()
	if n != 1 {
		return opErr("semaphore release", s.name, ErrLeaseLost)
	}
	// Wake a waiter of this process at once; those of other processes wake
	// on the invalidation of the key.
	s.f.watch.WakeOne(s.key)
	return nil
}

// extend pushes l's lease to hold from now (Lease.Extend).
func (s *Semaphore) extend(ctx context.Context, l *Lease, hold time.Duration) error {
	if err := s.check(ctx, hold); err != nil {
		return opErr("semaphore extend", s.name, err)
	}
	sent := mono.Now()
	n, err := semExtendScript.Exec(ctx, s.f.client, []string{s.key}, []string{l.token, millis(hold)}).AsInt64()
	if err != nil {
		return opErr("semaphore extend", s.name, err)
	}
	if n != 1 {
		l.clock.Lose()
		return opErr("semaphore extend", s.name, ErrLeaseLost)
	}
	l.clock.Prove(sent, hold)
	return nil
}
