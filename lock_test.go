package fleet_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/internal/redistest"
)

func TestLockAcquireRelease(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		lk := e.F.Lock("harvest:nowsecure.nl")
		lease, err := lk.Acquire(c, fleet.LockOptions{Hold: 30 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		key := e.key("fleet:lock:harvest:nowsecure.nl", "fleet:lock:{harvest:nowsecure.nl}")
		fence := e.key("fleet:fence:harvest:nowsecure.nl", "fleet:fence:{harvest:nowsecure.nl}")
		if v, _ := e.get(t, key); v != lease.Token() || v == "" {
			t.Fatalf("lock key holds %q, want the token %q", v, lease.Token())
		}
		pttl, _ := e.Raw.Do(c, e.Raw.B().Pttl().Key(key).Build()).AsInt64()
		if pttl <= 29000 || pttl > 30000 {
			t.Fatalf("lock PTTL %d, want about 30000", pttl)
		}
		if v, _ := e.get(t, fence); v != strconv.FormatInt(lease.Fence(), 10) {
			t.Fatalf("fence key %q, lease fence %d", v, lease.Fence())
		}
		if got := e.keys(t); !slices.Equal(got, []string{fence, key}) {
			t.Fatalf("keys %v", got)
		}
		// Held: zero wait fails at once.
		start := time.Now()
		if _, err := lk.Acquire(c, fleet.LockOptions{Hold: time.Second}); !errors.Is(err, fleet.ErrNotObtained) {
			t.Fatalf("second Acquire: %v, want ErrNotObtained", err)
		}
		if d := time.Since(start); d > time.Second {
			t.Fatalf("zero wait took %v", d)
		}
		if err := lease.Release(c); err != nil {
			t.Fatal(err)
		}
		if _, ok := e.get(t, key); ok {
			t.Fatal("lock key left after release")
		}
		if err := lease.Release(c); !errors.Is(err, fleet.ErrNotHeld) {
			t.Fatalf("second Release: %v, want ErrNotHeld", err)
		}
		again, err := lk.Acquire(c, fleet.LockOptions{Hold: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if again.Fence() <= lease.Fence() {
			t.Fatalf("fence did not rise: %d then %d", lease.Fence(), again.Fence())
		}
		// The fence stays above every earlier one even if its key is lost.
		e.do(t, e.Raw.B().Del().Key(fence).Build())
		if err := again.Release(c); err != nil {
			t.Fatal(err)
		}
		third, err := lk.Acquire(c, fleet.LockOptions{Hold: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if third.Fence() <= again.Fence() {
			t.Fatalf("fence after losing its key: %d, earlier %d", third.Fence(), again.Fence())
		}
	})
}

// A holder whose lease ran out, and whose lock another then took, can
// neither release nor extend the new holder's lock.
func TestLockExpiredHolderCannotTouchNewHolder(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		other := openOn(t, tg, e.Prefix)
		c := ctx(t)
		old, err := e.F.Lock("job").Acquire(c, fleet.LockOptions{Hold: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		cur, err := other.Lock("job").Acquire(c, fleet.LockOptions{Hold: 30 * time.Second, Wait: 5 * time.Second})
		if err != nil {
			t.Fatalf("second holder after expiry: %v", err)
		}
		key := e.key("fleet:lock:job", "fleet:lock:{job}")
		if err := old.Release(c); !errors.Is(err, fleet.ErrNotHeld) {
			t.Fatalf("stale Release: %v, want ErrNotHeld", err)
		}
		if err := old.Extend(c, time.Hour); !errors.Is(err, fleet.ErrNotHeld) {
			t.Fatalf("stale Extend: %v, want ErrNotHeld", err)
		}
		if v, _ := e.get(t, key); v != cur.Token() {
			t.Fatalf("lock holds %q, want the new holder's %q", v, cur.Token())
		}
		pttl, _ := e.Raw.Do(c, e.Raw.B().Pttl().Key(key).Build()).AsInt64()
		if pttl <= 25000 || pttl > 30000 {
			t.Fatalf("stale Extend changed the TTL: %d ms", pttl)
		}
		if cur.Fence() <= old.Fence() {
			t.Fatalf("fences %d then %d", old.Fence(), cur.Fence())
		}
		if err := cur.Extend(c, time.Minute); err != nil {
			t.Fatal(err)
		}
		pttl, _ = e.Raw.Do(c, e.Raw.B().Pttl().Key(key).Build()).AsInt64()
		if pttl <= 55000 {
			t.Fatalf("Extend left PTTL %d", pttl)
		}
		if err := cur.Release(c); err != nil {
			t.Fatal(err)
		}
	})
}

// A waiter is woken by the release, long before the holder's lease or the
// wait would end.
func TestLockWaiterWokenByRelease(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		for _, nocache := range []bool{false, true} {
			t.Run("nocache="+strconv.FormatBool(nocache), func(t *testing.T) {
				e := open(t, tg)
				waiterF := openOn(t, tg, e.Prefix, func(o *fleet.Options) { o.DisableCache = nocache })
				c := ctx(t)
				held, err := e.F.Lock("w").Acquire(c, fleet.LockOptions{Hold: time.Minute})
				if err != nil {
					t.Fatal(err)
				}
				got := make(chan time.Time, 1)
				go func() {
					l, err := waiterF.Lock("w").Acquire(c, fleet.LockOptions{Hold: time.Minute, Wait: 30 * time.Second})
					if err != nil {
						t.Error(err)
						close(got)
						return
					}
					got <- time.Now()
					_ = l.Release(c)
				}()
				time.Sleep(300 * time.Millisecond) // let the waiter settle into its wait
				released := time.Now()
				if err := held.Release(c); err != nil {
					t.Fatal(err)
				}
				select {
				case at, ok := <-got:
					if !ok {
						return
					}
					t.Logf("hand-off after %v", at.Sub(released))
				case <-time.After(10 * time.Second):
					t.Fatal("waiter not woken by the release")
				}
			})
		}
	})
}

func TestLockContendedIsExclusive(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		second := openOn(t, tg, e.Prefix)
		c := ctx(t)
		var inside, max, total atomic.Int64
		var wg sync.WaitGroup
		for i := range 20 {
			f := e.F
			if i%2 == 1 {
				f = second
			}
			wg.Go(func() {
				for range 10 {
					err := f.Lock("shared").Do(c, fleet.LockOptions{Hold: 5 * time.Second, Wait: 20 * time.Second}, func(context.Context, *fleet.Lease) error {
						n := inside.Add(1)
						for m := max.Load(); n > m && !max.CompareAndSwap(m, n); m = max.Load() {
						}
						time.Sleep(100 * time.Microsecond)
						inside.Add(-1)
						total.Add(1)
						return nil
					})
					if err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		if max.Load() != 1 || total.Load() != 200 {
			t.Fatalf("max holders at once %d (want 1), total %d (want 200)", max.Load(), total.Load())
		}
	})
}

func TestLockDo(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		key := e.key("fleet:lock:do", "fleet:lock:{do}")
		lk := e.F.Lock("do")
		boom := errors.New("boom")
		err := lk.Do(c, fleet.LockOptions{Hold: time.Minute}, func(ctx context.Context, l *fleet.Lease) error {
			if v, _ := e.get(t, key); v != l.Token() {
				t.Errorf("inside Do the key holds %q", v)
			}
			return boom
		})
		if !errors.Is(err, boom) {
			t.Fatalf("Do = %v, want fn's error", err)
		}
		if _, ok := e.get(t, key); ok {
			t.Fatal("Do left the lock held after an error")
		}
		func() {
			defer func() {
				if recover() == nil {
					t.Error("panic swallowed")
				}
			}()
			_ = lk.Do(c, fleet.LockOptions{Hold: time.Minute}, func(context.Context, *fleet.Lease) error { panic("fn panics") })
		}()
		if _, ok := e.get(t, key); ok {
			t.Fatal("Do left the lock held after a panic")
		}
		// KeepAlive carries the lease past Hold (a hold long enough that a
		// loaded machine's slow extension does not lose it).
		err = lk.Do(c, fleet.LockOptions{Hold: time.Second, KeepAlive: true}, func(ctx context.Context, l *fleet.Lease) error {
			time.Sleep(1500 * time.Millisecond)
			if v, _ := e.get(t, key); v != l.Token() {
				t.Errorf("KeepAlive lost the lock: key holds %q", v)
			}
			return ctx.Err()
		})
		if err != nil {
			t.Fatalf("Do with KeepAlive = %v", err)
		}
		// KeepAlive cancels fn when the lock is lost to another.
		err = lk.Do(c, fleet.LockOptions{Hold: 300 * time.Millisecond, KeepAlive: true}, func(ctx context.Context, l *fleet.Lease) error {
			e.do(t, e.Raw.B().Set().Key(key).Value("thief").Build())
			select {
			case <-ctx.Done():
				if !errors.Is(context.Cause(ctx), fleet.ErrLockLost) {
					t.Errorf("cause %v", context.Cause(ctx))
				}
				return nil
			case <-time.After(5 * time.Second):
				return errors.New("fn was not cancelled")
			}
		})
		if !errors.Is(err, fleet.ErrLockLost) {
			t.Fatalf("Do after losing the lock = %v, want ErrLockLost", err)
		}
		if v, _ := e.get(t, key); v != "thief" {
			t.Fatalf("the loser's release touched the new holder: %q", v)
		}
		// Not obtained: fn never runs.
		ran := false
		err = lk.Do(c, fleet.LockOptions{Hold: time.Second}, func(context.Context, *fleet.Lease) error { ran = true; return nil })
		if !errors.Is(err, fleet.ErrNotObtained) || ran {
			t.Fatalf("Do on a held lock = %v, ran %v", err, ran)
		}
	})
}

func TestLockWaitTimesOut(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		if _, err := e.F.Lock("busy").Acquire(c, fleet.LockOptions{Hold: time.Minute}); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		_, err := e.F.Lock("busy").Acquire(c, fleet.LockOptions{Hold: time.Second, Wait: 200 * time.Millisecond})
		if !errors.Is(err, fleet.ErrNotObtained) {
			t.Fatalf("Acquire = %v, want ErrNotObtained", err)
		}
		if d := time.Since(start); d < 200*time.Millisecond || d > 5*time.Second {
			t.Fatalf("waited %v for a 200ms wait", d)
		}
		cctx, cancel := context.WithTimeout(c, 100*time.Millisecond)
		defer cancel()
		if _, err := e.F.Lock("busy").Acquire(cctx, fleet.LockOptions{Hold: time.Second, Wait: time.Minute}); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Acquire with a ctx deadline = %v, want DeadlineExceeded", err)
		}
	})
}

// Waiters of one process give up (their Wait runs out) around the moment
// the holder releases: a lock handed to one that gave up is passed on, and
// at the end the lock is free. (A ctx that ends while an acquire script is
// in flight is TestLockAcquireInFlightLeavesNothing's.)
func TestLockHandoverToWaitersGivingUp(t *testing.T) {
	e := open(t, redistest.Targets(t)[0])
	lk := e.F.Lock("handover")
	key := e.key("fleet:lock:handover", "fleet:lock:{handover}")
	for iter := range 40 {
		lease, err := lk.Acquire(ctx(t), fleet.LockOptions{Hold: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				l, err := lk.Acquire(ctx(t), fleet.LockOptions{Hold: 5 * time.Second, Wait: time.Duration(5+rand.IntN(10)) * time.Millisecond})
				if err == nil {
					time.Sleep(time.Millisecond)
					if err := l.Release(context.Background()); err != nil {
						t.Errorf("release: %v", err)
					}
				}
			})
		}
		time.Sleep(time.Duration(5+rand.IntN(8)) * time.Millisecond)
		if err := lease.Release(context.Background()); err != nil {
			t.Fatalf("release: %v", err)
		}
		wg.Wait()
		if v, ok := e.get(t, key); ok {
			t.Fatalf("iteration %d: lock still held by %q after everyone left", iter, v)
		}
	}
}

// A fence key of the wrong type fails Acquire and changes nothing: the
// lock is not left held by a token nobody has.
func TestLockFenceWrongTypeChangesNothing(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		fence := e.key("fleet:fence:wt", "fleet:fence:{wt}")
		e.do(t, e.Raw.B().Lpush().Key(fence).Element("x").Build())
		if _, err := e.F.Lock("wt").Acquire(ctx(t), fleet.LockOptions{Hold: time.Minute}); !errors.Is(err, fleet.ErrWrongType) {
			t.Fatalf("Acquire = %v, want ErrWrongType", err)
		}
		if v, ok := e.get(t, e.key("fleet:lock:wt", "fleet:lock:{wt}")); ok {
			t.Fatalf("a failed Acquire left the lock held by %q", v)
		}
	})
}
