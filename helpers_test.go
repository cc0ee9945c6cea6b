package fleet_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/redis/rueidis/rueidiscompat"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/fleettest"
	"github.com/fleet-go/fleet/internal/costmeter"
	"github.com/fleet-go/fleet/internal/redistest"
)

// TestMain runs the tests against the harness's servers. Their Fleets keep
// no history unless a test asks (Options.HistoryFlush): many tests count
// the commands a call sends, or read the keys it leaves, and a flush of the
// history (history.go) could land in between. history_test.go turns it on.
// A test binary started with FLEET_TEST_STEP_KILL_AT is a worker process
// of TestStepKilledAtEachPoint instead.
func TestMain(m *testing.M) {
	if os.Getenv(stepKillAt) != "" {
		os.Exit(runStepKiller())
	}
	fleet.SetDefaultHistoryFlush(-1)
	redistest.Main(m)
}

// env is one test's Fleet on one target, with a raw client to arrange and
// assert what is in Redis, and the test's key prefix.
type env struct {
	F      *fleet.Fleet
	Raw    rueidis.Client
	Prefix string
	Tg     redistest.Target
}

// open opens a Fleet on tg under a fresh prefix, closed when the test ends.
func open(t *testing.T, tg redistest.Target, mods ...func(*fleet.Options)) *env {
	t.Helper()
	e := &env{Tg: tg, Raw: redistest.Client(t, tg), Prefix: redistest.Prefix(t, tg)}
	e.F = openOn(t, tg, e.Prefix, mods...)
	return e
}

// openOn opens another Fleet on the same target and prefix.
func openOn(t *testing.T, tg redistest.Target, prefix string, mods ...func(*fleet.Options)) *fleet.Fleet {
	t.Helper()
	opts := fleet.Options{URL: tg.URL, Prefix: prefix, Layout: fleet.LayoutCompat}
	if tg.Tagged {
		opts.Layout = fleet.LayoutTagged
	}
	for _, m := range mods {
		m(&opts)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	f, err := fleet.Open(ctx, opts)
	if err != nil {
		t.Fatalf("open %s: %v", tg.Name, err)
	}
	t.Cleanup(func() { _ = f.Close() })
	return f
}

// ctx returns a context that ends with the test, bounded to a minute.
func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return c
}

// key spells a key the way the layout does, for asserting what is stored.
func (e *env) key(compat, tagged string) string {
	if e.Tg.Tagged {
		return e.Prefix + tagged
	}
	return e.Prefix + compat
}

// keys lists every key the test left in Redis, but the layout marker that
// Open writes (TestMarker checks that one).
func (e *env) keys(t *testing.T) []string { return prefixedKeys(t, e.Raw, e.Prefix) }

// get reads a string key raw ("" and false when missing).
func (e *env) get(t *testing.T, key string) (string, bool) { return rawGet(t, e.Raw, key) }

// compat is the raw client as a go-redis style client (rueidiscompat), for
// reading back what a test left in Redis the way the documented schema
// spells it.
func (e *env) compat() rueidiscompat.Cmdable { return rueidiscompat.NewAdapter(e.Raw) }

// do runs a raw command and fails the test on error.
func (e *env) do(t *testing.T, cmd rueidis.Completed) rueidis.RedisResult {
	t.Helper()
	r := e.Raw.Do(context.Background(), cmd)
	if err := r.Error(); err != nil && !rueidis.IsRedisNil(err) {
		t.Fatalf("raw command: %v", err)
	}
	return r
}

// serverCalls reads INFO commandstats of the server c talks to: the calls
// of each command so far (commands run inside scripts included), by name
// ("get", "evalsha", "client|caching").
func serverCalls(t *testing.T, c rueidis.Client) map[string]int64 {
	t.Helper()
	s, err := costmeter.Read(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	return s.Calls
}

// ownCalls is serverCalls for a server of the test's own, read through
// redis-cli, so that the reading adds no client of its own (INFO only).
func ownCalls(t *testing.T, s *fleettest.Server) map[string]int64 { return ownStats(t, s).Calls }

// ownStats reads INFO commandstats and cpu of a server of the test's own
// through redis-cli.
func ownStats(t testing.TB, s *fleettest.Server) costmeter.Snapshot {
	t.Helper()
	out, err := s.Cli(context.Background(), "INFO", "commandstats")
	if err != nil {
		t.Fatal(err)
	}
	cpu, err := s.Cli(context.Background(), "INFO", "cpu")
	if err != nil {
		t.Fatal(err)
	}
	snap, err := costmeter.Parse(out + "\n" + cpu)
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

// lockServer starts a server of the test's own, a Fleet on it, and a raw
// client to arrange and assert what is stored there.
func lockServer(t *testing.T) (*fleettest.Server, *fleet.Fleet, rueidis.Client) {
	t.Helper()
	s, f := ownServer(t, fleet.Options{})
	return s, f, redistest.Client(t, redistest.Target{Name: "own", URL: s.URL()})
}

// openURL opens a Fleet on url (a proxy in front of a server), closed when
// the test ends.
func openURL(t *testing.T, url string) *fleet.Fleet {
	t.Helper()
	f, err := fleet.Open(ctx(t), fleet.Options{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func rawGet(t *testing.T, c rueidis.Client, key string) (string, bool) {
	t.Helper()
	s, err := c.Do(context.Background(), c.B().Get().Key(key).Build()).ToString()
	if rueidis.IsRedisNil(err) {
		return "", false
	}
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	return s, true
}

func rawExists(t *testing.T, c rueidis.Client, key string) bool {
	t.Helper()
	n, err := c.Do(context.Background(), c.B().Exists().Key(key).Build()).AsInt64()
	if err != nil {
		t.Fatal(err)
	}
	return n == 1
}

func rawInt(t *testing.T, c rueidis.Client, key string) int64 {
	t.Helper()
	s, ok := rawGet(t, c, key)
	if !ok {
		return 0
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatalf("%s holds %q, not an integer", key, s)
	}
	return n
}

func rawPTTL(t *testing.T, c rueidis.Client, key string) int64 {
	t.Helper()
	n, err := c.Do(context.Background(), c.B().Pttl().Key(key).Build()).AsInt64()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// allKeys lists every key of the server but the layout marker, sorted.
func allKeys(t *testing.T, c rueidis.Client) []string { return prefixedKeys(t, c, "") }

// prefixedKeys lists the keys under prefix but the layout marker, sorted.
func prefixedKeys(t *testing.T, c rueidis.Client, prefix string) []string {
	return slices.DeleteFunc(redistest.Keys(t, c, prefix), func(k string) bool { return k == prefix+"fleet:meta" })
}

// commandCalls sums the calls of every command the server ran, commands
// inside scripts included, INFO excluded.
func commandCalls(t *testing.T, s *fleettest.Server) int64 {
	t.Helper()
	n := int64(0)
	for name, v := range ownCalls(t, s) {
		if name != "info" {
			n += v
		}
	}
	return n
}

// proxied is a server of a test's own (compat layout) with a proxy in
// front of it: Direct is a Fleet on the server, Through one on the proxy
// (closed at cleanup; closing it earlier is fine), E an env on the server
// to arrange and assert what is stored, and Raw its raw client.
type proxied struct {
	S       *fleettest.Server
	P       *fleettest.Proxy
	Direct  *fleet.Fleet
	Through *fleet.Fleet
	E       *env
	Raw     rueidis.Client
}

// startProxied starts a proxied server; through sets the Options of the
// Fleet on the proxy (its URL is filled in).
func startProxied(t *testing.T, through fleet.Options) *proxied {
	t.Helper()
	s, direct := ownServer(t, fleet.Options{Layout: fleet.LayoutCompat})
	p, err := fleettest.StartProxy(s.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	through.URL = p.URL()
	wf, err := fleet.Open(ctx(t), through)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = wf.Close() })
	// rueidis spreads commands over a few connections at random, and dials
	// each on its first command: dial them all now, or a test that holds
	// the replies back would find a command stuck behind the handshake of
	// a new connection (whose replies the proxy holds too).
	for range 64 {
		if _, err := wf.Counter("warm").Get(ctx(t)); err != nil {
			t.Fatal(err)
		}
	}
	tg := redistest.Target{URL: s.URL()}
	raw := redistest.Client(t, tg)
	return &proxied{S: s, P: p, Direct: direct, Through: wf, E: &env{F: direct, Raw: raw, Tg: tg}, Raw: raw}
}

// waitQueueGone waits until the queue of k has nothing pending or in
// flight left (its list, :processing, bodies and leases are gone).
func waitQueueGone(t *testing.T, e *env, k qkeys) {
	t.Helper()
	waitFor(t, 60*time.Second, func() bool {
		left, _ := e.Raw.Do(context.Background(), e.Raw.B().Exists().Key(k.Pending, k.Processing, k.Body, k.Lease).Build()).AsInt64()
		return left == 0
	}, "tasks left: %v", e.dump(t))
}

// assertAllHandled fails unless every one of ids was handled at least once
// (handled counts runs by id) and no task of k went to the dead letters.
func assertAllHandled(t *testing.T, e *env, k qkeys, ids []string, handled map[string]int) {
	t.Helper()
	for _, id := range ids {
		if handled[id] == 0 {
			t.Fatalf("task %s was never handled", id)
		}
	}
	if dead := e.lrange(t, k.Dead); len(dead) > 0 {
		t.Fatalf("%d tasks went to the dead letters: %v", len(dead), dead[0])
	}
}

// runSweeper runs f's sweeper every interval until the test ends.
func runSweeper(t *testing.T, f *fleet.Fleet, interval time.Duration) {
	t.Helper()
	sweepCtx, stop := context.WithCancel(context.Background())
	swept := make(chan error, 1)
	go func() { swept <- f.RunSweeper(sweepCtx, fleet.SweeperOptions{Interval: interval}) }()
	t.Cleanup(func() { stop(); <-swept })
}

// submitJobs submits jobN(0..n-1) to q in one call and returns their ids.
func submitJobs(t *testing.T, q *fleet.Queue[job], n int) []string {
	t.Helper()
	items := make([]job, n)
	for i := range items {
		items[i] = jobN(i)
	}
	ids, err := q.SubmitMany(ctx(t), items)
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// waitFor polls cond until it holds or d passes, and then fails with
// format and args. Pass a later for an arg that reports changing state.
func waitFor(t *testing.T, d time.Duration, cond func() bool, format string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf(format, args...)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// later is an arg of waitFor's message that is read when the message is
// formatted, so that it reports the state at the deadline, read as cond
// reads it (under its lock). An arg evaluated at the call is read once, at
// the start, and without the lock.
type later func() any

// Format formats what l returns with the verb and flags l was given.
func (l later) Format(s fmt.State, verb rune) { fmt.Fprintf(s, fmt.FormatString(s, verb), l()) }
