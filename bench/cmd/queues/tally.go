package main

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// epoch is what task timestamps count from: ns since the program started,
// on the monotonic clock, so that they fit a JSON number (gocraft/work
// decodes arguments into float64) without losing a microsecond.
var epoch = time.Now()

// now is the time since epoch, in ns.
func now() int64 { return int64(time.Since(epoch)) }

// job is every system's payload: the task's sequence number in its window
// and when its submit call started (ns since epoch).
type job struct {
	Seq int   `json:"s"`
	T   int64 `json:"t"`
}

// tally counts the tasks of one window exactly: each sequence number in
// [0, n) may start and end once; a second end of the same task is a
// double, and a task never ended by the window's end is lost (or, when the
// window hit its cap, unfinished). Tasks with a sequence number out of
// range (the warm-up's) are ignored.
type tally struct {
	n       int
	started []atomic.Bool
	ended   []atomic.Bool
	lat     []atomic.Int64 // handler start minus submit, ns; 0: not started
	ends    atomic.Int64   // distinct tasks ended
	doubles atomic.Int64   // ends of a task already ended
	starts2 atomic.Int64   // starts of a task already started (a redelivery)
	lastEnd atomic.Int64   // ns since epoch of the latest distinct end
	done    chan struct{}
	once    sync.Once

	mu     sync.Mutex
	errs   int
	firsts []string // the first few errors
}

// fail records an error of the system under test (a failed ack, a
// reserve error, a task that ended with an error).
func (t *tally) fail(err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.errs++
	if len(t.firsts) < 3 {
		t.firsts = append(t.firsts, err.Error())
	}
}

// failures returns the errors count and the first few.
func (t *tally) failures() (int, []string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.errs, slices.Clone(t.firsts)
}

func newTally(n int) *tally {
	return &tally{
		n:       n,
		started: make([]atomic.Bool, n),
		ended:   make([]atomic.Bool, n),
		lat:     make([]atomic.Int64, n),
		done:    make(chan struct{}),
	}
}

// start records that the handler of task seq, submitted at t, started.
func (t *tally) start(seq int, submitted int64) {
	if seq < 0 || seq >= t.n {
		return
	}
	if t.started[seq].Swap(true) {
		t.starts2.Add(1)
		return
	}
	t.lat[seq].Store(max(now()-submitted, 1))
}

// end records that task seq is done (acked, where the system says so).
func (t *tally) end(seq int) {
	if seq < 0 || seq >= t.n {
		return
	}
	if t.ended[seq].Swap(true) {
		t.doubles.Add(1)
		return
	}
	t.lastEnd.Store(now())
	if t.ends.Add(1) == int64(t.n) {
		t.once.Do(func() { close(t.done) })
	}
}

// handled is start and end at once, for systems whose handler is the last
// thing the caller sees of a task.
func (t *tally) handled(seq int, submitted int64) {
	t.start(seq, submitted)
	t.end(seq)
}

// wait returns true once every task ended, false when d passed first.
func (t *tally) wait(d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-t.done:
		return true
	case <-timer.C:
		return false
	}
}

// latencies returns every task's pickup latency in ns, -1 for a task that
// never started.
func (t *tally) latencies() []int64 {
	out := make([]int64, t.n)
	for i := range t.lat {
		if v := t.lat[i].Load(); v > 0 {
			out[i] = v
		} else {
			out[i] = -1
		}
	}
	return out
}
