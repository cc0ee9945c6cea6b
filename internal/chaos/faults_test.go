package chaos

// The faults and the phases that inject them.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/fleet-go/fleet/fleettest"
)

// faultEvent is one line of the fault log.
type faultEvent struct {
	at     int64 // µs
	kind   string
	target string
	detail string
}

// faultLog keeps every fault (and start) in memory and in faults.log.
type faultLog struct {
	mu     sync.Mutex
	f      *os.File
	events []faultEvent
	phase  string
}

func (l *faultLog) add(kind, target, detail string) {
	l.addAt(time.Now().UnixMicro(), kind, target, detail)
}

// addAt logs an event that happened at µs at.
func (l *faultLog) addAt(at int64, kind, target, detail string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := faultEvent{at: at, kind: kind, target: target, detail: detail}
	l.events = append(l.events, e)
	if l.f != nil {
		fmt.Fprintf(l.f, "%d %s %s %s %s\n", e.at, l.phase, kind, target, detail)
	}
}

func (l *faultLog) setPhase(p string) {
	l.mu.Lock()
	l.phase = p
	l.mu.Unlock()
}

func (l *faultLog) snapshot() []faultEvent {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.events)
}

// The phases. Each injects one kind of fault ("mixed": all of them, at
// random) for its time, then heals everything and leaves a quiet gap, so
// that what went wrong can be put down to a kind.
const (
	phKillWorker = "kill-worker"  // SIGKILL a worker, start it again after 0.1-1 s
	phStopWorker = "stop-worker"  // SIGSTOP a worker for 0.3-2.5 leases, then SIGCONT
	phTermWorker = "term-worker"  // SIGTERM a worker (graceful stop), start it again
	phSweepers   = "sweepers"     // SIGKILL or SIGSTOP a sweeper
	phRedisKill  = "redis-kill"   // SIGKILL redis-server, restart it after 0-0.8 s (AOF, fsync always)
	phRedisTerm  = "redis-term"   // SIGTERM redis-server and restart it
	phCut        = "cut"          // close every connection of one process (proxy)
	phFreeze     = "freeze"       // blackhole one process's connections for 0.3-2.5 leases
	phHold       = "hold-replies" // hold back the replies to one process for 0.3-2.5 leases
	phMixed      = "mixed"        // any of the above
)

// phasesFor lists the phases a target supports: on the cluster no proxy
// can sit in front (the cluster redirects clients past it) and the servers
// are shared, so only process faults run there.
func phasesFor(single bool) []string {
	if single {
		return []string{phKillWorker, phStopWorker, phTermWorker, phSweepers, phRedisKill, phRedisTerm, phCut, phFreeze, phHold, phMixed}
	}
	return []string{phKillWorker, phStopWorker, phTermWorker, phSweepers, phMixed}
}

// rng is the run's seeded random source, safe for concurrent use.
type rng struct {
	mu sync.Mutex
	r  *rand.Rand
}

func newRNG(seed int64) *rng {
	return &rng{r: rand.New(rand.NewPCG(uint64(seed), uint64(seed)^0x9e3779b97f4a7c15))}
}

func (g *rng) intn(n int) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.r.IntN(n)
}

func (g *rng) float() float64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.r.Float64()
}

// between returns a duration in [lo, hi).
func (g *rng) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(g.float()*float64(hi-lo))
}

// pick returns a proc of the candidates that no fault holds (and holds it),
// or nil.
func (r *run) pick(cands []*proc) *proc {
	if len(cands) == 0 {
		return nil
	}
	off := r.rng.intn(len(cands))
	for i := range cands {
		p := cands[(off+i)%len(cands)]
		if p.tryBusy() {
			return p
		}
	}
	return nil
}

// runPhase injects the phase's faults for d, then heals.
func (r *run) runPhase(ctx context.Context, kind string, d time.Duration) {
	r.flog.setPhase(kind)
	r.flog.add("phase", "-", kind)
	end := time.Now().Add(d)
	var wg sync.WaitGroup
	for ctx.Err() == nil && time.Now().Before(end) {
		k := kind
		if kind == phMixed {
			all := phasesFor(r.server != nil)
			k = all[r.rng.intn(len(all)-1)] // every kind but mixed
		}
		pause := r.inject(ctx, k, &wg)
		select {
		case <-ctx.Done():
		case <-time.After(min(pause, time.Until(end))):
		}
	}
	wg.Wait()
	r.heal(ctx)
	r.flog.add("healed", "-", kind)
}

// inject starts one fault of kind; long faults run on in a goroutine (wg).
// It returns the pause before the next one.
func (r *run) inject(ctx context.Context, kind string, wg *sync.WaitGroup) time.Duration {
	lease := r.s.lease
	long := func() time.Duration { return r.rng.between(lease*3/10, lease*5/2) }
	async := func(p *proc, fn func()) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer p.free()
			fn()
		}()
	}
	switch kind {
	case phKillWorker, phStopWorker, phTermWorker, phSweepers:
		cands := r.workers
		if kind == phSweepers {
			cands = r.sweepers
		}
		p := r.pick(cands)
		if p == nil {
			return 100 * time.Millisecond
		}
		switch {
		case kind == phKillWorker || (kind == phSweepers && r.rng.intn(2) == 0):
			async(p, func() {
				p.kill("kill")
				sleep(ctx, r.rng.between(100*time.Millisecond, time.Second))
				r.startOrFail(p)
			})
		case kind == phTermWorker:
			async(p, func() {
				p.term("term", 20*time.Second)
				sleep(ctx, r.rng.between(0, 300*time.Millisecond))
				r.startOrFail(p)
			})
		default:
			async(p, func() {
				if p.stop("stop") {
					sleep(ctx, long())
					p.cont("cont")
				}
			})
		}
		return r.rng.between(300*time.Millisecond, time.Second)
	case phRedisKill, phRedisTerm:
		if kind == phRedisKill {
			r.flog.add("redis-kill", "redis", r.server.Addr)
			r.server.Kill()
			sleep(ctx, r.rng.between(0, 800*time.Millisecond))
		} else {
			r.flog.add("redis-term", "redis", r.server.Addr)
		}
		r.restartServer(ctx)
		return r.rng.between(1500*time.Millisecond, 3*time.Second)
	case phCut:
		p := r.pick(r.proxied)
		if p == nil {
			return 100 * time.Millisecond
		}
		r.flog.add("cut", p.name, p.id())
		p.proxy.Cut()
		p.free()
		return r.rng.between(200*time.Millisecond, 800*time.Millisecond)
	case phFreeze, phHold:
		p := r.pick(r.proxied)
		if p == nil {
			return 100 * time.Millisecond
		}
		async(p, func() {
			r.flog.add(kind, p.name, p.id())
			if kind == phFreeze {
				p.proxy.Freeze()
			} else {
				p.proxy.HoldReplies()
			}
			sleep(ctx, long())
			p.proxy.Thaw()
			r.flog.add("thaw", p.name, p.id())
		})
		return r.rng.between(300*time.Millisecond, time.Second)
	}
	r.t.Errorf("unknown fault kind %q", kind)
	return time.Second
}

// restartServer restarts redis-server (SIGTERM, unless it is dead) until it
// answers.
func (r *run) restartServer(ctx context.Context) {
	for i := 0; ; i++ {
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := r.server.Restart(rctx)
		cancel()
		if err == nil {
			r.flog.add("redis-up", "redis", r.server.Addr)
			return
		}
		if i == 5 || ctx.Err() != nil {
			r.t.Errorf("redis-server did not come back: %v", err)
			return
		}
		sleep(ctx, 200*time.Millisecond)
	}
}

func (r *run) startOrFail(p *proc) {
	if err := p.start(); err != nil {
		r.t.Errorf("%v", err)
	}
}

// heal ends every fault: every place runs, nothing is stopped, every proxy
// passes bytes, the server answers.
func (r *run) heal(ctx context.Context) {
	if r.server != nil {
		if err := fleettest.Ping(ctx, r.server.Addr); err != nil {
			r.restartServer(ctx)
		}
	}
	for _, p := range r.all {
		if p.proxy != nil {
			p.proxy.Thaw()
		}
		p.cont("heal-cont")
		r.startOrFail(p)
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
