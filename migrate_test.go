package fleet_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/internal/redistest"
)

type migCookie struct {
	V string `json:"v"`
}

type migTags struct {
	Site string `json:"site" fleet:"index"`
}

type migOut struct {
	Seq int `json:"seq"`
}

type migCfg struct {
	Rate int `json:"rate"`
}

func singleCompat(t *testing.T) redistest.Target {
	return redistest.Target{Name: "single-compat", URL: redistest.SingleURL(t)}
}

func clusterTagged(t *testing.T) redistest.Target {
	return redistest.Target{Name: "cluster-tagged", URL: redistest.ClusterURL(t), Cluster: true, Tagged: true}
}

// migQueue is the queue of the migration test: a short lease and backoff.
func migQueue(f *fleet.Fleet) *fleet.Queue[job] {
	return fleet.NewQueue[job](f, "jobs", fleet.QueueOptions{Lease: 3 * time.Second, BackoffBase: time.Second, BackoffMax: time.Second})
}

// fillSource writes one of every kind of key on a compat source. It returns
// the ids of the tasks that must each be done once on the target, the lock
// fence, and the stream entries in order.
func fillSource(t *testing.T, src *env) (live map[int]bool, fence int64) {
	t.Helper()
	c := ctx(t)
	f := src.F
	q := migQueue(f)
	for i := 1; i <= 3; i++ {
		if _, err := q.Submit(c, jobN(i)); err != nil {
			t.Fatal(err)
		}
	}
	ts, err := q.Reserve(c, 3, 0)
	if err != nil || len(ts) != 3 {
		t.Fatalf("reserve: %v %d", err, len(ts))
	}
	if err := ts[2].Nack(c, errors.New("retry me")); err != nil { // -> scheduled
		t.Fatal(err)
	}
	// ts[0], ts[1] stay in flight, never acked.
	if _, err := q.Submit(c, jobN(20)); err != nil {
		t.Fatal(err)
	}
	dead, err := q.Reserve(c, 1, 0)
	if err != nil || len(dead) != 1 {
		t.Fatalf("reserve: %v", err)
	}
	if err := dead[0].DeadLetter(c, errors.New("poison")); err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{4, 5} {
		if _, err := q.SubmitWith(c, jobN(i), fleet.SubmitOptions{DedupKey: "d" + strconv.Itoa(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := q.SubmitWith(c, jobN(10), fleet.SubmitOptions{NotBefore: time.Now().Add(2 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	live = map[int]bool{1: true, 2: true, 3: true, 4: true, 5: true, 10: true}

	pool := fleet.NewPool[migCookie, migTags](f, "cookies", fleet.PoolOptions{})
	for i, site := range []string{"x", "x", "y:z"} {
		ttl := time.Duration(0)
		if i == 0 {
			ttl = time.Hour
		}
		if _, err := pool.Put(c, migCookie{V: strconv.Itoa(i)}, migTags{Site: site}, ttl); err != nil {
			t.Fatal(err)
		}
	}
	if cl, err := pool.Where(fleet.Eq("site", "x")).Claim(c, fleet.ClaimOptions{Hold: 3 * time.Second}); err != nil || cl == nil {
		t.Fatalf("claim: %v", err)
	}

	lease, err := f.Lock("job:a:b").Acquire(c, fleet.LockOptions{Hold: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Counter("hits:2024").IncrBy(c, 7); err != nil {
		t.Fatal(err)
	}
	kv := f.KV("cfg")
	if err := kv.Set(c, "a:b", "forever", 0); err != nil {
		t.Fatal(err)
	}
	if err := kv.Set(c, "t", "hour", time.Hour); err != nil {
		t.Fatal(err)
	}

	// The worker runtime is built elsewhere: write its documented keys.
	p, r := src.Prefix, src.Raw
	src.do(t, r.B().Mset().KeyValue().KeyValue(p+"wkr:cam:w1:hardware", `{"cpu":4}`).
		KeyValue(p+"wkr:cam:w1:config", `{"rate":3}`).KeyValue(p+"wkr:cam:w1:gen", "5").
		KeyValue(p+"wkr:cam:w1:stats", `{"done":9}`).Build())
	src.do(t, r.B().Hset().Key(p+"wkr:cam:w1:state").FieldValue().FieldValue("state", "RUNNING").FieldValue("last_seen", "1700000000").FieldValue("last_error", "").Build())
	src.do(t, r.B().Sadd().Key(p+"wkrs:cam").Member("w1").Build())
	src.do(t, r.B().Sadd().Key(p+"wkrs:all").Member("cam|w1").Build())

	st := fleet.NewStream[migOut](f, "cam", fleet.StreamOptions{})
	for i := range 3 {
		if _, err := st.Push(c, migOut{Seq: i}); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.PublishCatalog(c, fleet.Describe[migCfg, migOut, job]("cam")); err != nil {
		t.Fatal(err)
	}
	// A key of no documented shape: skipped and reported.
	src.do(t, r.B().Set().Key(p+"fleet:weird:thing").Value("?").Build())
	return live, lease.Fence()
}

func TestMigrateCompatToCluster(t *testing.T) {
	src := open(t, singleCompat(t))
	dst := open(t, clusterTagged(t))
	live, fence := fillSource(t, src)
	c := ctx(t)

	// A dry run lists and writes nothing.
	rep, err := src.F.MigrateTo(c, dst.F, fleet.MigrateOptions{DryRun: true})
	if err != nil {
		t.Fatalf("dry run: %v", err)
	}
	if got := dst.keys(t); len(got) != 0 {
		t.Fatalf("dry run wrote %v", got)
	}
	plan := map[string]fleet.MigrateStep{}
	for _, s := range rep.Plan {
		plan[s.Source] = s
	}
	if s := plan[src.Prefix+"fleet:queue:jobs:processing"]; s.Target != dst.Prefix+"fleet:queue:{jobs}:processing" || s.Type != "zset" {
		t.Errorf("dry run step for processing: %+v", s)
	}
	if s := plan[src.Prefix+"fleet:kv:cfg:t"]; s.TTL < 59*time.Minute || s.Type != "string" {
		t.Errorf("dry run step for a kv with TTL: %+v", s)
	}
	if !slices.Contains(rep.UnknownKeys, src.Prefix+"fleet:weird:thing") || rep.Unknown != 1 {
		t.Errorf("dry run unknown keys: %d %v", rep.Unknown, rep.UnknownKeys)
	}
	if _, ok := plan[src.Prefix+"fleet:meta"]; ok {
		t.Error("dry run would copy the layout marker")
	}

	// Interrupted after its first batch, then resumed to the end.
	cctx, cancel := context.WithCancel(c)
	batches := 0
	_, err = src.F.MigrateTo(cctx, dst.F, fleet.MigrateOptions{Batch: 5, Progress: func(p fleet.MigrateProgress) {
		batches++
		cancel()
	}})
	if !errors.Is(err, context.Canceled) || batches != 1 {
		t.Fatalf("interrupted run: %v after %d batches", err, batches)
	}
	var last fleet.MigrateProgress
	rep, err = src.F.MigrateTo(c, dst.F, fleet.MigrateOptions{Batch: 5, Progress: func(p fleet.MigrateProgress) { last = p }})
	if err != nil {
		t.Fatalf("resumed run: %v\n%+v", err, rep)
	}
	t.Logf("resumed run: %d scanned, %d copied, %d skipped of ~%d in %v", rep.Scanned, rep.Copied, rep.Skipped, rep.Total, rep.Elapsed)
	if !rep.Resumed || !rep.Verified || len(rep.Mismatches) != 0 || last.Copied != rep.Copied || rep.Unknown != 1 {
		t.Errorf("resumed report: %+v", rep)
	}
	for _, fam := range []string{"queue", "queue:processing", "queue:processing:body", "queue:processing:lease", "queue:scheduled", "queue:dead", "queue:dedup", "queues",
		"pool", "pool:claim", "pidx:all", "pidx:exp", "pidx:tags", "pidx:t", "pidx:own", "pidx:sig", "lock", "fence", "counter", "kv",
		"wkr:hardware", "wkr:config", "wkr:gen", "wkr:state", "wkr:stats", "wkrs", "wkrs:all", "stream", "catalog"} {
		i := slices.IndexFunc(rep.Families, func(f fleet.MigrateFamily) bool { return f.Family == fam })
		if i < 0 || rep.Families[i].TargetKeys == 0 {
			t.Errorf("family %s not migrated: %+v", fam, rep.Families)
		}
	}
	if _, ok := dst.get(t, dst.Prefix+"fleet:weird:thing"); ok {
		t.Error("the unknown key was copied")
	}
	if m, err := dst.F.ReadMarker(c); err != nil || m.Layout != fleet.LayoutTagged {
		t.Errorf("target marker %+v %v", m, err)
	}

	// The cluster copy goes back to a compat single node, as a rollback
	// rehearsal would, and verifies too.
	back := open(t, singleCompat(t))
	if rep, err := dst.F.MigrateTo(c, back.F, fleet.MigrateOptions{}); err != nil || !rep.Verified {
		t.Fatalf("cluster -> compat: %v %+v", err, rep)
	}
	if s, _ := back.get(t, back.Prefix+"wkr:cam:w1:gen"); s != "5" {
		t.Errorf("round trip gen %q", s)
	}

	checkTarget(t, dst, live, fence)
}

// checkTarget runs the fleet on the cluster copy.
func checkTarget(t *testing.T, dst *env, live map[int]bool, fence int64) {
	c := ctx(t)
	f := dst.F
	p := dst.Prefix
	// Documented worker keys, renamed with the worker's tag.
	for field, want := range map[string]string{"config": `{"rate":3}`, "gen": "5", "hardware": `{"cpu":4}`, "stats": `{"done":9}`} {
		if got, _ := dst.get(t, p+"wkr:{cam:w1}:"+field); got != want {
			t.Errorf("worker %s = %q, want %q", field, got, want)
		}
	}
	if st := dst.do(t, dst.Raw.B().Hget().Key(p+"wkr:{cam:w1}:state").Field("state").Build()); st.String() == "" {
		t.Error("no worker state")
	}
	if ok, _ := dst.do(t, dst.Raw.B().Sismember().Key(p+"wkrs:all").Member("cam|w1").Build()).AsBool(); !ok {
		t.Error("wkrs:all lost its member")
	}
	// Counter, KV and TTLs.
	if n, err := f.Counter("hits:2024").Get(c); err != nil || n != 7 {
		t.Errorf("counter %d %v", n, err)
	}
	kv := f.KV("cfg")
	if v, ok, err := kv.GetString(c, "a:b"); err != nil || !ok || v != `"forever"` && v != "forever" {
		t.Errorf("kv a:b = %q %v %v", v, ok, err)
	}
	if ttl, ok, err := kv.TTL(c, "a:b"); err != nil || !ok || ttl != 0 {
		t.Errorf("kv a:b TTL %v %v %v, want none", ttl, ok, err)
	}
	if ttl, ok, err := kv.TTL(c, "t"); err != nil || !ok || ttl < time.Hour-time.Minute || ttl > time.Hour {
		t.Errorf("kv t TTL %v %v %v, want about an hour", ttl, ok, err)
	}
	// The lock is still held, with its fence and about its TTL.
	if _, err := f.Lock("job:a:b").Acquire(c, fleet.LockOptions{Hold: time.Second}); !errors.Is(err, fleet.ErrNotObtained) {
		t.Errorf("lock free on the target: %v", err)
	}
	if ms, _ := dst.do(t, dst.Raw.B().Pttl().Key(p+"fleet:lock:{job:a:b}").Build()).AsInt64(); ms < 50_000 || ms > 60_000 {
		t.Errorf("lock TTL %d ms", ms)
	}
	if s, _ := dst.get(t, p+"fleet:fence:{job:a:b}"); s != strconv.FormatInt(fence, 10) {
		t.Errorf("fence %q, want %d", s, fence)
	}
	// The stream, in order; the catalog.
	es, err := fleet.NewStream[migOut](f, "cam", fleet.StreamOptions{}).Peek(c, 10)
	if err != nil || len(es) != 3 {
		t.Fatalf("stream: %v %d", err, len(es))
	}
	for i, e := range es {
		if e.Data.Seq != i {
			t.Errorf("stream entry %d holds %d", i, e.Data.Seq)
		}
	}
	if cat, err := f.Catalog(c); err != nil || len(cat) != 1 {
		t.Errorf("catalog %v %v", cat, err)
	}

	// Pool: every item listed, each claimable once; the claimed one after
	// its hold. The tag index of site "x" answers.
	pool := fleet.NewPool[migCookie, migTags](f, "cookies", fleet.PoolOptions{})
	items, err := pool.List(c)
	if err != nil || len(items) != 3 {
		t.Fatalf("pool list: %v %d", err, len(items))
	}
	xs, err := pool.Where(fleet.Eq("site", "x")).List(c)
	if err != nil || len(xs) != 2 {
		t.Fatalf("pool where site=x: %v %d", err, len(xs))
	}
	// The tag registry's members, key names, were re-spelled.
	tags, _ := dst.do(t, dst.Raw.B().Smembers().Key(p+"fleet:pidx:{cookies}:tags").Build()).AsStrSlice()
	slices.Sort(tags)
	if want := []string{p + "fleet:pidx:{cookies}:t:site:sx", p + "fleet:pidx:{cookies}:t:site:sy:z"}; !slices.Equal(tags, want) {
		t.Errorf("tag registry %q, want %q", tags, want)
	}
	claimed := map[string]bool{}
	for range 3 {
		cl, err := pool.Claim(c, fleet.ClaimOptions{Hold: time.Minute, Wait: 10 * time.Second})
		if err != nil || cl == nil {
			t.Fatalf("claim on the target: %v", err)
		}
		if claimed[cl.Item.ID] {
			t.Fatalf("item %s claimed twice", cl.Item.ID)
		}
		claimed[cl.Item.ID] = true
	}

	// Queue: a consumer and a sweeper on the cluster do every live task
	// once: pending at once, scheduled and delayed when due, in-flight after
	// their lease. The dead letter stays dead.
	sctx, stop := context.WithCancel(c)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = f.RunSweeper(sctx, fleet.SweeperOptions{Interval: 100 * time.Millisecond})
	}()
	defer func() { stop(); wg.Wait() }()
	q := migQueue(f)
	done := map[int]int{}
	deadline := time.Now().Add(20 * time.Second)
	for len(done) < len(live) && time.Now().Before(deadline) {
		ts, err := q.Reserve(c, 10, 500*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		for _, task := range ts {
			done[task.Payload.N]++
			if err := task.Ack(c); err != nil {
				t.Fatal(err)
			}
		}
	}
	for n := range live {
		if done[n] != 1 {
			t.Errorf("task %d done %d times", n, done[n])
		}
	}
	if len(done) != len(live) {
		t.Errorf("tasks done: %v, want %v", done, live)
	}
	if dl, err := q.DeadLetters(c, 0, 10); err != nil || len(dl) != 1 {
		t.Errorf("dead letters %v %v", dl, err)
	}
}

// TestMigrateRefusesAnotherSource keeps an unfinished migration from
// being mixed with another source's keys.
func TestMigrateRefusesAnotherSource(t *testing.T) {
	a := open(t, singleCompat(t))
	b := open(t, singleCompat(t))
	dst := open(t, clusterTagged(t))
	c := ctx(t)
	for i := range 30 {
		if err := a.F.KV("ns").Set(c, strconv.Itoa(i), i, 0); err != nil {
			t.Fatal(err)
		}
	}
	cctx, cancel := context.WithCancel(c)
	_, err := a.F.MigrateTo(cctx, dst.F, fleet.MigrateOptions{Batch: 2, Progress: func(fleet.MigrateProgress) { cancel() }})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted run: %v", err)
	}
	if _, err := b.F.MigrateTo(c, dst.F, fleet.MigrateOptions{}); !errors.Is(err, fleet.ErrMigrateSource) {
		t.Fatalf("another source: %v, want ErrMigrateSource", err)
	}
	rep, err := b.F.MigrateTo(c, dst.F, fleet.MigrateOptions{Restart: true})
	if !errors.Is(err, fleet.ErrMigrateMismatch) || len(rep.Mismatches) != 1 || rep.Mismatches[0].Family != "kv" {
		// The target still holds a's first keys: verification says so.
		t.Fatalf("restart onto a non-empty target: %v %+v", err, rep.Mismatches)
	}
	if _, err := a.F.MigrateTo(c, a.F, fleet.MigrateOptions{}); !errors.Is(err, fleet.ErrInvalidArgument) {
		t.Errorf("a Fleet onto itself: %v", err)
	}
	if _, err := a.F.MigrateTo(c, dst.F, fleet.MigrateOptions{Batch: -1}); !errors.Is(err, fleet.ErrInvalidArgument) {
		t.Errorf("negative batch: %v", err)
	}
}

// BenchmarkMigrate copies a 100k-key compat database (strings, lists,
// hashes, zsets) into the three-master cluster and reports keys/s.
func BenchmarkMigrate(b *testing.B) {
	const n = 100_000
	src := redistest.Target{Name: "single-compat", URL: redistest.SingleURL(b)}
	raw := redistest.Client(b, src)
	sp := redistest.Prefix(b, src)
	dt := redistest.Target{Name: "cluster-tagged", URL: redistest.ClusterURL(b), Cluster: true, Tagged: true}
	dp := redistest.Prefix(b, dt)
	c := context.Background()
	var cmds rueidis.Commands
	flush := func() {
		for _, r := range raw.DoMulti(c, cmds...) {
			if err := r.Error(); err != nil {
				b.Fatal(err)
			}
		}
		cmds = cmds[:0]
	}
	for i := range n {
		switch i % 4 {
		case 0, 1:
			cmds = append(cmds, raw.B().Set().Key(fmt.Sprintf("%sfleet:kv:ns:%d", sp, i)).Value(`{"v":1234567890}`).Build())
		case 2:
			cmds = append(cmds, raw.B().Rpush().Key(fmt.Sprintf("%sfleet:queue:q%d", sp, i)).Element(`{"id":"a","payload":{}}`, `{"id":"b","payload":{}}`).Build())
		case 3:
			cmds = append(cmds, raw.B().Hset().Key(fmt.Sprintf("%sfleet:pool:p%d", sp, i)).FieldValue().FieldValue("i", `{"p":"","t":{},"x":null}`).Build())
		}
		if len(cmds) == 1000 {
			flush()
		}
	}
	flush()
	sf, err := fleet.Open(c, fleet.Options{URL: src.URL, Prefix: sp, Layout: fleet.LayoutCompat})
	if err != nil {
		b.Fatal(err)
	}
	defer sf.Close()
	df, err := fleet.Open(c, fleet.Options{URL: dt.URL, Prefix: dp, Layout: fleet.LayoutTagged})
	if err != nil {
		b.Fatal(err)
	}
	defer df.Close()
	b.ResetTimer()
	for range b.N {
		rep, err := sf.MigrateTo(c, df, fleet.MigrateOptions{Restart: true, SkipVerify: true})
		if err != nil || rep.Copied < n {
			b.Fatalf("%v, %d copied", err, rep.Copied)
		}
		b.ReportMetric(float64(rep.Copied)/rep.Elapsed.Seconds(), "keys/s")
	}
	b.StopTimer()
	start := time.Now()
	rep, err := sf.MigrateTo(c, df, fleet.MigrateOptions{Restart: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("with verification: %d keys in %v (%.0f keys/s)", rep.Copied, time.Since(start), float64(rep.Copied)/time.Since(start).Seconds())
}

// TestMigrateTagRegistryMembers re-spells the key names a pool's tag
// registry holds, and lists (and drops) a member of no known shape, which
// the verification then reports.
func TestMigrateTagRegistryMembers(t *testing.T) {
	src := open(t, singleCompat(t))
	dst := open(t, clusterTagged(t))
	sp, dp := src.Prefix, dst.Prefix
	src.do(t, src.Raw.B().Sadd().Key(sp+"fleet:pidx:p:tags").Member(sp+"fleet:pidx:p:t:f:sv", "garbage").Build())
	rep, err := src.F.MigrateTo(ctx(t), dst.F, fleet.MigrateOptions{})
	if !errors.Is(err, fleet.ErrMigrateMismatch) || len(rep.Mismatches) != 1 || rep.Mismatches[0].Family != "pidx:tags" {
		t.Fatalf("%v %+v", err, rep.Mismatches)
	}
	if rep.Unknown != 1 || rep.Skipped != 1 || len(rep.UnknownKeys) != 1 || rep.UnknownKeys[0] != "garbage (a member of "+sp+"fleet:pidx:p:tags)" {
		t.Errorf("unknown %d %q, skipped %d", rep.Unknown, rep.UnknownKeys, rep.Skipped) // skipped: the marker
	}
	got, _ := dst.do(t, dst.Raw.B().Smembers().Key(dp+"fleet:pidx:{p}:tags").Build()).AsStrSlice()
	if !slices.Equal(got, []string{dp + "fleet:pidx:{p}:t:f:sv"}) {
		t.Errorf("target registry %q", got)
	}
}
