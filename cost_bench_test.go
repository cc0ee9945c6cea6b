package fleet_test

// Cost benchmarks (issue 10, "minimum Redis work on the hot path"): what each
// hot-path operation costs Redis, beside a bare rueidis "floor" that runs the
// minimal commands and scripts for the same operation, on the same
// redis-server (one of the benchmark's own, so nothing else moves its
// counters), in the same run.
//
// Run: go test -run '^$' -bench '^BenchmarkCost' -benchtime 5000x .
// ('Cost' alone also matches BenchmarkWorkerIdleCost, a 6 s run.)
//
// The busy queue, the full cycle, the lock pair and KV run their floor and
// fleet by turns in rounds (costInterleave), so that both see the same
// load; they report each kind's figures and fleet's ratios to the others:
//   - <kind>-cmds/op: calls from INFO commandstats deltas; a script's
//     EVALSHA and each command it ran count one each; the meter's own INFO
//     calls are left out;
//   - <kind>-scripts/op: EVAL/EVALSHA/FCALL calls alone;
//   - <kind>-µs/op: server CPU, the used_cpu_user+used_cpu_sys delta;
//   - <kind>-ops/s: operations over the kind's own wall time;
//   - fleet/<kind>-cpu and fleet/<kind>-rate: fleet's server CPU per op
//     and rate over the other kind's.
//
// The idle pickup runs floor then fleet (its figure is a command count,
// which does not drift): cmds/op, scripts/op, redis-µs/op, ops/s, and
// fleet's x-floor-cmds, x-floor-cpu, x-floor-rate. TestCostTrace
// (FLEET_COST_TRACE=1) prints, through MONITOR, the commands of one
// operation of each kind.

import (
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/fleettest"
	"github.com/fleet-go/fleet/internal/costmeter"
)

type costJob struct {
	N int `json:"n"`
}

type costCfg struct{}

type costOut struct{}

// Shapes of the concurrent benchmarks.
const (
	costGoroutines = 50 // lock and KV: goroutines, each on a name of its own
	costSlots      = 16 // full cycle: worker slots, and floor consumers
	costProducers  = 8  // full cycle: submitting goroutines
	costQuiet      = time.Millisecond
)

// costServer starts the redis-server of one Cost benchmark; every sub-run
// flushes it first (costClean).
func costServer(tb testing.TB) *fleettest.Server {
	tb.Helper()
	srv, err := fleettest.StartServer(context.Background(), fleettest.Config{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(srv.Stop)
	return srv
}

// costClient opens a plain rueidis client on addr, closed at cleanup.
func costClient(tb testing.TB, addr string, mod func(*rueidis.ClientOption)) rueidis.Client {
	tb.Helper()
	o := rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true}
	if mod != nil {
		mod(&o)
	}
	c, err := rueidis.NewClient(o)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(c.Close)
	return c
}

// costFleet opens a Fleet on url with the documented keys (no prefix).
func costFleet(tb testing.TB, url string, mods ...func(*fleet.Options)) *fleet.Fleet {
	tb.Helper()
	// The product's default history (TestMain turns it off for the tests).
	opts := fleet.Options{URL: url, HistoryFlush: fleet.DefaultHistoryFlush}
	for _, m := range mods {
		m(&opts)
	}
	f, err := fleet.Open(context.Background(), opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { f.Close() })
	return f
}

// costClean empties srv before a sub-run builds its clients.
func costClean(tb testing.TB, srv *fleettest.Server) {
	tb.Helper()
	if out, err := srv.Cli(context.Background(), "FLUSHALL"); err != nil || out != "OK" {
		tb.Fatal(out, err)
	}
}

// costResult is one sub-run's figures per op.
type costResult struct {
	cmds, scripts, cpuUS, rate float64
}

// costFloors holds the last floor result of each benchmark (by the name of
// its parent), for the fleet sub-benchmark that runs after it.
var costFloors sync.Map

// costRun measures one sub-run through a meter on a client of its own.
type costRun struct {
	b *testing.B
	m *costmeter.Meter
}

func startCost(b *testing.B, srv *fleettest.Server) *costRun {
	b.Helper()
	m, err := costmeter.Start(context.Background(), costClient(b, srv.Addr, nil))
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	return &costRun{b: b, m: m}
}

// costTap is a TCP forwarder in front of a server that notes when bytes
// last went through it, so that a benchmark can wait for its clients to go
// idle without asking the server, whose CPU it measures (on this machine a
// lone command costs an idle redis-server about 80 µs of CPU, against 18 µs
// in a tight loop: INFO polls would swamp an idle pickup's figure).
type costTap struct {
	ln    net.Listener
	last  atomic.Int64 // unix ns of the last bytes through, either way
	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

// startTap listens on a free port of 127.0.0.1 and forwards to target until
// cleanup.
func startTap(tb testing.TB, target string) *costTap {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	t := &costTap{ln: ln}
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		for {
			down, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				down.Close()
				continue
			}
			t.mu.Lock()
			t.conns = append(t.conns, down, up)
			t.mu.Unlock()
			t.wg.Add(2)
			go t.pump(up, down)
			go t.pump(down, up)
		}
	}()
	tb.Cleanup(func() {
		ln.Close()
		t.mu.Lock()
		for _, c := range t.conns {
			c.Close()
		}
		t.mu.Unlock()
		t.wg.Wait()
	})
	return t
}

func (t *costTap) pump(dst, src net.Conn) {
	defer t.wg.Done()
	defer dst.Close()
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			t.last.Store(time.Now().UnixNano())
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
			t.last.Store(time.Now().UnixNano())
		}
		if err != nil {
			return
		}
	}
}

// URL is the tap's redis:// URL.
func (t *costTap) URL() string { return "redis://" + t.ln.Addr().String() }

// Addr is the tap's address.
func (t *costTap) Addr() string { return t.ln.Addr().String() }

// waitQuiet returns once no byte went through for costQuiet: what a submit
// set off (the pickup, the consumer going back to sleep) is over.
func (t *costTap) waitQuiet(tb testing.TB) {
	tb.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		idle := time.Since(time.Unix(0, t.last.Load()))
		if idle >= costQuiet {
			return
		}
		time.Sleep(costQuiet - idle)
	}
	tb.Fatal("the clients never went quiet")
}

// stop ends the measure and reports it. kind is "floor" or "fleet".
func (r *costRun) stop(kind string) costResult {
	b := r.b
	b.StopTimer()
	cost, err := r.m.Stop(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	n := float64(b.N)
	cpu := cost.CPU
	res := costResult{
		cmds:    float64(cost.Commands()) / n,
		scripts: float64(cost.Scripts()) / n,
		cpuUS:   float64(cpu.Nanoseconds()) / 1e3 / n,
		rate:    n / b.Elapsed().Seconds(),
	}
	b.ReportMetric(res.cmds, "cmds/op")
	b.ReportMetric(res.scripts, "scripts/op")
	b.ReportMetric(res.cpuUS, "redis-µs/op")
	b.ReportMetric(res.rate, "ops/s")
	b.ReportMetric(100*cpu.Seconds()/b.Elapsed().Seconds(), "redis-cpu-%")
	if b.N < 10 {
		return res // the probe run: nothing worth a log line
	}
	b.Logf("%s per op: %s", kind, cost.Breakdown(b.N))
	parent := b.Name()[:strings.LastIndex(b.Name(), "/")]
	switch kind {
	case "floor":
		costFloors.Store(parent, res)
	case "fleet":
		v, ok := costFloors.Load(parent)
		if !ok {
			break
		}
		fl := v.(costResult)
		b.ReportMetric(res.cmds/fl.cmds, "x-floor-cmds")
		b.ReportMetric(res.cpuUS/fl.cpuUS, "x-floor-cpu")
		b.ReportMetric(res.rate/fl.rate, "x-floor-rate")
		b.Logf("fleet vs floor: %.1f vs %.1f cmds/op (%.2fx), %.1f vs %.1f redis-µs/op (%.2fx), %.0f vs %.0f ops/s (%.2fx)",
			res.cmds, fl.cmds, res.cmds/fl.cmds, res.cpuUS, fl.cpuUS, res.cpuUS/fl.cpuUS, res.rate, fl.rate, res.rate/fl.rate)
	}
	return res
}

// floorQueue is the floor of a queue: a list of JSON bodies, a zset of the

// costKind is one contender of an interleaved cost benchmark: round runs n
// operations and returns once they are all done.
type costKind struct {
	name  string
	round func(b *testing.B, n int)
}

// costRound is the operations of one kind per turn of costInterleave.
const costRound = 500

// costInterleave runs b.N operations of every kind, by turns in rounds of
// at most costRound (the order rotating every round, so that no kind always
// follows the same one), and sums each kind's wall time and the server's
// counters over its own rounds. Every kind thus runs on the same server in
// the same stretch of time, and a shared machine's drifting load falls on
// all of them alike; run one after the other, the same kinds drifted by up
// to 2x here. One warm round of each (scripts, connections) goes first,
// uncounted.
//
// It reports per kind <kind>-cmds/op, <kind>-scripts/op, <kind>-µs/op (the
// server's CPU) and <kind>-ops/s, then the ratios of "fleet" to each other
// kind: fleet/<kind>-cpu (its server CPU per op over theirs) and
// fleet/<kind>-rate (its rate over theirs), and logs each kind's commands
// per op by name.
func costInterleave(b *testing.B, srv *fleettest.Server, kinds ...costKind) map[string]costResult {
	b.Helper()
	meter := costClient(b, srv.Addr, nil)
	warm := min(b.N, costRound)
	for _, k := range kinds {
		k.round(b, warm)
	}
	walls := make([]time.Duration, len(kinds))
	costs := make([]costmeter.Cost, len(kinds))
	b.ResetTimer()
	for r, left := 0, b.N; left > 0; r, left = r+1, left-costRound {
		n := min(left, costRound)
		for j := range kinds {
			i := (r + j) % len(kinds)
			m, err := costmeter.Start(context.Background(), meter)
			if err != nil {
				b.Fatal(err)
			}
			t0 := time.Now()
			kinds[i].round(b, n)
			walls[i] += time.Since(t0)
			c, err := m.Stop(context.Background())
			if err != nil {
				b.Fatal(err)
			}
			costs[i] = costs[i].Add(c)
		}
	}
	b.StopTimer()
	res := make(map[string]costResult, len(kinds))
	n := float64(b.N)
	for i, k := range kinds {
		r := costResult{
			cmds:    float64(costs[i].Commands()) / n,
			scripts: float64(costs[i].Scripts()) / n,
			cpuUS:   float64(costs[i].CPU.Nanoseconds()) / 1e3 / n,
			rate:    n / walls[i].Seconds(),
		}
		res[k.name] = r
		b.ReportMetric(r.cmds, k.name+"-cmds/op")
		b.ReportMetric(r.scripts, k.name+"-scripts/op")
		b.ReportMetric(r.cpuUS, k.name+"-µs/op")
		b.ReportMetric(r.rate, k.name+"-ops/s")
		if b.N >= 10 {
			b.Logf("%s per op: %s", k.name, costs[i].Breakdown(b.N))
		}
	}
	if f, ok := res["fleet"]; ok {
		for _, k := range kinds {
			if o := res[k.name]; k.name != "fleet" && o.cpuUS > 0 {
				b.ReportMetric(f.cpuUS/o.cpuUS, "fleet/"+k.name+"-cpu")
				b.ReportMetric(f.rate/o.rate, "fleet/"+k.name+"-rate")
			}
		}
	}
	return res
}

// costSpread runs n calls of op from costGoroutines goroutines, the g-th
// doing its even share on its own index g (a lock name, a key), and
// returns once all are done; a goroutine stops at its first error.
func costSpread(b *testing.B, n int, op func(ctx context.Context, g int) error) {
	var wg sync.WaitGroup
	for g := range costGoroutines {
		share := n / costGoroutines
		if g < n%costGoroutines {
			share++
		}
		if share == 0 {
			continue
		}
		wg.Go(func() {
			ctx := context.Background()
			for range share {
				if err := op(ctx, g); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// floorRelease deletes a lock only if the caller holds it (GET, DEL).
var floorRelease = rueidis.NewLuaScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0`)

// floorFencedAcquire takes a lock and its fencing token in one script
// (SET NX PX, INCR): the least a fenced lock costs.
var floorFencedAcquire = rueidis.NewLuaScript(`
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return redis.call('INCR', KEYS[2])
end
return 0`)

// BenchmarkCostLock: acquire + release, 50 goroutines each on a lock name
// of its own (the same names every round: the steady state; a name's first
// acquire costs two commands more, to seed its fence). floor: the fenced
// floor, a script SET NX PX + INCR of the fence, then a script GET+DEL.
func BenchmarkCostLock(b *testing.B) {
	srv := costServer(b)
	costClean(b, srv)
	const hold = 10 * time.Second
	c := costClient(b, srv.Addr, nil)
	f := costFleet(b, srv.URL())
	locks := make([]*fleet.Lock, costGoroutines)
	for g := range locks {
		locks[g] = f.Lock("cost:" + strconv.Itoa(g))
	}
	floorPair := func(ctx context.Context, g int) error {
		key, token := "floor:lock:"+strconv.Itoa(g), rand.Text()
		fence, err := floorFencedAcquire.Exec(ctx, c, []string{key, key + ":fence"}, []string{token, strconv.FormatInt(hold.Milliseconds(), 10)}).AsInt64()
		if err != nil || fence == 0 {
			return fmt.Errorf("floor acquire: %d, %v", fence, err)
		}
		if n, err := floorRelease.Exec(ctx, c, []string{key}, []string{token}).AsInt64(); err != nil || n != 1 {
			return fmt.Errorf("floor release: %d, %v", n, err)
		}
		return nil
	}
	fleetPair := func(ctx context.Context, g int) error {
		l, err := locks[g].Acquire(ctx, fleet.LockOptions{Hold: hold})
		if err != nil {
			return err
		}
		return l.Release(ctx)
	}
	costInterleave(b, srv,
		costKind{"floor", func(b *testing.B, n int) { costSpread(b, n, floorPair) }},
		costKind{"fleet", func(b *testing.B, n int) { costSpread(b, n, fleetPair) }})
}

// BenchmarkCostKV: a write then reads of the same key, from 50 goroutines
// each on a key of its own: sub-benchmarks reads=1 and reads=10 reads per
// write. Each read must see the value just written (<kind>-stale/op counts
// those that did not). floor: SET, then GET through DoCache.
func BenchmarkCostKV(b *testing.B) {
	srv := costServer(b)
	for _, reads := range []int{1, 10} {
		b.Run("reads="+strconv.Itoa(reads), func(b *testing.B) {
			costClean(b, srv)
			c := costClient(b, srv.Addr, func(o *rueidis.ClientOption) { o.DisableCache = false })
			kv := costFleet(b, srv.URL()).KV("cost")
			var seq, floorStale, fleetStale atomic.Int64
			value := func(g int) string {
				return "value-" + strconv.Itoa(g) + "-" + strconv.FormatInt(seq.Add(1), 10) + "-0123456789abcdef"
			}
			floorOp := func(ctx context.Context, g int) error {
				key, v := "floor:kv:"+strconv.Itoa(g), value(g)
				if err := c.Do(ctx, c.B().Set().Key(key).Value(v).Build()).Error(); err != nil {
					return err
				}
				for range reads {
					got, err := c.DoCache(ctx, c.B().Get().Key(key).Cache(), time.Minute).ToString()
					if err != nil {
						return err
					}
					if got != v {
						floorStale.Add(1)
					}
				}
				return nil
			}
			fleetOp := func(ctx context.Context, g int) error {
				key, v := "k"+strconv.Itoa(g), value(g)
				if err := kv.Set(ctx, key, v, 0); err != nil {
					return err
				}
				for range reads {
					got, ok, err := kv.GetString(ctx, key)
					if err != nil || !ok {
						return fmt.Errorf("get %s: %v, %v", key, ok, err)
					}
					if got != v {
						fleetStale.Add(1)
					}
				}
				return nil
			}
			costInterleave(b, srv,
				costKind{"floor", func(b *testing.B, n int) { costSpread(b, n, floorOp) }},
				costKind{"fleet", func(b *testing.B, n int) { costSpread(b, n, fleetOp) }})
			b.ReportMetric(float64(floorStale.Load())/float64(b.N), "floor-stale/op")
			b.ReportMetric(float64(fleetStale.Load())/float64(b.N), "fleet-stale/op")
		})
	}
}
