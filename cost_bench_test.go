package fleet_test

// Cost benchmarks (issue 10, "minimum Redis work on the hot path"): what each
// hot-path operation costs Redis, beside a bare rueidis "floor" that runs the
// minimal commands and scripts for the same operation, on the same
// redis-server (one of the benchmark's own, so nothing else moves its
// counters), in the same run.
//
// Run: go test -run '^$' -bench '^BenchmarkCost' -benchtime 2000x .
// ('Cost' alone also matches BenchmarkWorkerIdleCost, a 6 s run.)
//
// Each benchmark has a floor and a fleet sub-benchmark, floor first. Both
// report per operation:
//   - cmds/op: calls from INFO commandstats deltas; a script's EVALSHA and
//     each command it ran count one each; the meter's own INFO calls are
//     left out;
//   - scripts/op: EVAL/EVALSHA/FCALL calls alone;
//   - redis-µs/op: server CPU, the used_cpu_user+used_cpu_sys delta;
//   - ops/s and redis-cpu-%: the rate, and the server's CPU over wall time.
//
// fleet also reports its ratios to the floor run just before it
// (x-floor-cmds, x-floor-cpu, x-floor-rate), and both log the commands per
// op by name. TestCostTrace (FLEET_COST_TRACE=1) prints, through MONITOR,
// the commands of one operation of each kind.

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net"
	"runtime"
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
func costFleet(tb testing.TB, url string) *fleet.Fleet {
	tb.Helper()
	f, err := fleet.Open(context.Background(), fleet.Options{URL: url})
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
// its parent), for the fleet sub-benchmark that runs after it; costSafe
// likewise the "safe" floor's, where a benchmark has one.
var costFloors, costSafe sync.Map

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
	case "safe":
		costSafe.Store(parent, res)
	case "fleet":
		if v, ok := costSafe.Load(parent); ok {
			sf := v.(costResult)
			b.ReportMetric(res.cpuUS/sf.cpuUS, "x-safe-cpu")
			b.Logf("fleet vs safe floor: %.1f vs %.1f cmds/op, %.1f vs %.1f redis-µs/op (%.2fx), %.0f vs %.0f ops/s (%.2fx)",
				res.cmds, sf.cmds, res.cpuUS, sf.cpuUS, res.cpuUS/sf.cpuUS, res.rate, sf.rate, res.rate/sf.rate)
		}
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
// ids in flight by deadline and a hash of their bodies, through the minimal
// scripts. The keys are not fleet's.
type floorQueue struct {
	c                           rueidis.Client
	pending, processing, bodies string
	ids                         atomic.Int64
}

// floorReserve pops one task and registers it as in flight (LPOP, ZADD,
// HSET); the id comes out of the JSON body, as fleet's does.
var floorReserve = rueidis.NewLuaScript(`
local body = redis.call('LPOP', KEYS[1])
if not body then return false end
local id = cjson.decode(body).id
redis.call('ZADD', KEYS[2], ARGV[1], id)
redis.call('HSET', KEYS[3], id, body)
return {id, body}`)

// floorAck ends a task in flight (ZREM, HDEL).
var floorAck = rueidis.NewLuaScript(`
if redis.call('ZREM', KEYS[1], ARGV[1]) == 1 then
  return redis.call('HDEL', KEYS[2], ARGV[1])
end
return 0`)

// safeReserve is floorReserve with the Redis work of fleet's guarantees
// (the "safe" floor): the call's tombstone looked at (EXISTS), the
// deadline from the server's clock (TIME), and a lease entry, "token
// deadline_ms", written with the call's record of what it took (HSET).
var safeReserve = rueidis.NewLuaScript(`
if redis.call('EXISTS', KEYS[4]) == 1 then return false end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local body = redis.call('LPOP', KEYS[1])
if not body then return false end
local id = cjson.decode(body).id
local dl = now + 30000
redis.call('ZADD', KEYS[2], dl / 1000, id)
redis.call('HSET', KEYS[3], id, body)
local token = ARGV[1] .. '1'
redis.call('HSET', KEYS[5], id, token .. ' ' .. dl, ARGV[1], id)
return {id, token, body}`)

// safeAck is floorAck with the owner check of fleet's guarantees: the
// lease entry's token and deadline against the caller's token and the
// :processing score (HGET, ZSCORE), and the lease entry and the call's
// record deleted with the task (HDEL).
var safeAck = rueidis.NewLuaScript(`
local v = redis.call('HGET', KEYS[3], ARGV[1])
if not v then return 0 end
local tok, dl = string.match(v, '^(%S+) (%d+)$')
if tok ~= ARGV[2] then return 0 end
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score or math.floor(tonumber(score) * 1000 + 0.5) ~= tonumber(dl) then return 0 end
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1], ARGV[3])
return 1`)

// floorRelease deletes a lock only if the caller holds it (GET, DEL).
var floorRelease = rueidis.NewLuaScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0`)

func newFloorQueue(c rueidis.Client, name string) *floorQueue {
	k := "floor:queue:" + name
	return &floorQueue{c: c, pending: k, processing: k + ":processing", bodies: k + ":processing:body"}
}

func (q *floorQueue) submit(ctx context.Context, n int) error {
	id := "t" + strconv.FormatInt(q.ids.Add(1), 10)
	body := `{"id":"` + id + `","payload":{"n":` + strconv.Itoa(n) + `},"attempts":0}`
	return q.c.Do(ctx, q.c.B().Rpush().Key(q.pending).Element(body).Build()).Error()
}

// reserve takes one task; ok is false when the queue was empty. It decodes
// the payload, as any consumer must.
func (q *floorQueue) reserve(ctx context.Context) (id string, ok bool, err error) {
	deadline := strconv.FormatInt(time.Now().Add(30*time.Second).UnixMilli(), 10)
	res, err := floorReserve.Exec(ctx, q.c, []string{q.pending, q.processing, q.bodies}, []string{deadline}).ToArray()
	if rueidis.IsRedisNil(err) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	if len(res) != 2 {
		return "", false, fmt.Errorf("floor reserve: %d elements", len(res))
	}
	id, _ = res[0].ToString()
	body, _ := res[1].ToString()
	var w struct {
		Payload costJob `json:"payload"`
	}
	if err := json.Unmarshal([]byte(body), &w); err != nil {
		return "", false, err
	}
	return id, true, nil
}

func (q *floorQueue) ack(ctx context.Context, id string) error {
	n, err := floorAck.Exec(ctx, q.c, []string{q.processing, q.bodies}, []string{id}).AsInt64()
	if err == nil && n != 1 {
		err = fmt.Errorf("floor ack %s: not in flight", id)
	}
	return err
}

// safeReserve and safeAck run the safe floor's scripts on q's keys (its
// lease hash and tombstones beside them): the token prefix is random per
// call, as fleet's.
func (q *floorQueue) safeReserve(ctx context.Context) (id, token string, err error) {
	prefix := rand.Text()[:12] + "."
	res, err := safeReserve.Exec(ctx, q.c, []string{q.pending, q.processing, q.bodies, q.pending + ":call:" + prefix, q.processing + ":lease"},
		[]string{prefix}).ToArray()
	if err != nil {
		return "", "", err
	}
	if len(res) != 3 {
		return "", "", fmt.Errorf("safe reserve: %d elements", len(res))
	}
	id, _ = res[0].ToString()
	token, _ = res[1].ToString()
	body, _ := res[2].ToString()
	var w struct {
		Payload costJob `json:"payload"`
	}
	return id, token, json.Unmarshal([]byte(body), &w)
}

func (q *floorQueue) safeAck(ctx context.Context, id, token string) error {
	n, err := safeAck.Exec(ctx, q.c, []string{q.processing, q.bodies, q.processing + ":lease"},
		[]string{id, token, strings.TrimSuffix(token, "1")}).AsInt64()
	if err == nil && n != 1 {
		err = fmt.Errorf("safe ack %s: not in flight", id)
	}
	return err
}

// BenchmarkCostBusyQueue: submit -> reserve (1) -> ack of one task, on a
// queue that always has work (a backlog of 100), from one goroutine (seq:
// every command waits for the one before, as a lone worker does) and from
// 16 at once (par: rueidis pipelines them, as on a busy fleet).
// floor: RPUSH; a script LPOP+ZADD+HSET; a script ZREM+HDEL. safe: the
// floor with the Redis work of fleet's guarantees and nothing else (see
// safeReserve, safeAck): what fleet's scripts could cost at best.
func BenchmarkCostBusyQueue(b *testing.B) {
	srv := costServer(b)
	const backlog = 100
	for _, mode := range []struct {
		name        string
		concurrency int
	}{{"seq", 1}, {"par", 16}} {
		loop := func(b *testing.B, kind string, cycle func(ctx context.Context, i int)) {
			cycle(context.Background(), 0) // loads the scripts
			r := startCost(b, srv)
			var next atomic.Int64
			var wg sync.WaitGroup
			for range mode.concurrency {
				wg.Add(1)
				go func() {
					defer wg.Done()
					ctx := context.Background()
					for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
						cycle(ctx, int(i))
					}
				}()
			}
			wg.Wait()
			r.stop(kind)
		}
		b.Run(mode.name, func(b *testing.B) {
			b.Run("floor", func(b *testing.B) {
				costClean(b, srv)
				q := newFloorQueue(costClient(b, srv.Addr, nil), "busy")
				for i := range backlog {
					if err := q.submit(context.Background(), i); err != nil {
						b.Fatal(err)
					}
				}
				loop(b, "floor", func(ctx context.Context, i int) {
					if err := q.submit(ctx, i); err != nil {
						b.Error(err)
						return
					}
					id, ok, err := q.reserve(ctx)
					if err != nil || !ok {
						b.Error(ok, err)
						return
					}
					if err := q.ack(ctx, id); err != nil {
						b.Error(err)
					}
				})
			})
			b.Run("safe", func(b *testing.B) {
				costClean(b, srv)
				q := newFloorQueue(costClient(b, srv.Addr, nil), "busy")
				for i := range backlog {
					if err := q.submit(context.Background(), i); err != nil {
						b.Fatal(err)
					}
				}
				loop(b, "safe", func(ctx context.Context, i int) {
					if err := q.submit(ctx, i); err != nil {
						b.Error(err)
						return
					}
					id, token, err := q.safeReserve(ctx)
					if err != nil {
						b.Error(err)
						return
					}
					if err := q.safeAck(ctx, id, token); err != nil {
						b.Error(err)
					}
				})
			})
			b.Run("fleet", func(b *testing.B) {
				costClean(b, srv)
				q := fleet.NewQueue[costJob](costFleet(b, srv.URL()), "busy", fleet.QueueOptions{})
				for i := range backlog {
					if _, err := q.Submit(context.Background(), costJob{N: i}); err != nil {
						b.Fatal(err)
					}
				}
				loop(b, "fleet", func(ctx context.Context, i int) {
					if _, err := q.Submit(ctx, costJob{N: i}); err != nil {
						b.Error(err)
						return
					}
					ts, err := q.Reserve(ctx, 1, 0)
					if err != nil || len(ts) != 1 {
						b.Error(len(ts), err)
						return
					}
					if err := ts[0].Ack(ctx); err != nil {
						b.Error(err)
					}
				})
			})
		})
	}
}

// BenchmarkCostIdlePickup: a consumer of one slot sleeps on an empty queue;
// one task is submitted, picked up, handled (no-op) and acked, and the
// consumer goes back to sleep. cmds/op is the whole cost of one task to an
// idle consumer: the submit, the wake-up, the pickup, the ack, and the
// reserve and re-arm that find the queue empty again. The next task is
// submitted only once no byte went between the clients and the server for
// 1 ms (seen by a TCP forwarder in front of the server, so that the wait
// costs the server nothing). pickup-p50/p99-µs: from submit to the end of
// the ack, through the forwarder. Heartbeats (every 5 s) are in the count.
//
// floor: the same wake-up as fleet (client-side caching: LLEN read through
// DoCache, woken by its invalidation), and the floor queue's scripts.
func BenchmarkCostIdlePickup(b *testing.B) {
	srv := costServer(b)
	b.Run("floor", func(b *testing.B) {
		costClean(b, srv)
		tap := startTap(b, srv.Addr)
		q, done := floorIdleConsumer(b, tap.Addr(), "idle")
		idlePickups(b, srv, tap, "floor", done, func(ctx context.Context, i int) error { return q.submit(ctx, i) })
	})
	b.Run("fleet", func(b *testing.B) {
		costClean(b, srv)
		tap := startTap(b, srv.Addr)
		f := costFleet(b, tap.URL())
		q := fleet.NewQueue[costJob](f, "idle", fleet.QueueOptions{})
		done := make(chan struct{}, 1)
		w := fleet.NewBatchWorker(f, fleet.WorkerOptions{Type: "cost-idle", ID: "w", Slots: 1,
			OnTaskEnd: func(id string, err error) {
				if err != nil {
					b.Error(id, err)
				}
				done <- struct{}{}
			}}, q,
			fleet.BatchFunc[costCfg, costOut, costJob](func(context.Context, *fleet.Slot[costCfg, costOut], *fleet.Task[costJob]) error {
				return nil
			}))
		if err := w.Start(context.Background()); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = w.Stop(context.Background()) })
		idlePickups(b, srv, tap, "fleet", done, func(ctx context.Context, i int) error {
			_, err := q.Submit(ctx, costJob{N: i})
			return err
		})
	})
}

// floorIdleConsumer starts the floor's idle-pickup consumer on a client of
// its own: reserve one task; when none, read LLEN through DoCache, which arms
// the invalidation of the list, and sleep until it comes. It sends on done
// after each ack, and ends at cleanup.
func floorIdleConsumer(tb testing.TB, addr, name string) (*floorQueue, <-chan struct{}) {
	wake := make(chan struct{}, 1)
	c := costClient(tb, addr, func(o *rueidis.ClientOption) {
		o.DisableCache = false
		o.OnInvalidations = func([]rueidis.RedisMessage) {
			select {
			case wake <- struct{}{}:
			default:
			}
		}
	})
	q := newFloorQueue(c, name)
	done := make(chan struct{}, 1)
	runCtx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for runCtx.Err() == nil {
			id, ok, err := q.reserve(runCtx)
			if err == nil && ok {
				if err = q.ack(runCtx, id); err == nil {
					select {
					case done <- struct{}{}:
					case <-runCtx.Done():
					}
					continue
				}
			}
			if err != nil {
				if runCtx.Err() == nil {
					tb.Error(err)
				}
				return
			}
			l, err := c.DoCache(runCtx, c.B().Llen().Key(q.pending).Cache(), time.Minute).AsInt64()
			if err == nil && l > 0 {
				continue
			}
			select {
			case <-runCtx.Done():
			case <-wake:
			case <-time.After(5 * time.Second):
			}
		}
	}()
	tb.Cleanup(func() { cancel(); wg.Wait() })
	return q, done
}

// idlePickups submits b.N tasks one at a time, each once the consumer is
// idle, and waits for each to be done.
func idlePickups(b *testing.B, srv *fleettest.Server, tap *costTap, kind string, done <-chan struct{}, submit func(context.Context, int) error) {
	ctx := context.Background()
	one := func(i int) time.Duration {
		t0 := time.Now()
		if err := submit(ctx, i); err != nil {
			b.Fatal(err)
		}
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			b.Fatal("task not done within 10 s")
		}
		return time.Since(t0)
	}
	one(-1) // loads the scripts
	tap.waitQuiet(b)
	r := startCost(b, srv)
	lat := make([]time.Duration, 0, b.N)
	for i := range b.N {
		lat = append(lat, one(i))
		tap.waitQuiet(b)
	}
	r.stop(kind)
	reportLatency(b, "pickup", lat)
}

// BenchmarkCostLock: acquire + release, 50 goroutines each on a lock name
// of its own. floor: SET NX PX, then a script GET+DEL.
func BenchmarkCostLock(b *testing.B) {
	srv := costServer(b)
	const hold = 10 * time.Second
	b.Run("floor", func(b *testing.B) {
		costClean(b, srv)
		c := costClient(b, srv.Addr, nil)
		pair := func(ctx context.Context, key string) {
			token := rand.Text()
			ok, err := c.Do(ctx, c.B().Set().Key(key).Value(token).Nx().PxMilliseconds(hold.Milliseconds()).Build()).ToString()
			if err != nil || ok != "OK" {
				b.Fatal(ok, err)
			}
			if n, err := floorRelease.Exec(ctx, c, []string{key}, []string{token}).AsInt64(); err != nil || n != 1 {
				b.Fatal(n, err)
			}
		}
		pair(context.Background(), "floor:lock:warm")
		var id atomic.Int64
		r := startCost(b, srv)
		costParallel(b, func(pb *testing.PB) {
			ctx := context.Background()
			key := "floor:lock:" + strconv.FormatInt(id.Add(1), 10)
			for pb.Next() {
				pair(ctx, key)
			}
		})
		r.stop("floor")
	})
	b.Run("fleet", func(b *testing.B) {
		costClean(b, srv)
		f := costFleet(b, srv.URL())
		pair := func(ctx context.Context, lk *fleet.Lock) {
			l, err := lk.Acquire(ctx, fleet.LockOptions{Hold: hold})
			if err != nil {
				b.Fatal(err)
			}
			if err := l.Release(ctx); err != nil {
				b.Fatal(err)
			}
		}
		pair(context.Background(), f.Lock("cost:warm"))
		var id atomic.Int64
		r := startCost(b, srv)
		costParallel(b, func(pb *testing.PB) {
			ctx := context.Background()
			lk := f.Lock("cost:" + strconv.FormatInt(id.Add(1), 10))
			for pb.Next() {
				pair(ctx, lk)
			}
		})
		r.stop("fleet")
	})
}

func costParallel(b *testing.B, fn func(pb *testing.PB)) {
	b.SetParallelism(max(1, costGoroutines/runtime.GOMAXPROCS(0)))
	b.RunParallel(fn)
}

// BenchmarkCostKV: a write then reads of the same key, from 50 goroutines
// each on a key of its own: sub-benchmarks reads=1 and reads=10 reads per
// write. Each read must see the value just written (stale/op counts those
// that did not). floor: SET, then GET through DoCache.
func BenchmarkCostKV(b *testing.B) {
	srv := costServer(b)
	for _, reads := range []int{1, 10} {
		b.Run("reads="+strconv.Itoa(reads), func(b *testing.B) {
			b.Run("floor", func(b *testing.B) {
				costClean(b, srv)
				c := costClient(b, srv.Addr, func(o *rueidis.ClientOption) { o.DisableCache = false })
				var stale atomic.Int64
				op := func(ctx context.Context, key, value string) {
					if err := c.Do(ctx, c.B().Set().Key(key).Value(value).Build()).Error(); err != nil {
						b.Fatal(err)
					}
					for range reads {
						got, err := c.DoCache(ctx, c.B().Get().Key(key).Cache(), time.Minute).ToString()
						if err != nil {
							b.Fatal(err)
						}
						if got != value {
							stale.Add(1)
						}
					}
				}
				op(context.Background(), "floor:kv:warm", "x")
				kvLoop(b, srv, "floor", &stale, func(i int64) string { return "floor:kv:" + strconv.FormatInt(i, 10) }, op)
			})
			b.Run("fleet", func(b *testing.B) {
				costClean(b, srv)
				kv := costFleet(b, srv.URL()).KV("cost")
				var stale atomic.Int64
				op := func(ctx context.Context, key, value string) {
					if err := kv.Set(ctx, key, value, 0); err != nil {
						b.Fatal(err)
					}
					for range reads {
						got, ok, err := kv.GetString(ctx, key)
						if err != nil || !ok {
							b.Fatal(ok, err)
						}
						if got != value {
							stale.Add(1)
						}
					}
				}
				op(context.Background(), "warm", "x")
				kvLoop(b, srv, "fleet", &stale, func(i int64) string { return "k" + strconv.FormatInt(i, 10) }, op)
			})
		})
	}
}

func kvLoop(b *testing.B, srv *fleettest.Server, kind string, stale *atomic.Int64, key func(int64) string, op func(ctx context.Context, key, value string)) {
	var id atomic.Int64
	r := startCost(b, srv)
	costParallel(b, func(pb *testing.PB) {
		ctx := context.Background()
		g := id.Add(1)
		k := key(g)
		for i := 0; pb.Next(); i++ {
			op(ctx, k, "value-"+strconv.FormatInt(g, 10)+"-"+strconv.Itoa(i)+"-0123456789abcdef")
		}
	})
	r.stop(kind)
	b.ReportMetric(float64(stale.Load())/float64(b.N), "stale/op")
}

// BenchmarkCostFullCycle: b.N tasks submitted by 8 goroutines and handled
// (no-op) and acked by 16 consumers, the two at once; ops/s is tasks
// through per second. fleet: Queue.Submit and a batch worker of 16 slots.
// floor: RPUSH, and 16 goroutines that reserve one task at a time (the
// floor scripts), decode its payload and ack it, sleeping 100 µs when the
// queue is empty.
func BenchmarkCostFullCycle(b *testing.B) {
	srv := costServer(b)
	produce := func(b *testing.B, submit func(ctx context.Context, i int) error) {
		var next atomic.Int64
		var wg sync.WaitGroup
		for range costProducers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx := context.Background()
				for {
					i := next.Add(1)
					if i > int64(b.N) {
						return
					}
					if err := submit(ctx, int(i)); err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
	}
	await := func(b *testing.B, all <-chan struct{}) {
		select {
		case <-all:
		case <-time.After(time.Minute):
			b.Fatal("tasks not all done within a minute")
		}
	}
	b.Run("floor", func(b *testing.B) {
		costClean(b, srv)
		c := costClient(b, srv.Addr, nil)
		q := newFloorQueue(c, "cycle")
		var acked atomic.Int64
		all := make(chan struct{})
		runCtx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		// Load the scripts before the clock starts.
		if _, _, err := q.reserve(runCtx); err != nil {
			b.Fatal(err)
		}
		_ = floorAck.Exec(runCtx, c, []string{q.processing, q.bodies}, []string{"none"}).Error()
		r := startCost(b, srv)
		for range costSlots {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for runCtx.Err() == nil {
					id, ok, err := q.reserve(runCtx)
					if err == nil && ok {
						err = q.ack(runCtx, id)
						if err == nil && acked.Add(1) == int64(b.N) {
							close(all)
						}
					}
					if err != nil {
						if runCtx.Err() == nil {
							b.Error(err)
						}
						return
					}
					if !ok {
						time.Sleep(100 * time.Microsecond)
					}
				}
			}()
		}
		produce(b, func(ctx context.Context, i int) error { return q.submit(ctx, i) })
		await(b, all)
		res := r.stop("floor")
		_ = res
		cancel()
		wg.Wait()
	})
	b.Run("fleet", func(b *testing.B) {
		costClean(b, srv)
		f := costFleet(b, srv.URL())
		q := fleet.NewQueue[costJob](f, "cycle", fleet.QueueOptions{})
		var acked atomic.Int64
		all := make(chan struct{})
		w := fleet.NewBatchWorker(f, fleet.WorkerOptions{Type: "cost-cycle", ID: "w", Slots: costSlots,
			OnTaskEnd: func(id string, err error) {
				if err != nil {
					b.Error(id, err)
				}
				if acked.Add(1) == int64(b.N) {
					close(all)
				}
			}}, q,
			fleet.BatchFunc[costCfg, costOut, costJob](func(context.Context, *fleet.Slot[costCfg, costOut], *fleet.Task[costJob]) error {
				return nil
			}))
		if err := w.Start(context.Background()); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = w.Stop(context.Background()) })
		// Load the scripts before the clock starts.
		warm := fleet.NewQueue[costJob](f, "cycle-warm", fleet.QueueOptions{})
		if _, err := warm.Submit(context.Background(), costJob{}); err != nil {
			b.Fatal(err)
		}
		if ts, err := warm.Reserve(context.Background(), 1, 0); err != nil || len(ts) != 1 || ts[0].Ack(context.Background()) != nil {
			b.Fatal(len(ts), err)
		}
		r := startCost(b, srv)
		produce(b, func(ctx context.Context, i int) error {
			_, err := q.Submit(ctx, costJob{N: i})
			return err
		})
		await(b, all)
		r.stop("fleet")
	})
}
