package fleet_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
)

// Every lease ends the ctx of the work under it by one mechanism (lease.go):
// with its connection frozen, so that no extension is confirmed, the ctx of
// Lock.Do, Semaphore.Do, Query.Do (each with KeepAlive) and of a batch
// handler ends with cause ErrLeaseLost, and its Err is never nil once the
// lease, less the margin, can no longer be proven. After the thaw each Do
// says ErrLeaseLost, and what the frozen holder held comes free.
func TestLeaseFrozenEveryPrimitive(t *testing.T) {
	const hold = time.Second
	margin := hold / 10
	type work func(ctx context.Context, deadline func() time.Time) error
	cases := []struct {
		name string
		// run runs w under a lease of f through the proxy, and returns what
		// the run returned (a worker: the task's end, from OnTaskEnd).
		run func(t *testing.T, px *proxied, w work) error
		// free waits until what the frozen holder held is free again.
		free func(t *testing.T, px *proxied)
	}{
		{"lock", func(t *testing.T, px *proxied, w work) error {
			return px.Through.Lock("l").Do(ctx(t), fleet.LockOptions{Hold: hold, KeepAlive: true}, func(ctx context.Context, l *fleet.Lease) error {
				return w(ctx, l.Deadline)
			})
		}, func(t *testing.T, px *proxied) {
			waitFor(t, 10*time.Second, func() bool { return !rawExists(t, px.Raw, "fleet:lock:l") }, "the lock stays held")
		}},
		{"semaphore", func(t *testing.T, px *proxied, w work) error {
			return px.Through.Semaphore("s", 1).Do(ctx(t), fleet.SemaphoreOptions{Hold: hold, KeepAlive: true}, func(ctx context.Context, l *fleet.Lease) error {
				return w(ctx, l.Deadline)
			})
		}, func(t *testing.T, px *proxied) {
			l, err := px.Direct.Semaphore("s", 1).Acquire(ctx(t), fleet.SemaphoreOptions{Hold: time.Minute, Wait: 10 * time.Second})
			if err != nil {
				t.Fatalf("the permit stays held: %v", err)
			}
			_ = l.Release(ctx(t))
		}},
		{"claim", func(t *testing.T, px *proxied, w work) error {
			if _, err := fleet.NewPool[string, struct{}](px.Direct, "p", fleet.PoolOptions{}).Put(ctx(t), "v", struct{}{}, 0); err != nil {
				t.Fatal(err)
			}
			p := fleet.NewPool[string, struct{}](px.Through, "p", fleet.PoolOptions{})
			claimed, err := p.Do(ctx(t), fleet.ClaimOptions{Hold: hold, KeepAlive: true}, func(ctx context.Context, c *fleet.Claim[string, struct{}]) error {
				return w(ctx, c.Deadline)
			})
			if !claimed && err == nil {
				t.Fatal("nothing claimed")
			}
			return err
		}, func(t *testing.T, px *proxied) {
			c, err := fleet.NewPool[string, struct{}](px.Direct, "p", fleet.PoolOptions{}).Claim(ctx(t), fleet.ClaimOptions{Hold: time.Minute, Wait: 10 * time.Second})
			if err != nil || c == nil {
				t.Fatalf("the item stays claimed: %v", err)
			}
		}},
		{"task", func(t *testing.T, px *proxied, w work) error {
			q := fleet.NewQueue[job](px.Through, "q", fleet.QueueOptions{Lease: hold})
			ended := make(chan error, 1)
			first := true
			wk := fleet.NewBatchWorker(px.Through, fleet.WorkerOptions{Type: "frozen", ID: "w", Slots: 1, StopGrace: time.Second,
				OnTaskEnd: func(_ string, err error) {
					select {
					case ended <- err:
					default:
					}
				}}, q,
				fleet.BatchFunc[wcfg, out, job](func(ctx context.Context, _ *fleet.Slot[wcfg, out], task *fleet.Task[job]) error {
					if !first {
						return nil // the task came back: done
					}
					first = false
					return w(ctx, task.Deadline)
				}))
			startWorker(t, wk)
			if _, err := fleet.NewQueue[job](px.Direct, "q", fleet.QueueOptions{Lease: hold}).Submit(ctx(t), jobN(1)); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-ended:
				return err
			case <-time.After(30 * time.Second):
				t.Fatal("the task never ended")
				return nil
			}
		}, func(t *testing.T, px *proxied) {
			// The worker's release (or the sweeper) hands the task back,
			// and it runs again, to its ack.
			runSweeper(t, px.Direct, 50*time.Millisecond)
			k := px.E.qk("q")
			waitQueueGone(t, px.E, k)
			if dead := px.E.lrange(t, k.Dead); len(dead) > 0 {
				t.Fatalf("the task went to the dead letters: %v", dead)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			px := startProxied(t, fleet.Options{})
			type seen struct {
				cause    error
				lateNil  time.Duration // how far past deadline - margin Err was still nil (0: never)
				deadline time.Time
			}
			got := make(chan seen, 1)
			err := c.run(t, px, func(ctx context.Context, deadline func() time.Time) error {
				px.P.Freeze()
				var s seen
				for ctx.Err() == nil {
					// Err checked at now: nil is allowed only while the
					// lease, less the margin, can still be proven.
					if late := time.Since(deadline().Add(-margin)); late > 0 && ctx.Err() == nil {
						s.lateNil = late
						break
					}
					select {
					case <-ctx.Done():
					case <-time.After(time.Millisecond):
					}
				}
				s.cause, s.deadline = context.Cause(ctx), deadline()
				got <- s
				px.P.Thaw()
				return ctx.Err()
			})
			s := <-got
			if s.lateNil > 0 {
				t.Fatalf("Err was nil %v past the lease's end less the margin", s.lateNil)
			}
			if !errors.Is(s.cause, fleet.ErrLeaseLost) {
				t.Fatalf("the work's ctx ended with cause %v, want ErrLeaseLost", s.cause)
			}
			if !errors.Is(err, fleet.ErrLeaseLost) {
				t.Fatalf("the run returned %v, want ErrLeaseLost", err)
			}
			c.free(t, px)
		})
	}
}
