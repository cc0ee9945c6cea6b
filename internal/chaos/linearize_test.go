package chaos

// TestLinearizable checks fleet's KV, Counter, Lock, Semaphore and Limiter against
// models that fleet did not write, under faults: three clients, each two
// Fleets (one writes, one reads through its cache) behind proxies of their own, against a redis-server with AOF and appendfsync always, while
// connections are cut, blackholed and their replies held back, and the
// server is SIGKILLed and SIGTERMed and restarted. On the single node,
// -lin.procs more clients (KV writes and fresh reads, Counter, Lock) run
// as processes of their own (linearize_proc_test.go) that are SIGKILLed
// (the call in flight has an unknown outcome) and SIGSTOPped for 0.5-3 s,
// longer than a lock's hold. Every call is recorded
// with its invocation and response times and its result ("unknown" for a
// write whose outcome the caller could not learn: it may take effect at
// any time after its invocation).
//
//   - Fresh KV reads (WithFreshReads), Set and Delete against a register
//     per key, and Counter's Incr and Get against a counter, both checked
//     for linearizability by porcupine (github.com/anishathalye/porcupine).
//   - Cached KV reads against bounded staleness: a read returns a value
//     that was the register's at some point within Options.CacheTTL before
//     the read began. A read fails the check when every write of its value
//     was certainly overwritten (by a write begun after it ended) more than
//     CacheTTL before the read began.
//   - Lock: each grant's fence is greater than that of every grant that
//     ended before it began, and no two holds overlap, a hold lasting from
//     its grant to its release or its Deadline (counted on the holder's
//     clock from the send of the acquire, so that it ends before the
//     server's); a stopped holder's hold ends at the last instant it saw
//     before its Deadline, a killed holder's at its Deadline, and a hold
//     recorded past its Deadline is a violation.
//   - Semaphore: at most its limit of holds at any instant, holds counted as
//     the lock's.
//   - Limiter (Allow, and Wait, which books ahead): in every window of
//     length w, at most Burst + w*Rate/Per tokens used (checkLimiter), on
//     the server's clock as the calls' intervals bound it; a call of
//     unknown outcome counts as possibly admitted.
//
// A failing porcupine history is written as HTML (porcupine's
// visualisation) to -chaos.dir or the test's temporary directory, and its
// path logged. A big run:
//
//	go test ./internal/chaos -run TestLinearizable -count=1 -v -timeout 1h -lin.time=5m

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/fleettest"
)

var (
	linTime    = flag.Duration("lin.time", 8*time.Second, "TestLinearizable: how long the clients run under faults")
	linClients = flag.Int("lin.clients", 3, "TestLinearizable: clients, each a writing and a reading Fleet")
	linProcs   = flag.Int("lin.procs", 1, "TestLinearizable on single: checked clients that run as processes of their own (SIGKILLed and SIGSTOPped)")
	linTarget  = flag.String("lin.target", "single", "TestLinearizable: single (a redis-server behind proxies: must pass); sentinel, sentinel-wait or sentinel-all (failovers of a master with linReplicas replicas, with MinReplicas 0, 1 and linReplicas: measured and logged)")
)

const (
	linKeys     = 3                      // KV keys, each a register
	linCacheTTL = 500 * time.Millisecond // the cached reads' bound
	linSemLimit = 2
	linHold     = 400 * time.Millisecond // lock and permit hold
	linRate     = 100                    // the limiter's tokens per second: one per 10 ms
	linBurst    = 5
	never       = math.MaxInt64 // the response time of an unknown outcome
)

// linOp is one recorded call.
type linOp struct {
	client    int
	call, ret int64 // ns since the run began; ret is never when unknown
	kind      string
	key       int
	arg       string // the value written
	out       string // the value read; "" for absent
	ok        bool   // a read found a value
	budget    int64  // counter: the unknown increments invoked before ret (resolveUnknown)
	tokens    int    // limiter: the tokens asked for
}

// history gathers the calls of one model from many goroutines.
type history struct {
	mu  sync.Mutex
	ops []linOp
}

func (h *history) add(op linOp) {
	h.mu.Lock()
	h.ops = append(h.ops, op)
	h.mu.Unlock()
}

// hold is one grant of the lock or a permit, as its holder knows it.
type hold struct {
	client         int
	call, ret, end int64 // the acquire's call and return; the hold's end
	deadline       int64 // the lease's Deadline; 0: not known
	fence          int64
}

type holds struct {
	mu sync.Mutex
	hs []hold
}

func (h *holds) add(x hold) {
	h.mu.Lock()
	h.hs = append(h.hs, x)
	h.mu.Unlock()
}

// linEnv is where a linearizability run goes: how to open a client's
// Fleet, and how to inject one fault (returning its kind); and the
// processes of the checked clients that run as processes (procs_test.go;
// none when run is nil), to start when the run begins.
type linEnv struct {
	open     func() *fleet.Fleet
	fault    func(ctx context.Context, g *rng) string
	run      *run
	children []*proc
}

func TestLinearizable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	switch *linTarget {
	case "single":
		runLinearizable(ctx, t, singleEnv(ctx, t), t.Errorf)
	case "sentinel", "sentinel-wait", "sentinel-all":
		// WAIT is not consensus: measured and reported, not failed.
		minReplicas := map[string]int{"sentinel": 0, "sentinel-wait": 1, "sentinel-all": linReplicas}[*linTarget]
		runLinearizable(ctx, t, sentinelEnv(ctx, t, minReplicas), func(format string, args ...any) {
			t.Logf("VIOLATION "+format, args...)
		})
	default:
		t.Fatalf("-lin.target %q: want single, sentinel, sentinel-wait or sentinel-all", *linTarget)
	}
}

// singleEnv is a redis-server of the test's own (AOF, appendfsync always)
// with a proxy in front of each Fleet and each client process
// (-lin.procs): faults are cuts, blackholes, held replies, the server
// SIGKILLed or SIGTERMed and restarted, and a client process SIGKILLed
// (and started again) or SIGSTOPped for 0.5-3 s.
func singleEnv(ctx context.Context, t *testing.T) linEnv {
	srv, err := fleettest.StartServer(ctx, fleettest.Config{AppendOnly: true})
	if err != nil {
		t.Fatalf("no redis-server: %v (install one: apt-get install -y redis-server)", err)
	}
	t.Cleanup(srv.Stop)
	var proxies []*fleettest.Proxy
	proxy := func() *fleettest.Proxy {
		p, err := fleettest.StartProxy(srv.Addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		proxies = append(proxies, p)
		return p
	}
	// The client processes are places of a run of the fault suite's
	// machinery (procs_test.go), with their evidence in its directory.
	r := newRun(t, settings{seed: time.Now().UnixNano() % 1_000_000_007}, target{name: "lin", url: srv.URL(), layout: fleet.LayoutCompat}, srv, "lin:")
	t.Cleanup(func() { r.stopAll(); r.bg.Wait() }) // on any way out
	var children []*proc
	for i := range *linProcs {
		p := &proc{r: r, name: fmt.Sprintf("lc%d", i+1), role: linClientRole, busy: make(chan struct{}, 1), proxy: proxy()}
		r.all, r.proxied = append(r.all, p), append(r.proxied, p)
		children = append(children, p)
	}
	open := func() *fleet.Fleet {
		p := proxy()
		f, err := fleet.Open(ctx, fleet.Options{URL: p.URL(), CacheTTL: linCacheTTL, Prefix: "lin:"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
	fault := func(ctx context.Context, g *rng) string {
		kinds := []string{"cut", "freeze", "hold", "redis-kill", "redis-term"}
		if len(children) > 0 {
			kinds = append(kinds, "client-kill", "client-stop")
		}
		kind := kinds[g.intn(len(kinds))]
		p := proxies[g.intn(len(proxies))]
		switch kind {
		case "client-kill": // its call in flight has an unknown outcome
			c := children[g.intn(len(children))]
			c.kill(kind)
			sleep(ctx, g.between(0, 300*time.Millisecond))
			if err := c.start(); err != nil {
				t.Errorf("client process did not start again: %v", err)
			}
		case "client-stop": // longer than a lock's hold: a holder stopped past its lease
			c := children[g.intn(len(children))]
			if c.stop(kind) {
				sleep(ctx, g.between(500*time.Millisecond, 3*time.Second))
				c.cont("client-cont")
			}
		case "cut":
			p.Cut()
		case "freeze":
			p.Freeze()
			sleep(ctx, g.between(100*time.Millisecond, 2*time.Second))
			p.Thaw()
		case "hold":
			p.HoldReplies()
			sleep(ctx, g.between(100*time.Millisecond, 2*time.Second))
			p.Thaw()
		case "redis-kill", "redis-term":
			if kind == "redis-kill" {
				srv.Kill()
				sleep(ctx, g.between(0, 300*time.Millisecond))
			}
			if err := srv.Restart(ctx); err != nil {
				t.Errorf("redis-server did not come back: %v", err)
			}
		}
		return kind
	}
	return linEnv{open: open, fault: fault, run: r, children: children}
}

// linReplicas is how many replicas the Sentinel target's master has.
const linReplicas = 2

// sentinelEnv is a master with linReplicas replicas (AOF, appendfsync
// always) under three sentinels; the fault is the master SIGKILLed, a
// replica promoted, and the old master rejoined as a replica. Every write
// waits for minReplicas replicas (Options.MinReplicas): with linReplicas,
// for every replica the master has (between a kill and the rejoin, the
// new master has one fewer: writes then fail with ErrNotDurable).
func sentinelEnv(ctx context.Context, t *testing.T, minReplicas int) linEnv {
	st, err := fleettest.StartSentinel(ctx, fleettest.SentinelConfig{Replicas: linReplicas, Args: []string{"--appendonly", "yes", "--appendfsync", "always"}})
	if err != nil {
		t.Fatalf("no Sentinel: %v (apt-get install -y redis-server redis-sentinel)", err)
	}
	t.Cleanup(st.Stop)
	open := func() *fleet.Fleet {
		f, err := fleet.Open(ctx, fleet.Options{URL: st.URL(), CacheTTL: linCacheTTL, Prefix: "lin:", MinReplicas: minReplicas})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
	fault := func(ctx context.Context, g *rng) string {
		sleep(ctx, g.between(2*time.Second, 4*time.Second))
		old, err := st.KillMaster(ctx)
		if err != nil {
			t.Errorf("kill master: %v", err)
			return "failover"
		}
		if _, err := st.WaitFailover(ctx, old.Addr); err != nil {
			t.Errorf("no failover: %v", err)
		}
		if err := st.Rejoin(ctx, old); err != nil {
			t.Errorf("rejoin: %v", err)
			for _, s := range st.Servers { // what each server says of its replication
				info, err := s.Cli(ctx, "info", "replication")
				var keep []string
				for line := range strings.SplitSeq(info, "\n") {
					if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") && !strings.Contains(line, "repl_backlog") {
						keep = append(keep, line)
					}
				}
				t.Logf("after the failed rejoin, %s: %s (%v)", s.Addr, strings.Join(keep, " "), err)
			}
		}
		return "failover"
	}
	return linEnv{open: open, fault: fault}
}

// runLinearizable runs the clients on env under its faults for -lin.time,
// then checks the histories; report gets each violation.
func runLinearizable(ctx context.Context, t *testing.T, env linEnv, report func(string, ...any)) {
	// Times are wall-clock ns since t0: the clock that the client
	// processes share with this one.
	t0 := time.Now()
	base := t0.UnixNano()
	now := func() int64 { return time.Now().UnixNano() - base }
	for _, p := range env.children {
		if err := p.start(); err != nil {
			t.Fatal(err)
		}
	}
	// Each client is a Fleet that writes and a Fleet that only reads
	// through its cache (a Fleet's own writes would send its reads of the
	// key to the server until their invalidation arrives).
	var fleets, readers []*fleet.Fleet
	for range *linClients {
		fleets, readers = append(fleets, env.open()), append(readers, env.open())
	}

	var kvH, cachedH, counterH, limH history
	var lockH, semH holds
	var seq atomic.Int64 // unique values written
	var stop, writersDone atomic.Bool
	var wg, rwg sync.WaitGroup
	opCtx := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, time.Second) }
	for ci, f := range fleets {
		kv, ctr := f.KV("reg"), f.Counter("ctr")
		wg.Go(func() { // KV: fresh reads, sets and deletes
			for i := 0; !stop.Load() && time.Since(t0) < *linTime; i++ {
				op := linOp{client: ci, key: i % linKeys}
				c, cancel := opCtx()
				k := strconv.Itoa(op.key)
				var err error
				op.call = now()
				switch r := (i * 7919) % 10; {
				case r < 4:
					op.kind, op.arg = "set", strconv.FormatInt(seq.Add(1), 10)
					err = kv.Set(c, k, op.arg, 0)
				case r < 5:
					op.kind = "del"
					_, err = kv.Delete(c, k)
				default:
					op.kind = "get"
					var s string
					s, op.ok, err = kv.GetString(fleet.WithFreshReads(c), k)
					op.out = s
				}
				op.ret = now()
				cancel()
				if err != nil {
					if op.kind == "get" {
						continue // a read that failed says nothing
					}
					op.ret = never
				}
				kvH.add(op)
				time.Sleep(2 * time.Millisecond)
			}
		})
		cached := readers[ci].KV("reg")
		for key := range linKeys { // a reader per key: one read that waits on the server stops no other key's
			rwg.Go(func() { // KV: cached reads of the registers, while the others run
				for !stop.Load() && !writersDone.Load() {
					op := linOp{client: ci, key: key, kind: "get"}
					c, cancel := opCtx()
					op.call = now()
					s, ok, err := cached.GetString(c, strconv.Itoa(op.key))
					op.ret = now()
					cancel()
					if err == nil {
						op.out, op.ok = s, ok
						cachedH.add(op)
					}
					time.Sleep(2 * time.Millisecond)
				}
			})
		}
		wg.Go(func() { // Counter
			for i := 0; !stop.Load() && time.Since(t0) < *linTime; i++ {
				op := linOp{client: ci}
				c, cancel := opCtx()
				op.call = now()
				var v int64
				var err error
				if i%2 == 0 {
					op.kind = "incr"
					v, err = ctr.Incr(c)
				} else {
					op.kind = "get"
					v, err = ctr.Get(c)
				}
				op.ret = now()
				cancel()
				if err != nil {
					if op.kind == "get" {
						continue
					}
					op.ret = never
				}
				op.out = strconv.FormatInt(v, 10)
				counterH.add(op)
				time.Sleep(2 * time.Millisecond)
			}
		})
		for _, sem := range []bool{false, true} {
			wg.Go(func() { // Lock, Semaphore
				for i := 0; !stop.Load() && time.Since(t0) < *linTime; i++ {
					c, cancel := context.WithTimeout(ctx, 3*time.Second)
					call := now()
					var l *fleet.Lease
					var err error
					if sem {
						l, err = f.Semaphore("sem", linSemLimit).Acquire(c, fleet.SemaphoreOptions{Hold: linHold, Wait: 2 * time.Second})
					} else {
						l, err = f.Lock("mu").Acquire(c, fleet.LockOptions{Hold: linHold, Wait: 2 * time.Second})
					}
					ret := now()
					if err != nil {
						cancel()
						continue
					}
					time.Sleep(time.Duration(i%5) * 20 * time.Millisecond)
					deadline := l.Deadline().UnixNano() - base
					end := min(now(), deadline)
					_ = l.Release(c)
					cancel()
					h := hold{client: ci, call: call, ret: ret, end: end, deadline: deadline, fence: l.Fence()}
					if sem {
						semH.add(h)
					} else {
						lockH.add(h)
					}
				}
			})
		}
		lim := f.Limiter("lim", fleet.LimitOptions{Rate: linRate, Per: time.Second, Burst: linBurst})
		for _, wait := range []bool{false, true} {
			wg.Go(func() { // Limiter: Allow, and Wait (which books ahead)
				for i := 0; !stop.Load() && time.Since(t0) < *linTime; i++ {
					op := linOp{client: ci, kind: "allow", tokens: 1 + i%2}
					// Wait's ctx is long, so that it seldom ends in the sleep
					// (then Wait gives its tokens back: an unknown outcome).
					c, cancel := context.WithTimeout(ctx, 5*time.Second)
					var admitted bool
					var err error
					op.call = now()
					if wait {
						op.kind = "wait"
						err = lim.Wait(c, op.tokens)
						admitted = err == nil
					} else {
						var r fleet.LimitResult
						r, err = lim.Allow(c, op.tokens)
						admitted = r.Allowed
					}
					op.ret = now()
					cancel()
					switch {
					case err != nil:
						op.ret = never
					case admitted:
						op.out = "admitted"
					default:
						op.out = "denied"
					}
					limH.add(op)
					time.Sleep(2 * time.Millisecond)
				}
			})
		}
	}

	// The faults, until every client is done.
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	faults := map[string]int{}
	g := newRNG(time.Now().UnixNano())
	func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(g.between(100*time.Millisecond, 400*time.Millisecond)):
			}
			faults[env.fault(ctx, g)]++
		}
	}()
	writersDone.Store(true)
	rwg.Wait()
	if r := env.run; r != nil {
		// The client processes: stopped (SIGTERM), and their evidence read.
		r.stopAll()
		r.bg.Wait()
		for _, odd := range r.oddExits {
			t.Errorf("client process: %s", odd)
		}
		var ch linChild
		for i, p := range env.children {
			for inc := 0; inc <= p.inc; inc++ {
				path := filepath.Join(r.dir, "ev", fmt.Sprintf("%s.%d.log", p.name, inc))
				err := readLinClient(path, 100*(i+1)+inc, base, &ch)
				if errors.Is(err, fs.ErrNotExist) {
					continue // killed before it opened its evidence: it made no call
				}
				if err != nil {
					t.Fatal(err)
				}
			}
		}
		kvH.ops = append(kvH.ops, ch.kv...)
		counterH.ops = append(counterH.ops, ch.counter...)
		lockH.hs = append(lockH.hs, ch.holds...)
		t.Logf("client processes: %d incarnations; kv %d ops, counter %d, lock grants %d (%d outlasted by a SIGSTOP); %d calls of unknown outcome (cut off by a kill, or failed)",
			len(env.children)+faults["client-kill"], len(ch.kv), len(ch.counter), len(ch.holds), ch.lapsed, ch.unknown)
	}
	t.Logf("faults: %v; ops: kv %d, cached kv %d, counter %d, lock grants %d, permits %d, limiter %d",
		faults, len(kvH.ops), len(cachedH.ops), len(counterH.ops), len(lockH.hs), len(semH.hs), len(limH.ops))

	dir := *flagDir // "": a directory of its own, made for a failing history and kept
	checkPorcupine(t, report, "kv", kvModel, toPorcupine(kvH.ops), dir)
	// A witness that needs no search (porcupine may give up on a long
	// history that is not linearizable): a fresh read of a value that was
	// certainly overwritten before the read began.
	var fresh []linOp
	for _, op := range kvH.ops {
		if op.kind == "get" {
			fresh = append(fresh, op)
		}
	}
	if bad := staleReads(kvH.ops, fresh, 0); len(bad) > 0 {
		report("kv: %d of %d fresh reads returned a value certainly overwritten before they began (not linearizable); the first: %s", len(bad), len(fresh), bad[0])
	}
	checkPorcupine(t, report, "counter", counterModel, toPorcupine(resolveUnknown(counterH.ops)), dir)
	if back := stepBacks(counterH.ops, false); len(back) > 0 {
		lost := stepBacks(counterH.ops, true)
		report("counter: %d operations found it lower than an operation that ended before they began (not linearizable), %d of them lower than an acknowledged increment left it (lost); the first: %s",
			len(back), len(lost), back[0])
	}
	t.Logf("cached reads certainly stale (bound 0): %d of %d; past 100ms: %d", len(staleReads(kvH.ops, cachedH.ops, 0)), len(cachedH.ops),
		len(staleReads(kvH.ops, cachedH.ops, int64(100*time.Millisecond))))
	if bad := staleReads(kvH.ops, cachedH.ops, int64(linCacheTTL)); len(bad) > 0 {
		report("%d of %d cached reads were older than CacheTTL (%v); the first: %s", len(bad), len(cachedH.ops), linCacheTTL, bad[0])
	}
	for _, c := range []struct {
		name  string
		hs    []hold
		limit int
	}{{"lock", lockH.hs, 1}, {"semaphore", semH.hs, linSemLimit}} {
		if err := checkHolds(c.hs, c.limit, c.limit == 1); err != nil {
			report("%s: %v", c.name, err)
		} else {
			t.Logf("%s: %d holds, none over its limit of %d", c.name, len(c.hs), c.limit)
		}
	}
	limStat := map[string]int{}
	for _, op := range limH.ops {
		switch {
		case op.ret == never:
			limStat["unknown"]++
		default:
			limStat[op.out]++
		}
		if op.out == "admitted" {
			limStat["tokens"] += op.tokens
		}
	}
	if w, err := checkLimiter(limH.ops, time.Second/linRate, linBurst); err != nil {
		report("limiter: %v", err)
	} else {
		t.Logf("limiter: %d calls %v, within the limit; the tightest window: %v", len(limH.ops), limStat, w)
	}
	if limStat["admitted"] == 0 || len(semH.hs) == 0 || len(kvH.ops) == 0 || len(cachedH.ops) == 0 || len(counterH.ops) == 0 {
		t.Errorf("a model has no history to check")
	}
}
