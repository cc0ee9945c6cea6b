package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
)

// The floor queue and its scripts are those of the root package's cost
// benchmarks (cost_queue_bench_test.go: floorQueue, floorReserve, floorAck,
// safeReserve, safeAck), copied: this is another module. A list of JSON
// bodies, a zset of the ids in flight by deadline and a hash of their
// bodies. Keep the Lua text in step with that file.

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

// floorInst is the floor queue (safe: the safe floor) on a plain rueidis
// client of its own: RPUSH to submit, a reserve script, an ack script.
type floorInst struct {
	addr                        string
	c                           rueidis.Client
	safe                        bool
	pending, processing, bodies string
	ids                         atomic.Int64
}

func openFloor(safe bool) func(context.Context, env) (instance, error) {
	return func(ctx context.Context, e env) (instance, error) {
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{e.addr}, DisableCache: true})
		if err != nil {
			return nil, err
		}
		k := fmt.Sprintf("floor%d:queue:tiny", time.Now().UnixNano())
		return &floorInst{addr: e.addr, c: c, safe: safe, pending: k, processing: k + ":processing", bodies: k + ":processing:body"}, nil
	}
}

func (q *floorInst) submit(ctx context.Context, j job) error {
	id := "t" + strconv.FormatInt(q.ids.Add(1), 10)
	body := `{"id":"` + id + `","payload":{"s":` + strconv.Itoa(j.Seq) + `,"t":` + strconv.FormatInt(j.T, 10) + `},"attempts":0}`
	return q.c.Do(ctx, q.c.B().Rpush().Key(q.pending).Element(body).Build()).Error()
}

// taken is one reserved task.
type taken struct {
	id, token string
	job       job
}

// reserve takes one task on c; ok is false when the queue was empty. It
// decodes the payload, as any consumer must.
func (q *floorInst) reserve(ctx context.Context, c rueidis.Client) (tk taken, ok bool, err error) {
	var res []rueidis.RedisMessage
	if q.safe {
		prefix := rand.Text()[:12] + "."
		res, err = safeReserve.Exec(ctx, c, []string{q.pending, q.processing, q.bodies, q.pending + ":call:" + prefix, q.processing + ":lease"},
			[]string{prefix}).ToArray()
	} else {
		deadline := strconv.FormatInt(time.Now().Add(30*time.Second).UnixMilli(), 10)
		res, err = floorReserve.Exec(ctx, c, []string{q.pending, q.processing, q.bodies}, []string{deadline}).ToArray()
	}
	if rueidis.IsRedisNil(err) {
		return tk, false, nil
	}
	if err != nil {
		return tk, false, err
	}
	want := 2
	if q.safe {
		want = 3
	}
	if len(res) != want {
		return tk, false, fmt.Errorf("floor reserve: %d elements", len(res))
	}
	tk.id, _ = res[0].ToString()
	body, _ := res[len(res)-1].ToString()
	if q.safe {
		tk.token, _ = res[1].ToString()
	}
	var w struct {
		Payload job `json:"payload"`
	}
	if err := json.Unmarshal([]byte(body), &w); err != nil {
		return tk, false, err
	}
	tk.job = w.Payload
	return tk, true, nil
}

func (q *floorInst) ack(ctx context.Context, c rueidis.Client, tk taken) error {
	var n int64
	var err error
	if q.safe {
		n, err = safeAck.Exec(ctx, c, []string{q.processing, q.bodies, q.processing + ":lease"},
			[]string{tk.id, tk.token, strings.TrimSuffix(tk.token, "1")}).AsInt64()
	} else {
		n, err = floorAck.Exec(ctx, c, []string{q.processing, q.bodies}, []string{tk.id}).AsInt64()
	}
	if err == nil && n != 1 {
		err = fmt.Errorf("floor ack %s: not in flight", tk.id)
	}
	return err
}

// consume runs w goroutines that reserve one task at a time, decode it and
// ack it, sleeping 100 µs when the queue is empty (as the cost benchmarks'
// full cycle does). idle: instead, the idle consumer of the cost
// benchmarks' idle pickup (floorIdleConsumer) on a caching client of its
// own, one goroutine reserving for w handlers: when the queue is empty it
// reads LLEN through DoCache, which arms the invalidation of the list, and
// sleeps until it comes (or a second passed); on a backlog it sends
// several reserves at once (see below), so that it keeps up at 5,000/s.
func (q *floorInst) consume(ctx context.Context, w int, t *tally, idle bool) (func(), error) {
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	handle := func(c rueidis.Client, tk taken) {
		t.start(tk.job.Seq, tk.job.T)
		if err := q.ack(rctx, c, tk); err != nil {
			if rctx.Err() == nil {
				t.fail(err)
			}
			return
		}
		t.end(tk.job.Seq)
	}
	if !idle {
		for range w {
			wg.Go(func() {
				for rctx.Err() == nil {
					tk, ok, err := q.reserve(rctx, q.c)
					switch {
					case err != nil:
						if rctx.Err() == nil {
							t.fail(err)
							time.Sleep(10 * time.Millisecond)
						}
					case ok:
						handle(q.c, tk)
					default:
						time.Sleep(100 * time.Microsecond)
					}
				}
			})
		}
		return func() { cancel(); wg.Wait() }, nil
	}

	wake := make(chan struct{}, 1)
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{q.addr},
		OnInvalidations: func([]rueidis.RedisMessage) {
			select {
			case wake <- struct{}{}:
			default:
			}
		}})
	if err != nil {
		cancel()
		return nil, err
	}
	// The reserver sends k reserves at once (pipelined on the client's
	// connection), each for a free slot: k is 1 while tasks come one at a
	// time (a task, then the queue empty again: one reserve each), and
	// doubles, up to w, after the second round in a row that found a task
	// for every reserve, so that a backlog goes at many tasks per round
	// trip, as fleet's batch reserve does.
	slots := make(chan struct{}, w)
	trySlot := func() bool {
		select {
		case slots <- struct{}{}:
			return true
		default:
			return false
		}
	}
	k, full := 1, 0
	wg.Go(func() {
		for rctx.Err() == nil {
			select {
			case slots <- struct{}{}:
			case <-rctx.Done():
				return
			}
			n := 1
			for n < k && trySlot() {
				n++
			}
			type got struct {
				tk  taken
				ok  bool
				err error
			}
			res := make([]got, n)
			var rwg sync.WaitGroup
			for i := range n {
				rwg.Go(func() { res[i].tk, res[i].ok, res[i].err = q.reserve(rctx, c) })
			}
			rwg.Wait()
			hits := 0
			var rerr error
			for _, r := range res {
				if r.err == nil && r.ok {
					hits++
					wg.Go(func() { handle(c, r.tk); <-slots })
					continue
				}
				<-slots
				if r.err != nil {
					rerr = r.err
				}
			}
			switch {
			case hits == n:
				if full++; full >= 2 {
					k = min(2*k, w)
				}
				continue
			case hits > 0:
				k, full = 1, 0
				continue
			}
			k, full = 1, 0
			if rerr != nil {
				if rctx.Err() == nil {
					t.fail(rerr)
					time.Sleep(10 * time.Millisecond)
				}
				continue
			}
			l, err := c.DoCache(rctx, c.B().Llen().Key(q.pending).Cache(), time.Minute).AsInt64()
			if err == nil && l > 0 {
				continue
			}
			select {
			case <-rctx.Done():
			case <-wake:
			case <-time.After(time.Second):
			}
		}
	})
	return func() { cancel(); wg.Wait(); c.Close() }, nil
}

func (q *floorInst) close() { q.c.Close() }
