package fleet_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
)

// failLoad runs submitters and consumers on queues of one Fleet through a
// failover, and counts what it loses: tasks whose Submit returned nil and
// that never show up again, and tasks whose Ack returned nil that are
// reserved again (acks that came back).
type failLoad struct {
	f      *fleet.Fleet
	queues map[string]*fleet.Queue[int]

	mu        sync.Mutex
	submitted map[string]map[int]bool // Submit returned nil
	acked     map[string]map[int]bool // Ack returned nil, by payload
	ackedIDs  map[string]bool         // Ack returned nil, by task id
	seen      map[string]map[int]bool // reserved at least once
	cameBack  map[string]int          // tasks reserved again after their Ack returned nil
	submitErr atomic.Int64
	ackErr    atomic.Int64
	acks      map[string]*atomic.Int64 // acks that returned nil, per queue
	next      map[string]*atomic.Int64 // next payload per queue

	stopSubmit context.CancelFunc
	subCtx     context.Context
	stopAll    context.CancelFunc
	allCtx     context.Context
	wg, subWG  sync.WaitGroup
}

func newFailLoad(f *fleet.Fleet, names ...string) *failLoad {
	l := &failLoad{f: f, queues: map[string]*fleet.Queue[int]{},
		submitted: map[string]map[int]bool{}, acked: map[string]map[int]bool{}, seen: map[string]map[int]bool{}, ackedIDs: map[string]bool{}, cameBack: map[string]int{},
		acks: map[string]*atomic.Int64{}, next: map[string]*atomic.Int64{}}
	l.allCtx, l.stopAll = context.WithCancel(context.Background())
	l.subCtx, l.stopSubmit = context.WithCancel(l.allCtx)
	for _, n := range names {
		l.queues[n] = fleet.NewQueue[int](f, n, fleet.QueueOptions{Lease: 2 * time.Second, MaxAttempts: 100})
		l.submitted[n], l.acked[n], l.seen[n] = map[int]bool{}, map[int]bool{}, map[int]bool{}
		l.acks[n], l.next[n] = &atomic.Int64{}, &atomic.Int64{}
	}
	return l
}

// start runs submitters and consumers per queue, and a sweeper that brings
// back tasks whose reservation a failover left behind. limit > 0 stops each
// queue's submitters after that many payloads.
func (l *failLoad) start(submitters, consumers int, limit int64) {
	l.wg.Go(func() { _ = l.f.RunSweeper(l.allCtx, fleet.SweeperOptions{Interval: 200 * time.Millisecond}) })
	for name, q := range l.queues {
		for range submitters {
			l.subWG.Go(func() { l.submit(name, q, limit) })
		}
		for range consumers {
			l.wg.Go(func() { l.consume(name, q) })
		}
	}
}

func (l *failLoad) submit(name string, q *fleet.Queue[int], limit int64) {
	for l.subCtx.Err() == nil {
		p := int(l.next[name].Add(1) - 1)
		if limit > 0 && int64(p) >= limit {
			return
		}
		for l.subCtx.Err() == nil { // the same payload until it is acknowledged
			ctx, cancel := context.WithTimeout(l.subCtx, 5*time.Second)
			_, err := q.Submit(ctx, p)
			cancel()
			if err == nil {
				l.mu.Lock()
				l.submitted[name][p] = true
				l.mu.Unlock()
				break
			}
			l.submitErr.Add(1)
			time.Sleep(20 * time.Millisecond)
		}
	}
}

func (l *failLoad) consume(name string, q *fleet.Queue[int]) {
	for l.allCtx.Err() == nil {
		ctx, cancel := context.WithTimeout(l.allCtx, 5*time.Second)
		tasks, err := q.Reserve(ctx, 10, 100*time.Millisecond)
		cancel()
		if err != nil {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		for _, tk := range tasks {
			l.mu.Lock()
			if l.ackedIDs[tk.ID] { // by id: a submit retried after an error may have made a second task of one payload
				l.cameBack[name]++
			}
			l.seen[name][tk.Payload] = true
			l.mu.Unlock()
			ctx, cancel := context.WithTimeout(l.allCtx, 5*time.Second)
			err := tk.Ack(ctx)
			cancel()
			if err != nil {
				l.ackErr.Add(1)
				continue
			}
			l.mu.Lock()
			l.acked[name][tk.Payload] = true
			l.ackedIDs[tk.ID] = true
			l.mu.Unlock()
			l.acks[name].Add(1)
		}
	}
}

// submittedCount returns how many submits were acknowledged, all queues.
func (l *failLoad) submittedCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, s := range l.submitted {
		n += len(s)
	}
	return n
}

// finish stops the submitters, lets the consumers drain every queue
// (waiting until each is empty: nothing pending, in flight or scheduled),
// stops them, and returns per queue the acknowledged submits that no
// consumer ever reserved (lost) and the acks that came back.
func (l *failLoad) finish(t *testing.T) (lost, cameBack map[string]int) {
	t.Helper()
	l.stopSubmit()
	l.subWG.Wait()
	for name, q := range l.queues {
		waitFor(t, 2*time.Minute, func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			st, err := q.Stats(fleet.WithMinReplicas(ctx, 0))
			return err == nil && st.Pending == 0 && st.InFlight == 0 && st.Scheduled == 0
		}, "queue %s never drained", name)
	}
	l.stopAll()
	l.wg.Wait()
	lost, cameBack = map[string]int{}, map[string]int{}
	l.mu.Lock()
	defer l.mu.Unlock()
	for name := range l.queues {
		lost[name] = 0
		for p := range l.submitted[name] {
			if !l.seen[name][p] {
				lost[name]++
			}
		}
		cameBack[name] = l.cameBack[name]
	}
	return lost, cameBack
}

// stop ends every goroutine of l without draining (for a failed test).
func (l *failLoad) stop() {
	l.stopAll()
	l.subWG.Wait()
	l.wg.Wait()
}

// waitAcks waits until queue name has n more acks than it had at from.
func (l *failLoad) waitAcks(t *testing.T, name string, from, n int64, what string) {
	t.Helper()
	waitFor(t, time.Minute, func() bool { return l.acks[name].Load() >= from+n }, "%s: queue %s acked %d tasks, not %d more than %d", what, name, later(func() any { return l.acks[name].Load() }), n, from)
}
