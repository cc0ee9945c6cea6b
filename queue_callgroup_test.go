package fleet

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/fleet-go/fleet/fleettest"
	"github.com/fleet-go/fleet/internal/costmeter"
)

// evalshaCalls reads how many EVALSHA calls s has served.
func evalshaCalls(t *testing.T, s *fleettest.Server) int {
	t.Helper()
	out, err := s.Cli(context.Background(), "INFO", "commandstats", "cpu")
	if err != nil {
		t.Fatal(err)
	}
	snap, err := costmeter.Parse(out)
	if err != nil {
		t.Fatal(err)
	}
	return int(snap.Calls["evalsha"])
}

// TestAckGroup: concurrent Task.Acks of one queue share a call. With the
// replies held back, one ack is in flight; fifty more wait; one of them
// whose ctx ends leaves the group at once (ctx's error) and its ack is
// never sent; when the replies flow, the other 49 go in one script call.
// Each caller gets its own outcome, and Redis holds exactly the one
// reservation that was not acked, which can still be acked.
func TestAckGroup(t *testing.T) {
	ctx, cancelAll := context.WithTimeout(context.Background(), time.Minute)
	defer cancelAll()
	s, err := fleettest.StartServer(ctx, fleettest.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	p, err := fleettest.StartProxy(s.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	f, err := Open(ctx, Options{URL: p.URL()})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	q := NewQueue[int](f, "ag", QueueOptions{Lease: time.Minute})
	const n = 51
	for i := range n {
		if _, err := q.Submit(ctx, i); err != nil {
			t.Fatal(err)
		}
	}
	tasks, err := q.Reserve(ctx, n, 0)
	if err != nil || len(tasks) != n {
		t.Fatalf("Reserve = %d tasks, %v", len(tasks), err)
	}
	before := evalshaCalls(t, s)

	p.HoldReplies()
	errs := make([]error, n-1)
	var wg sync.WaitGroup
	wg.Go(func() { errs[0] = tasks[0].Ack(ctx) })
	waitUntil(t, func() bool { q.calls.mu.Lock(); defer q.calls.mu.Unlock(); return q.calls.busy })
	leaving, leave := context.WithCancel(ctx)
	left := make(chan error, 1)
	go func() { left <- tasks[n-1].Ack(leaving) }()
	for i := 1; i < n-1; i++ {
		wg.Go(func() { errs[i] = tasks[i].Ack(ctx) })
	}
	pending := func() int { q.calls.mu.Lock(); defer q.calls.mu.Unlock(); return len(q.calls.pending) }
	waitUntil(t, func() bool { return pending() == n-1 })
	leave()
	select {
	case err := <-left:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("the ack whose ctx ended returned %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("an ack whose ctx ended kept waiting on the group")
	}
	if got := pending(); got != n-2 {
		t.Fatalf("%d acks wait after one left, want %d", got, n-2)
	}
	p.Thaw()
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("ack %d: %v", i, err)
		}
	}
	if calls := evalshaCalls(t, s) - before; calls != 2 {
		t.Fatalf("%d ack scripts for %d acks, want 2 (the one in flight, then the %d that waited)", calls, n-1, n-2)
	}
	st, err := q.Stats(ctx)
	if err != nil || st.InFlight != 1 || st.Pending != 0 {
		t.Fatalf("Stats = %+v, %v; want the one reservation that was not acked", st, err)
	}
	// The ack that left was never sent: its reservation is intact.
	if err := tasks[n-1].Ack(ctx); err != nil {
		t.Fatalf("acking the reservation whose ack left: %v", err)
	}
	if st, err := q.Stats(ctx); err != nil || st.InFlight != 0 {
		t.Fatalf("Stats = %+v, %v; want nothing in flight", st, err)
	}
	// The group goes idle (its flusher ends once none wait).
	waitUntil(t, func() bool {
		q.calls.mu.Lock()
		defer q.calls.mu.Unlock()
		return !q.calls.busy && len(q.calls.pending) == 0
	})
}
