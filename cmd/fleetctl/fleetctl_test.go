package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/internal/redistest"
)

// TestMain runs the tests as redistest.Main does (servers stopped, no
// goroutine left over), and removes the binary that bin built.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "fleetctl-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binPath = filepath.Join(dir, "fleetctl")
	code := m.Run()
	os.RemoveAll(dir)
	redistest.Shutdown()
	if code == 0 {
		if err := goleak.Find(goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*clusterClient)._refresh.func2"),
			goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*call).DelayDo.func1")); err != nil {
			fmt.Fprintf(os.Stderr, "goroutines outlived the tests: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// bin builds fleetctl once per test binary.
func bin(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			buildErr = errors.New(string(out))
		}
	})
	if buildErr != nil {
		t.Fatalf("build fleetctl: %v", buildErr)
	}
	return binPath
}

// fctl runs the built binary and returns stdout, stderr and the exit code.
func fctl(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin(t), args...)
	cmd.Env = append(os.Environ(), "FLEET_REDIS_URL=")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run fleetctl %q: %v", args, err)
	}
	return out.String(), errb.String(), code
}

type job struct {
	N int `json:"n"`
}

type tags struct {
	Region string `json:"region"`
}

func TestFleetctl(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		ctx, f, conn, prefix := openTarget(t, tg)
		q := fleet.NewQueue[job](f, "jobs", fleet.QueueOptions{})
		for i := range 3 {
			if _, err := q.Submit(ctx, job{N: i}); err != nil {
				t.Fatal(err)
			}
		}
		p := fleet.NewPool[string, tags](f, "cookies", fleet.PoolOptions{})
		if _, err := p.Put(ctx, "c", tags{Region: "eu"}, 0); err != nil {
			t.Fatal(err)
		}
		raw := redistest.Client(t, tg)
		dead := prefix + "fleet:queue:jobs:dead"
		state := prefix + "wkr:scraper:h1:state"
		if tg.Tagged {
			dead = prefix + "fleet:queue:{jobs}:dead"
			state = prefix + "wkr:{scraper:h1}:state"
		}
		for _, cmd := range [][]string{
			{"RPUSH", dead, `{"id":"d1","payload":{"n":9},"attempts":3,"error":"boom","dead_at":1}`},
			{"HSET", state, "state", "RUNNING", "last_seen", "1700000000"},
			{"SADD", prefix + "wkrs:scraper", "h1"},
			{"SADD", prefix + "wkrs:all", "scraper|h1"},
			{"HSET", prefix + "fleet:catalog", "scraper", `{"config":{"type":"object"},"output":{},"task_payload":null}`},
		} {
			if err := raw.Do(ctx, raw.B().Arbitrary(cmd...).Build()).Error(); err != nil {
				t.Fatal(err)
			}
		}
		runJSON := func(v any, args ...string) {
			t.Helper()
			out, errOut, code := fctl(t, append(append([]string{"--json"}, conn...), args...)...)
			if code != 0 {
				t.Fatalf("fleetctl %q: exit %d: %s", args, code, errOut)
			}
			if err := json.Unmarshal([]byte(out), v); err != nil {
				t.Fatalf("fleetctl %q: %v in %q", args, err, out)
			}
		}

		var qs []fleet.QueueCounts
		runJSON(&qs, "queues")
		if len(qs) != 1 || qs[0].Latency <= 0 || qs[0].Latency > time.Minute || (fleet.QueueCounts{Name: qs[0].Name, QueueStats: fleet.QueueStats{Pending: qs[0].Pending, Dead: qs[0].Dead, InFlight: qs[0].InFlight, Scheduled: qs[0].Scheduled, Paused: qs[0].Paused}}) != (fleet.QueueCounts{Name: "jobs", QueueStats: fleet.QueueStats{Pending: 3, Dead: 1}}) {
			t.Fatalf("queues %+v", qs)
		}
		var ps []fleet.PoolCounts
		runJSON(&ps, "pools")
		if len(ps) != 1 || ps[0] != (fleet.PoolCounts{Name: "cookies", Items: 1}) {
			t.Fatalf("pools %+v", ps)
		}
		var ws []fleet.WorkerInfo
		runJSON(&ws, "workers", "--type", "scraper")
		if len(ws) != 1 || ws[0].ID != "h1" || ws[0].State != "RUNNING" || ws[0].LastSeen.Unix() != 1700000000 {
			t.Fatalf("workers %+v", ws)
		}
		var dl []map[string]any
		runJSON(&dl, "dlq", "list", "jobs")
		if len(dl) != 1 || dl[0]["id"] != "d1" || dl[0]["error"] != "boom" {
			t.Fatalf("dlq list %+v", dl)
		}
		var cat map[string]fleet.CatalogSchemas
		runJSON(&cat, "catalog")
		if _, ok := cat["scraper"]; !ok || len(cat) != 1 {
			t.Fatalf("catalog %+v", cat)
		}
		var sr fleet.SyncReport
		runJSON(&sr, "sync")
		if sr.Queues != 1 || sr.Pools != 1 || sr.Workers != 1 || sr.Fixed() != 0 {
			t.Fatalf("sync %+v", sr)
		}
		var hr fleet.HealthReport
		out, _, code := fctl(t, append(append([]string{"--json"}, conn...), "health")...)
		if err := json.Unmarshal([]byte(out), &hr); err != nil || len(hr.Nodes) == 0 {
			t.Fatalf("health %q: %v", out, err)
		}
		if want := map[bool]int{true: 0, false: 3}[hr.OK()]; code != want {
			t.Fatalf("health exit %d, want %d (problems %+v)", code, want, hr.Problems)
		}

		// Flags after the arguments, tables by default.
		out, _, code = fctl(t, append([]string{"dlq", "list", "jobs"}, conn...)...)
		if code != 0 || !strings.Contains(out, "ATTEMPTS") || !strings.Contains(out, "d1") {
			t.Fatalf("dlq table: %d %q", code, out)
		}
		// Not found: 4.
		if _, _, code := fctl(t, append([]string{"dlq", "requeue", "jobs", "nope"}, conn...)...); code != 4 {
			t.Fatalf("requeue missing: exit %d", code)
		}
		if _, _, code := fctl(t, append([]string{"catalog", "mailer"}, conn...)...); code != 4 {
			t.Fatalf("catalog missing: exit %d", code)
		}
		var n map[string]int
		runJSON(&n, "dlq", "requeue", "jobs", "d1")
		if n["requeued"] != 1 {
			t.Fatalf("requeue %+v", n)
		}
		runJSON(&n, "dlq", "purge", "jobs")
		if n["purged"] != 0 {
			t.Fatalf("purge %+v", n)
		}
		runJSON(&qs, "queues", "jobs")
		if len(qs) != 1 || qs[0].Pending != 4 || qs[0].Dead != 0 {
			t.Fatalf("queue jobs %+v", qs)
		}
		// Usage: 2.
		for _, args := range [][]string{{"nope"}, {"dlq", "list"}, {"queues", "a:b"}, {"workers", "--bogus"}, {}} {
			if _, _, code := fctl(t, append(conn, args...)...); code != 2 {
				t.Errorf("fleetctl %q: exit %d, want 2", args, code)
			}
		}
	})
}

func TestFleetctlHelpAndErrors(t *testing.T) {
	for _, name := range []string{"workers", "queues", "pools", "dlq", "catalog", "sync", "health", "migrate", "acl"} {
		out, errOut, code := fctl(t, name, "--help")
		if code != 0 || out != "" || !strings.Contains(errOut, "usage: fleetctl "+name) || !strings.Contains(errOut, "-url") {
			t.Errorf("%s --help: exit %d, %q", name, code, errOut)
		}
	}
	if _, errOut, code := fctl(t, "--help"); code != 0 || !strings.Contains(errOut, "exit codes") {
		t.Errorf("--help: exit %d, %q", code, errOut)
	}
	// No URL: an error, 1.
	if _, errOut, code := fctl(t, "queues"); code != 1 || !strings.Contains(errOut, "FLEET_REDIS_URL") {
		t.Errorf("no url: exit %d, %q", code, errOut)
	}
	// Nothing listens: an error, 1.
	if _, _, code := fctl(t, "--url", "redis://127.0.0.1:1", "--timeout", "3s", "queues"); code != 1 {
		t.Errorf("unreachable: exit %d", code)
	}
}

// migrate: a compat single node into the tagged cluster, a dry run first.
func TestFleetctlMigrate(t *testing.T) {
	single, cluster := redistest.Targets(t)[0], redistest.Targets(t)[2]
	from, to := redistest.Prefix(t, single), redistest.Prefix(t, cluster)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	f, err := fleet.Open(ctx, fleet.Options{URL: single.URL, Prefix: from})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	q := fleet.NewQueue[job](f, "jobs", fleet.QueueOptions{})
	for i := range 5 {
		if _, err := q.Submit(ctx, job{N: i}); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.KV("ns").Set(ctx, "k", "v", time.Hour); err != nil {
		t.Fatal(err)
	}
	args := []string{"--url", single.URL, "--prefix", from, "--json", "migrate", "--to", cluster.URL, "--to-prefix", to}
	var r fleet.MigrateReport
	out, errOut, code := fctl(t, append(args, "--dry-run")...)
	// The queue, its policy and the registry; the KV key.
	if code != 0 || json.Unmarshal([]byte(out), &r) != nil || !r.DryRun || len(r.Plan) != 4 {
		t.Fatalf("dry run: exit %d, %s %s", code, out, errOut)
	}
	if got := redistest.Keys(t, redistest.Client(t, cluster), to); len(got) != 0 {
		t.Fatalf("the dry run wrote %v", got)
	}
	out, errOut, code = fctl(t, args...)
	if code != 0 || json.Unmarshal([]byte(out), &r) != nil || r.Copied != 4 || !r.Verified {
		t.Fatalf("migrate: exit %d, %s %s", code, out, errOut)
	}
	g, err := fleet.Open(ctx, fleet.Options{URL: cluster.URL, Prefix: to})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	st, err := fleet.NewQueue[job](g, "jobs", fleet.QueueOptions{}).Stats(ctx)
	if err != nil || st.Pending != 5 {
		t.Fatalf("on the cluster: %+v, %v", st, err)
	}
	if v, ok, err := g.KV("ns").GetString(ctx, "k"); v != "v" || !ok || err != nil {
		t.Fatalf("kv on the cluster: %q %v %v", v, ok, err)
	}
	if _, _, code := fctl(t, "--url", single.URL, "migrate"); code != 2 {
		t.Fatalf("migrate without --to: exit %d, want 2", code)
	}
}

// openTarget opens a Fleet on target tg under a prefix of the test's own,
// closed at cleanup, and returns it with a ctx bounded by a minute and the
// connection flags that point fleetctl at the same fleet.
func openTarget(t *testing.T, tg redistest.Target) (context.Context, *fleet.Fleet, []string, string) {
	t.Helper()
	prefix := redistest.Prefix(t, tg)
	layout := fleet.LayoutCompat
	if tg.Tagged {
		layout = fleet.LayoutTagged
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	f, err := fleet.Open(ctx, fleet.Options{URL: tg.URL, Prefix: prefix, Layout: layout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return ctx, f, []string{"--url", tg.URL, "--prefix", prefix, "--layout", string(layout)}, prefix
}

// TestFleetctlGroups: fleetctl groups lists a queue's groups with their
// depth, running count, limits and state; task get shows a task's
// metadata and group.
func TestFleetctlGroups(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		ctx, f, conn, _ := openTarget(t, tg)
		q := fleet.NewQueue[job](f, "sites", fleet.QueueOptions{Groups: fleet.GroupLimits{Concurrency: 2}})
		var ids []string
		for i, g := range []string{"a", "a", "a", "b"} {
			id, err := q.SubmitWith(ctx, job{N: i}, fleet.SubmitOptions{Group: g, Metadata: map[string]string{"tenant": "t-" + g}})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		if err := q.SetGroupLimit(ctx, "b", fleet.GroupLimits{Concurrency: 1, Rate: fleet.LimitOptions{Rate: 5, Per: time.Second}}); err != nil {
			t.Fatal(err)
		}
		if err := q.PauseGroup(ctx, "b"); err != nil {
			t.Fatal(err)
		}
		if ts, err := q.Reserve(ctx, 1, 0); err != nil || len(ts) != 1 || ts[0].Group() != "a" {
			t.Fatalf("reserve: %v, %v", ts, err)
		}
		out, errOut, code := fctl(t, append(append([]string{"--json"}, conn...), "groups", "sites")...)
		if code != 0 {
			t.Fatalf("groups: exit %d: %s", code, errOut)
		}
		var gs []fleet.GroupInfo
		if err := json.Unmarshal([]byte(out), &gs); err != nil {
			t.Fatalf("groups: %v in %q", err, out)
		}
		for i := range gs {
			gs[i].Latency = 0
		}
		want := []fleet.GroupInfo{
			{Name: "a", Pending: 2, Running: 1, Limits: fleet.GroupLimits{Concurrency: 2}, State: "ready"},
			{Name: "b", Pending: 1, Limits: fleet.GroupLimits{Concurrency: 1, Rate: fleet.LimitOptions{Rate: 5, Per: time.Second, Burst: 1}}, Own: true, Paused: true, State: "paused"},
		}
		if !slices.EqualFunc(gs, want, func(a, b fleet.GroupInfo) bool { return reflect.DeepEqual(a, b) }) {
			t.Fatalf("groups:\n got %+v\nwant %+v", gs, want)
		}
		out, _, code = fctl(t, append(conn, "groups", "sites")...)
		for _, line := range []string{"GROUP", "a ", "b ", "5/1s burst 1", "paused"} {
			if code != 0 || !strings.Contains(out, line) {
				t.Fatalf("groups table (exit %d) lacks %q:\n%s", code, line, out)
			}
		}
		out, _, code = fctl(t, append(conn, "task", "get", "sites", ids[3])...)
		if code != 0 || !strings.Contains(out, "t-b") || !strings.Contains(out, "tenant") {
			t.Fatalf("task get (exit %d):\n%s", code, out)
		}
		if _, errOut, code := fctl(t, append(conn, "groups")...); code == 0 || !strings.Contains(errOut, "takes one queue name") {
			t.Fatalf("groups without a queue: exit %d: %s", code, errOut)
		}
	})
}
