package script

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/redis/rueidis"

	"github.com/fleet-go/fleet/fleettest"
)

// TestExecMulti: ExecMulti runs a pipeline of EVALSHA routed by slot,
// on a single node and on a three-master cluster of the test's own. A
// server that never saw the script (or flushed it) answers NOSCRIPT, and
// those runs go again through Exec: EVALSHA, and the script's text (EVAL)
// where the node still lacks it, which teaches it the script, so once per
// node; once the nodes know it, a call is EVALSHA alone. No call sends SCRIPT LOAD, which rueidis's own
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
			c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: addrs, DisableCache: true})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
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
			round := func(want int64) map[string]int64 {
				t.Helper()
				before := calls()
				for i, r := range echo.ExecMulti(ctx, c, execs...) {
					got, err := r.AsStrSlice()
					if err != nil || len(got) != 2 || got[0] != execs[i].Keys[0] || got[1] != execs[i].Args[0] {
						t.Fatalf("run %d: %q, %v", i, got, err)
					}
				}
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
			// and goes again by Exec, whose first on each node goes on by
			// EVAL (EVAL_RO). The ten keys fall on every master.
			nodes := int64(len(c.Nodes()))
			if d := round(1); d["evalsha"] != 20 || d["eval"] != nodes || d["evalsha_ro"] != 20 || d["eval_ro"] != nodes || d["script|load"] != 0 {
				t.Fatalf("first calls: %v; want 20 EVALSHA and EVALSHA_RO (10 NOSCRIPT), %d EVAL and EVAL_RO, no SCRIPT LOAD", d, nodes)
			}
			// Now they know them: EVALSHA alone.
			if d := round(2); d["evalsha"] != 10 || d["eval"] != 0 || d["evalsha_ro"] != 10 || d["eval_ro"] != 0 || d["script|load"] != 0 {
				t.Fatalf("later calls: %v; want 10 EVALSHA and 10 EVALSHA_RO alone", d)
			}
			// A flush (as a restart): the text again, for those runs only.
			for _, n := range c.Nodes() {
				if err := n.Do(ctx, n.B().ScriptFlush().Build()).Error(); err != nil {
					t.Fatal(err)
				}
			}
			if d := round(3); d["evalsha"] != 20 || d["eval"] != nodes || d["evalsha_ro"] != 20 || d["eval_ro"] != nodes || d["script|load"] != 0 {
				t.Fatalf("calls after SCRIPT FLUSH: %v; want those of the first calls", d)
			}
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
		})
	}
}
