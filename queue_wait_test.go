package fleet_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/fleettest"
)

// dedicated starts a redis-server of the test's own, so that its command
// counts and restarts concern this test alone.
func dedicated(t *testing.T) *fleettest.Server {
	t.Helper()
	if err := fleettest.Available(); err != nil {
		t.Fatal(err)
	}
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := fleettest.StartServer(c, fleettest.Config{AppendOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

// roundTrips counts the commands that clients sent to s (commands that
// scripts run inside count once, as their EVALSHA; a cached read counts as
// its MULTI/EXEC).
func roundTrips(t *testing.T, s *fleettest.Server) int64 {
	t.Helper()
	calls := ownCalls(t, s)
	return calls["evalsha"] + calls["eval"] + calls["exec"] + calls["ping"] + calls["info"]
}

// TestQueueIdleWaitCost: an idle waiting consumer costs Redis about one
// command a second, and a task submitted to the idle queue is picked up at
// once; with caching on and off.
func TestQueueIdleWaitCost(t *testing.T) {
	for _, noCache := range []bool{false, true} {
		t.Run("nocache="+strconv.FormatBool(noCache), func(t *testing.T) {
			t.Parallel()
			s := dedicated(t)
			f, err := fleet.Open(ctx(t), fleet.Options{URL: s.URL(), DisableCache: noCache})
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			q := fleet.NewQueue[job](f, "idle", fleet.QueueOptions{})
			if _, err := q.Reserve(ctx(t), 1, 0); err != nil { // warm up: scripts loaded, connections open
				t.Fatal(err)
			}
			type result struct {
				tasks []*fleet.Task[job]
				err   error
				at    time.Time
			}
			done := make(chan result, 1)
			go func() {
				got, err := q.Reserve(ctx(t), 1, 10*time.Second)
				done <- result{got, err, time.Now()}
			}()
			time.Sleep(200 * time.Millisecond) // let the waiter settle
			before := roundTrips(t, s)
			time.Sleep(3 * time.Second)
			idle := roundTrips(t, s) - before - 1 // minus our INFO
			limit := int64(6)                     // 3 s: ~3 polls, plus slack
			if noCache {
				limit = 12 // the backoff climbs to 1 s first
			}
			if idle > limit {
				t.Fatalf("an idle consumer sent %d commands in 3 s", idle)
			}
			start := time.Now()
			if _, err := q.Submit(ctx(t), jobN(1)); err != nil {
				t.Fatal(err)
			}
			r := <-done
			if r.err != nil || len(r.tasks) != 1 {
				t.Fatalf("Reserve = %v, %v", r.tasks, r.err)
			}
			pickup := r.at.Sub(start)
			t.Logf("cache=%v idle: %d commands in 3 s; pickup %v", !noCache, idle, pickup)
			if !noCache && pickup > 100*time.Millisecond {
				t.Fatalf("pickup took %v", pickup)
			}
			if err := r.tasks[0].Ack(ctx(t)); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestQueueServerRestart: a consumer keeps working when redis-server
// restarts under it.
func TestQueueServerRestart(t *testing.T) {
	t.Parallel()
	s := dedicated(t)
	f, err := fleet.Open(ctx(t), fleet.Options{URL: s.URL()})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	q := fleet.NewQueue[job](f, "restart", fleet.QueueOptions{})
	cctx, stop := context.WithCancel(ctx(t))
	got := make(chan string, 16)
	consumerDone := make(chan struct{})
	go func() {
		defer close(consumerDone)
		for cctx.Err() == nil {
			tasks, err := q.Reserve(cctx, 4, 2*time.Second)
			if err != nil {
				time.Sleep(50 * time.Millisecond) // the server is away: try again
				continue
			}
			for _, task := range tasks {
				if task.Ack(cctx) == nil {
					got <- task.ID
				}
			}
		}
	}()
	defer func() { stop(); <-consumerDone }()

	submit := func() string {
		t.Helper()
		var id string
		waitFor(t, 20*time.Second, func() bool {
			c, cancel := context.WithTimeout(ctx(t), time.Second)
			defer cancel()
			var err error
			id, err = q.Submit(c, jobN(1))
			return err == nil
		}, "timed out waiting for a submit to succeed")
		return id
	}
	expect := func(id string) {
		t.Helper()
		select {
		case g := <-got:
			if g != id {
				t.Fatalf("consumed %s, want %s", g, id)
			}
		case <-time.After(15 * time.Second):
			t.Fatalf("task %s not consumed", id)
		}
	}
	expect(submit())
	time.Sleep(100 * time.Millisecond) // the consumer waits again
	if err := s.Restart(ctx(t)); err != nil {
		t.Fatal(err)
	}
	expect(submit())
	// And once more after a crash (SIGKILL).
	time.Sleep(100 * time.Millisecond)
	s.Kill()
	if err := s.Restart(ctx(t)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	expect(submit())
	t.Logf("after the crash, a task went through in %v", time.Since(start))
}
