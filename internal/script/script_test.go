package script

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"testing/fstest"
	"time"

	"github.com/redis/rueidis"

	"github.com/fleet-go/fleet/fleettest"
)

// TestExecMulti: ExecMulti runs a pipeline of EVALSHA routed by slot,
// on a single node and on a three-master cluster of the test's own. A
// server that never saw the script (or flushed it) answers NOSCRIPT, and
// those runs go again in a round per node, each one pipeline whose first
// run is the script's text (EVAL), which teaches its node the script;
// once the nodes know it, a call is EVALSHA alone, in one round trip. No call sends SCRIPT LOAD, which rueidis's own
// Lua.ExecMulti sends to every node first, on every call. A read-only
// script goes by EVALSHA_RO.
func TestExecMulti(t *testing.T) {
	l := NewLinker(fstest.MapFS{
		"lua/echo.lua": {Data: []byte("-- echo: KEYS[1] and ARGV[1] back, and a count in KEYS[1].\nredis.call('INCR', KEYS[1])\nreturn {KEYS[1], ARGV[1]}\n")},
		"lua/peek.lua": {Data: []byte("-- peek: KEYS[1]'s value.\nreturn redis.call('GET', KEYS[1])\n")},
	}, "lua", nil, nil)
	echo, peek := l.New("echo.lua"), l.New("peek.lua", ReadOnly)
	for _, cluster := range []bool{false, true} {
		t.Run(map[bool]string{false: "single", true: "cluster"}[cluster], func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			var addrs []string
			if cluster {
				c, err := fleettest.StartCluster(ctx, 3)
				if err != nil {
					t.Fatalf("a cluster of the test's own (redis-server on PATH: apt-get install -y redis-server): %v", err)
				}
				t.Cleanup(c.Stop)
				addrs = c.Addrs()
			} else {
				s, err := fleettest.StartServer(ctx, fleettest.Config{})
				if err != nil {
					t.Fatalf("a redis-server of the test's own (apt-get install -y redis-server): %v", err)
				}
				t.Cleanup(s.Stop)
				addrs = []string{s.Addr}
			}
			rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: addrs, DisableCache: true})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(rc.Close)
			c := &counting{Client: rc}
			// Ten keys, in slots all over the cluster.
			execs := make([]rueidis.LuaExec, 10)
			for i := range execs {
				execs[i] = rueidis.LuaExec{Keys: []string{fmt.Sprintf("k{%d}", i)}, Args: []string{strconv.Itoa(i)}}
			}
			calls := func() map[string]int64 {
				sum := map[string]int64{}
				for _, n := range c.Nodes() {
					info, err := n.Do(ctx, n.B().Info().Section("commandstats").Build()).ToString()
					if err != nil {
						t.Fatal(err)
					}
					for line := range strings.SplitSeq(info, "\n") {
						name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
						if !ok {
							continue
						}
						v, _, _ := strings.Cut(rest, ",")
						k, _ := strconv.ParseInt(v, 10, 64)
						sum[strings.TrimPrefix(name, "cmdstat_")] += k
					}
				}
				return sum
			}
			trips := 0 // round trips of the last round's echo calls
			round := func(want int64) map[string]int64 {
				t.Helper()
				before := calls()
				c.trips.Store(0)
				for i, r := range echo.ExecMulti(ctx, c, execs...) {
					got, err := r.AsStrSlice()
					if err != nil || len(got) != 2 || got[0] != execs[i].Keys[0] || got[1] != execs[i].Args[0] {
						t.Fatalf("run %d: %q, %v", i, got, err)
					}
				}
				trips = int(c.trips.Load())
				for i, r := range peek.ExecMulti(ctx, c, execs...) {
					if n, err := r.AsInt64(); err != nil || n != want {
						t.Fatalf("peek %d: %d, %v; want %d", i, n, err, want)
					}
				}
				after := calls()
				d := map[string]int64{}
				for k, v := range after {
					if v != before[k] {
						d[k] = v - before[k]
					}
				}
				return d
			}
			// The nodes never saw the scripts: each run is answered NOSCRIPT
			// and they go again in rounds, a pipeline each: the first by EVAL
			// (EVAL_RO), which teaches its node, the rest by EVALSHA after it.
			// The ten keys fall on every master: a round per node, so 1 +
			// nodes round trips, against 1 + 10 + nodes one run at a time.
			nodes := int64(len(c.Nodes()))
			taught := func(what string, d map[string]int64) {
				t.Helper()
				if d["evalsha"] < 20-nodes || d["eval"] != nodes || d["evalsha_ro"] < 20-nodes || d["eval_ro"] != nodes || d["script|load"] != 0 || trips != 1+int(nodes) {
					t.Fatalf("%s: %v in %d round trips; want at least %d EVALSHA and EVALSHA_RO (10 NOSCRIPT), %d EVAL and EVAL_RO, no SCRIPT LOAD, %d round trips", what, d, trips, 20-nodes, nodes, 1+nodes)
				}
				t.Logf("%s: 10 runs on %d nodes that lack the script: %d round trips (one at a time: %d)", what, nodes, trips, 1+10+nodes)
			}
			taught("first calls", round(1))
			// Now they know them: EVALSHA alone, in one round trip.
			if d := round(2); d["evalsha"] != 10 || d["eval"] != 0 || d["evalsha_ro"] != 10 || d["eval_ro"] != 0 || d["script|load"] != 0 || trips != 1 {
				t.Fatalf("later calls: %v in %d round trips; want 10 EVALSHA and 10 EVALSHA_RO alone, one round trip", d, trips)
			}
			// A flush (as a restart): the text again, for those runs only.
			flush := func() {
				for _, n := range c.Nodes() {
					if err := n.Do(ctx, n.B().ScriptFlush().Build()).Error(); err != nil {
						t.Fatal(err)
					}
				}
			}
			flush()
			taught("calls after SCRIPT FLUSH", round(3))
			// A single run: one EVALSHA, no pipeline.
			before := calls()
			one := echo.ExecMulti(ctx, c, execs[0])
			if got, err := one[0].AsStrSlice(); len(one) != 1 || err != nil || len(got) != 2 || got[1] != "0" {
				t.Fatalf("a single run: %v", one)
			}
			if after := calls(); after["evalsha"]-before["evalsha"] != 1 || after["eval"] != before["eval"] {
				t.Fatalf("a single run sent %d EVALSHA and %d EVAL; want one EVALSHA", after["evalsha"]-before["evalsha"], after["eval"]-before["eval"])
			}
			if got := echo.ExecMulti(ctx, c); got != nil {
				t.Fatalf("no runs: %v", got)
			}
			// A ctx that ends after the first pipeline of a flushed server:
			// the runs answered NOSCRIPT (all of them) get the ctx's error
			// and did not run: the counts stay 3 (4 for the single run's key).
			flush()
			cctx, ccancel := context.WithCancel(ctx)
			c.afterMulti = ccancel
			res := echo.ExecMulti(cctx, c, execs...)
			c.afterMulti = nil
			for i, r := range res {
				if !errors.Is(r.Error(), context.Canceled) {
					t.Fatalf("run %d after its ctx ended: %v, want context.Canceled", i, r.Error())
				}
			}
			for i, r := range peek.ExecMulti(ctx, c, execs...) {
				want := int64(3)
				if i == 0 {
					want = 4
				}
				if n, err := r.AsInt64(); err != nil || n != want {
					t.Fatalf("peek %d after the ended calls: %d, %v; want %d (not run)", i, n, err, want)
				}
			}
		})
	}
}

// counting is a client that counts its round trips (Do and DoMulti) and
// calls afterMulti, when set, after each DoMulti.
type counting struct {
	rueidis.Client
	trips      atomic.Int64
	afterMulti func()
}

func (c *counting) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	c.trips.Add(1)
	return c.Client.Do(ctx, cmd)
}

func (c *counting) DoMulti(ctx context.Context, cmds ...rueidis.Completed) []rueidis.RedisResult {
	c.trips.Add(1)
	res := c.Client.DoMulti(ctx, cmds...)
	if c.afterMulti != nil {
		c.afterMulti()
	}
	return res
}
