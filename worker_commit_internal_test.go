package fleet

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fleet-go/fleet/internal/engine"
)

// TestAckerGroupsWhileInFlight: an acker of one call in flight. A slot
// that hands a task over while a call is in flight waits, and every task
// handed over meanwhile goes in the next call, made by the first of them;
// a lone task goes at once. Every slot gets the outcome of its own task.
func TestAckerGroupsWhileInFlight(t *testing.T) {
	a := acker[int]{max: 1}
	log := newCallLog(1) // the first call stays in flight until the others queued
	gate, call := log.gate, log.call
	commit := func(id string) *ackReq[int] {
		r := &ackReq[int]{t: &Task[int]{ID: id}}
		a.commit(r, call)
		return r
	}
	var wg sync.WaitGroup
	results := make(map[string]*ackReq[int])
	var rmu sync.Mutex
	run := func(id string) {
		defer wg.Done()
		r := commit(id)
		rmu.Lock()
		results[id] = r
		rmu.Unlock()
	}
	wg.Add(1)
	go run("a")
	waitUntil(t, func() bool { return len(log.made()) == 1 })
	for _, id := range []string{"b", "c", "d", "e"} {
		wg.Add(1)
		go run(id)
	}
	waitUntil(t, func() bool { a.mu.Lock(); defer a.mu.Unlock(); return len(a.pending) == 4 })
	close(gate)
	wg.Wait()
	calls := log.made()
	if len(calls) != 2 || !slices.Equal(calls[0], []string{"a"}) || len(calls[1]) != 4 {
		t.Fatalf("calls = %v; want [a] then the four others in one", calls)
	}
	second := slices.Clone(calls[1])
	slices.Sort(second)
	if !slices.Equal(second, []string{"b", "c", "d", "e"}) {
		t.Fatalf("second call = %v", calls[1])
	}
	for id, r := range results {
		if r.acked != 1 || r.t.ID != id {
			t.Fatalf("%s: outcome %+v", id, r)
		}
	}
	if a.inFlight != 0 || len(a.pending) != 0 {
		t.Fatalf("acker left %d calls in flight with %d pending", a.inFlight, len(a.pending))
	}
	// Alone again: a task goes at once, in a call of its own.
	commit("f")
	if calls = log.made(); len(calls) != 3 || !slices.Equal(calls[2], []string{"f"}) {
		t.Fatalf("calls = %v; want [f] last", calls)
	}
}

// TestAckerBoundsACall: a call acks at most engine.MaxCommit tasks; the rest go in
// the next call.
func TestAckerBoundsACall(t *testing.T) {
	a := acker[int]{max: 1}
	log := newCallLog(1)
	gate, call := log.gate, log.call
	var wg sync.WaitGroup
	n := engine.MaxCommit + 10
	for i := range n + 1 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a.commit(&ackReq[int]{t: &Task[int]{}}, call)
		}()
		if i == 0 {
			waitUntil(t, func() bool { return len(log.made()) == 1 })
		}
	}
	waitUntil(t, func() bool { a.mu.Lock(); defer a.mu.Unlock(); return len(a.pending) == n })
	close(gate)
	wg.Wait()
	var sizes []int
	for _, c := range log.made() {
		sizes = append(sizes, len(c))
	}
	if !slices.Equal(sizes, []int{1, engine.MaxCommit, 10}) {
		t.Fatalf("call sizes = %v; want [1 %d 10]", sizes, engine.MaxCommit)
	}
}

// TestAckerTwoInFlight: an acker of up to two calls at once.
// The first two slots each make a call at once; the next three wait, and
// each call that ends hands the lead to the first slot still waiting,
// which makes one call for all that wait: the three go in one call, or in
// two.
func TestAckerTwoInFlight(t *testing.T) {
	a := acker[int]{max: 2}
	log := newCallLog(2)
	gate, call := log.gate, log.call
	var wg sync.WaitGroup
	ncalls := func() int { return len(log.made()) }
	npending := func() int { a.mu.Lock(); defer a.mu.Unlock(); return len(a.pending) }
	for i, id := range []string{"a", "b", "c", "d", "e"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := &ackReq[int]{t: &Task[int]{ID: id}}
			a.commit(r, call)
			if r.acked != 1 {
				t.Errorf("%s: acked %d", id, r.acked)
			}
		}()
		if i < 2 {
			waitUntil(t, func() bool { return ncalls() == i+1 })
		} else {
			waitUntil(t, func() bool { return npending() == i-1 })
		}
	}
	close(gate)
	wg.Wait()
	calls := log.made()
	// a and b alone; then c, d and e in one call, or two when both held
	// calls ended before the first of them took the others.
	var rest []string
	for _, c := range calls[2:] {
		rest = append(rest, c...)
	}
	slices.Sort(rest)
	if len(calls) < 3 || len(calls) > 4 || !slices.Equal(calls[0], []string{"a"}) || !slices.Equal(calls[1], []string{"b"}) || !slices.Equal(rest, []string{"c", "d", "e"}) {
		t.Fatalf("calls = %v; want [a] [b], then c, d and e in one or two calls", calls)
	}
	if a.inFlight != 0 || len(a.pending) != 0 {
		t.Fatalf("acker left %d calls in flight with %d pending", a.inFlight, len(a.pending))
	}
}

// callLog is an acker call for the tests: it acks every request, records
// the ids of each call, and holds the first held calls until gate closes.
type callLog struct {
	held  int
	gate  chan struct{}
	mu    sync.Mutex
	calls [][]string
}

func newCallLog(held int) *callLog { return &callLog{held: held, gate: make(chan struct{})} }

func (l *callLog) call(reqs []*ackReq[int]) {
	var ids []string
	for _, r := range reqs {
		ids = append(ids, r.t.ID)
		r.acked = 1
	}
	l.mu.Lock()
	l.calls = append(l.calls, ids)
	hold := len(l.calls) <= l.held
	l.mu.Unlock()
	if hold {
		<-l.gate
	}
}

// made returns the calls made so far.
func (l *callLog) made() [][]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.calls)
}

// waitUntil polls cond until it holds, for up to 10 s (the conditions here
// only wait on goroutines of the test).
func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 10 s")
		}
		time.Sleep(time.Millisecond)
	}
}
