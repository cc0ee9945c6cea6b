// Package redistest gives tests a real Redis: a single node and a
// three-master Redis Cluster, started once per test binary and stopped at its
// end, plus helpers that isolate each test's keys and read back what a test
// left in Redis.
//
// Where the servers come from, in order:
//   - FLEET_REDIS_URL (a single node) and FLEET_REDIS_CLUSTER_URL (a cluster,
//     seeds as redis://host:port?addr=host2:port2), when set;
//   - redis-server and redis-cli from PATH, on free ports;
//   - for the single node only, a container through testcontainers-go's redis
//     module, where Docker works.
//
// When none works, the test fails and says how to get a server.
package redistest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"go.uber.org/goleak"

	"github.com/fleet-go/fleet/fleettest"
)

const howTo = "install redis-server (apt-get install -y redis-server), or set FLEET_REDIS_URL (and FLEET_REDIS_CLUSTER_URL) to servers the tests may write to"

// Target is one Redis a test body runs on, with the key layout to use there.
type Target struct {
	// Name is "single-compat", "single-tagged" or "cluster-tagged".
	Name string
	// URL connects to the target: redis://host:port, with addr= for more
	// cluster seeds.
	URL string
	// Cluster is true on the Redis Cluster.
	Cluster bool
	// Tagged is true for the tagged key layout.
	Tagged bool
}

type lazy struct {
	once sync.Once
	url  string
	err  error
	stop func()
}

var (
	single, cluster lazy
	stopMu          sync.Mutex
	stops           []func()
)

func (l *lazy) get(start func(ctx context.Context) (string, func(), error)) (string, error) {
	l.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		l.url, l.stop, l.err = start(ctx)
		if l.stop != nil {
			stopMu.Lock()
			stops = append(stops, l.stop)
			stopMu.Unlock()
		}
	})
	return l.url, l.err
}

// Main runs the tests, stops every server this package started, and fails
// the run if a goroutine outlived its test (goleak). Call it from TestMain.
func Main(m *testing.M) {
	code := m.Run()
	Shutdown()
	if code == 0 {
		if err := goleak.Find(
			goleak.IgnoreTopFunction("github.com/testcontainers/testcontainers-go.(*Reaper).connect.func1"),
			// rueidis closes the connections a cluster refresh replaced after
			// a fixed 5 s sleep, in a goroutine of its own; it ends by itself.
			goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*clusterClient)._refresh.func2"),
			// and runs a delayed cluster refresh (under a second) the same way.
			goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*call).DelayDo.func1"),
		); err != nil {
			fmt.Fprintf(os.Stderr, "goroutines outlived the tests: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// Shutdown stops every server this package started.
func Shutdown() {
	stopMu.Lock()
	defer stopMu.Unlock()
	for _, stop := range stops {
		stop()
	}
	stops = nil
}

// SingleURL returns the URL of the single node, starting it on first use.
func SingleURL(tb testing.TB) string {
	tb.Helper()
	url, err := single.get(startSingle)
	if err != nil {
		tb.Fatalf("redistest: no single Redis node: %v\n%s", err, howTo)
	}
	return url
}

// SingleURLOrErr is SingleURL for code without a testing.TB, such as
// Example functions.
func SingleURLOrErr() (string, error) { return single.get(startSingle) }

// DeletePrefix deletes every key under prefix, for code without a
// testing.TB.
func DeletePrefix(url, prefix string) {
	opt, err := rueidis.ParseURL(url)
	if err != nil {
		return
	}
	opt.DisableCache = true
	c, err := rueidis.NewClient(opt)
	if err != nil {
		return
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, k := range scan(ctx, c, prefix) {
		c.Do(ctx, c.B().Del().Key(k).Build())
	}
}

// ClusterURL returns the URL (seeds) of the three-master cluster, starting
// it on first use.
func ClusterURL(tb testing.TB) string {
	tb.Helper()
	url, err := cluster.get(startCluster)
	if err != nil {
		tb.Fatalf("redistest: no Redis Cluster: %v\n%s", err, howTo)
	}
	return url
}

func startSingle(ctx context.Context) (string, func(), error) {
	r, err := fleettest.Start(ctx) // FLEET_REDIS_URL, PATH, then Docker
	if err != nil {
		return "", nil, err
	}
	return r.URL(), r.Close, nil
}

func startCluster(ctx context.Context) (string, func(), error) {
	if url := os.Getenv("FLEET_REDIS_CLUSTER_URL"); url != "" {
		return url, nil, nil
	}
	if err := fleettest.Available(); err != nil {
		return "", nil, fmt.Errorf("the cluster needs redis-server and redis-cli on PATH: %w", err)
	}
	c, err := fleettest.StartCluster(ctx, 3)
	if err != nil {
		return "", nil, err
	}
	addrs := c.Addrs()
	url := "redis://" + addrs[0]
	for i, a := range addrs[1:] {
		if i == 0 {
			url += "?addr=" + a
		} else {
			url += "&addr=" + a
		}
	}
	return url, c.Stop, nil
}

// Targets returns the three targets every primitive's tests run on: single
// node compat, single node tagged, cluster tagged.
func Targets(tb testing.TB) []Target {
	tb.Helper()
	s := SingleURL(tb)
	c := ClusterURL(tb)
	return []Target{
		{Name: "single-compat", URL: s},
		{Name: "single-tagged", URL: s, Tagged: true},
		{Name: "cluster-tagged", URL: c, Cluster: true, Tagged: true},
	}
}

// Each runs fn as a subtest on each of the three targets.
func Each(t *testing.T, fn func(t *testing.T, tg Target)) {
	t.Helper()
	for _, tg := range Targets(t) {
		t.Run(tg.Name, func(t *testing.T) { fn(t, tg) })
	}
}

// EachSingle runs fn as a subtest on the two single-node targets: for a
// test that puts a proxy (fleettest.Proxy) in front of its server, which
// a cluster's redirects would go past.
func EachSingle(t *testing.T, fn func(t *testing.T, tg Target)) {
	t.Helper()
	for _, tg := range Targets(t) {
		if !tg.Cluster {
			t.Run(tg.Name, func(t *testing.T) { fn(t, tg) })
		}
	}
}

// EachTagged runs fn as a subtest on the two targets of the tagged
// layout: for what only that layout has (a queue's shards).
func EachTagged(t *testing.T, fn func(t *testing.T, tg Target)) {
	t.Helper()
	for _, tg := range Targets(t) {
		if tg.Tagged {
			t.Run(tg.Name, func(t *testing.T) { fn(t, tg) })
		}
	}
}

// Client returns a plain rueidis client (no caching) on the target, closed
// when the test ends: for arranging and asserting what is in Redis.
func Client(tb testing.TB, tg Target) rueidis.Client {
	tb.Helper()
	opt, err := rueidis.ParseURL(tg.URL)
	if err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	opt.DisableCache = true
	c, err := rueidis.NewClient(opt)
	if err != nil {
		tb.Fatalf("redistest: connect %s: %v\n%s", tg.URL, err, howTo)
	}
	tb.Cleanup(c.Close)
	return c
}

// Prefix returns a key prefix no other test uses, and deletes every key
// under it when the test ends, so tests can run in parallel on one server.
func Prefix(tb testing.TB, tg Target) string {
	tb.Helper()
	var b [5]byte
	_, _ = rand.Read(b[:])
	prefix := "ft" + hex.EncodeToString(b[:]) + ":"
	c := Client(tb, tg)
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, k := range scan(ctx, c, prefix) {
			c.Do(ctx, c.B().Del().Key(k).Build())
		}
	})
	return prefix
}

// Keys returns every key under prefix on the target, sorted.
func Keys(tb testing.TB, c rueidis.Client, prefix string) []string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return scan(ctx, c, prefix)
}

func scan(ctx context.Context, c rueidis.Client, prefix string) []string {
	var out []string
	for _, n := range c.Nodes() {
		var cursor uint64
		for {
			e, err := n.Do(ctx, n.B().Scan().Cursor(cursor).Match(prefix+"*").Count(1000).Build()).AsScanEntry()
			if err != nil {
				break
			}
			out = append(out, e.Elements...)
			if cursor = e.Cursor; cursor == 0 {
				break
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
