package main

import (
	"context"
	"fmt"
	"os"
	"runtime/pprof"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
)

// env is what a system needs to open.
type env struct {
	addr string // host:port
	url  string // redis://host:port
	c    int    // concurrency: handlers, and submitters
}

// instance is one system opened for one window: its clients, and a queue
// of its own.
type instance interface {
	// submit enqueues one task.
	submit(ctx context.Context, j job) error
	// consume starts w concurrent handlers, each calling t.start when it
	// begins a task and t.end once the task is done (acked, where the
	// system lets its caller see that), and returns what stops them. idle
	// asks for the system's idle consumer where it has a separate one (the
	// floors).
	consume(ctx context.Context, w int, t *tally, idle bool) (stop func(), err error)
	// close closes the clients.
	close()
}

type shapeKind int

const (
	shSubmit shapeKind = iota
	shDrain
	shCycle
	shIdle
)

// shape is one measure of the table.
type shape struct {
	key   string
	title string
	kind  shapeKind
	rate  int // shIdle: tasks per second
}

// winResult is one system's figures for one shape in one round.
type winResult struct {
	tasks       int64 // tasks done in the window (submit: submitted)
	want        int64 // tasks of the window
	wall        time.Duration
	cost        cost
	capped      bool  // the window hit -cap before every task was done
	doubles     int64 // a task ended twice
	redelivered int64 // a task's handler started twice
	errs        int
	firsts      []string
	p50, p99    time.Duration // idle: submit to handler start; -1: not reached within the window
	offered     float64       // idle: the submit rate achieved
}

func (r winResult) rate() float64 { return float64(r.tasks) / r.wall.Seconds() }

// perTask returns the server's CPU µs and commands per task of the window:
// over the tasks done, in a window cut short too (what every task done
// cost, the submits of those left over included).
func (r winResult) perTask() (cpuUS, cmds float64) {
	n := float64(max(r.tasks, 1))
	return float64(r.cost.cpu.Nanoseconds()) / 1e3 / n, float64(r.cost.commands()) / n
}

// cpuShare is the server's CPU over the window's wall time (1 = a core).
func (r winResult) cpuShare() float64 { return r.cost.cpu.Seconds() / r.wall.Seconds() }

// bench is one run: the flags, the server, the meter's client.
type bench struct {
	o     options
	e     env
	meter rueidis.Client
}

// snap takes a snapshot of the server's counters.
func (b *bench) snap(ctx context.Context) snapshot {
	s, err := readSnapshot(ctx, b.meter)
	if err != nil {
		fatalf("%v", err)
	}
	return s
}

// flush empties the server between windows, once the window's clients are
// closed.
func (b *bench) flush(ctx context.Context) {
	if err := b.meter.Do(ctx, b.meter.B().Flushall().Build()).Error(); err != nil {
		fatalf("FLUSHALL: %v", err)
	}
}

// profile starts a CPU profile of this process for one fleet window when
// -cpuprofile is set, and returns what stops it.
func (b *bench) profile(s system, sh shape, round int) func() {
	if b.o.cpuprofile == "" || !s.profiled {
		return func() {}
	}
	name := fmt.Sprintf("%s.%s.%s.r%d.pprof", b.o.cpuprofile, s.key, sh.key, round+1)
	f, err := os.Create(name)
	if err != nil {
		fatalf("%v", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		fatalf("%v", err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }
}

// submitAll submits tasks 0..n-1 from c goroutines, each task stamped with
// the time its submit call started.
func submitAll(ctx context.Context, inst instance, n, c int) error {
	var next atomic.Int64
	var first atomic.Pointer[error]
	var wg sync.WaitGroup
	for range c {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(n); i = next.Add(1) - 1 {
				if err := inst.submit(ctx, job{Seq: int(i), T: now()}); err != nil {
					first.CompareAndSwap(nil, &err)
					return
				}
			}
		})
	}
	wg.Wait()
	if p := first.Load(); p != nil {
		return *p
	}
	return nil
}

// warm runs a few tasks through s once, uncounted, so that its scripts
// are loaded and the process has run its code before the first round.
func (b *bench) warm(ctx context.Context, s system) {
	inst, err := s.open(ctx, b.e)
	if err != nil {
		fatalf("%s: open: %v", s.key, err)
	}
	defer func() { inst.close(); b.flush(ctx) }()
	t := newTally(b.o.warm)
	stop, err := inst.consume(ctx, b.o.c, t, false)
	if err != nil {
		fatalf("%s: consume: %v", s.key, err)
	}
	if err := submitAll(ctx, inst, b.o.warm, b.o.c); err != nil {
		fatalf("%s: submit: %v", s.key, err)
	}
	if !t.wait(max(b.o.cap, 30*time.Second)) {
		fatalf("%s: warm-up: %d of %d tasks done", s.key, t.ends.Load(), b.o.warm)
	}
	stop()
	if n, firsts := t.failures(); n > 0 {
		fatalf("%s: warm-up: %d errors: %v", s.key, n, firsts)
	}
}

// window measures one system on one shape.
func (b *bench) window(ctx context.Context, s system, sh shape, round int) winResult {
	inst, err := s.open(ctx, b.e)
	if err != nil {
		fatalf("%s: open: %v", s.key, err)
	}
	defer func() { inst.close(); b.flush(ctx) }()
	n, c := b.o.n, b.o.c
	var res winResult
	var t *tally
	var t0 int64
	var stop func()
	consume := func(idle bool) {
		var err error
		if stop, err = inst.consume(ctx, c, t, idle); err != nil {
			fatalf("%s: consume: %v", s.key, err)
		}
	}
	// finish closes the window once every task ended or the cap passed.
	finish := func(snap0 snapshot, endProfile func(), capFrom int64) {
		ok := t.wait(time.Duration(capFrom + int64(b.o.cap) - now()))
		end := now()
		if ok {
			end = t.lastEnd.Load()
		}
		snap1 := b.snap(ctx)
		endProfile()
		stop()
		res.wall = time.Duration(end - t0)
		res.cost = snap1.since(snap0)
		res.want = int64(t.n)
		res.tasks = t.ends.Load()
		res.capped = !ok
		res.doubles = t.doubles.Load()
		res.redelivered = t.starts2.Load()
		res.errs, res.firsts = t.failures()
	}

	switch sh.kind {
	case shSubmit:
		snap0 := b.snap(ctx)
		endProfile := b.profile(s, sh, round)
		start := time.Now()
		if err := submitAll(ctx, inst, n, c); err != nil {
			fatalf("%s: submit: %v", s.key, err)
		}
		res.wall = time.Since(start)
		endProfile()
		res.cost = b.snap(ctx).since(snap0)
		res.tasks, res.want = int64(n), int64(n)

	case shDrain:
		t = newTally(n)
		if err := submitAll(ctx, inst, n, c); err != nil {
			fatalf("%s: submit: %v", s.key, err)
		}
		snap0 := b.snap(ctx)
		endProfile := b.profile(s, sh, round)
		t0 = now()
		consume(false)
		finish(snap0, endProfile, t0)

	case shCycle:
		t = newTally(n)
		consume(false)
		snap0 := b.snap(ctx)
		endProfile := b.profile(s, sh, round)
		t0 = now()
		submitted := make(chan error, 1)
		go func() { submitted <- submitAll(ctx, inst, n, c) }()
		finish(snap0, endProfile, t0)
		if err := <-submitted; err != nil {
			fatalf("%s: submit: %v", s.key, err)
		}

	case shIdle:
		total := int(float64(sh.rate) * b.o.idleFor.Seconds())
		t = newTally(total)
		consume(true)
		time.Sleep(b.o.settle)
		snap0 := b.snap(ctx)
		endProfile := b.profile(s, sh, round)
		t0 = now()
		res.offered = pace(ctx, inst, sh.rate, total, t)
		finish(snap0, endProfile, now())
		lat := t.latencies()
		res.p50, res.p99 = percentile(lat, 0.50), percentile(lat, 0.99)
	}
	return res
}

// pace submits total tasks one at a time at rate per second, each on a
// goroutine of its own at its due time (an open loop: a slow submit delays
// no other), and returns the rate achieved. A failed submit counts as a
// failure of the window.
func pace(ctx context.Context, inst instance, rate, total int, t *tally) float64 {
	interval := time.Second / time.Duration(rate)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range total {
		if d := time.Until(start.Add(time.Duration(i) * interval)); d > 0 {
			time.Sleep(d)
		}
		wg.Go(func() {
			if err := inst.submit(ctx, job{Seq: i, T: now()}); err != nil {
				t.fail(fmt.Errorf("submit: %w", err))
			}
		})
	}
	wg.Wait()
	return float64(total) / time.Since(start).Seconds()
}

// percentile returns the q quantile of the latencies (ns; -1: never
// started, as if infinite), or -1 when it falls on a task never started.
func percentile(lat []int64, q float64) time.Duration {
	if len(lat) == 0 {
		return -1
	}
	s := slices.Clone(lat)
	slices.SortFunc(s, func(a, b int64) int {
		switch {
		case a == b:
			return 0
		case a < 0:
			return 1
		case b < 0:
			return -1
		case a < b:
			return -1
		}
		return 1
	})
	i := min(int(q*float64(len(s))+0.5), len(s)) - 1
	return time.Duration(s[max(i, 0)])
}
