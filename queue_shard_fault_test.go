package fleet_test

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/fleettest"
	"github.com/fleet-go/fleet/internal/redistest"
)

// A consumer of a sharded queue whose connection is cut again and again
// mid-run (reserves and acks in flight): nothing is lost or left behind.
// Reserves cut in flight hand their tasks back to their shard (or the
// sweeper re-queues them there), no task is acked twice, and a task never
// acked successfully is one whose ack's outcome the cut hid.
func TestQueueShardsConnectionCut(t *testing.T) {
	t.Parallel()
	tg := redistest.Targets(t)[1] // single node, tagged: one address to proxy
	e := open(t, tg)
	p, err := fleettest.StartProxy(strings.TrimPrefix(tg.URL, "redis://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	cut := openOn(t, redistest.Target{Name: "proxied", URL: p.URL(), Tagged: true}, e.Prefix)
	c := ctx(t)
	opts := fleet.QueueOptions{Shards: 4, Lease: 2 * time.Second}
	prod := fleet.NewQueue[job](e.F, "cut", opts)
	var ids []string
	for range 30 {
		got, err := prod.SubmitMany(c, jobs(20))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, got...)
	}
	q := fleet.NewQueue[job](cut, "cut", opts)
	var mu sync.Mutex
	acked := map[string]int{}
	unknown := map[string]bool{} // acks that failed: done or not, the cut hid it
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				ts, err := q.Reserve(c, 5, 100*time.Millisecond)
				if err != nil && !errors.Is(err, fleet.ErrUnavailable) {
					t.Errorf("reserve: %v", err)
					return
				}
				for _, tk := range ts {
					err := tk.Ack(c)
					mu.Lock()
					if err == nil {
						acked[tk.ID]++
					} else {
						unknown[tk.ID] = true
					}
					mu.Unlock()
				}
			}
		}()
	}
	// Tasks keep coming while the cuts hit.
	for i := range 40 {
		got, err := prod.SubmitMany(c, jobs(20))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, got...)
		time.Sleep(25 * time.Millisecond)
		if i%5 == 4 {
			p.Cut()
		}
	}
	// The sweeper re-queues what the cuts stranded; the consumers finish.
	waitFor(t, 60*time.Second, func() bool {
		if _, err := e.F.Sweep(c, fleet.SweeperOptions{}); err != nil {
			t.Fatalf("sweep: %v", err)
		}
		return len(e.shardData(t, "cut", 4)) == 0
	}, "left after the cuts: %v", e.shardData(t, "cut", 4))
	close(stop)
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	for _, id := range ids {
		switch n := acked[id]; {
		case n > 1:
			t.Fatalf("task %s acked %d times", id, n)
		case n == 0 && !unknown[id]:
			t.Fatalf("task %s gone, yet never acked nor hidden by a cut", id)
		}
	}
	if p.Accepts() < 3 {
		t.Fatalf("the proxy accepted %d connections: the cuts never hit", p.Accepts())
	}
	t.Logf("%d acked, %d acks hidden by the cuts", len(acked), len(unknown))
}
