package fleet_test

// The queue's cost benchmarks (see cost_bench_test.go): the busy cycle, the
// idle pickup and the full cycle, and the floor queue they are measured
// against.

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/fleettest"
)

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
// 16 at once (par: rueidis pipelines them, as on a busy fleet), and from
// 50 (c50: the raw Reserve(1)/Ack loops of issue 22). Three
// kinds by turns: floor: RPUSH; a script LPOP+ZADD+HSET; a script
// ZREM+HDEL. safe: the floor with the Redis work of fleet's guarantees and
// nothing else (see safeReserve, safeAck): what fleet's scripts could cost
// at best. fleet: Queue.Submit, Queue.Reserve(1), Task.Ack. nohist: the
// same on a Fleet that keeps no history (Options.HistoryFlush < 0), the
// history's cost being fleet's less nohist's.
func BenchmarkCostBusyQueue(b *testing.B) {
	srv := costServer(b)
	const backlog = 100
	for _, mode := range []struct {
		name        string
		concurrency int
	}{{"seq", 1}, {"par", 16}, {"c50", 50}} {
		b.Run(mode.name, func(b *testing.B) {
			costClean(b, srv)
			ctx := context.Background()
			floor := newFloorQueue(costClient(b, srv.Addr, nil), "busy")
			safe := newFloorQueue(costClient(b, srv.Addr, nil), "busy-safe")
			q := fleet.NewQueue[costJob](costFleet(b, srv.URL()), "busy", fleet.QueueOptions{})
			nq := fleet.NewQueue[costJob](costFleet(b, srv.URL(), noHistory), "busy-nohist", fleet.QueueOptions{})
			for i := range backlog {
				if _, err := nq.Submit(ctx, costJob{N: i}); err != nil {
					b.Fatal(err)
				}
				if err := floor.submit(ctx, i); err != nil {
					b.Fatal(err)
				}
				if err := safe.submit(ctx, i); err != nil {
					b.Fatal(err)
				}
				if _, err := q.Submit(ctx, costJob{N: i}); err != nil {
					b.Fatal(err)
				}
			}
			// cycles runs n cycles from mode.concurrency goroutines.
			cycles := func(cycle func(ctx context.Context, i int) error) func(*testing.B, int) {
				return func(b *testing.B, n int) { costPull(b, n, mode.concurrency, cycle) }
			}
			costInterleave(b, srv,
				costKind{"floor", cycles(func(ctx context.Context, i int) error {
					if err := floor.submit(ctx, i); err != nil {
						return err
					}
					id, ok, err := floor.reserve(ctx)
					if err != nil || !ok {
						return fmt.Errorf("floor reserve: %v, %v", ok, err)
					}
					return floor.ack(ctx, id)
				})},
				costKind{"safe", cycles(func(ctx context.Context, i int) error {
					if err := safe.submit(ctx, i); err != nil {
						return err
					}
					id, token, err := safe.safeReserve(ctx)
					if err != nil {
						return err
					}
					return safe.safeAck(ctx, id, token)
				})},
				costKind{"fleet", cycles(func(ctx context.Context, i int) error { return busyCycle(ctx, q, i) })},
				costKind{"nohist", cycles(func(ctx context.Context, i int) error { return busyCycle(ctx, nq, i) })})
		})
	}
}

// busyCycle is one submit, Reserve(1) and Ack on q.
func busyCycle(ctx context.Context, q *fleet.Queue[costJob], i int) error {
	if _, err := q.Submit(ctx, costJob{N: i}); err != nil {
		return err
	}
	ts, err := q.Reserve(ctx, 1, 0)
	if err != nil || len(ts) != 1 {
		return fmt.Errorf("reserve: %d tasks, %v", len(ts), err)
	}
	return ts[0].Ack(ctx)
}

// noHistory opens a Fleet that keeps no history (Options.HistoryFlush):
// the cost benchmarks run it beside the default (kind "nohist") to
// measure what the history costs the hot path.
func noHistory(o *fleet.Options) { o.HistoryFlush = -1 }

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
		startNoopWorker(b, f, q, "cost-idle", 1, func() { done <- struct{}{} })
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

// BenchmarkCostFullCycle: tasks submitted by 8 goroutines and handled
// (no-op) and acked by 16 consumers, the two at once; <kind>-ops/s is
// tasks through per second. fleet: Queue.Submit and a batch worker of 16
// slots. floor: RPUSH, and 16 goroutines that reserve one task at a time
// (the floor scripts), decode its payload and ack it, sleeping 100 µs when
// the queue is empty; they run only during the floor's rounds (fleet's
// worker, idle between its rounds, sleeps on an invalidation: only its
// heartbeat, every 5 s, falls in the floor's rounds). nohist: fleet's on
// a Fleet that keeps no history.
func BenchmarkCostFullCycle(b *testing.B) {
	srv := costServer(b)
	costClean(b, srv)
	produce := func(b *testing.B, n int, submit func(ctx context.Context, i int) error) {
		costPull(b, n, costProducers, submit)
	}
	await := func(b *testing.B, all <-chan struct{}) {
		select {
		case <-all:
		case <-time.After(time.Minute):
			b.Fatal("tasks not all done within a minute")
		}
	}

	fq := newFloorQueue(costClient(b, srv.Addr, nil), "cycle")
	floorRound := func(b *testing.B, n int) {
		var acked atomic.Int64
		all := make(chan struct{})
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for range costSlots {
			wg.Go(func() {
				for ctx.Err() == nil {
					id, ok, err := fq.reserve(ctx)
					if err == nil && ok {
						err = fq.ack(ctx, id)
						if err == nil && acked.Add(1) == int64(n) {
							close(all)
						}
					}
					if err != nil {
						if ctx.Err() == nil {
							b.Error(err)
						}
						return
					}
					if !ok {
						time.Sleep(100 * time.Microsecond)
					}
				}
			})
		}
		produce(b, n, fq.submit)
		await(b, all)
		cancel()
		wg.Wait()
	}

	// fleetCycle is Queue.Submit and a batch worker of costSlots on a
	// Fleet of its own (mods change its options), on queue name.
	fleetCycle := func(name string, mods ...func(*fleet.Options)) func(*testing.B, int) {
		f := costFleet(b, srv.URL(), mods...)
		q := fleet.NewQueue[costJob](f, name, fleet.QueueOptions{})
		var acked, target atomic.Int64
		all := make(chan struct{}, 1)
		startNoopWorker(b, f, q, "cost-"+name, costSlots, func() {
			if acked.Add(1) == target.Load() {
				all <- struct{}{}
			}
		})
		return func(b *testing.B, n int) {
			target.Store(acked.Load() + int64(n))
			produce(b, n, func(ctx context.Context, i int) error {
				_, err := q.Submit(ctx, costJob{N: i})
				return err
			})
			await(b, all)
		}
	}
	costInterleave(b, srv, costKind{"floor", floorRound}, costKind{"fleet", fleetCycle("cycle")},
		costKind{"nohist", fleetCycle("cycle-nohist", noHistory)})
}

// startNoopWorker starts a batch worker of slots slots and a no-op
// handler on q (of f), which calls ended after each task's end (failing b on an
// error), and stops it at cleanup.
func startNoopWorker(b *testing.B, f *fleet.Fleet, q *fleet.Queue[costJob], typ string, slots int, ended func()) *fleet.Worker {
	w := fleet.NewBatchWorker(f, fleet.WorkerOptions{Type: typ, ID: "w", Slots: slots,
		OnTaskEnd: func(id string, err error) {
			if err != nil {
				b.Error(id, err)
			}
			ended()
		}}, q,
		fleet.BatchFunc[costCfg, costOut, costJob](func(context.Context, *fleet.Slot[costCfg, costOut], *fleet.Task[costJob]) error {
			return nil
		}))
	if err := w.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = w.Stop(context.Background()) })
	return w
}

// costPull calls op for i = 1..n from workers goroutines, each taking the
// next i until none is left, and returns once all are done; a goroutine
// stops at its first error.
func costPull(b *testing.B, n, workers int, op func(ctx context.Context, i int) error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			ctx := context.Background()
			for i := next.Add(1); i <= int64(n); i = next.Add(1) {
				if err := op(ctx, int(i)); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}
