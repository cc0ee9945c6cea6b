package fleet_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/fleettest"
)

// replicated starts a master and one replica in sync with it, stopped when
// the test ends.
func replicated(tb testing.TB) (master, replica *fleettest.Server) {
	tb.Helper()
	c, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sync0 := []string{"--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0"}
	m, err := fleettest.StartServer(c, fleettest.Config{Args: sync0})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(m.Stop)
	r, err := fleettest.StartServer(c, fleettest.Config{Args: append(sync0, "--replicaof", "127.0.0.1", strconv.Itoa(m.Port))})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(r.Stop)
	for {
		if n, err := fleettest.OnlineReplicas(c, m); err == nil && n == 1 {
			return m, r
		}
		select {
		case <-c.Done():
			tb.Fatalf("replica %s never came online", r.Addr)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// cli runs redis-cli on s and fails the test on error.
func cli(t *testing.T, s *fleettest.Server, args ...string) string {
	t.Helper()
	out, err := s.Cli(context.Background(), args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Bad durability options are refused before any connection: a negative
// MinReplicas or ReplicaTimeout.
func TestMinReplicasBadOptions(t *testing.T) {
	t.Parallel()
	for _, o := range []fleet.Options{
		{URL: "redis://127.0.0.1:1", MinReplicas: -1},
		{URL: "redis://127.0.0.1:1", ReplicaTimeout: -time.Second},
	} {
		_, err := fleet.Open(ctx(t), o)
		if !errors.Is(err, fleet.ErrInvalidOptions) || !strings.Contains(err.Error(), "may not be negative") {
			t.Errorf("Open(%+v) = %v; want ErrInvalidOptions, may not be negative", o, err)
		}
	}
}

// MinReplicas above the replicas the master has fails Open with
// ErrInvalidOptions naming the master and the count, and writes nothing.
func TestMinReplicasAboveReplicas(t *testing.T) {
	t.Parallel()
	m, _ := replicated(t)
	_, err := fleet.Open(ctx(t), fleet.Options{URL: m.URL(), MinReplicas: 2})
	if !errors.Is(err, fleet.ErrInvalidOptions) ||
		!strings.Contains(err.Error(), "MinReplicas is 2 but the master "+m.Addr+" has 1 replicas") {
		t.Fatalf("Open = %v; want ErrInvalidOptions naming %s with 1 replica", err, m.Addr)
	}
	if n := cli(t, m, "dbsize"); n != "0" {
		t.Fatalf("dbsize = %s after a refused Open; want 0", n)
	}
	alone, err := fleettest.StartServer(ctx(t), fleettest.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer alone.Stop()
	_, err = fleet.Open(ctx(t), fleet.Options{URL: alone.URL(), MinReplicas: 1})
	if !errors.Is(err, fleet.ErrInvalidOptions) || !strings.Contains(err.Error(), "has 0 replicas") {
		t.Fatalf("Open on a node without replicas = %v; want ErrInvalidOptions, has 0 replicas", err)
	}
}

// With MinReplicas 1 each write is followed by one WAIT on the master, and
// is on the replica when the call returns; reads send no WAIT.
func TestMinReplicasWaits(t *testing.T) {
	t.Parallel()
	m, r := replicated(t)
	// No history: its depth sample at a minute's end is a write (and a
	// WAIT) of its own, which a run across a minute's end would count.
	f, err := fleet.Open(ctx(t), fleet.Options{URL: m.URL(), MinReplicas: 1, ReplicaTimeout: 10 * time.Second, Prefix: "d:", HistoryFlush: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c := ctx(t)
	q := fleet.NewQueue[int](f, "jobs", fleet.QueueOptions{})
	// The queue's registration rounds are at most one a second, counted
	// from the first, which this submit makes.
	first := time.Now()
	if _, err := q.Submit(c, 0); err != nil { // registers the queue too
		t.Fatal(err)
	}
	before := ownCalls(t, m)["wait"]
	start := time.Now()
	for i := 1; i <= 5; i++ {
		if _, err := q.Submit(c, i); err != nil {
			t.Fatal(err)
		}
		// WAIT returned: the replica has the task, no need to wait on it.
		if n := cli(t, r, "llen", "d:fleet:queue:jobs"); n != strconv.Itoa(i+1) {
			t.Fatalf("replica's pending list holds %s tasks after submit %d; want %d", n, i, i+1)
		}
	}
	// Plus one for each registration round (Queue.Register: at most one a
	// second from submits, a write that waits too) when the submits ended
	// over a second after the first registration, as beside CPU hogs.
	took := time.Since(start)
	extra := int64(time.Since(first) / time.Second)
	if got := ownCalls(t, m)["wait"] - before; got < 5 || got > 5+extra {
		t.Fatalf("%d WAIT calls for 5 submits in %v (%v after the first registration); want 5 (up to %d more for the queue's registration)", got, took, time.Since(first), extra)
	}
	before = ownCalls(t, m)["wait"]
	if st, err := q.Stats(c); err != nil || st.Pending != 6 {
		t.Fatalf("Stats = %+v, %v; want 6 pending", st, err)
	}
	if got := ownCalls(t, m)["wait"] - before; got != 0 {
		t.Fatalf("%d WAIT calls for a read; want 0", got)
	}
	tasks, err := q.Reserve(c, 6, 0)
	if err != nil || len(tasks) != 6 {
		t.Fatalf("Reserve = %d tasks, %v", len(tasks), err)
	}
	for _, tk := range tasks {
		if err := tk.Ack(c); err != nil {
			t.Fatal(err)
		}
	}
	if n := cli(t, r, "llen", "d:fleet:queue:jobs"); n != "0" {
		t.Fatalf("replica's pending list holds %s tasks after the acks; want 0", n)
	}
	// A script the server forgot (SCRIPT FLUSH) is sent again with EVAL,
	// which waits too.
	cli(t, m, "script", "flush")
	_, shaB4 := cmdstat(t, m, "evalsha")
	evalB4, _ := cmdstat(t, m, "eval")
	before = ownCalls(t, m)["wait"]
	if _, err := q.Submit(c, 7); err != nil {
		t.Fatalf("Submit after SCRIPT FLUSH: %v", err)
	}
	tasks, err = q.Reserve(c, 1, 0)
	if err != nil || len(tasks) != 1 {
		t.Fatalf("Reserve after SCRIPT FLUSH = %d tasks, %v", len(tasks), err)
	}
	if err := tasks[0].Ack(c); err != nil {
		t.Fatalf("Ack after SCRIPT FLUSH: %v", err)
	}
	_, shaErr := cmdstat(t, m, "evalsha")
	eval, _ := cmdstat(t, m, "eval")
	if shaErr-shaB4 < 1 || eval-evalB4 < 1 {
		t.Fatalf("after SCRIPT FLUSH: %d EVALSHA refused, %d EVAL; want the NOSCRIPT fallback (>= 1 each)", shaErr-shaB4, eval-evalB4)
	}
	if w := ownCalls(t, m)["wait"] - before; w < 3 {
		t.Fatalf("%d WAIT calls for a submit, a reserve and an ack; want >= 3", w)
	}
	if n := cli(t, r, "llen", "d:fleet:queue:jobs"); n != "0" {
		t.Fatalf("replica's pending list holds %s tasks; want 0", n)
	}
	if st, err := q.Stats(c); err != nil || st.Pending != 0 || st.InFlight != 0 {
		t.Fatalf("Stats = %+v, %v; want nothing left", st, err)
	}
}

// When the replica does not confirm in time (it is dead), writes fail with
// ErrNotDurable, yet are on the master; WithMinReplicas(ctx, 0) lets a call
// through, and a negative count is refused.
func TestMinReplicasNotDurable(t *testing.T) {
	t.Parallel()
	m, r := replicated(t)
	f, err := fleet.Open(ctx(t), fleet.Options{URL: m.URL(), MinReplicas: 1, ReplicaTimeout: 2 * time.Second, Prefix: "d:"})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c := ctx(t)
	q := fleet.NewQueue[int](f, "jobs", fleet.QueueOptions{})
	p := fleet.NewPool[string, struct{}](f, "cookies", fleet.PoolOptions{})
	if _, err := q.Submit(c, 1); err != nil {
		t.Fatal(err)
	}
	r.Kill()
	start := time.Now()
	_, err = q.Submit(c, 2)
	if !errors.Is(err, fleet.ErrNotDurable) || !strings.Contains(err.Error(), "0 of 1 replicas confirmed the write within 2000 ms") {
		t.Fatalf("Submit with the replica dead = %v; want ErrNotDurable, 0 of 1 within 2000 ms", err)
	}
	if d := time.Since(start); d < 2*time.Second {
		t.Fatalf("Submit failed after %v, before ReplicaTimeout", d)
	}
	if n := cli(t, m, "llen", "d:fleet:queue:jobs"); n != "2" {
		t.Fatalf("master's pending list holds %s tasks; want 2 (the write happened)", n)
	}
	if _, err := p.Put(c, "a", struct{}{}, time.Minute); !errors.Is(err, fleet.ErrNotDurable) {
		t.Fatalf("Pool.Put = %v; want ErrNotDurable", err)
	}
	tasks, err := q.Reserve(fleet.WithMinReplicas(c, 0), 1, 0)
	if err != nil || len(tasks) != 1 {
		t.Fatalf("Reserve with WithMinReplicas(ctx, 0) = %d, %v; want 1 task", len(tasks), err)
	}
	if err := tasks[0].Ack(c); !errors.Is(err, fleet.ErrNotDurable) {
		t.Fatalf("Ack = %v; want ErrNotDurable", err)
	}
	if _, err := q.Submit(fleet.WithMinReplicas(c, -1), 3); !errors.Is(err, fleet.ErrInvalidArgument) {
		t.Fatalf("Submit with WithMinReplicas(ctx, -1) = %v; want ErrInvalidArgument", err)
	}
	if st, err := q.Stats(c); err != nil || st.Pending != 1 || st.InFlight != 0 {
		t.Fatalf("Stats = %+v, %v; want 1 pending, 0 in flight (the ack happened)", st, err)
	}
	// The replica comes back: writes are confirmed again.
	if err := r.Restart(c); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, func() bool {
		n, err := fleettest.OnlineReplicas(context.Background(), m)
		return err == nil && n == 1
	}, "replica never came back")
	if _, err := q.Submit(c, 4); err != nil {
		t.Fatalf("Submit with the replica back: %v", err)
	}
}

// cmdstat reads INFO commandstats of s for one command: its calls, and its
// failed plus rejected calls.
func cmdstat(t *testing.T, s *fleettest.Server, name string) (calls, failed int) {
	t.Helper()
	snap := ownStats(t, s)
	return int(snap.Calls[name]), int(snap.Failed[name])
}

// Open with MinReplicas on a cluster whose replicas its client sees (they
// are in CLUSTER SLOTS once gossip has spread them, and then in the
// client's nodes): the replicas are not masters to check. Open used to
// ask them for their own replicas, find none, and refuse after
// ReplicaTimeout.
func TestMinReplicasClusterReplicasSeen(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	cl, err := fleettest.StartClusterWith(c, fleettest.ClusterConfig{Replicas: 1, NodeTimeout: 15 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Stop)
	waitFor(t, 30*time.Second, func() bool {
		for _, m := range cl.Nodes {
			out, err := m.Cli(c, "cluster", "slots")
			if err != nil || strings.Count(out, "127.0.0.1") < 6 { // each range: its master and its replica
				return false
			}
		}
		return true
	}, "every master's CLUSTER SLOTS lists the replicas")
	f, err := fleet.Open(c, fleet.Options{Addrs: cl.Addrs(), MinReplicas: 1, ReplicaTimeout: 3 * time.Second})
	if err != nil {
		t.Fatalf("Open with MinReplicas 1: %v", err)
	}
	defer f.Close()
	if n := len(f.Client().Nodes()); n != 6 {
		t.Fatalf("the client sees %d nodes; want the 3 masters and their 3 replicas", n)
	}
	q := fleet.NewQueue[int](f, "seen", fleet.QueueOptions{})
	if _, err := q.Submit(c, 1); err != nil {
		t.Fatalf("a durable submit: %v", err)
	}
}
