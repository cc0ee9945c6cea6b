package fleet_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/fleettest"
	"github.com/fleet-go/fleet/internal/costmeter"
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

// A reply held back until the lease's hold ran out on the server is not a
// lease, for a lock and for a semaphore permit (acquireLease): with Wait 0
// Acquire says ErrNotObtained and nothing stays held, with a Wait it tries
// again and returns a lease that has time left, whose token the server
// holds.
func TestLeaseDelayedReply(t *testing.T) {
	const hold = 300 * time.Millisecond
	cases := []struct {
		name string
		key  string
		// acquire takes the lease through f.
		acquire func(c context.Context, f *fleet.Fleet, wait time.Duration) (*fleet.Lease, error)
		// holders lists the tokens the server holds.
		holders func(t *testing.T, raw rueidis.Client) []string
	}{
		{"lock", "fleet:lock:slow", func(c context.Context, f *fleet.Fleet, wait time.Duration) (*fleet.Lease, error) {
			return f.Lock("slow").Acquire(c, fleet.LockOptions{Hold: hold, Wait: wait})
		}, func(t *testing.T, raw rueidis.Client) []string {
			if v, ok := rawGet(t, raw, "fleet:lock:slow"); ok {
				return []string{v}
			}
			return nil
		}},
		{"semaphore", "fleet:sem:slow", func(c context.Context, f *fleet.Fleet, wait time.Duration) (*fleet.Lease, error) {
			return f.Semaphore("slow", 1).Acquire(c, fleet.SemaphoreOptions{Hold: hold, Wait: wait})
		}, func(t *testing.T, raw rueidis.Client) []string {
			toks, err := raw.Do(context.Background(), raw.B().Zrange().Key("fleet:sem:slow").Min("0").Max("-1").Build()).AsStrSlice()
			if err != nil {
				t.Fatal(err)
			}
			return toks
		}},
	}
	for _, tc := range cases {
		for _, wait := range []time.Duration{0, 10 * time.Second} {
			t.Run(tc.name+"/wait="+wait.String(), func(t *testing.T) {
				t.Parallel()
				px := startProxied(t, fleet.Options{})
				c := ctx(t)
				warm, err := tc.acquire(c, px.Through, 0) // scripts loaded, the fence seeded
				if err != nil {
					t.Fatal(err)
				}
				if err := warm.Release(c); err != nil {
					t.Fatal(err)
				}
				// Counted through a direct connection: cheap enough to poll
				// on a loaded machine.
				scripts := func() int64 {
					snap, err := costmeter.Read(context.Background(), px.Raw)
					if err != nil {
						t.Fatal(err)
					}
					return snap.Calls["evalsha"] + snap.Calls["eval"]
				}
				before := scripts()
				px.P.HoldReplies()
				type result struct {
					l   *fleet.Lease
					err error
					at  time.Time
				}
				done := make(chan result, 1)
				go func() {
					l, err := tc.acquire(c, px.Through, wait)
					done <- result{l, err, time.Now()}
				}()
				// The script ran (the count of scripts run rose: the key may
				// be gone before a poll sees it), and its hold ran out on the
				// server, before the reply gets through.
				waitFor(t, 30*time.Second, func() bool { return scripts() > before }, "the acquire never reached the server")
				waitFor(t, 30*time.Second, func() bool { return !rawExists(t, px.Raw, tc.key) }, "the lease never expired on the server")
				px.P.Thaw()
				var r result
				select {
				case r = <-done:
				case <-time.After(15 * time.Second):
					t.Fatal("Acquire did not return")
				}
				if wait == 0 {
					if !errors.Is(r.err, fleet.ErrNotObtained) {
						t.Fatalf("Acquire = %v, %v; want ErrNotObtained for a lease that expired on its way", r.l, r.err)
					}
					if h := tc.holders(t, px.Raw); len(h) != 0 {
						t.Fatalf("held after an expired acquire: %v", h)
					}
					return
				}
				if r.err != nil {
					t.Fatal(r.err)
				}
				if left := r.l.Deadline().Sub(r.at); left <= 0 || left > hold {
					t.Fatalf("lease returned with %v left of %v", left, hold)
				}
				if h := tc.holders(t, px.Raw); !slices.Equal(h, []string{r.l.Token()}) {
					t.Fatalf("the server holds %v, the lease's token is %q", h, r.l.Token())
				}
			})
		}
	}
}

// acquirePaused runs acquire with a ctx of 100 ms while server s holds
// every client's commands (CLIENT PAUSE 700 ms ALL), so that its script
// waits in flight: acquire must return ctx's error at once. It returns
// once the server answers raw again.
func acquirePaused(t *testing.T, s *fleettest.Server, raw rueidis.Client, acquire func(ctx context.Context) error) {
	t.Helper()
	c := ctx(t)
	if _, err := s.Cli(c, "CLIENT", "PAUSE", "700", "ALL"); err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	sctx, cancel := context.WithTimeout(c, 100*time.Millisecond)
	err := acquire(sctx)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire on a paused server = %v, want DeadlineExceeded", err)
	}
	if d := time.Since(paused); d > 500*time.Millisecond {
		t.Fatalf("Acquire returned %v after its ctx of 100ms", d)
	}
	if err := raw.Do(c, raw.B().Ping().Build()).Error(); err != nil {
		t.Fatal(err)
	}
}
