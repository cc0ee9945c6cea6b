package fleet

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/fleet-go/fleet/internal/costmeter"
	"github.com/fleet-go/fleet/internal/keys"
	"github.com/fleet-go/fleet/internal/redistest"
)

// keys.Slot and slotKey agree with Redis Cluster (CLUSTER KEYSLOT) and with
// rueidis' own slot of a key.
func TestSlotKey(t *testing.T) {
	t.Parallel()
	if got := keys.Slot("123456789"); got != 0x31C3 {
		t.Fatalf("keys.Slot(123456789) = %#x; want 0x31c3 (CRC-16/XMODEM)", got)
	}
	c := redistest.Client(t, redistest.Target{URL: redistest.ClusterURL(t), Cluster: true})
	for _, s := range []uint16{0, 1, 5461, 5462, 10922, 10923, 16383} {
		k := slotKey(s)
		got, err := c.Do(context.Background(), c.B().ClusterKeyslot().Key(k).Build()).AsInt64()
		if err != nil || got != int64(s) {
			t.Fatalf("CLUSTER KEYSLOT %s = %d, %v; want %d", k, got, err, s)
		}
		if cs := c.B().Get().Key(k).Build(); cs.Slot() != s {
			t.Fatalf("rueidis slot of %s = %d; want %d", k, cs.Slot(), s)
		}
	}
}

// waitCalls reads cmdstat_wait calls of every node of c.
func waitCalls(t *testing.T, c rueidis.Client) map[string]int {
	t.Helper()
	out := map[string]int{}
	for addr, n := range c.Nodes() {
		snap, err := costmeter.Read(context.Background(), n)
		if err != nil {
			t.Fatal(err)
		}
		out[addr] = int(snap.Calls["wait"])
	}
	return out
}

// On a cluster, WAIT goes to the node that took the write, in Do and in a
// DoMulti spanning slots (one WAIT per slot written, none for the reads).
// The cluster has no replicas: every write reports ErrNotDurable, 0 of 1.
func TestDurableClientPinsWaitToTheWritesNode(t *testing.T) {
	t.Parallel()
	raw := redistest.Client(t, redistest.Target{URL: redistest.ClusterURL(t), Cluster: true})
	d := newDurableClient(raw, 1, 10*time.Millisecond)
	prefix := redistest.Prefix(t, redistest.Target{URL: redistest.ClusterURL(t), Cluster: true})
	ctx := context.Background()
	owner := func(key string) string {
		for addr, n := range raw.Nodes() {
			r := n.Do(ctx, n.B().Exists().Key(key).Build())
			if err := r.Error(); err == nil {
				return addr
			}
		}
		t.Fatalf("no node owns %s", key)
		return ""
	}
	// Three keys on three different masters.
	var keys []string
	seen := map[string]bool{}
	for i := 0; len(keys) < 3; i++ {
		k := prefix + "{" + strconv.Itoa(i) + "}"
		if o := owner(k); !seen[o] {
			seen[o] = true
			keys = append(keys, k)
		}
	}
	for _, k := range keys {
		before := waitCalls(t, raw)
		err := d.Do(ctx, d.B().Set().Key(k).Value("v").Build()).Error()
		if !errors.Is(err, ErrNotDurable) || !strings.Contains(err.Error(), "0 of 1 replicas") {
			t.Fatalf("SET %s = %v; want ErrNotDurable, 0 of 1", k, err)
		}
		after := waitCalls(t, raw)
		for addr := range after {
			want := 0
			if addr == owner(k) {
				want = 1
			}
			if got := after[addr] - before[addr]; got != want {
				t.Fatalf("SET %s (on %s): %d WAIT on %s; want %d", k, owner(k), got, addr, want)
			}
		}
	}
	before := waitCalls(t, raw)
	rs := d.DoMulti(ctx,
		d.B().Set().Key(keys[0]).Value("w").Build(),
		d.B().Get().Key(keys[1]).Build(),
		d.B().Set().Key(keys[2]).Value("w").Build(),
		d.B().Set().Key(keys[2]+"x").Value("w").Build(), // same slot as keys[2]
	)
	if len(rs) != 4 {
		t.Fatalf("DoMulti returned %d results; want 4", len(rs))
	}
	for i, want := range []bool{true, false, true, true} {
		if err := rs[i].Error(); errors.Is(err, ErrNotDurable) != want {
			t.Fatalf("DoMulti result %d = %v; want ErrNotDurable %v", i, err, want)
		}
	}
	if v, err := rs[1].ToString(); err != nil || v != "v" {
		t.Fatalf("the GET in DoMulti = %q, %v; want v", v, err)
	}
	after := waitCalls(t, raw)
	for addr := range after {
		want := 0
		if addr == owner(keys[0]) || addr == owner(keys[2]) {
			want = 1
		}
		if got := after[addr] - before[addr]; got != want {
			t.Fatalf("DoMulti: %d WAIT on %s; want %d", got, addr, want)
		}
	}
	// Reads and WithMinReplicas(ctx, 0) send no WAIT.
	before = waitCalls(t, raw)
	if err := d.Do(WithMinReplicas(ctx, 0), d.B().Set().Key(keys[0]).Value("x").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if err := d.Do(ctx, d.B().Get().Key(keys[0]).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if err := d.Do(ctx, d.B().Time().Build()).Error(); err != nil {
		t.Fatal(err)
	}
	after = waitCalls(t, raw)
	for addr := range after {
		if got := after[addr] - before[addr]; got != 0 {
			t.Fatalf("%d WAIT on %s for reads and a write under WithMinReplicas(ctx, 0); want 0", got, addr)
		}
	}
}
