package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/fleet-go/fleet"
)

// fleetInst is fleet on a Fleet of its own (a fresh key prefix), with a
// queue "tiny". raw: the consumer is c goroutines looping Reserve(1)/Ack
// instead of a BatchWorker with c slots.
type fleetInst struct {
	f   *fleet.Fleet
	q   *fleet.Queue[job]
	raw bool
}

func openFleet(raw bool) func(context.Context, env) (instance, error) {
	return func(ctx context.Context, e env) (instance, error) {
		f, err := fleet.Open(ctx, fleet.Options{URL: e.url, Prefix: fmt.Sprintf("b%d:", time.Now().UnixNano())})
		if err != nil {
			return nil, err
		}
		return &fleetInst{f: f, q: fleet.NewQueue[job](f, "tiny", fleet.QueueOptions{}), raw: raw}, nil
	}
}

func (s *fleetInst) submit(ctx context.Context, j job) error {
	_, err := s.q.Submit(ctx, j)
	return err
}

func (s *fleetInst) consume(ctx context.Context, w int, t *tally, _ bool) (func(), error) {
	if s.raw {
		return s.consumeRaw(ctx, w, t), nil
	}
	// The handler learns the task's id and sequence number; OnTaskEnd,
	// called after the ack, counts it done.
	var ids sync.Map
	wk := fleet.NewBatchWorker(s.f, fleet.WorkerOptions{Type: "bench", ID: "w", Slots: w,
		OnTaskEnd: func(id string, err error) {
			v, ok := ids.LoadAndDelete(id)
			switch {
			case !ok:
				t.fail(fmt.Errorf("fleet: OnTaskEnd for %s, never handled", id))
			case err != nil:
				t.fail(fmt.Errorf("fleet: task %s: %w", id, err))
			default:
				t.end(v.(int))
			}
		}}, s.q,
		fleet.BatchFunc[struct{}, struct{}, job](func(_ context.Context, _ *fleet.Slot[struct{}, struct{}], task *fleet.Task[job]) error {
			t.start(task.Payload.Seq, task.Payload.T)
			ids.Store(task.ID, task.Payload.Seq)
			return nil
		}))
	if err := wk.Start(context.WithoutCancel(ctx)); err != nil {
		return nil, err
	}
	return func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := wk.Stop(sctx); err != nil {
			t.fail(fmt.Errorf("fleet: stop: %w", err))
		}
	}, nil
}

// consumeRaw runs w goroutines, each reserving one task at a time (waiting
// up to a second on an empty queue, woken by the invalidation) and acking
// it.
func (s *fleetInst) consumeRaw(ctx context.Context, w int, t *tally) func() {
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	for range w {
		wg.Go(func() {
			for rctx.Err() == nil {
				tasks, err := s.q.Reserve(rctx, 1, time.Second)
				if err != nil {
					if rctx.Err() == nil {
						t.fail(fmt.Errorf("fleet raw: reserve: %w", err))
						time.Sleep(10 * time.Millisecond)
					}
					continue
				}
				for _, task := range tasks {
					t.start(task.Payload.Seq, task.Payload.T)
					if err := task.Ack(rctx); err != nil {
						if rctx.Err() == nil {
							t.fail(fmt.Errorf("fleet raw: ack: %w", err))
						}
						continue
					}
					t.end(task.Payload.Seq)
				}
			}
		})
	}
	return func() { cancel(); wg.Wait() }
}

func (s *fleetInst) close() { _ = s.f.Close() }
