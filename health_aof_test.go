package fleet_test

import (
	"sync"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/fleettest"
)

// TestAOFRestartKeepsQueue restarts a redis-server with AOF on while a
// producer submits and a consumer reserves and acks, then drains the queue:
// nothing acknowledged is lost or comes back, nothing pending disappears.
// Every id whose Submit succeeded is acked exactly once in the end, but ids
// whose Ack failed during the restart (the call may or may not have taken
// effect), which may be acked twice, as at-least-once allows.
func TestAOFRestartKeepsQueue(t *testing.T) {
	c := ctx(t)
	s, err := fleettest.StartServer(c, fleettest.Config{AppendOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	f, err := fleet.Open(c, fleet.Options{URL: s.URL()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	if r, err := f.Health(c); err != nil || r.Nodes[0].AOF != true {
		t.Fatalf("health: %+v %v", r, err)
	}
	q := fleet.NewQueue[job](f, "busy", fleet.QueueOptions{Lease: 2 * time.Second})

	var mu sync.Mutex
	submitted := map[string]bool{}
	acked := map[string]int{}
	doubt := map[string]bool{} // ack failed: may or may not have taken effect
	ackedN := func() int { mu.Lock(); defer mu.Unlock(); return len(acked) }

	stopProd := make(chan struct{})
	stopCons := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stopProd:
				return
			default:
			}
			id, err := q.Submit(c, jobN(i))
			if err != nil {
				time.Sleep(5 * time.Millisecond) // the server is restarting
				continue
			}
			mu.Lock()
			submitted[id] = true
			mu.Unlock()
			time.Sleep(time.Millisecond)
		}
	}()
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stopCons:
				return
			default:
			}
			tasks, err := q.Reserve(c, 5, 20*time.Millisecond)
			if err != nil {
				time.Sleep(5 * time.Millisecond)
				continue
			}
			for _, tk := range tasks {
				err := tk.Ack(c)
				mu.Lock()
				if err == nil {
					acked[tk.ID]++
					if acked[tk.ID] > 1 && !doubt[tk.ID] {
						t.Errorf("task %s acked again after a successful ack", tk.ID)
					}
				} else {
					doubt[tk.ID] = true
				}
				mu.Unlock()
			}
		}
	}()
	waitFor(t, 30*time.Second, func() bool { return ackedN() >= 100 }, "no acks before the restart")
	if err := s.Restart(c); err != nil {
		t.Fatal(err)
	}
	at := ackedN()
	waitFor(t, 30*time.Second, func() bool { return ackedN() >= at+100 }, "no acks after the restart")
	close(stopProd)
	// Drain: the sweeper brings back reservations whose ack was lost.
	waitFor(t, 30*time.Second, func() bool {
		if _, err := f.Sweep(c, fleet.SweeperOptions{}); err != nil {
			return false
		}
		st, err := q.Stats(c)
		return err == nil && st == (fleet.QueueStats{})
	}, "queue does not drain")
	close(stopCons)
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	if len(submitted) < 200 {
		t.Fatalf("only %d submitted", len(submitted))
	}
	for id := range submitted {
		switch n := acked[id]; {
		case n == 0 && !doubt[id]:
			t.Errorf("task %s submitted, never acked, and gone", id)
		case n > 1 && !doubt[id]:
			t.Errorf("task %s acked %d times", id, n)
		}
	}
	if st, err := q.Stats(c); err != nil || st != (fleet.QueueStats{}) {
		t.Fatalf("after drain: %+v %v", st, err)
	}
}
