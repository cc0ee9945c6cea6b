package fleet

// This file holds the one fetcher of the batch workers: it reserves tasks
// for a worker's free slots from its queues (one for NewBatchWorker, several
// by priority for NewPriorityWorker), and tells the slots which queue
// their next task comes from when they take it with their ack
// (worker_commit.go).

import (
	"context"
	"errors"
	"reflect"
	"sync"
	"time"

	"github.com/fleet-go/fleet/internal/engine"
)

// fetcher is the fetcher of a batch worker. It never polls its queues in
// turn: a queue found empty is left alone until the server's invalidation
// of its key says something came (or, without caching, until a push of
// this process or a fallback poll every ConfigPoll), and a paused queue
// (Queue.Pause) until it is resumed.
type fetcher[C, O, P any] struct {
	b       *runner[C, O, P]
	qs      []*Queue[P]
	weights []int
	strict  bool
	index   map[string]int // queue name -> its place in qs

	mu      sync.Mutex // guards what follows: the fetcher and the slots (takeNext) share it
	current []int      // smooth weighted round robin state
	empty   []bool     // the queue was found empty; its key's invalidation clears it
	paused  []bool     // the queue was paused at the fetcher's last look
	chosen  int        // the last pick

	readyAt []time.Time // when each queue may have tasks again without a wake-up (lookAgain; zero: none known)

	// The fetch loop's own state (fetch).
	wakes []<-chan struct{} // each queue's wake-up (ListenPending)
	gates []*pauseGate
	cases []reflect.SelectCase // each queue's wake-up, each pause flag's, soft's end, the timer
	timer *time.Timer
}

func newFetcher[C, O, P any](b *runner[C, O, P], qs []*Queue[P], weights []int, strict bool) *fetcher[C, O, P] {
	p := &fetcher[C, O, P]{b: b, qs: qs, weights: weights, strict: strict, index: map[string]int{},
		current: make([]int, len(qs)), empty: make([]bool, len(qs)), paused: make([]bool, len(qs)),
		readyAt: make([]time.Time, len(qs))}
	for i, q := range qs {
		p.index[q.name] = i
	}
	return p
}

// takeNext picks the queue of the next task by the priorities, as the
// fetcher does for one free slot: under PriorityStrict, the highest queue
// not known to be empty; under PriorityWeighted, the round robin's next
// pick (counted). It returns nil when none is known to have tasks, and
// while a shrink of the slots is under way (runner.mayTake).
func (p *fetcher[C, O, P]) takeNext() *Queue[P] {
	if !p.b.mayTake() {
		return nil // a shrink is under way: the fetcher reserves
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.pick(1, -1) {
		return nil
	}
	return p.qs[p.chosen]
}

// tookNone says that a take from queue found it empty (or failed: the
// fetcher takes over), with what the take learned (st): the queue is
// marked empty, its key's invalidation armed, and when to look again
// without one recorded (lookAgain).
func (p *fetcher[C, O, P]) tookNone(ctx context.Context, queue string, st engine.Reserved) {
	if i, ok := p.index[queue]; ok {
		p.lookAgain(i, st)
		p.arm(ctx, i, st)
	}
}

// lookAgain records when queue i may have tasks again without a wake-up,
// from what a take of it learned: a scheduled task falls due, a rate
// limit's token comes, a group's limit lets go (zero: none known).
func (p *fetcher[C, O, P]) lookAgain(i int, st engine.Reserved) {
	wait := st.NextReady
	for _, d := range [...]time.Duration{st.Limited, st.Blocked} {
		if d > 0 && (wait < 0 || d < wait) {
			wait = d
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.readyAt[i] = time.Time{}
	if wait >= 0 {
		p.readyAt[i] = time.Now().Add(wait)
	}
}

// arm marks queue i empty and arms the invalidation of its keys (its
// pending list's, or its signal's alone when st.Capped: GlobalConcurrency
// holds its tasks), unless the take that found it empty armed them
// (st.Armed: engine.Req.Arm, which read the pending list in its round
// trip); it reports false when the queue turned out to hold tasks after
// all.
func (p *fetcher[C, O, P]) arm(ctx context.Context, i int, st engine.Reserved) bool {
	p.mu.Lock()
	p.empty[i] = true
	p.mu.Unlock()
	if !p.b.w.f.cache {
		return true
	}
	var l int64
	var err error
	if st.Armed {
		l, err = p.qs[i].e.ArmedPending(ctx, st, st.Capped)
	} else {
		p.dropWake(i)                                       // the read below sees every change before it
		l, _, err = p.qs[i].e.CachedPending(ctx, st.Capped) // every shard of a sharded queue
	}
	if err == nil && l > 0 {
		p.mu.Lock()
		p.empty[i] = false
		p.mu.Unlock()
		return false
	}
	return true
}

// dropWake drops queue i's wake-up that came already, if any: a caller
// about to read the queue (a take, or the cached read that arms the next
// wake-up) sees every change before its read, and a wake-up left over from
// one of them would only make an empty take after the next sleep.
func (p *fetcher[C, O, P]) dropWake(i int) {
	select {
	case <-p.wakes[i]:
	default:
	}
}

// pausedNow reports whether q, one of the fetcher's queues, is paused, by its
// pause gate (free while the flag does not change); without caching it
// says true, so that only the fetcher, which polls the flag, reserves.
func (p *fetcher[C, O, P]) pausedNow(ctx context.Context, q *Queue[P]) bool {
	i, ok := p.index[q.name]
	if !ok || !p.b.w.f.cache {
		return true
	}
	return p.gates[i].check(ctx)
}

// candidates reports whether a queue is neither known empty nor paused.
func (p *fetcher[C, O, P]) candidates() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := range p.qs {
		if !p.empty[i] && !p.paused[i] {
			return true
		}
	}
	return false
}

// pick chooses the queue for the next free tasks among those neither
// known empty nor paused, and counts the choice when only is -1 or the
// choice is only; it returns whether a queue was chosen (and is only, when
// only >= 0). p.mu is held.
func (p *fetcher[C, O, P]) pick(free, only int) bool {
	best, total := -1, 0
	for i := range p.qs {
		if p.empty[i] || p.paused[i] {
			continue
		}
		total += p.weights[i]
		switch {
		case best < 0:
			best = i
		case p.strict && p.weights[i] > p.weights[best]:
			best = i
		case !p.strict && p.current[best]+p.weights[best]*free < p.current[i]+p.weights[i]*free:
			best = i
		}
	}
	if best < 0 || (only >= 0 && best != only) {
		return false
	}
	p.chosen = best
	if !p.strict {
		for i := range p.qs {
			if !p.empty[i] && !p.paused[i] {
				p.current[i] += p.weights[i] * free
			}
		}
		p.current[best] -= total * free
	}
	return true
}

// fetch reserves tasks for the free slots, by priority, until Stop begins
// (soft). Its Redis calls use run, which only ends at a hard stop, so a
// reservation is never cut off halfway by a graceful one. An idle worker
// costs Redis about one command every few seconds whatever its slot count:
// it sleeps on the invalidation of its queues' keys.
func (p *fetcher[C, O, P]) fetch(run, soft context.Context) {
	b := p.b
	defer b.endFetch()
	stop := p.listen(run, soft)
	defer stop()
	errBo := backoff{min: 50 * time.Millisecond, max: 5 * time.Second}
	bo := backoff{min: 2 * time.Millisecond, max: time.Second}
	for {
		free, ok := p.freeSlots(soft)
		if !ok {
			return
		}
		got, failed, closed := p.reserveFor(run, free)
		b.giveBack(free - got)
		switch {
		case closed:
			return
		case got > 0:
			bo.n, errBo.n = 0, 0
			continue
		case !failed && p.candidates():
			continue // the queue chosen was empty: try the next at once
		}
		// Nothing came: sleep until a queue's key changes, a pause flag
		// changes, a scheduled task is due, or the fallback poll.
		sleep := b.w.opts.ConfigPoll
		if failed {
			sleep = errBo.next()
		} else if !b.w.f.cache {
			sleep = bo.next()
		}
		if !p.sleep(sleep) {
			return
		}
	}
}

// listen makes the fetch loop's wake-ups: each queue's pending list (every
// shard of a sharded queue), each queue's pause flag, soft's end and a
// timer. It returns what stops them.
func (p *fetcher[C, O, P]) listen(run, soft context.Context) func() {
	f, n := p.b.w.f, len(p.qs)
	p.gates = make([]*pauseGate, n)
	p.wakes = make([]<-chan struct{}, n)
	p.cases = make([]reflect.SelectCase, 0, 2*n+2)
	stops := make([]func(), 0, 2*n)
	for i, q := range p.qs {
		ch, stop := q.e.ListenPending(run)
		p.wakes[i] = ch
		p.gates[i] = newPauseGate(f, q.key.Paused, p.b.w.opts.ConfigPoll)
		stops = append(stops, stop, p.gates[i].stop)
		p.cases = append(p.cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ch)})
	}
	for _, g := range p.gates {
		p.cases = append(p.cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(g.ch)})
	}
	p.timer = time.NewTimer(time.Hour)
	p.cases = append(p.cases,
		reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(soft.Done())},
		reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(p.timer.C)})
	return func() {
		p.timer.Stop()
		for _, s := range stops {
			s()
		}
	}
}

// freeSlots waits for a free slot, then takes every free one (up to
// MaxReserve, what one reserve may take); false when Stop began first.
func (p *fetcher[C, O, P]) freeSlots(soft context.Context) (int, bool) {
	b := p.b
	select {
	case <-soft.Done():
		return 0, false
	case <-b.free:
	}
	free := 1
	for free < min(cap(b.free), MaxReserve) { // a chunk worker's may hold more (worker_chunk.go)
		select {
		case <-b.free:
			free++
		default:
			return free, true
		}
	}
	return free, true
}

// reserveFor reserves up to free tasks from the queue the priorities pick
// among those not known empty nor paused, and hands them to the slots. It
// returns how many it got, whether a reserve failed, and whether the
// worker is closing (run ended, or the Fleet closed).
func (p *fetcher[C, O, P]) reserveFor(run context.Context, free int) (got int, failed, closed bool) {
	b := p.b
	now := time.Now()
	paused := make([]bool, len(p.qs))
	for i, g := range p.gates {
		paused[i] = g.check(run)
	}
	plan := make([]int, len(p.qs))
	p.mu.Lock()
	for i := range p.qs {
		if p.empty[i] && !p.readyAt[i].IsZero() && !now.Before(p.readyAt[i]) {
			p.empty[i], p.readyAt[i] = false, time.Time{}
		}
	}
	copy(p.paused, paused)
	if p.pick(free, -1) {
		plan[p.chosen] = free
	}
	p.mu.Unlock()
	for i, k := range plan {
		if k == 0 {
			continue
		}
		q := p.qs[i]
		// The take, and the read that arms the next wake-up after it
		// (armedTake, or arm's cached read), see every change before them.
		p.dropWake(i)
		tasks, st, err := q.reserveTasks(run, engine.Req{N: k, WantLeft: true, Arm: true, Owner: b.w.name()})
		p.lookAgain(i, st)
		if err == nil && (len(tasks) == 0 || st.Drained) {
			// Known empty before the slots get the tasks: a slot that
			// finishes at once acks without trying a take (takeNext).
			p.mu.Lock()
			p.empty[i] = true
			p.mu.Unlock()
		}
		for _, t := range tasks {
			b.hand(t)
		}
		got += len(tasks)
		switch {
		case err != nil:
			if run.Err() != nil || errors.Is(err, ErrClosed) {
				return got, true, true
			}
			b.w.log.Warn("fleet: worker reserve failed", "queue", q.name, "err", err)
			failed = true
		case st.Limited > 0:
			// The rate limit's tokens come back by time alone (readyAt).
		case len(tasks) == 0 || st.Drained:
			p.arm(run, i, st)
		}
	}
	return got, failed, false
}

// sleep sleeps up to d (less when a scheduled task is due sooner) until a
// wake-up; it reports false when Stop began.
func (p *fetcher[C, O, P]) sleep(d time.Duration) bool {
	n := len(p.qs)
	p.mu.Lock()
	for i := range p.qs {
		if !p.readyAt[i].IsZero() {
			d = min(d, max(time.Until(p.readyAt[i]), time.Millisecond))
		}
	}
	p.mu.Unlock()
	p.timer.Reset(d)
	chosen, _, _ := reflect.Select(p.cases)
	if !p.timer.Stop() {
		select {
		case <-p.timer.C:
		default:
		}
	}
	switch {
	case chosen < n:
		p.mu.Lock()
		p.empty[chosen] = false
		p.mu.Unlock()
	case chosen < 2*n:
		p.gates[chosen-n].stale()
	case chosen == 2*n:
		return false
	default:
		p.mu.Lock()
		for i := range p.empty {
			p.empty[i] = false // the fallback poll: look at every queue again
		}
		p.mu.Unlock()
	}
	return true
}
