package keys

import (
	"strconv"
	"strings"
	"testing"
)

func TestSlot(t *testing.T) {
	// Values from the Redis Cluster specification and CLUSTER KEYSLOT.
	for key, want := range map[string]int{"foo": 12182, "somekey": 11058, "{user1000}.following": Slot("user1000"), "123456789": 0x31C3 & 16383, "a{}b": Slot("a{}b")} {
		if got := Slot(key); got != want {
			t.Errorf("Slot(%q) = %d; want %d", key, got, want)
		}
	}
	if Slot("{}x") != int(crc16("{}x")&16383) {
		t.Errorf("an empty tag hashes the whole key")
	}
}

func TestShardTag(t *testing.T) {
	for _, name := range []string{"q", "orders", "a.b-c_d", "ünïcode"} {
		seen := map[string]bool{}
		for i := 1; i < 64; i++ {
			tag := ShardTag(name, i)
			if !strings.HasPrefix(tag, name+":"+strconv.Itoa(i)+":") || seen[tag] {
				t.Fatalf("ShardTag(%q, %d) = %q", name, i, tag)
			}
			seen[tag] = true
			if tag != ShardTag(name, i) {
				t.Fatalf("ShardTag(%q, %d) is not stable", name, i)
			}
			n, j, ok := ParseShardTag(tag)
			if !ok || n != name || j != i {
				t.Fatalf("ParseShardTag(%q) = %q %d %v", tag, n, j, ok)
			}
			if Check(KindQueue, tag) == nil {
				t.Fatalf("shard tag %q is a valid queue name: a queue could collide with it", tag)
			}
		}
		// 12 shards: one in each twelfth of the slot space after shard 0.
		s0 := Slot(name)
		got := map[int]bool{}
		for i := 1; i < 12; i++ {
			off := (Slot(ShardTag(name, i)) - s0 + 16384) % 16384
			got[off*12/16384] = true
		}
		if len(got) != 11 || got[0] {
			t.Fatalf("queue %q: 11 shards in twelfths %v; want one in each of 1..11", name, got)
		}
	}
	for _, bad := range []string{"q", "q:1", "q:x:0", "q:0:0", "q:1:999999", "q:1024:0", "a b:1:0"} {
		if _, _, ok := ParseShardTag(bad); ok {
			t.Errorf("ParseShardTag(%q) ok", bad)
		}
	}
}

func TestQueueShardKeys(t *testing.T) {
	tagged, compat := New("p:", true), New("p:", false)
	if tagged.QueueShard("q", 0) != tagged.Queue("q") || compat.QueueShard("q", 5) != compat.Queue("q") {
		t.Fatal("shard 0, and any shard in compat, is the queue's own keys")
	}
	s := tagged.QueueShard("q", 3)
	want := "p:fleet:queue:{" + ShardTag("q", 3) + "}"
	if s.Pending != want || s.Dead != want+":dead" || s.Shard != 3 || s.Shards != "" {
		t.Fatalf("shard 3 = %+v", s)
	}
	if tagged.Queue("q").Shards != "p:fleet:queue:{q}:shards" {
		t.Fatalf("Shards = %q", tagged.Queue("q").Shards)
	}
	// Parse and Spell: a shard's keys and the shard count are of the
	// tagged layout only.
	for _, k := range []string{s.Pending, s.Processing, s.Body, s.Lease, s.Scheduled, s.Dead, s.Dedup, s.Policy, s.Call + "abc.", tagged.Queue("q").Shards} {
		p, ok := tagged.Parse(k)
		if !ok || p.Name != "q" {
			t.Fatalf("Parse(%q) = %+v, %v", k, p, ok)
		}
		if got, ok := tagged.Spell(p); !ok || got != k {
			t.Fatalf("Spell(%+v) = %q, %v; want %q", p, got, ok, k)
		}
		if p.Shard > 0 || p.Family == FamQueueShards {
			if _, ok := compat.Spell(p); ok {
				t.Fatalf("compat spells %+v", p)
			}
		}
	}
	for _, k := range []string{"p:fleet:queue:{q:3:0}:shards", "p:fleet:queue:{q:3:99999}", "p:fleet:queue:q:shards"} {
		if p, ok := tagged.Parse(k); ok && k != "p:fleet:queue:q:shards" {
			t.Fatalf("Parse(%q) = %+v", k, p)
		}
	}
	if _, ok := compat.Parse("p:fleet:queue:q:shards"); ok {
		t.Fatal("compat parses a shard count")
	}
}
