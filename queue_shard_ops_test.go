package fleet_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/internal/redistest"
)

// consume reserves and acks tasks of q until stop is closed and the queue
// holds nothing, counting acks per id into acks.
func consume(t *testing.T, c context.Context, q *fleet.Queue[job], mu *sync.Mutex, acks map[string]int, stop <-chan struct{}) {
	for {
		ts, err := q.Reserve(c, 10, 100*time.Millisecond)
		if err != nil {
			t.Errorf("reserve: %v", err)
			return
		}
		for _, tk := range ts {
			if err := tk.Ack(c); err != nil {
				t.Errorf("ack %s: %v", tk.ID, err)
				continue
			}
			mu.Lock()
			acks[tk.ID]++
			mu.Unlock()
		}
		if len(ts) == 0 {
			select {
			case <-stop:
				st, err := q.Stats(c)
				if err == nil && st.Pending == 0 && st.InFlight == 0 && st.Scheduled == 0 {
					return
				}
			default:
			}
		}
	}
}

// The shard count changes 4 -> 8 -> 2 on a live queue, with consumers
// opened with other counts (0 and 2) running all along: every task is
// acked exactly once, the old shards drain, and the sweeper lowers the
// high-water mark to the count still in use, then drops it.
func TestQueueShardsReshard(t *testing.T) {
	eachTagged(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		var mu sync.Mutex
		acks := map[string]int{}
		var ids []string
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for _, k := range []int{0, 2} {
			q := fleet.NewQueue[job](openOn(t, tg, e.Prefix), "re", fleet.QueueOptions{Shards: k})
			wg.Add(1)
			go func() { defer wg.Done(); consume(t, c, q, &mu, acks, stop) }()
		}
		submit := func(q *fleet.Queue[job], n int) {
			for range n / 20 {
				got, err := q.SubmitMany(c, jobs(20))
				if err != nil {
					t.Fatalf("submit: %v", err)
				}
				mu.Lock()
				ids = append(ids, got...)
				mu.Unlock()
			}
		}
		for _, k := range []int{4, 8} {
			submit(fleet.NewQueue[job](openOn(t, tg, e.Prefix), "re", fleet.QueueOptions{Shards: k}), 1000)
		}
		mark := e.shard("re", 0).Shards
		if got, _ := e.hget(t, mark, "max"); got != "8" {
			t.Fatalf("mark after 8 = %q; want 8", got)
		}
		// K = 2 keeps submitting; the shards past 2 drain.
		two := fleet.NewQueue[job](openOn(t, tg, e.Prefix), "re", fleet.QueueOptions{Shards: 2})
		submit(two, 1000)
		waitFor(t, 30*time.Second, func() bool { return len(e.shardData(t, "re", 8)) == 0 || onlyLow(e.shardData(t, "re", 8), e, "re", 2) },
			"shards 2..7 never drained: %v", e.shardData(t, "re", 8))
		// The sweeper lowers the mark to 2 once 8 and 4 are out of use.
		sw := fleet.SweeperOptions{ShardGrace: 2 * time.Second}
		waitFor(t, 30*time.Second, func() bool {
			submit(two, 20) // keeps K = 2 in use
			if _, err := e.F.Sweep(c, sw); err != nil {
				t.Fatalf("sweep: %v", err)
			}
			got, _ := e.hget(t, mark, "max")
			return got == "2"
		}, "mark never lowered to 2: %v", e.hgetall(t, mark))
		for i := 2; i < 8; i++ {
			if _, ok := e.get(t, e.shard("re", i).Policy); ok {
				t.Fatalf("shard %d's policy kept after the mark went down", i)
			}
		}
		// Then, with no handle of 2 submitting, to one shard: the mark goes.
		time.Sleep(2500 * time.Millisecond)
		waitFor(t, 30*time.Second, func() bool {
			if _, err := e.F.Sweep(c, sw); err != nil {
				t.Fatalf("sweep: %v", err)
			}
			_, ok := e.hget(t, mark, "max")
			return !ok
		}, "mark never dropped: %v", e.hgetall(t, mark))
		close(stop)
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		if len(acks) != len(ids) {
			t.Fatalf("acked %d distinct tasks of %d", len(acks), len(ids))
		}
		for _, id := range ids {
			if acks[id] != 1 {
				t.Fatalf("task %s acked %d times", id, acks[id])
			}
		}
		if left := e.shardData(t, "re", 8); len(left) != 0 {
			t.Fatalf("left: %v", left)
		}
	})
}

// onlyLow reports whether every key in ks is of the first n shards.
func onlyLow(ks []string, e *env, name string, n int) bool {
	for _, k := range ks {
		low := false
		for i := range n {
			s := e.shard(name, i)
			if slices.Contains([]string{s.Pending, s.Processing, s.Body, s.Lease, s.Scheduled, s.Dead, s.Dedup}, k) {
				low = true
			}
		}
		if !low {
			return false
		}
	}
	return true
}

// Stats, the dead letters, Lookup, Cancel, the admin lists and Overview
// see a sharded queue as one queue, from a Fleet that never opened it (it
// reads the stored shard count).
func TestQueueShardsAdmin(t *testing.T) {
	eachTagged(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		other := openOn(t, tg, e.Prefix)
		c := ctx(t)
		q := fleet.NewQueue[job](e.F, "adm", fleet.QueueOptions{Shards: 4, MaxAttempts: 1})
		ids, err := q.SubmitMany(c, jobs(1))
		if err != nil {
			t.Fatal(err)
		}
		for i := range 7 {
			id, err := q.Submit(c, job{URL: "https://a.example", N: i + 2})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		for i := range 4 {
			if n := e.llen(t, e.shard("adm", i).Pending); n != 2 {
				t.Fatalf("shard %d holds %d; want 2", i, n)
			}
		}
		st, err := other.Queue("adm").Stats(c)
		if err != nil || counted(t, st) != (fleet.QueueStats{Pending: 8}) {
			t.Fatalf("QueueStats = %+v, %v; want 8 pending", st, err)
		}
		ov, err := other.Overview(c)
		if err != nil || len(ov.Queues) != 1 || ov.Queues[0].Pending != 8 {
			t.Fatalf("Overview = %+v, %v", ov, err)
		}
		listed, err := other.Queue("adm").Pending(c, 0, 100)
		if err != nil || len(listed) != 8 {
			t.Fatalf("PendingTasks = %d, %v", len(listed), err)
		}
		var got []string
		for _, w := range listed {
			got = append(got, w.ID)
		}
		if !sameSet(got, ids) {
			t.Fatalf("PendingTasks ids %v; want %v", got, ids)
		}
		page, err := other.Queue("adm").Pending(c, 3, 3)
		if err != nil || len(page) != 3 || page[0].ID != listed[3].ID || page[2].ID != listed[5].ID {
			t.Fatalf("PendingTasks(3, 3) = %v, %v", page, err)
		}
		for _, id := range ids {
			r, err := other.Queue("adm").Lookup(c, id)
			if err != nil || r.Status != fleet.TaskPending {
				t.Fatalf("LookupTask %s = %+v, %v", id, r, err)
			}
		}
		// Every task dies (MaxAttempts 1), each in its own shard.
		for n := 0; n < 8; {
			ts, err := q.Reserve(c, 8, time.Second)
			if err != nil || len(ts) == 0 {
				t.Fatalf("reserve: %v", err)
			}
			for _, tk := range ts {
				if err := tk.Nack(c, errors.New("boom")); err != nil {
					t.Fatal(err)
				}
				n++
			}
		}
		for i := range 4 {
			if n := e.llen(t, e.shard("adm", i).Dead); n != 2 {
				t.Fatalf("shard %d has %d dead; want 2", i, n)
			}
		}
		dead, err := other.Queue("adm").DeadLetters(c, 0, 100)
		if err != nil || len(dead) != 8 {
			t.Fatalf("DeadLetters = %d, %v", len(dead), err)
		}
		got = got[:0]
		for _, d := range dead {
			got = append(got, d.ID)
		}
		if !sameSet(got, ids) {
			t.Fatalf("dead ids %v; want %v", got, ids)
		}
		page2, err := q.DeadLetters(c, 1, 4)
		if err != nil || len(page2) != 4 || page2[0].ID != dead[1].ID || page2[3].ID != dead[4].ID {
			t.Fatalf("DeadLetters(1, 4) = %v, %v", page2, err)
		}
		// A dead letter of the last shard goes back to that shard.
		last := e.lrange(t, e.shard("adm", 3).Dead)
		back := ""
		for _, d := range dead {
			if d.Raw == last[0] {
				back = d.ID
			}
		}
		if err := other.Queue("adm").RequeueDead(c, back); err != nil {
			t.Fatalf("RequeueDead: %v", err)
		}
		if n := e.llen(t, e.shard("adm", 3).Pending); n != 1 {
			t.Fatalf("shard 3 pending = %d after RequeueDead; want 1", n)
		}
		if r, err := other.Queue("adm").Lookup(c, back); err != nil || r.Status != fleet.TaskPending {
			t.Fatalf("lookup of the re-queued task: %+v, %v", r, err)
		}
		if err := other.Queue("adm").Cancel(c, back); err != nil {
			t.Fatalf("CancelTask: %v", err)
		}
		if n := e.llen(t, e.shard("adm", 3).Pending); n != 0 {
			t.Fatalf("shard 3 pending = %d after Cancel", n)
		}
		if err := other.Queue("adm").Cancel(c, "0190aaaa-0000-7000-8000-000000000000"); !errors.Is(err, fleet.ErrTaskNotFound) {
			t.Fatalf("cancel of an unknown id: %v", err)
		}
		if err := q.RequeueDead(c, "0190aaaa-0000-7000-8000-000000000000"); !errors.Is(err, fleet.ErrDeadLetterNotFound) {
			t.Fatalf("requeue of an unknown id: %v", err)
		}
		n, err := other.Queue("adm").PurgeDead(c)
		if err != nil || n != 7 {
			t.Fatalf("PurgeDead = %d, %v; want 7", n, err)
		}
		// Scheduled tasks of every shard, listed soonest first.
		now := time.Now()
		var want []string
		for i, d := range []time.Duration{4 * time.Hour, time.Hour, 3 * time.Hour, 2 * time.Hour} {
			id, err := q.SubmitWith(c, job{URL: "https://a.example", N: i}, fleet.SubmitOptions{NotBefore: now.Add(d), ShardKey: string(rune('a' + i))})
			if err != nil {
				t.Fatal(err)
			}
			want = append(want, id)
		}
		sch, err := other.Queue("adm").Scheduled(c, 0, 10)
		if err != nil || len(sch) != 4 || sch[0].ID != want[1] || sch[1].ID != want[3] || sch[2].ID != want[2] || sch[3].ID != want[0] {
			t.Fatalf("ScheduledTasks = %+v, %v; want soonest first", sch, err)
		}
		if sch, err := other.Queue("adm").Scheduled(c, 1, 2); err != nil || len(sch) != 2 || sch[0].ID != want[3] || sch[1].ID != want[2] {
			t.Fatalf("ScheduledTasks(1, 2) = %+v, %v", sch, err)
		}
		if st, err := q.Stats(c); err != nil || st != (fleet.QueueStats{Scheduled: 4}) {
			t.Fatalf("Stats = %+v, %v", st, err)
		}
		// RemoveType removes every shard and the count.
		if _, err := other.RemoveType(c, "adm"); err != nil {
			t.Fatal(err)
		}
		if ks := e.keys(t); len(ks) != 0 {
			t.Fatalf("RemoveType left %v", ks)
		}
	})
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// A dedup key lives in one shard: a second submit with it, from a handle
// of another Fleet, gets the first task's id; Sync rebuilds a shard's lost
// dedup hash.
func TestQueueShardsDedupSync(t *testing.T) {
	eachTagged(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		q := fleet.NewQueue[job](e.F, "dd", fleet.QueueOptions{Shards: 5})
		q2 := fleet.NewQueue[job](openOn(t, tg, e.Prefix), "dd", fleet.QueueOptions{Shards: 5})
		first := map[string]string{}
		for i := range 10 {
			key := "order-" + string(rune('a'+i))
			id, err := q.SubmitWith(c, job{URL: "https://a.example"}, fleet.SubmitOptions{DedupKey: key})
			if err != nil {
				t.Fatal(err)
			}
			first[key] = id
			again, err := q2.SubmitWith(c, job{URL: "https://b.example"}, fleet.SubmitOptions{DedupKey: key, ShardKey: key})
			if err != nil || again != id {
				t.Fatalf("second submit of %s = %s, %v; want %s", key, again, err, id)
			}
		}
		if st, _ := q.Stats(c); st.Pending != 10 {
			t.Fatalf("pending %d; want 10", st.Pending)
		}
		// Lose every shard's dedup hash; Sync rebuilds each in its shard.
		want := map[string]map[string]string{}
		for i := range 5 {
			k := e.shard("dd", i).Dedup
			want[k] = e.hgetall(t, k)
			e.do(t, e.Raw.B().Del().Key(k).Build())
		}
		if _, err := e.F.Sync(c); err != nil {
			t.Fatal(err)
		}
		for k, w := range want {
			if got := e.hgetall(t, k); len(got) != len(w) || !mapsEqual(got, w) {
				t.Fatalf("%s after Sync = %v; want %v", k, got, w)
			}
		}
	})
}

// A consumer's Fleet closes with tasks reserved on a sharded queue: the
// sweeper puts each back on its own shard (attempt counted), and another
// consumer acks them all.
func TestQueueShardsLeaseLost(t *testing.T) {
	eachTagged(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		opts := fleet.QueueOptions{Shards: 3, Lease: 2 * time.Second}
		q := fleet.NewQueue[job](e.F, "ll", opts)
		ids, err := q.SubmitMany(c, jobs(1))
		if err != nil {
			t.Fatal(err)
		}
		for range 5 {
			id, err := q.Submit(c, job{URL: "https://a.example"})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		where := map[string]int{} // id -> shard
		for i := range 3 {
			for _, raw := range e.lrange(t, e.shard("ll", i).Pending) {
				for _, id := range ids {
					if strings.Contains(raw, id) {
						where[id] = i
					}
				}
			}
		}
		gone := openOn(t, tg, e.Prefix)
		gq := fleet.NewQueue[job](gone, "ll", opts)
		var held int
		for held < 6 {
			ts, err := gq.Reserve(c, 6, time.Second)
			if err != nil || len(ts) == 0 {
				t.Fatalf("reserve: %v", err)
			}
			held += len(ts)
		}
		if err := gone.Close(); err != nil {
			t.Fatal(err)
		}
		var st fleet.SweepStats
		waitFor(t, 30*time.Second, func() bool {
			s, err := e.F.Sweep(c, fleet.SweeperOptions{})
			if err != nil {
				t.Fatalf("sweep: %v", err)
			}
			st.Requeued += s.Requeued
			return st.Requeued == 6
		}, "sweeper re-queued %d of 6", st.Requeued)
		for id, i := range where {
			found := false
			for _, raw := range e.lrange(t, e.shard("ll", i).Pending) {
				found = found || strings.Contains(raw, id)
			}
			if !found {
				t.Fatalf("task %s not back on its shard %d", id, i)
			}
		}
		var acked atomic.Int64
		for acked.Load() < 6 {
			ts, err := q.Reserve(c, 6, time.Second)
			if err != nil {
				t.Fatal(err)
			}
			for _, tk := range ts {
				if tk.Attempts != 1 {
					t.Fatalf("task %s attempts %d; want 1", tk.ID, tk.Attempts)
				}
				if err := tk.Ack(c); err != nil {
					t.Fatal(err)
				}
				acked.Add(1)
			}
		}
		if left := e.shardData(t, "ll", 3); len(left) != 0 {
			t.Fatalf("left: %v", left)
		}
	})
}

// jobs returns n valid payloads.
func jobs(n int) []job {
	out := make([]job, n)
	for i := range out {
		out[i] = job{URL: "https://a.example", N: i % 1000}
	}
	return out
}

// Batch workers on two Fleets run every task of a sharded queue exactly
// once: their fetchers listen to every shard (listenPending), and a slot
// that finishes a task takes the next one from the shards.
func TestQueueShardsWorkers(t *testing.T) {
	eachTagged(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		const total = 2000
		var mu sync.Mutex
		runs := map[string]int{}
		var ws []*fleet.Worker
		for i := range 2 {
			f := openOn(t, tg, e.Prefix)
			q := fleet.NewQueue[job](f, "wk", fleet.QueueOptions{Shards: 6})
			w := fleet.NewBatchWorker(f, fleet.WorkerOptions{Type: "wk", ID: "w" + string(rune('0'+i)), Slots: 4}, q,
				fleet.BatchFunc[struct{}, struct{}, job](func(ctx context.Context, s *fleet.Slot[struct{}, struct{}], tk *fleet.Task[job]) error {
					mu.Lock()
					runs[tk.ID]++
					mu.Unlock()
					return nil
				}))
			if err := w.Start(c); err != nil {
				t.Fatal(err)
			}
			ws = append(ws, w)
		}
		q := fleet.NewQueue[job](e.F, "wk", fleet.QueueOptions{Shards: 6})
		var ids []string
		for range total / 100 {
			got, err := q.SubmitMany(c, jobs(100))
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, got...)
			time.Sleep(5 * time.Millisecond)
		}
		waitFor(t, 60*time.Second, func() bool {
			st, err := q.Stats(c)
			return err == nil && st.Pending == 0 && st.InFlight == 0 && ws[0].Stats().Done+ws[1].Stats().Done == total
		}, "workers did %d + %d of %d", ws[0].Stats().Done, ws[1].Stats().Done, total)
		for _, w := range ws {
			if err := w.Stop(c); err != nil {
				t.Fatal(err)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		for _, id := range ids {
			if runs[id] != 1 {
				t.Fatalf("task %s ran %d times", id, runs[id])
			}
		}
		if len(runs) != total {
			t.Fatalf("ran %d distinct tasks; want %d", len(runs), total)
		}
		if left := e.shardData(t, "wk", 6); len(left) != 0 {
			t.Fatalf("left: %v", left)
		}
	})
}

// Migrate copies every shard of a sharded queue and its shard count to a
// tagged target (the cluster), and refuses a compat target.
func TestQueueShardsMigrate(t *testing.T) {
	t.Parallel()
	tgs := redistest.Targets(t)
	src := open(t, tgs[1])
	dst := open(t, tgs[2])
	c := ctx(t)
	q := fleet.NewQueue[job](src.F, "mig", fleet.QueueOptions{Shards: 5})
	for range 4 {
		if _, err := q.SubmitMany(c, jobs(3)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := q.SubmitWith(c, job{URL: "https://a.example"}, fleet.SubmitOptions{DedupKey: "d1"}); err != nil {
		t.Fatal(err)
	}
	rep, err := src.F.MigrateTo(c, dst.F, fleet.MigrateOptions{})
	if err != nil {
		t.Fatalf("migrate: %v (%+v)", err, rep.Mismatches)
	}
	st, err := dst.F.Queue("mig").Stats(c)
	if err != nil || counted(t, st) != (fleet.QueueStats{Pending: 13}) {
		t.Fatalf("target stats = %+v, %v; want 13 pending", st, err)
	}
	if got, _ := dst.hget(t, dst.shard("mig", 0).Shards, "max"); got != "5" {
		t.Fatalf("target's shard count = %q; want 5", got)
	}
	for i := range 5 {
		if a, b := src.lrange(t, src.shard("mig", i).Pending), dst.lrange(t, dst.shard("mig", i).Pending); !slices.Equal(a, b) {
			t.Fatalf("shard %d: target %v; source %v", i, b, a)
		}
	}
	compat := open(t, tgs[0])
	if _, err := src.F.MigrateTo(c, compat.F, fleet.MigrateOptions{}); !errors.Is(err, fleet.ErrLayout) || !strings.Contains(err.Error(), `sharded queue "mig"`) {
		t.Fatalf("migrate to compat: %v; want ErrLayout naming the sharded queue", err)
	}
}

// A worker's group commit on a sharded queue acks each task on its own
// shard (one call per shard, the tasks of that shard together), and a
// lost lease says so, changing nothing.
func TestQueueShardsGroupAck(t *testing.T) {
	eachTagged(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		q := fleet.NewQueue[job](e.F, "at", fleet.QueueOptions{Shards: 4})
		for range 8 {
			if _, err := q.SubmitMany(c, jobs(5)); err != nil {
				t.Fatal(err)
			}
		}
		byShard := map[int][]*fleet.Task[job]{}
		for held := 0; held < 40; {
			ts, err := q.Reserve(c, 10, time.Second)
			if err != nil || len(ts) == 0 {
				t.Fatalf("reserve after %d: %d tasks, %v", held, len(ts), err)
			}
			for _, tk := range ts {
				byShard[fleet.TaskShard(tk)] = append(byShard[fleet.TaskShard(tk)], tk)
			}
			held += len(ts)
		}
		if len(byShard) < 2 {
			t.Fatalf("40 tasks from %d shard(s); want them spread", len(byShard))
		}
		// The last task of one shard loses its lease first.
		var lost *fleet.Task[job]
		for i, ts := range byShard {
			lost = ts[len(ts)-1]
			e.do(t, e.Raw.B().Zrem().Key(e.shard("at", i).Processing).Member(lost.ID).Build())
			break
		}
		for i, ts := range byShard {
			want := strings.Repeat("1", len(ts))
			if ts[len(ts)-1] == lost {
				want = want[:len(want)-1] + "0"
			}
			acks, none, err := fleet.AckManyAndTake(c, q, ts, 0)
			if err != nil || acks != want || len(none) != 0 {
				t.Fatalf("shard %d: acks %q, %d taken, %v; want %q", i, acks, len(none), err, want)
			}
		}
		if st, err := q.Stats(c); err != nil || st != (fleet.QueueStats{}) {
			t.Fatalf("stats %+v, %v; want zeros (40 taken, 39 acked, the last lost)", st, err)
		}
	})
}
