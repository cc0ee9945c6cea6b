package fleet_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/internal/redistest"
)

// adminTags are the tags of the admin and sync tests' pools.
type adminTags struct {
	Region string `json:"region" fleet:"index"`
	Fast   bool   `json:"fast" fleet:"index"`
}

// fixture fills a Fleet with one of everything that has derived keys: a
// pool with tagged items (one with an expiry, one claimed), a queue with
// pending, dedup'd, scheduled, reserved and dead tasks, and workers of two
// types written the way the documented schema spells them.
type fixture struct {
	pool  *fleet.Pool[string, adminTags]
	queue *fleet.Queue[job]
	items []string
	claim *fleet.Claim[string, adminTags]
	task  *fleet.Task[job]
}

func newFixture(t *testing.T, e *env) *fixture {
	t.Helper()
	c := ctx(t)
	fx := &fixture{pool: fleet.NewPool[string, adminTags](e.F, "cookies", fleet.PoolOptions{}),
		queue: fleet.NewQueue[job](e.F, "crawl", fleet.QueueOptions{})}
	for i, tg := range []adminTags{{"eu", true}, {"eu", false}, {"us", true}} {
		ttl := time.Duration(0)
		if i == 1 {
			ttl = time.Hour
		}
		id, err := fx.pool.Put(c, fmt.Sprintf("item%d", i), tg, ttl)
		if err != nil {
			t.Fatal(err)
		}
		fx.items = append(fx.items, id)
	}
	var err error
	if fx.claim, err = fx.pool.Where(fleet.Eq("region", "us")).Claim(c, fleet.ClaimOptions{Hold: time.Hour}); err != nil || fx.claim == nil {
		t.Fatalf("claim: %v %v", fx.claim, err)
	}
	if _, err := fx.queue.SubmitWith(c, jobN(1), fleet.SubmitOptions{DedupKey: "first"}); err != nil {
		t.Fatal(err)
	}
	tasks, err := fx.queue.Reserve(c, 1, 0)
	if err != nil || len(tasks) != 1 {
		t.Fatalf("reserve: %v %v", tasks, err)
	}
	fx.task = tasks[0]
	if _, err := fx.queue.SubmitWith(c, jobN(2), fleet.SubmitOptions{DedupKey: "later", NotBefore: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if _, err := fx.queue.SubmitWith(c, jobN(3), fleet.SubmitOptions{DedupKey: "waiting"}); err != nil {
		t.Fatal(err)
	}
	if _, err := fx.queue.Submit(c, jobN(4)); err != nil {
		t.Fatal(err)
	}
	e.do(t, e.Raw.B().Rpush().Key(e.qk("crawl").Dead).Element(`{"id":"dead1","payload":{"url":"https://example.com/x","n":1},"attempts":3,"error":"boom","dead_at":1}`).Build())
	e.addWorker(t, "scraper", "host1", "RUNNING", time.Now())
	e.addWorker(t, "scraper", "host2", "IDLE", time.Now().Add(-time.Hour))
	e.addWorker(t, "mailer", "m1", "ERROR", time.Now())
	return fx
}

// addWorker writes a worker's documented keys and index entries raw.
func (e *env) addWorker(t *testing.T, typ, id, state string, seen time.Time) {
	t.Helper()
	b := e.Raw.B()
	w := func(field string) string {
		return e.key("wkr:"+typ+":"+id+":"+field, "wkr:{"+typ+":"+id+"}:"+field)
	}
	e.do(t, b.Set().Key(w("hardware")).Value(`{"cpus":4}`).Build())
	e.do(t, b.Set().Key(w("config")).Value(`{"depth":2}`).Build())
	e.do(t, b.Set().Key(w("gen")).Value("7").Build())
	e.do(t, b.Hset().Key(w("state")).FieldValue().FieldValue("state", state).
		FieldValue("last_seen", fmt.Sprintf("%d", seen.Unix())).FieldValue("last_error", "").Build())
	e.do(t, b.Set().Key(w("stats")).Value(`{"done":1}`).Build())
	e.do(t, b.Sadd().Key(e.Prefix+"wkrs:"+typ).Member(id).Build())
	e.do(t, b.Sadd().Key(e.Prefix+"wkrs:all").Member(typ+"|"+id).Build())
}

// syncDump is dump without the keys whose values Sync does not keep: the
// pools' wake-up counters (:sig, bumped when items are indexed) and reindex
// cursors (:scan, transient).
func (e *env) syncDump(t *testing.T) map[string]string {
	d := e.dump(t)
	maps.DeleteFunc(d, func(k, _ string) bool { return strings.HasSuffix(k, ":sig") || strings.HasSuffix(k, ":scan") })
	return d
}

func diffDumps(before, after map[string]string) string {
	var out []string
	for k, v := range before {
		if w, ok := after[k]; !ok {
			out = append(out, "lost "+k)
		} else if w != v {
			out = append(out, fmt.Sprintf("changed %s:\n  was %q\n  now %q", k, v, w))
		}
	}
	for k := range after {
		if _, ok := before[k]; !ok {
			out = append(out, "gained "+k)
		}
	}
	slices.Sort(out)
	return strings.Join(out, "\n")
}

func TestSync(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		e := open(t, tg)
		c := ctx(t)
		fx := newFixture(t, e)
		r, err := e.F.Sync(c)
		if err != nil {
			t.Fatal(err)
		}
		if r.Fixed() != 0 || r.Queues != 1 || r.Pools != 1 || r.WorkerTypes != 2 || r.Workers != 3 || r.LeasesMissing != 0 {
			t.Fatalf("sync of a sound database: %+v", r)
		}
		before := e.syncDump(t)
		q, b := e.qk("crawl"), e.Raw.B()
		tagEU := e.idxKey("cookies", "t:region:seu")
		cases := []struct {
			name   string
			break_ rueidis.Completed
			check  func(r fleet.SyncReport) bool
		}{
			{"delete queue registry", b.Del().Key(q.Registry).Build(), func(r fleet.SyncReport) bool { return r.QueuesRegistered == 1 }},
			{"delete pool registry", b.Del().Key(e.Prefix + "fleet:pools").Build(), func(r fleet.SyncReport) bool { return r.PoolsRegistered == 1 }},
			{"delete wkrs:all", b.Del().Key(e.Prefix + "wkrs:all").Build(), func(r fleet.SyncReport) bool { return r.WorkersIndexed == 3 }},
			{"corrupt wkrs:all", b.Sadd().Key(e.Prefix+"wkrs:all").Member("scraper|ghost", "nobody|x").Build(), func(r fleet.SyncReport) bool { return r.WorkersUnindexed == 2 }},
			{"shrink wkrs:all", b.Srem().Key(e.Prefix + "wkrs:all").Member("mailer|m1").Build(), func(r fleet.SyncReport) bool { return r.WorkersIndexed == 1 }},
			{"corrupt lease", b.Hset().Key(q.Lease).FieldValue().FieldValue("gone-task", "tok").Build(), func(r fleet.SyncReport) bool { return r.LeasesRemoved == 1 }},
			{"delete dedup", b.Del().Key(q.Dedup).Build(), func(r fleet.SyncReport) bool { return r.DedupAdded == 3 }},
			{"corrupt dedup", b.Hset().Key(q.Dedup).FieldValue().FieldValue("stale", "t0").FieldValue("waiting", "wrong-id").Build(),
				func(r fleet.SyncReport) bool { return r.DedupRemoved == 1 && r.DedupFixed == 1 }},
			{"delete item set", b.Del().Key(e.idxKey("cookies", "all")).Build(), func(r fleet.SyncReport) bool { return r.PoolIndexed == 3 }},
			{"corrupt item set", b.Sadd().Key(e.idxKey("cookies", "all")).Member("ghost").Build(), func(r fleet.SyncReport) bool { return r.PoolUnindexed == 1 }},
			{"delete expiry index", b.Del().Key(e.idxKey("cookies", "exp")).Build(), func(r fleet.SyncReport) bool { return r.Fixed() == 0 }},
			{"corrupt expiry index", b.Zadd().Key(e.idxKey("cookies", "exp")).ScoreMember().ScoreMember(9e15, "ghost").ScoreMember(9e15, fx.items[0]).Build(),
				// The reindex drops the entry of the item without expiry
				// unseen; the expiry pass counts the ghost.
				func(r fleet.SyncReport) bool { return r.PoolUnindexed == 1 }},
			// Tag and expiry entries remade for items already in the item
			// set are not counted (pool_index.lua counts new items only).
			{"delete tag set", b.Del().Key(tagEU).Build(), func(r fleet.SyncReport) bool { return r.Fixed() == 0 }},
			{"corrupt tag set", b.Sadd().Key(tagEU).Member(fx.items[2], "ghost").Build(), func(r fleet.SyncReport) bool { return r.PoolUnindexed == 2 }},
			{"delete tag registry", b.Del().Key(e.idxKey("cookies", "tags")).Build(), func(r fleet.SyncReport) bool { return r.Fixed() == 0 }},
			{"delete wake-up counter", b.Del().Key(e.idxKey("cookies", "sig")).Build(), func(r fleet.SyncReport) bool { return r.Fixed() == 0 }},
		}
		for _, tc := range cases {
			e.do(t, tc.break_)
			r, err := e.F.Sync(c)
			if err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			if !tc.check(r) {
				t.Errorf("%s: report %+v", tc.name, r)
			}
			if d := diffDumps(before, e.syncDump(t)); d != "" {
				t.Errorf("%s: after sync:\n%s", tc.name, d)
			}
			if r, err := e.F.Sync(c); err != nil || r.Fixed() != 0 {
				t.Errorf("%s: second sync: %+v %v", tc.name, r, err)
			}
		}

		// A lost lease hash is found, not repaired: no worker holds a token
		// that a rebuilt entry could match; the sweeper ends it.
		e.do(t, b.Del().Key(q.Lease).Build())
		if r, err := e.F.Sync(c); err != nil || r.LeasesMissing != 1 || r.Fixed() != 0 {
			t.Fatalf("lost lease: %+v %v", r, err)
		}

		// The marker comes back.
		e.do(t, b.Del().Key(e.Prefix+"fleet:meta").Build())
		if r, err := e.F.Sync(c); err != nil || !r.MarkerWritten {
			t.Fatalf("marker: %+v %v", r, err)
		}
		if m, err := e.F.ReadMarker(c); err != nil || !m.Found || m.Layout != e.F.Layout() {
			t.Fatalf("marker: %+v %v", m, err)
		}
		_ = fx.task
	})
}

// TestSyncWhileBusy runs Sync in a loop while producers, consumers and
// claimers work, and checks that it never removed a derived entry a
// concurrent write had made valid: at the end the database is sound (one
// more Sync fixes nothing but what the last writes left for the sweeper).
func TestSyncWhileBusy(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		e := open(t, tg)
		c := ctx(t)
		q := fleet.NewQueue[job](e.F, "busy", fleet.QueueOptions{})
		p := fleet.NewPool[string, adminTags](e.F, "busy", fleet.PoolOptions{})
		stop := make(chan struct{})
		done := make(chan error, 3)
		go func() { // producer with dedup keys
			for i := 0; ; i++ {
				select {
				case <-stop:
					done <- nil
					return
				default:
				}
				if _, err := q.SubmitWith(c, jobN(i), fleet.SubmitOptions{DedupKey: fmt.Sprint("k", i%50)}); err != nil {
					done <- err
					return
				}
				if _, err := p.Put(c, "x", adminTags{Region: fmt.Sprint("r", i%3)}, 0); err != nil {
					done <- err
					return
				}
			}
		}()
		go func() { // consumer
			for {
				select {
				case <-stop:
					done <- nil
					return
				default:
				}
				ts, err := q.Reserve(c, 5, 10*time.Millisecond)
				if err != nil {
					done <- err
					return
				}
				for _, tk := range ts {
					if err := tk.Ack(c); err != nil {
						done <- fmt.Errorf("ack: %w", err)
						return
					}
				}
			}
		}()
		go func() { // claimer
			for {
				select {
				case <-stop:
					done <- nil
					return
				default:
				}
				cl, err := p.Claim(c, fleet.ClaimOptions{Hold: time.Minute})
				if err != nil {
					done <- err
					return
				}
				if cl != nil {
					if _, err := cl.Item.ID, cl.MarkBad(c, "used"); err != nil {
						done <- fmt.Errorf("mark bad: %w", err)
						return
					}
				}
			}
		}()
		for range 10 {
			r, err := e.F.Sync(c)
			if err != nil {
				t.Fatal(err)
			}
			if r.LeasesRemoved+r.DedupRemoved+r.DedupFixed+r.PoolUnindexed+r.WorkersUnindexed > 0 {
				t.Errorf("sync removed entries of a sound, busy database: %+v", r)
			}
		}
		close(stop)
		for range 3 {
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		}
		if r, err := e.F.Sync(c); err != nil || r.Fixed() != 0 {
			t.Fatalf("final sync: %+v %v", r, err)
		}
	})
}

func TestSyncClosed(t *testing.T) {
	tg := redistest.Targets(t)[0]
	e := open(t, tg)
	_ = e.F.Close()
	if _, err := e.F.Sync(context.Background()); err == nil {
		t.Fatal("sync after close: no error")
	}
}

// A live task whose id is "first" (ids are free-form for other clients)
// with a dedup key: Sync repairs its dedup entry like any other.
func TestSyncQueueTaskNamedFirst(t *testing.T) {
	e := open(t, redistest.Targets(t)[0])
	pending := e.key("fleet:queue:rvq", "fleet:queue:{rvq}")
	e.do(t, e.Raw.B().Rpush().Key(pending).Element(`{"id":"first","payload":{},"attempts":0,"dedup":"k1"}`).Build())
	e.do(t, e.Raw.B().Sadd().Key(e.Prefix+"fleet:queues").Member("rvq").Build())
	if _, err := e.F.Sync(ctx(t)); err != nil {
		t.Fatalf("Sync: %v", err)
	}
	if v, _ := e.Raw.Do(ctx(t), e.Raw.B().Hget().Key(e.Prefix+"fleet:queue:rvq:dedup").Field("k1").Build()).ToString(); v != "first" {
		t.Fatalf("dedup k1 -> %q, want first", v)
	}
}

// TestSyncQueueBoundedWhileBusy: Sync of a long queue runs in short steps
// (a PING from another client is answered within a fraction of what one
// script over the whole queue takes) while producers submit with dedup
// keys and consumers reserve and ack; it removes exactly the stale dedup
// entries, and at the end :dedup names, for each key, a live task that
// carries it, and nothing else: no live task's entry was dropped.
func TestSyncQueueBoundedWhileBusy(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		e := open(t, tg)
		// Five minutes, not ctx's one: two syncs and a walk of 60,000 tasks
		// under -race beside CPU hogs took all of one (.ci/stress).
		c, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		const n, stale = 60_000, 100
		q := fleet.NewQueue[job](e.F, "big", fleet.QueueOptions{})
		qk := e.qk("big")
		// Filled raw, fast: every task has a dedup key; every 600th has no
		// entry (Sync adds it), and 100 entries name tasks that are gone.
		var cmds rueidis.Commands
		bodies := make([]string, 0, 500)
		dedup := make([]string, 0, 1000)
		for i := range n {
			bodies = append(bodies, fmt.Sprintf(`{"id":"t%d","payload":{"url":"https://example.com/%d","n":%d},"attempts":0,"dedup":"d%d"}`, i, i, i%1000, i))
			if i%600 != 0 {
				dedup = append(dedup, fmt.Sprint("d", i), fmt.Sprint("t", i))
			}
			if len(bodies) == cap(bodies) || i == n-1 {
				cmds = append(cmds, e.Raw.B().Rpush().Key(qk.Pending).Element(bodies...).Build())
				bodies = bodies[:0]
			}
		}
		for j := range stale {
			dedup = append(dedup, fmt.Sprint("stale", j), fmt.Sprint("gone", j))
		}
		for i := 0; i < len(dedup); i += 1000 {
			h := e.Raw.B().Hset().Key(qk.Dedup).FieldValue()
			for j := i; j < min(i+1000, len(dedup)); j += 2 {
				h = h.FieldValue(dedup[j], dedup[j+1])
			}
			cmds = append(cmds, h.Build())
		}
		for _, r := range e.Raw.DoMulti(c, cmds...) {
			if err := r.Error(); err != nil {
				t.Fatal(err)
			}
		}

		// What one script over the whole queue costs on this server now: a
		// walk of every body with a JSON decode and a look at its dedup
		// key, as a Sync in one step would. Sync's steps are held to half
		// of it (and to 100 ms when it is faster): a loaded machine slows
		// both alike.
		walk := rueidis.NewLuaScript(`local n = 0
for _, b in ipairs(redis.call('LRANGE', KEYS[1], 0, -1)) do
  local ok, v = pcall(cjson.decode, b)
  if ok and redis.call('HEXISTS', KEYS[2], v.dedup) == 1 then n = n + 1 end
end
return n`)
		t0 := time.Now()
		if err := walk.Exec(c, e.Raw, []string{qk.Pending, qk.Dedup}, nil).Error(); err != nil {
			t.Fatal(err)
		}
		whole := time.Since(t0)

		stop := make(chan struct{})
		var wg sync.WaitGroup
		errs := make(chan error, 3)
		loop := func(fn func(i int) error) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					if err := fn(i); err != nil {
						errs <- err
						return
					}
				}
			}()
		}
		loop(func(i int) error { // producer: new keys, and keys already held
			_, err := q.SubmitWith(c, jobN(i), fleet.SubmitOptions{DedupKey: fmt.Sprint("d", n-1-i%n)})
			if err == nil && i%2 == 0 {
				_, err = q.SubmitWith(c, jobN(i), fleet.SubmitOptions{DedupKey: fmt.Sprint("new", i)})
			}
			return err
		})
		loop(func(int) error { // consumer
			ts, err := q.Reserve(c, 10, 0)
			for _, tk := range ts {
				if err == nil {
					err = tk.Ack(c)
				}
			}
			return err
		})
		// The server's own slow log says how long each script ran, whatever
		// the load on this machine does to a client's timing: watch it for
		// calls on this queue's keys (it keeps calls over 10 ms, the last
		// 128, so it is read while Sync runs).
		var worst atomic.Int64
		seen := map[string]bool{}
		last := map[string]int64{} // per node, the newest entry before Sync: the fill above may be in the log
		for addr, node := range e.Raw.Nodes() {
			entries, err := node.Do(c, node.B().Arbitrary("SLOWLOG", "GET", "1").Build()).ToArray()
			if err != nil {
				t.Fatal(err)
			}
			last[addr] = -1
			if len(entries) > 0 {
				f, _ := entries[0].ToArray()
				last[addr], _ = f[0].AsInt64()
			}
		}
		loop(func(int) error {
			for addr, node := range e.Raw.Nodes() {
				entries, err := node.Do(c, node.B().Arbitrary("SLOWLOG", "GET", "128").Build()).ToArray()
				if err != nil {
					return err
				}
				for _, en := range entries {
					f, err := en.ToArray()
					if err != nil || len(f) < 4 {
						return fmt.Errorf("slowlog entry %v: %w", en, err)
					}
					id, _ := f[0].AsInt64()
					us, _ := f[2].AsInt64()
					args, _ := f[3].AsStrSlice()
					key := fmt.Sprint(addr, "/", id)
					if id <= last[addr] || seen[key] || !slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, qk.Pending) }) {
						continue
					}
					seen[key] = true
					if d := int64(time.Duration(us) * time.Microsecond); d > worst.Load() {
						worst.Store(d)
					}
				}
			}
			time.Sleep(20 * time.Millisecond)
			return nil
		})
		r, err := e.F.Sync(c)
		close(stop)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		if err != nil {
			t.Fatal(err)
		}
		if r.DedupRemoved != stale || r.DedupFixed != 0 || r.DedupAdded > n/600 {
			t.Errorf("report %+v; want %d dedup entries removed, none fixed, at most %d added", r, stale, n/600)
		}
		// One script over the whole queue runs for about a second here;
		// Sync's steps run for a few ms each.
		if w := time.Duration(worst.Load()); w > max(100*time.Millisecond, whole/2) {
			t.Errorf("a call on the queue's keys ran %v on the server during Sync; one walk of the whole queue took %v", w, whole)
		}
		t.Logf("Sync of %d tasks: %+v; slowest call on its keys %v; a walk of the whole queue %v", n, r, time.Duration(worst.Load()), whole)

		// :dedup is exactly what the live tasks say.
		live := map[string][]string{}
		var all []string
		all = append(all, e.lrange(t, qk.Pending)...)
		for _, z := range e.zscores(t, qk.Scheduled) {
			all = append(all, z.Member)
		}
		for _, b := range e.hgetall(t, qk.Body) {
			all = append(all, b)
		}
		for _, b := range all {
			var v struct{ ID, Dedup string }
			if err := json.Unmarshal([]byte(b), &v); err != nil {
				t.Fatal(err)
			}
			if v.Dedup != "" {
				live[v.Dedup] = append(live[v.Dedup], v.ID)
			}
		}
		got := e.hgetall(t, qk.Dedup)
		for key, ids := range live {
			if id, ok := got[key]; !ok || !slices.Contains(ids, id) {
				t.Fatalf("dedup %s -> %q (%v); live tasks %v", key, id, ok, ids)
			}
		}
		for key, id := range got {
			if _, ok := live[key]; !ok {
				t.Fatalf("dedup %s -> %s: no live task carries it", key, id)
			}
		}
		if r, err := e.F.Sync(c); err != nil || r.Fixed() != 0 {
			t.Fatalf("second sync: %+v %v", r, err)
		}
	})
}
