package fleet_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
)

// TestChunkWorkerLeaseOverrun: a chunk whose handler runs on while its
// connection is frozen, so that no extension of its tasks' leases is
// confirmed, overruns its lease: every task's own ctx (Chunk.Context(i))
// ends with cause ErrLeaseLost, by the one lease mechanism (its Err is
// never nil once the task's lease, less the margin, can no longer be
// proven). The handler fails each task with its ctx's cause, and each
// ends with ErrLeaseLost (handed back, by the worker or the sweeper).
// After the thaw the tasks run again in a chunk of their own and are
// acked, none a dead letter, the queue's keys gone. (A handler that
// returns nil instead has its tasks acked when they are still its own:
// the ack's owner check decides, as for a batch worker.)
func TestChunkWorkerLeaseOverrun(t *testing.T) {
	t.Parallel()
	const lease, n = time.Second, 5
	margin := lease / 10
	px := startProxied(t, fleet.Options{})
	k := px.E.qk("overrun")
	opts := fleet.QueueOptions{Lease: lease}
	ids := submitJobs(t, fleet.NewQueue[job](px.Direct, "overrun", opts), n)
	runSweeper(t, px.Direct, 50*time.Millisecond)
	var mu sync.Mutex
	var chunks [][]string
	ends := map[string][]error{}
	type seen struct {
		cause   error
		lateNil time.Duration // how far past deadline - margin Err was still nil (0: never)
	}
	var firstRun []seen
	w := fleet.NewChunkWorker(px.Through, fleet.WorkerOptions{Type: "overrun", ID: "w", Slots: 1, StopGrace: time.Second,
		OnTaskEnd: func(id string, err error) {
			mu.Lock()
			defer mu.Unlock()
			ends[id] = append(ends[id], err)
		}}, fleet.NewQueue[job](px.Through, "overrun", opts),
		fleet.ChunkOptions{MinSize: n, MaxSize: n, MaxWait: time.Hour},
		fleet.ChunkFunc[wcfg, out, job](func(ctx context.Context, _ *fleet.Slot[wcfg, out], c *fleet.Chunk[job]) error {
			mu.Lock()
			var chunk []string
			for _, tk := range c.Tasks {
				chunk = append(chunk, tk.ID)
			}
			chunks = append(chunks, chunk)
			again := len(chunks) > 1
			mu.Unlock()
			if again {
				return nil
			}
			px.P.Freeze()
			defer px.P.Thaw()
			got := make([]seen, len(c.Tasks))
			for i, tk := range c.Tasks {
				tctx := c.Context(i)
				for tctx.Err() == nil {
					if late := time.Since(tk.Deadline().Add(-margin)); late > 0 && tctx.Err() == nil {
						got[i].lateNil = late
						break
					}
					select {
					case <-tctx.Done():
					case <-time.After(time.Millisecond):
					}
				}
				got[i].cause = context.Cause(tctx)
				_ = c.Fail(i, got[i].cause) // what a handler that watches its tasks' ctxs does
			}
			mu.Lock()
			firstRun = got
			mu.Unlock()
			return nil
		}))
	startWorker(t, w)
	waitFor(t, 20*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(ends) == n
	}, "the overrun chunk's tasks never ended")
	mu.Lock()
	first := firstRun
	firstEnds := map[string]error{}
	for id, es := range ends {
		firstEnds[id] = es[0]
	}
	mu.Unlock()
	if len(first) != n {
		t.Fatalf("the first chunk saw %v", first)
	}
	for i, s := range first {
		if s.lateNil > 0 {
			t.Errorf("task %d's ctx: Err was nil %v past its lease's end less the margin", i, s.lateNil)
		}
		if !errors.Is(s.cause, fleet.ErrLeaseLost) {
			t.Errorf("task %d's ctx ended with cause %v; want ErrLeaseLost", i, s.cause)
		}
	}
	for _, id := range ids {
		if !errors.Is(firstEnds[id], fleet.ErrLeaseLost) {
			t.Errorf("task %s ended %v; want ErrLeaseLost", id, firstEnds[id])
		}
	}
	waitFor(t, 20*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, id := range ids {
			if len(ends[id]) != 2 {
				return false
			}
		}
		return true
	}, "the tasks never ran again: %v", later(func() any { mu.Lock(); defer mu.Unlock(); return ends }))
	waitQueueGone(t, px.E, k)
	mu.Lock()
	ends2, chunks2 := map[string]error{}, slices.Clone(chunks)
	for id, es := range ends {
		ends2[id] = es[1]
	}
	mu.Unlock()
	for _, id := range ids {
		if ends2[id] != nil {
			t.Errorf("task %s's second run ended %v; want an ack", id, ends2[id])
		}
	}
	if len(chunks2) != 2 || len(chunks2[1]) != n {
		t.Fatalf("chunks %v; want the %d tasks again, in one", chunks2, n)
	}
	if dead := px.E.lrange(t, k.Dead); len(dead) > 0 {
		t.Fatalf("dead letters %v", dead)
	}
}
