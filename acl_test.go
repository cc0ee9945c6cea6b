package fleet_test

import (
	"context"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/internal/redistest"
)

// aclUser makes an ACL user of role for prefix on every node of tg (ACLs
// are per node), with the rules of fleet.ACLRules, deleted when the test
// ends. When the test fails, it logs the server's ACL LOG.
func aclUser(t *testing.T, tg redistest.Target, raw rueidis.Client, prefix string, role fleet.ACLRole) (user, pass string) {
	t.Helper()
	rules, err := fleet.ACLRules(prefix, role)
	if err != nil {
		t.Fatal(err)
	}
	user = "acl-" + strings.TrimSuffix(prefix, ":") + "-" + string(role)
	pass = "pw-" + user
	args := append([]string{"SETUSER", user, "on", ">" + pass}, rules...)
	c := context.Background()
	for addr, n := range raw.Nodes() {
		if err := n.Do(c, n.B().Arbitrary("ACL").Args(args...).Build()).Error(); err != nil {
			t.Fatalf("ACL SETUSER on %s: %v", addr, err)
		}
	}
	t.Cleanup(func() {
		for addr, n := range raw.Nodes() {
			if t.Failed() {
				if log, err := n.Do(c, n.B().Arbitrary("ACL", "LOG").Args("10").Build()).ToArray(); err == nil {
					for _, e := range log {
						m, _ := e.AsStrMap()
						if m["username"] == user {
							t.Logf("ACL LOG %s %s: %s %s %s", addr, user, m["reason"], m["context"], m["object"])
						}
					}
				}
			}
			_ = n.Do(c, n.B().Arbitrary("ACL", "DELUSER").Args(user).Build()).Error()
		}
	})
	return user, pass
}

// openAs opens a Fleet on tg under prefix as user.
func openAs(t *testing.T, tg redistest.Target, prefix, user, pass string, mods ...func(*fleet.Options)) *fleet.Fleet {
	t.Helper()
	return openOn(t, tg, prefix, append([]func(*fleet.Options){func(o *fleet.Options) {
		o.Username, o.Password = user, pass
	}}, mods...)...)
}

// isNoPerm reports whether err is the server's NOPERM (fleet's ErrAuth), or
// its refusal of a key inside a script, which Redis 7.0 ("can't access at
// least one of the keys") and Valkey 8 ("ACL failure in script: No
// permissions to access a key") word without NOPERM.
func isNoPerm(err error) bool {
	return err != nil && (errors.Is(err, fleet.ErrAuth) || strings.Contains(err.Error(), "NOPERM") ||
		strings.Contains(err.Error(), "can't access at least one of the keys") ||
		strings.Contains(err.Error(), "ACL failure in script: No permissions to access a key"))
}

// dumpAll reads every key under prefix with DUMP and PTTL: a snapshot to
// compare, so that a test can tell that nothing under prefix changed.
func dumpAll(t *testing.T, raw rueidis.Client, prefix string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, k := range redistest.Keys(t, raw, prefix) {
		d, err := raw.Do(context.Background(), raw.B().Dump().Key(k).Build()).ToString()
		if err != nil {
			t.Fatalf("DUMP %s: %v", k, err)
		}
		out[k] = d
	}
	return out
}

// Two tenants on one server, each with its own prefix and users made from
// ACLRules. Tenant A runs end to end with its fenced users (submits, a batch
// worker, a flow, the sweeper, pools, locks, semaphores, KV, counters,
// streams, events, Health); its submitter and reader are refused what their
// roles leave out; then every role of tenant A tries to open, read, write,
// script and subscribe to tenant B's keys and channels and is refused with
// NOPERM each time, and tenant B's keys are byte for byte what they were.
func TestACLTenants(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		c := ctx(t)
		raw := redistest.Client(t, tg)
		prefixA, prefixB := redistest.Prefix(t, tg), redistest.Prefix(t, tg)
		users := map[fleet.ACLRole][2]string{}
		for _, role := range fleet.ACLRoles() {
			u, p := aclUser(t, tg, raw, prefixA, role)
			users[role] = [2]string{u, p}
		}

		// Tenant B, set up by the default user: one key of each kind.
		fb := openOn(t, tg, prefixB)
		qb := fleet.NewQueue[int](fb, "jobs", fleet.QueueOptions{})
		if _, err := qb.Submit(c, 7); err != nil {
			t.Fatal(err)
		}
		if err := fb.KV("ns").Set(c, "k", "b", 0); err != nil {
			t.Fatal(err)
		}
		if _, err := fb.Counter("n").Incr(c); err != nil {
			t.Fatal(err)
		}
		if _, err := fleet.NewPool[string, struct{}](fb, "p", fleet.PoolOptions{}).Put(c, "item", struct{}{}, time.Hour); err != nil {
			t.Fatal(err)
		}
		if _, err := fleet.NewStream[int](fb, "s", fleet.StreamOptions{}).Push(c, 1); err != nil {
			t.Fatal(err)
		}
		before := dumpAll(t, raw, prefixB)
		if len(before) < 5 {
			t.Fatalf("tenant B has %d keys, want at least 5: %v", len(before), slices.Sorted(maps.Keys(before)))
		}

		as := func(role fleet.ACLRole, mods ...func(*fleet.Options)) *fleet.Fleet {
			return openAs(t, tg, prefixA, users[role][0], users[role][1], mods...)
		}
		fw, fs, fo := as(fleet.ACLWorker), as(fleet.ACLSubmitter), as(fleet.ACLOperator)
		fr := as(fleet.ACLReader, func(o *fleet.Options) { o.NoMarkerWrite = true })

		t.Run("worker", func(t *testing.T) { aclRunTenant(t, fw, fs) })
		t.Run("submitter", func(t *testing.T) { aclSubmitterFenced(t, fs) })
		t.Run("reader", func(t *testing.T) { aclReaderFenced(t, fr) })
		t.Run("operator", func(t *testing.T) {
			if _, err := fo.Sync(c); err != nil {
				t.Fatalf("Sync as operator: %v", err)
			}
			r, err := fo.Health(c)
			if err != nil {
				t.Fatal(err)
			}
			if r.OutsidePrefix {
				t.Fatal("Health of the operator: OutsidePrefix = true, want false")
			}
		})

		// Tenant A's users against tenant B.
		for _, role := range fleet.ACLRoles() {
			t.Run("cross-"+string(role), func(t *testing.T) {
				aclCrossTenant(t, tg, prefixB, users[role][0], users[role][1])
			})
		}
		if after := dumpAll(t, raw, prefixB); !maps.Equal(before, after) {
			t.Fatalf("tenant B changed:\nbefore %v\nafter  %v", slices.Sorted(maps.Keys(before)), slices.Sorted(maps.Keys(after)))
		}
	})
}

// aclRunTenant runs a tenant end to end: fs submits, fw works.
func aclRunTenant(t *testing.T, fw, fs *fleet.Fleet) {
	c := ctx(t)
	qs := fleet.NewQueue[int](fs, "jobs", fleet.QueueOptions{})
	qw := fleet.NewQueue[int](fw, "jobs", fleet.QueueOptions{})
	if _, err := qs.SubmitMany(c, []int{1, 2, 3, 4, 5}); err != nil {
		t.Fatalf("submit as submitter: %v", err)
	}
	// A flow: two steps, then one after both.
	fl := fleet.NewFlow(fs, fleet.FlowOptions{})
	a := fleet.AddStep(fl, qs, 10, fleet.SubmitOptions{})
	b := fleet.AddStep(fl, qs, 20, fleet.SubmitOptions{})
	last := fleet.AddStep(fl, qs, 30, fleet.SubmitOptions{After: fleet.Steps(a, b)})
	if err := fl.Submit(c); err != nil {
		t.Fatalf("flow submit as submitter: %v", err)
	}
	var sum atomic.Int64
	w := fleet.NewBatchWorker(fw, fleet.WorkerOptions{Type: "jobs", ID: "w1", Slots: 2}, qw,
		fleet.BatchFunc[struct{}, int, int](func(ctx context.Context, s *fleet.Slot[struct{}, int], t *fleet.Task[int]) error {
			sum.Add(int64(t.Payload))
			_, err := s.Emit(ctx, t.Payload)
			return err
		}))
	if err := w.Start(c); err != nil {
		t.Fatalf("worker start: %v", err)
	}
	waitFor(t, 30*time.Second, func() bool { return w.Stats().Done == 8 || w.Stats().Failed > 0 },
		"worker: %v", later(func() any { return w.Stats() }))
	if err := w.Stop(c); err != nil {
		t.Fatal(err)
	}
	if st := w.Stats(); st.Done != 8 || st.Failed != 0 || sum.Load() != 75 {
		t.Fatalf("worker stats %+v, sum %d; want 8 done, sum 75", st, sum.Load())
	}
	// The submitter waits for the flow's last step.
	if rec, err := qs.Wait(c, last.ID()); err != nil || rec.Status != fleet.TaskDone {
		t.Fatalf("Wait of the flow's last step: %+v, %v", rec, err)
	}

	// The sweeper puts back a reservation past its lease.
	ql := fleet.NewQueue[int](fw, "lease", fleet.QueueOptions{Lease: 50 * time.Millisecond})
	if _, err := fleet.NewQueue[int](fs, "lease", fleet.QueueOptions{}).Submit(c, 1); err != nil {
		t.Fatal(err)
	}
	if ts, err := ql.Reserve(c, 1, time.Second); err != nil || len(ts) != 1 {
		t.Fatalf("reserve: %d, %v", len(ts), err)
	}
	var swept fleet.SweepStats
	waitFor(t, 10*time.Second, func() bool {
		st, err := fw.Sweep(c, fleet.SweeperOptions{})
		if err != nil {
			t.Fatalf("sweep as worker: %v", err)
		}
		swept.Requeued += st.Requeued
		return swept.Requeued == 1
	}, "sweeper requeued %d", later(func() any { return swept.Requeued }))

	// The primitives.
	if err := fw.KV("ns").Set(c, "k", "v", time.Minute); err != nil {
		t.Fatal(err)
	}
	if v, ok, err := fw.KV("ns").GetString(c, "k"); err != nil || !ok || v != "v" {
		t.Fatalf("KV get: %q %v %v", v, ok, err)
	}
	if n, err := fw.Counter("n").IncrBy(c, 3); err != nil || n != 3 {
		t.Fatalf("counter: %d %v", n, err)
	}
	l, err := fw.Lock("l").Acquire(c, fleet.LockOptions{Hold: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(c); err != nil {
		t.Fatal(err)
	}
	sl, err := fw.Semaphore("s", 2).Acquire(c, fleet.SemaphoreOptions{Hold: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := sl.Release(c); err != nil {
		t.Fatal(err)
	}
	pool := fleet.NewPool[string, struct{}](fw, "p", fleet.PoolOptions{})
	if _, err := pool.Put(c, "item", struct{}{}, time.Hour); err != nil {
		t.Fatal(err)
	}
	claimed, err := pool.Do(c, fleet.ClaimOptions{Hold: time.Second}, func(ctx context.Context, cl *fleet.Claim[string, struct{}]) error {
		return nil
	})
	if err != nil || !claimed {
		t.Fatalf("pool claim: %v %v", claimed, err)
	}
	if es, err := fleet.NewStream[int](fw, "jobs", fleet.StreamOptions{}).Pop(c, 10); err != nil || len(es) != 8 {
		t.Fatalf("stream pop: %d entries, %v; want the 8 the worker emitted", len(es), err)
	}
	sub, err := fleet.Subscribe[string](c, fw, "news", fleet.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if err := fs.Publish(c, "news", "hello"); err != nil {
		t.Fatalf("publish as submitter: %v", err)
	}
	select {
	case m := <-sub.C():
		if m != "hello" {
			t.Fatalf("event %q", m)
		}
	case <-c.Done():
		t.Fatal("no event")
	}

	r, err := fw.Health(c)
	if err != nil {
		t.Fatalf("Health as worker: %v", err)
	}
	if r.OutsidePrefix {
		t.Fatal("Health of a fenced worker: OutsidePrefix = true, want false")
	}
}

// aclSubmitterFenced: a submitter reads its tenant, but writes only queues
// and flows.
func aclSubmitterFenced(t *testing.T, fs *fleet.Fleet) {
	c := ctx(t)
	if _, _, err := fs.KV("ns").Get(c, "k"); err != nil {
		t.Fatalf("KV read as submitter: %v", err)
	}
	for name, err := range map[string]error{
		"kv set":  fs.KV("ns").Set(c, "k", "x", 0),
		"counter": func() error { _, err := fs.Counter("n").Incr(c); return err }(),
		"lock":    func() error { _, err := fs.Lock("l").Acquire(c, fleet.LockOptions{Hold: time.Second}); return err }(),
		"pool": func() error {
			_, err := fleet.NewPool[string, struct{}](fs, "p", fleet.PoolOptions{}).Put(c, "x", struct{}{}, time.Hour)
			return err
		}(),
		"stream":  func() error { _, err := fleet.NewStream[int](fs, "jobs", fleet.StreamOptions{}).Push(c, 1); return err }(),
		"catalog": fs.PublishCatalog(c, fleet.CatalogEntry{Type: "x"}),
	} {
		if !isNoPerm(err) {
			t.Errorf("%s as submitter: %v, want NOPERM", name, err)
		}
	}
}

// aclReaderFenced: a reader reads, and writes nothing.
func aclReaderFenced(t *testing.T, fr *fleet.Fleet) {
	c := ctx(t)
	q := fleet.NewQueue[int](fr, "jobs", fleet.QueueOptions{})
	if _, err := q.Stats(c); err != nil {
		t.Fatalf("Stats as reader: %v", err)
	}
	if v, ok, err := fr.KV("ns").GetString(c, "k"); err != nil || (ok && v != "v") {
		t.Fatalf("KV read as reader: %q %v %v", v, ok, err)
	}
	if _, err := q.Submit(c, 1); !isNoPerm(err) {
		t.Errorf("submit as reader: %v, want NOPERM", err)
	}
	if err := fr.KV("ns").Set(c, "k", "x", 0); !isNoPerm(err) {
		t.Errorf("KV set as reader: %v, want NOPERM", err)
	}
	if err := fr.Publish(c, "news", "x"); !isNoPerm(err) {
		t.Errorf("publish as reader: %v, want NOPERM", err)
	}
}

// aclCrossTenant tries everything against tenant B (prefixB) as user, and
// wants NOPERM from each attempt.
func aclCrossTenant(t *testing.T, tg redistest.Target, prefixB, user, pass string) {
	c := ctx(t)
	// A Fleet under tenant B's prefix: Open reads B's layout marker.
	for _, noWrite := range []bool{false, true} {
		opts := fleet.Options{URL: tg.URL, Username: user, Password: pass, Prefix: prefixB, NoMarkerWrite: noWrite}
		if tg.Tagged {
			opts.Layout = fleet.LayoutTagged
		}
		if f, err := fleet.Open(c, opts); !errors.Is(err, fleet.ErrAuth) {
			if f != nil {
				f.Close()
			}
			t.Errorf("Open with tenant B's prefix (NoMarkerWrite %v): %v, want ErrAuth", noWrite, err)
		}
	}

	// Raw commands, as the user.
	opt, err := rueidis.ParseURL(tg.URL)
	if err != nil {
		t.Fatal(err)
	}
	opt.Username, opt.Password, opt.DisableCache = user, pass, true
	rc, err := rueidis.NewClient(opt)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	kv, queue := prefixB+"fleet:kv:ns:k", prefixB+"fleet:queue:jobs"
	if tg.Tagged {
		queue = prefixB + "fleet:queue:{jobs}"
	}
	channel := prefixB + "event:news"
	attempts := map[string]rueidis.Completed{
		"get":         rc.B().Get().Key(kv).Build(),
		"exists":      rc.B().Exists().Key(kv).Build(),
		"set":         rc.B().Set().Key(kv).Value("a").Build(),
		"del":         rc.B().Del().Key(kv).Build(),
		"lrange":      rc.B().Lrange().Key(queue).Start(0).Stop(-1).Build(),
		"rpush":       rc.B().Rpush().Key(queue).Element("{}").Build(),
		"publish":     rc.B().Publish().Channel(channel).Message("x").Build(),
		"eval keys":   rc.B().Eval().Script("return redis.call('GET', KEYS[1])").Numkeys(1).Key(kv).Build(),
		"eval_ro":     rc.B().EvalRo().Script("return redis.call('GET', KEYS[1])").Numkeys(1).Key(kv).Build(),
		"eval inside": rc.B().Eval().Script("return redis.call('SET', ARGV[1], 'a')").Numkeys(0).Arg(kv).Build(),
		"flushall":    rc.B().Flushall().Build(),
		"keys":        rc.B().Keys().Pattern("*").Build(),
		"config":      rc.B().ConfigGet().Parameter("*").Build(),
	}
	for name, cmd := range attempts {
		if err := rc.Do(c, cmd).Error(); !isNoPerm(err) {
			t.Errorf("%s on tenant B as %s: %v, want NOPERM", name, user, err)
		}
	}
	// Subscribing to tenant B's channel is refused too.
	err = rc.Receive(c, rc.B().Subscribe().Channel(channel).Build(), func(rueidis.PubSubMessage) {})
	if !isNoPerm(err) {
		t.Errorf("subscribe to tenant B's channel as %s: %v, want NOPERM", user, err)
	}
	if tg.Cluster {
		err = rc.Receive(c, rc.B().Ssubscribe().Channel(channel).Build(), func(rueidis.PubSubMessage) {})
		if !isNoPerm(err) {
			t.Errorf("ssubscribe to tenant B's channel as %s: %v, want NOPERM", user, err)
		}
	}
}

// Health tells a fenced user (NOPERM outside its prefix) from one that
// reaches every key, and says nothing of a Fleet with no prefix.
func TestACLHealthOutsidePrefix(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		c := ctx(t)
		raw := redistest.Client(t, tg)
		e := open(t, tg) // the default user, under a prefix
		r, err := e.F.Health(c)
		if err != nil {
			t.Fatal(err)
		}
		if !r.OutsidePrefix {
			t.Fatal("Health of the default user under a prefix: OutsidePrefix = false, want true")
		}
		u, p := aclUser(t, tg, raw, e.Prefix, fleet.ACLReader)
		fenced := openAs(t, tg, e.Prefix, u, p, func(o *fleet.Options) { o.NoMarkerWrite = true })
		if r, err = fenced.Health(c); err != nil || r.OutsidePrefix {
			t.Fatalf("Health of a reader fenced to its prefix: OutsidePrefix = %v, %v; want false", r.OutsidePrefix, err)
		}
		if tg.Cluster {
			return // one node lets a user in ~* everywhere; enough above
		}
		whole := openOn(t, tg, "", func(o *fleet.Options) { o.NoMarkerWrite = true })
		if r, err = whole.Health(c); err != nil || r.OutsidePrefix {
			t.Fatalf("Health with no prefix: OutsidePrefix = %v, %v; want false (no outside)", r.OutsidePrefix, err)
		}
	})
}

// ACLRules refuses what no key pattern can fence, and its worker rules
// allow every command that fleet's scripts call.
func TestACLRules(t *testing.T) {
	t.Parallel()
	for _, bad := range []struct {
		prefix string
		role   fleet.ACLRole
	}{
		{"", fleet.ACLWorker}, {"a*", fleet.ACLWorker}, {"a?", fleet.ACLWorker}, {"a[", fleet.ACLWorker},
		{"a]", fleet.ACLWorker}, {`a\`, fleet.ACLWorker}, {"a b", fleet.ACLWorker}, {"{a}", fleet.ACLWorker},
		{"a:", "admin"}, {"a:", ""},
	} {
		if rules, err := fleet.ACLRules(bad.prefix, bad.role); !errors.Is(err, fleet.ErrInvalidArgument) || rules != nil {
			t.Errorf("ACLRules(%q, %q) = %v, %v; want ErrInvalidArgument", bad.prefix, bad.role, rules, err)
		}
	}
	has := func(rules []string, w string) bool { return slices.Contains(rules, w) }
	for _, role := range fleet.ACLRoles() {
		rules, err := fleet.ACLRules("t1:", role)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(rules[:3], []string{"resetkeys", "resetchannels", "-@all"}) || rules[len(rules)-1] != "&t1:*" {
			t.Errorf("%s: rules %v do not start with the resets and end with &t1:*", role, rules)
		}
		for _, w := range rules {
			if (strings.Contains(w, "~") && !strings.Contains(w, "~t1:")) || w == "+keys" || w == "+flushall" || w == "+config" || strings.HasPrefix(w, "+@") {
				t.Errorf("%s: rule %q reaches past the tenant", role, w)
			}
		}
		want := map[fleet.ACLRole][3]bool{ // +set, ~t1:*, %R~t1:*
			fleet.ACLWorker: {true, true, false}, fleet.ACLOperator: {true, true, false},
			fleet.ACLSubmitter: {true, false, true}, fleet.ACLReader: {false, false, true},
		}[role]
		if got := [3]bool{has(rules, "+set"), has(rules, "~t1:*"), has(rules, "%R~t1:*")}; got != want {
			t.Errorf("%s: +set, ~t1:*, %%R~t1:* = %v, want %v", role, got, want)
		}
		if has(rules, "+scan") != (role == fleet.ACLOperator) {
			t.Errorf("%s: +scan is the operator's alone", role)
		}
	}
	// Every command a script calls is a worker's.
	worker, _ := fleet.ACLRules("t1:", fleet.ACLWorker)
	files, err := filepath.Glob("scripts/*.lua")
	if err != nil || len(files) == 0 {
		t.Fatalf("scripts: %v, %v", files, err)
	}
	call := regexp.MustCompile(`redis\.p?call\(\s*['"]([A-Za-z_]+)['"]`)
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range call.FindAllStringSubmatch(string(b), -1) {
			if cmd := strings.ToLower(m[1]); !has(worker, "+"+cmd) {
				t.Errorf("%s calls %s, which the worker's rules do not allow", file, cmd)
			}
		}
	}
}
