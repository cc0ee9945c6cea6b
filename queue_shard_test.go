package fleet_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/internal/keys"
	"github.com/fleet-go/fleet/internal/redistest"
)

// eachTagged runs fn on the two tagged targets (single node, cluster): the
// layout that sharded queues need.
func eachTagged(t *testing.T, fn func(t *testing.T, tg redistest.Target)) {
	t.Helper()
	for _, tg := range redistest.Targets(t) {
		if tg.Tagged {
			t.Run(tg.Name, func(t *testing.T) { fn(t, tg) })
		}
	}
}

// shard returns the keys of shard i of queue name in the test's layout.
func (e *env) shard(name string, i int) keys.Queue {
	return keys.New(e.Prefix, e.Tg.Tagged).QueueShard(name, i)
}

// shardData lists the data keys (tasks, leases, dedup) of the first n
// shards of queue name that exist, with their sizes.
func (e *env) shardData(t *testing.T, name string, n int) []string {
	t.Helper()
	var out []string
	for i := range n {
		s := e.shard(name, i)
		for _, k := range []string{s.Pending, s.Processing, s.Body, s.Lease, s.Scheduled, s.Dead, s.Dedup} {
			n, err := e.Raw.Do(context.Background(), e.Raw.B().Exists().Key(k).Build()).AsInt64()
			if err != nil {
				t.Fatalf("EXISTS %s: %v", k, err)
			}
			if n == 1 {
				out = append(out, k)
			}
		}
	}
	return out
}

// llen reads a list's length raw.
func (e *env) llen(t *testing.T, key string) int64 {
	t.Helper()
	n, err := e.Raw.Do(context.Background(), e.Raw.B().Llen().Key(key).Build()).AsInt64()
	if err != nil {
		t.Fatalf("LLEN %s: %v", key, err)
	}
	return n
}

func TestQueueShardsBadInput(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		for _, n := range []int{-1, 1025, 100000} {
			q := fleet.NewQueue[job](e.F, "bad", fleet.QueueOptions{Shards: n})
			if !errors.Is(q.Err(), fleet.ErrInvalidOptions) {
				t.Fatalf("Shards %d: Err() = %v; want ErrInvalidOptions", n, q.Err())
			}
			if _, err := q.Submit(ctx(t), job{URL: "https://a.example"}); !errors.Is(err, fleet.ErrInvalidOptions) {
				t.Fatalf("Shards %d: Submit = %v; want ErrInvalidOptions", n, err)
			}
		}
		for _, n := range []int{0, 1} {
			if q := fleet.NewQueue[job](e.F, "one", fleet.QueueOptions{Shards: n}); q.Err() != nil {
				t.Fatalf("Shards %d: Err() = %v; want nil", n, q.Err())
			}
		}
		q := fleet.NewQueue[job](e.F, "two", fleet.QueueOptions{Shards: 2})
		if !tg.Tagged {
			if !errors.Is(q.Err(), fleet.ErrInvalidOptions) || !strings.Contains(q.Err().Error(), "tagged layout") {
				t.Fatalf("compat, Shards 2: Err() = %v; want ErrInvalidOptions naming the tagged layout", q.Err())
			}
			if _, err := q.Submit(ctx(t), job{URL: "https://a.example"}); !errors.Is(err, fleet.ErrInvalidOptions) {
				t.Fatalf("compat, Shards 2: Submit = %v", err)
			}
			if ks := e.keys(t); len(ks) != 0 {
				t.Fatalf("a refused queue wrote %v", ks)
			}
			return
		}
		if q.Err() != nil {
			t.Fatalf("tagged, Shards 2: Err() = %v", q.Err())
		}
		_, err := q.SubmitWith(ctx(t), job{URL: "https://a.example"}, fleet.SubmitOptions{ShardKey: "a", DedupKey: "b"})
		if !errors.Is(err, fleet.ErrInvalidArgument) {
			t.Fatalf("ShardKey a, DedupKey b: %v; want ErrInvalidArgument", err)
		}
		if _, err := e.F.Sweep(ctx(t), fleet.SweeperOptions{ShardGrace: time.Second}); !errors.Is(err, fleet.ErrInvalidArgument) {
			t.Fatalf("ShardGrace 1s: %v; want ErrInvalidArgument", err)
		}
		if ks := e.keys(t); len(ks) != 0 {
			t.Fatalf("refused calls wrote %v", ks)
		}
	})
}

// clusterMasters maps each slot of the harness cluster to its master's
// address (CLUSTER SLOTS).
func clusterMasters(t *testing.T, c rueidis.Client) map[int]string {
	t.Helper()
	res, err := c.Do(context.Background(), c.B().ClusterSlots().Build()).ToArray()
	if err != nil {
		t.Fatalf("CLUSTER SLOTS: %v", err)
	}
	out := map[int]string{}
	for _, r := range res {
		row, _ := r.ToArray()
		lo, _ := row[0].AsInt64()
		hi, _ := row[1].AsInt64()
		node, _ := row[2].ToArray()
		host, _ := node[0].ToString()
		port, _ := node[1].AsInt64()
		for s := lo; s <= hi; s++ {
			out[int(s)] = host + ":" + strconv.FormatInt(port, 10)
		}
	}
	return out
}

// Twelve shards of a queue land on all three masters of the harness
// cluster, four on each (keys.ShardTag: exact for these names, as for
// about 98% of names; a shard's window may straddle a master's range
// edge), and a round-robin submit puts one task on each.
func TestQueueShardsSpreadMasters(t *testing.T) {
	t.Parallel()
	tg := redistest.Targets(t)[2]
	e := open(t, tg)
	masters := clusterMasters(t, e.Raw)
	for _, name := range []string{"hot", "orders", "q", "a-much-longer-queue-name.v2"} {
		per := map[string]int{}
		for i := range 12 {
			k := e.shard(name, i).Pending
			slot, err := e.Raw.Do(ctx(t), e.Raw.B().ClusterKeyslot().Key(k).Build()).AsInt64()
			if err != nil {
				t.Fatalf("CLUSTER KEYSLOT %s: %v", k, err)
			}
			if int(slot) != keys.Slot(k) {
				t.Fatalf("keys.Slot(%s) = %d; the server says %d", k, keys.Slot(k), slot)
			}
			per[masters[int(slot)]]++
		}
		if len(per) != 3 {
			t.Fatalf("queue %q: 12 shards on %d masters: %v; want all 3", name, len(per), per)
		}
		for m, n := range per {
			if n != 4 {
				t.Fatalf("queue %q: %d shards on master %s (%v); want 4 on each", name, n, m, per)
			}
		}
	}
	q := fleet.NewQueue[job](e.F, "hot", fleet.QueueOptions{Shards: 12})
	for i := range 12 {
		if _, err := q.Submit(ctx(t), job{URL: "https://a.example", N: i}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 12 {
		if n := e.llen(t, e.shard("hot", i).Pending); n != 1 {
			t.Fatalf("shard %d holds %d tasks; want 1 (round-robin)", i, n)
		}
	}
	if got, _ := e.hget(t, e.shard("hot", 0).Shards, "max"); got != "12" {
		t.Fatalf("shards max = %q; want 12", got)
	}
}

// 20,000 tasks through a queue of 8 shards, 8 consumers over 2 Fleets:
// each task is acked exactly once, and nothing is left in any shard.
func TestQueueShardsExactlyOnce(t *testing.T) {
	eachTagged(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		f2 := openOn(t, tg, e.Prefix)
		const total, shards = 20000, 8
		prod := fleet.NewQueue[job](e.F, "many", fleet.QueueOptions{Shards: shards})
		var mu sync.Mutex
		acks := map[string]int{}
		ids := map[string]bool{}
		c := ctx(t)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := 0; b < total; b += 250 {
				batch := make([]job, 250)
				for i := range batch {
					batch[i] = job{URL: "https://a.example", N: (b + i) % 1000}
				}
				got, err := prod.SubmitMany(c, batch)
				if err != nil {
					t.Errorf("submit: %v", err)
					return
				}
				mu.Lock()
				for _, id := range got {
					ids[id] = true
				}
				mu.Unlock()
			}
		}()
		var done sync.WaitGroup
		var acked, errs int64
		for w := range 8 {
			f := e.F
			if w%2 == 1 {
				f = f2
			}
			q := fleet.NewQueue[job](f, "many", fleet.QueueOptions{Shards: shards})
			done.Add(1)
			go func() {
				defer done.Done()
				for {
					mu.Lock()
					finished := acked >= total
					mu.Unlock()
					if finished || c.Err() != nil {
						return
					}
					ts, err := q.Reserve(c, 20, 200*time.Millisecond)
					if err != nil {
						t.Errorf("reserve: %v", err)
						return
					}
					for _, tk := range ts {
						if err := tk.Ack(c); err != nil {
							mu.Lock()
							errs++
							mu.Unlock()
							t.Errorf("ack %s: %v", tk.ID, err)
							continue
						}
						mu.Lock()
						acks[tk.ID]++
						acked++
						mu.Unlock()
					}
				}
			}()
		}
		wg.Wait()
		done.Wait()
		if len(ids) != total || len(acks) != total || errs != 0 {
			t.Fatalf("submitted %d ids, acked %d distinct, %d ack errors; want %d", len(ids), len(acks), errs, total)
		}
		for id, n := range acks {
			if n != 1 || !ids[id] {
				t.Fatalf("task %s acked %d times (submitted: %v)", id, n, ids[id])
			}
		}
		if left := e.shardData(t, "many", shards); len(left) != 0 {
			t.Fatalf("keys left after every ack: %v", left)
		}
		st, err := prod.Stats(c)
		if err != nil || st != (fleet.QueueStats{}) {
			t.Fatalf("Stats = %+v, %v; want zeros", st, err)
		}
		// What is left is derived: the registry, each shard's policy, the
		// shard count.
		var want []string
		for i := range shards {
			want = append(want, e.shard("many", i).Policy)
		}
		want = append(want, e.shard("many", 0).Shards, e.Prefix+"fleet:queues")
		slices.Sort(want)
		if got := e.keys(t); !slices.Equal(got, want) {
			t.Fatalf("keys left = %v; want %v", got, want)
		}
	})
}

// Tasks with the same ShardKey go to one shard and are reserved in the
// order they were submitted, whatever the other keys do.
func TestQueueShardsKeyFIFO(t *testing.T) {
	eachTagged(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		q := fleet.NewQueue[job](e.F, "fifo", fleet.QueueOptions{Shards: 6})
		keysUsed := []string{"alice", "bob", "carol", "dave", "erin"}
		for i := range 40 {
			for _, k := range keysUsed {
				if _, err := q.SubmitWith(ctx(t), job{URL: "https://" + k + ".example", N: i}, fleet.SubmitOptions{ShardKey: k}); err != nil {
					t.Fatal(err)
				}
			}
		}
		// Each key's tasks sit in one shard.
		for _, k := range keysUsed {
			in := 0
			for i := range 6 {
				for _, raw := range e.lrange(t, e.shard("fifo", i).Pending) {
					if strings.Contains(raw, "https://"+k+".example") {
						in |= 1 << i
					}
				}
			}
			if in == 0 || in&(in-1) != 0 {
				t.Fatalf("key %s spans shards %b; want one", k, in)
			}
		}
		next := map[string]int{}
		for got := 0; got < 200; {
			ts, err := q.Reserve(ctx(t), 3, time.Second)
			if err != nil || len(ts) == 0 {
				t.Fatalf("reserve after %d: %v, %d tasks", got, err, len(ts))
			}
			for _, tk := range ts {
				k := strings.TrimSuffix(strings.TrimPrefix(tk.Payload.URL, "https://"), ".example")
				if tk.Payload.N != next[k] {
					t.Fatalf("key %s: got task %d, want %d (per-key FIFO)", k, tk.Payload.N, next[k])
				}
				next[k]++
				got++
				if err := tk.Ack(ctx(t)); err != nil {
					t.Fatal(err)
				}
			}
		}
	})
}

// A Reserve that waits on an empty sharded queue wakes when a task lands on
// any shard, pushed by another Fleet, with and without client-side caching.
func TestQueueShardsBlockingWake(t *testing.T) {
	eachTagged(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		for _, cache := range []bool{true, false} {
			t.Run(fmt.Sprintf("cache=%v", cache), func(t *testing.T) {
				e := open(t, tg, func(o *fleet.Options) { o.DisableCache = !cache })
				other := openOn(t, tg, e.Prefix)
				q := fleet.NewQueue[job](e.F, "wake", fleet.QueueOptions{Shards: 8})
				p := fleet.NewQueue[job](other, "wake", fleet.QueueOptions{Shards: 8})
				// The waiter reaches Redis first: it knows all 8 shards.
				if ts, err := q.Reserve(ctx(t), 1, 0); err != nil || len(ts) != 0 {
					t.Fatalf("reserve on empty: %v %v", ts, err)
				}
				for _, target := range []int{5, 0, 7} {
					key := ""
					for i := 0; ; i++ {
						if key = "k" + strconv.Itoa(i); shardOfKey(key, 8) == target {
							break
						}
					}
					type res struct {
						ts  []*fleet.Task[job]
						err error
					}
					got := make(chan res, 1)
					go func() {
						ts, err := q.Reserve(ctx(t), 1, 50*time.Second)
						got <- res{ts, err}
					}()
					time.Sleep(200 * time.Millisecond) // usually parked by now; either way it must get the task
					id, err := p.SubmitWith(ctx(t), job{URL: "https://a.example", N: target}, fleet.SubmitOptions{ShardKey: key})
					if err != nil {
						t.Fatal(err)
					}
					if n := e.llen(t, e.shard("wake", target).Pending); n > 1 {
						t.Fatalf("shard %d holds %d", target, n)
					}
					r := <-got
					if r.err != nil || len(r.ts) != 1 || r.ts[0].ID != id {
						t.Fatalf("shard %d: woke with %v, %v; want task %s", target, r.ts, r.err, id)
					}
					if err := r.ts[0].Ack(ctx(t)); err != nil {
						t.Fatal(err)
					}
				}
			})
		}
	})
}

// shardOfKey is fleet's shard of a ShardKey among k (FNV-1a modulo k).
func shardOfKey(key string, k int) int {
	h := uint32(2166136261)
	for i := 0; i < len(key); i++ {
		h ^= uint32(key[i])
		h *= 16777619
	}
	return int(h % uint32(k))
}
