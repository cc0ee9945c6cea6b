package costmeter_test

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/fleet-go/fleet/fleettest"
	"github.com/fleet-go/fleet/internal/costmeter"
)

const info = "# Commandstats\r\n" +
	"cmdstat_evalsha:calls=3,usec=40,usec_per_call=13.33,rejected_calls=0,failed_calls=0\r\n" +
	"cmdstat_get:calls=10,usec=5,usec_per_call=0.50,rejected_calls=0,failed_calls=0\r\n" +
	"cmdstat_client|tracking:calls=1,usec=1,usec_per_call=1.00,rejected_calls=0,failed_calls=0\r\n" +
	"cmdstat_info:calls=7,usec=70,usec_per_call=10.00,rejected_calls=0,failed_calls=0\r\n" +
	"\r\n# CPU\r\nused_cpu_sys:1.250000\r\nused_cpu_user:0.500000\r\n" +
	"used_cpu_sys_children:9.000000\r\nused_cpu_user_children:9.000000\r\n"

func TestParse(t *testing.T) {
	s, err := costmeter.Parse(info)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"evalsha": 3, "get": 10, "client|tracking": 1, "info": 7}
	if len(s.Calls) != len(want) {
		t.Fatalf("calls %v, want %v", s.Calls, want)
	}
	for k, v := range want {
		if s.Calls[k] != v {
			t.Fatalf("calls %v, want %v", s.Calls, want)
		}
	}
	if s.CPU != 1750*time.Millisecond {
		t.Fatalf("cpu %v, want 1.75s (children left out)", s.CPU)
	}
	if _, err := costmeter.Parse("# CPU\r\nused_cpu_sys:1.0\r\n"); err == nil {
		t.Fatal("no used_cpu_user: want an error")
	}
}

func TestSince(t *testing.T) {
	prev, err := costmeter.Parse(info)
	if err != nil {
		t.Fatal(err)
	}
	next, err := costmeter.Parse(strings.NewReplacer(
		"evalsha:calls=3", "evalsha:calls=5",
		"get:calls=10", "get:calls=16",
		"info:calls=7", "info:calls=9",
		"used_cpu_user:0.500000", "used_cpu_user:0.500300",
	).Replace(info) + "cmdstat_del:calls=2,usec=1\r\n")
	if err != nil {
		t.Fatal(err)
	}
	c := next.Since(prev)
	if c.Commands() != 2+6+2 || c.Scripts() != 2 || c.CPU != 300*time.Microsecond {
		t.Fatalf("got %d commands, %d scripts, cpu %v; want 10, 2, 300µs", c.Commands(), c.Scripts(), c.CPU)
	}
	if got, want := c.Breakdown(2), "get=3.00 del=1.00 evalsha=1.00"; got != want {
		t.Fatalf("breakdown %q, want %q", got, want)
	}
}

func TestAdd(t *testing.T) {
	a := costmeter.Cost{Calls: map[string]int64{"get": 2, "evalsha": 1}, CPU: time.Millisecond}
	b := costmeter.Cost{Calls: map[string]int64{"get": 3, "del": 4}, CPU: 2 * time.Millisecond}
	sum := a.Add(b)
	if got, want := sum.Breakdown(1), "get=5.00 del=4.00 evalsha=1.00"; got != want || sum.CPU != 3*time.Millisecond {
		t.Fatalf("sum %q, cpu %v; want %q, 3ms", got, sum.CPU, want)
	}
	if a.Calls["get"] != 2 || len(a.Calls) != 2 {
		t.Fatalf("Add changed its receiver: %v", a.Calls)
	}
	if z := (costmeter.Cost{}).Add(costmeter.Cost{}); z.Commands() != 0 || z.CPU != 0 {
		t.Fatalf("zero sum: %+v", z)
	}
}

// TestMeter: on a real server, a script's commands count beside its EVALSHA,
// and the meter's own INFO calls do not count.
func TestMeter(t *testing.T) {
	ctx := context.Background()
	srv, err := fleettest.StartServer(ctx, fleettest.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	script := rueidis.NewLuaScript("redis.call('SET', KEYS[1], 'a'); return redis.call('GET', KEYS[1])")
	if err := script.Exec(ctx, c, []string{"k"}, nil).Error(); err != nil { // loads it
		t.Fatal(err)
	}
	m, err := costmeter.Start(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := script.Exec(ctx, c, []string{"k"}, nil).Error(); err != nil {
			t.Fatal(err)
		}
		if _, err := costmeter.Read(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Do(ctx, c.B().Del().Key("k").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	cost, err := m.Stop(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// rueidis may open a connection of its pool meanwhile: drop its handshake.
	maps.DeleteFunc(cost.Calls, func(name string, _ int64) bool {
		return name == "hello" || strings.HasPrefix(name, "client|")
	})
	if cost.Commands() != 10 || cost.Scripts() != 3 || cost.CPU <= 0 {
		t.Fatalf("got %d commands (%s), %d scripts, cpu %v; want 10, 3, > 0",
			cost.Commands(), cost.Breakdown(1), cost.Scripts(), cost.CPU)
	}
	if got, want := cost.Breakdown(1), "evalsha=3.00 get=3.00 set=3.00 del=1.00"; got != want {
		t.Fatalf("breakdown %q, want %q", got, want)
	}
}

// TestMonitor: Collect returns the commands since the last Collect, in
// order, a script's own commands marked lua.
func TestMonitor(t *testing.T) {
	ctx := context.Background()
	srv, err := fleettest.StartServer(ctx, fleettest.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	mon, err := costmeter.StartMonitor(ctx, srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer mon.Close()
	if err := c.Do(ctx, c.B().Ping().Build()).Error(); err != nil { // the client may connect lazily
		t.Fatal(err)
	}
	if _, err := mon.Collect(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Do(ctx, c.B().Set().Key("a").Value("1").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if err := c.Do(ctx, c.B().Eval().Script("return redis.call('GET', KEYS[1])").Numkeys(1).Key("a").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	lines, err := mon.Collect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// rueidis may open a connection of its pool here: drop its handshake.
	lines = slices.DeleteFunc(lines, func(l string) bool {
		return strings.Contains(l, `] "HELLO"`) || strings.Contains(l, `] "CLIENT"`)
	})
	if len(lines) != 3 || !strings.HasSuffix(lines[0], `"SET" "a" "1"`) ||
		!strings.Contains(lines[1], `"EVAL"`) || !strings.HasSuffix(lines[2], `[0 lua] "GET" "a"`) {
		t.Fatalf("got %q", lines)
	}
	lines, err = mon.Collect(ctx)
	if err != nil || len(lines) != 0 {
		t.Fatalf("second collect: %q, %v; want nothing", lines, err)
	}
}
