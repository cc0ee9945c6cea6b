package fleet_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/fleettest"
	"github.com/fleet-go/fleet/internal/redistest"
)

type harvestState struct {
	Site  string `json:"site"`
	Count int    `json:"count"`
}

func TestKVSetGet(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		kv := e.F.KV("warmup")
		c := ctx(t)
		if err := kv.Set(c, "raw", []byte{0, 1, 2, 0xff}, 0); err != nil {
			t.Fatal(err)
		}
		if err := kv.Set(c, "text", "hello", 0); err != nil {
			t.Fatal(err)
		}
		if err := kv.Set(c, "state", harvestState{Site: "x", Count: 3}, time.Minute); err != nil {
			t.Fatal(err)
		}
		if err := kv.Set(c, "last-harvest", 1712345678.5, 0); err != nil {
			t.Fatal(err)
		}
		// Stored as the schema says: raw bytes as they are, other values
		// (strings too) as JSON.
		want := map[string]string{
			"raw":          "\x00\x01\x02\xff",
			"text":         `"hello"`,
			"state":        `{"site":"x","count":3}`,
			"last-harvest": "1712345678.5",
		}
		for k, v := range want {
			if got, ok := e.get(t, e.Prefix+"fleet:kv:warmup:"+k); !ok || got != v {
				t.Errorf("stored %s = %q, %v; want %q", k, got, ok, v)
			}
		}
		if b, ok, err := kv.Get(c, "raw"); err != nil || !ok || string(b) != want["raw"] {
			t.Fatalf("Get raw = %q, %v, %v", b, ok, err)
		}
		if s, ok, err := kv.GetString(c, "text"); err != nil || !ok || s != "hello" {
			t.Fatalf("GetString = %q, %v, %v", s, ok, err)
		}
		st, ok, err := fleet.GetAs[harvestState](c, kv, "state")
		if err != nil || !ok || st != (harvestState{Site: "x", Count: 3}) {
			t.Fatalf("GetAs = %+v, %v, %v", st, ok, err)
		}
		ts, ok, err := fleet.GetAs[float64](c, kv, "last-harvest")
		if err != nil || !ok || ts != 1712345678.5 {
			t.Fatalf("GetAs float = %v, %v, %v", ts, ok, err)
		}
		if ttl, ok, err := kv.TTL(c, "state"); err != nil || !ok || ttl <= 50*time.Second || ttl > time.Minute {
			t.Fatalf("TTL = %v, %v, %v", ttl, ok, err)
		}
		if ttl, ok, err := kv.TTL(c, "text"); err != nil || !ok || ttl != 0 {
			t.Fatalf("TTL without expiry = %v, %v, %v", ttl, ok, err)
		}
		// Missing is a result, not an error.
		if b, ok, err := kv.Get(c, "missing"); err != nil || ok || b != nil {
			t.Fatalf("Get missing = %q, %v, %v", b, ok, err)
		}
		if v, ok, err := fleet.GetAs[harvestState](c, kv, "missing"); err != nil || ok || v != (harvestState{}) {
			t.Fatalf("GetAs missing = %+v, %v, %v", v, ok, err)
		}
		// Namespaces are separate.
		if _, ok, _ := e.F.KV("other").Get(c, "text"); ok {
			t.Fatal("namespace other sees warmup's key")
		}
		if ok, err := kv.Delete(c, "text"); !ok || err != nil {
			t.Fatalf("Delete = %v, %v", ok, err)
		}
		if ok, err := kv.Delete(c, "text"); ok || err != nil {
			t.Fatalf("second Delete = %v, %v", ok, err)
		}
		if _, ok, _ := kv.Get(c, "text"); ok {
			t.Fatal("deleted key still read")
		}
		got := e.keys(t)
		wantKeys := []string{e.Prefix + "fleet:kv:warmup:last-harvest", e.Prefix + "fleet:kv:warmup:raw", e.Prefix + "fleet:kv:warmup:state"}
		if !slices.Equal(got, wantKeys) {
			t.Fatalf("keys = %v, want %v", got, wantKeys)
		}
	})
}

func TestKVTTLExpires(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		kv := e.F.KV("short")
		c := ctx(t)
		if err := kv.Set(c, "k", "v", 50*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		if _, ok, _ := kv.Get(c, "k"); !ok {
			t.Fatal("value gone at once")
		}
		deadline := time.Now().Add(5 * time.Second)
		for {
			_, ok, err := kv.Get(c, "k")
			if err != nil {
				t.Fatal(err)
			}
			if !ok {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("cached value outlived its TTL")
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
}

// Strings round-trip with clients that JSON-encode every value, as the
// documented schema allows: a Go string is stored as a JSON string, a JSON
// string reads back without its quotes, and a raw value that is not JSON
// (an older fleet's, another client's) still reads back as it is.
func TestKVStringsRoundTripWithJSONClients(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		kv := e.F.KV("strs")
		c := ctx(t)
		key := func(k string) string { return e.Prefix + "fleet:kv:strs:" + k }
		odd := "a \"quoted\" back\\slash\n<é> & 日本"
		sets := map[string]any{
			"hello": "hello",
			"empty": "",
			"odd":   odd,
			"bytes": []byte("hello"),
			"json":  json.RawMessage(`{"a":1}`),
		}
		for k, v := range sets {
			if err := kv.Set(c, k, v, 0); err != nil {
				t.Fatalf("Set %s: %v", k, err)
			}
		}
		stored := map[string]string{"hello": `"hello"`, "empty": `""`, "bytes": "hello", "json": `{"a":1}`}
		for k, v := range stored {
			if got, ok := e.get(t, key(k)); !ok || got != v {
				t.Errorf("stored %s = %q, %v; want %q", k, got, ok, v)
			}
		}
		// What a JSON-decoding client reads of the odd string is the string.
		raw, _ := e.get(t, key("odd"))
		var decoded string
		if err := json.Unmarshal([]byte(raw), &decoded); err != nil || decoded != odd {
			t.Fatalf("stored odd %q decodes to %q, %v", raw, decoded, err)
		}
		if raw != `"a \"quoted\" back\\slash\n<é> & 日本"` {
			t.Errorf("stored odd = %s", raw)
		}
		// Another client's values: a JSON string, raw text (not JSON), text
		// that only looks quoted, and a JSON number.
		e.do(t, e.Raw.B().Set().Key(key("py")).Value(`"from \"python\""`).Build())
		e.do(t, e.Raw.B().Set().Key(key("legacy")).Value("plain text").Build())
		e.do(t, e.Raw.B().Set().Key(key("broken")).Value(`"a"b"`).Build())
		e.do(t, e.Raw.B().Set().Key(key("num")).Value(`42`).Build())
		asString := map[string]string{
			"hello": "hello", "empty": "", "odd": odd, "bytes": "hello", "json": `{"a":1}`,
			"py": `from "python"`, "legacy": "plain text", "broken": `"a"b"`, "num": "42",
		}
		for k, want := range asString {
			if got, ok, err := fleet.GetAs[string](c, kv, k); err != nil || !ok || got != want {
				t.Errorf("GetAs[string](%s) = %q, %v, %v; want %q", k, got, ok, err, want)
			}
			if got, ok, err := kv.GetString(c, k); err != nil || !ok || got != want {
				t.Errorf("GetString(%s) = %q, %v, %v; want %q", k, got, ok, err, want)
			}
		}
		// Get, GetAs[[]byte] and GetAs[json.RawMessage] give the bytes as stored.
		for k, want := range map[string]string{"hello": `"hello"`, "legacy": "plain text", "json": `{"a":1}`} {
			if got, ok, err := kv.Get(c, k); err != nil || !ok || string(got) != want {
				t.Errorf("Get(%s) = %q, %v, %v", k, got, ok, err)
			}
			if got, ok, err := fleet.GetAs[[]byte](c, kv, k); err != nil || !ok || string(got) != want {
				t.Errorf("GetAs[[]byte](%s) = %q, %v, %v", k, got, ok, err)
			}
			if got, ok, err := fleet.GetAs[json.RawMessage](c, kv, k); err != nil || !ok || string(got) != want {
				t.Errorf("GetAs[json.RawMessage](%s) = %q, %v, %v", k, got, ok, err)
			}
		}
		// Other types decode JSON; raw text is ErrDecode for them.
		if n, ok, err := fleet.GetAs[int](c, kv, "num"); err != nil || !ok || n != 42 {
			t.Errorf("GetAs[int](num) = %d, %v, %v", n, ok, err)
		}
		if _, ok, err := fleet.GetAs[int](c, kv, "legacy"); !errors.Is(err, fleet.ErrDecode) || ok {
			t.Errorf("GetAs[int](legacy) = %v, %v; want ErrDecode", ok, err)
		}
	})
}

// A write by another client reaches a reader that has the value cached.
func TestKVCachedReadSeesOtherWriters(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		other := openOn(t, tg, e.Prefix)
		c := ctx(t)
		reader, writer := e.F.KV("cfg"), other.KV("cfg")
		if err := writer.Set(c, "mode", "a", 0); err != nil {
			t.Fatal(err)
		}
		for range 3 { // the first read fills the cache, the next ones hit it
			if s, _, _ := reader.GetString(c, "mode"); s != "a" {
				t.Fatalf("read %q, want a", s)
			}
		}
		for i, v := range []string{"b", "c", "d"} {
			if err := writer.Set(c, "mode", v, 0); err != nil {
				t.Fatal(err)
			}
			waitFor(t, time.Second, func() bool { s, _, _ := reader.GetString(c, "mode"); return s == v }, "reader never saw write %d (%q)", i, v)
		}
		// A raw client's write (no fleet involved) invalidates too.
		e.do(t, e.Raw.B().Set().Key(e.Prefix+"fleet:kv:cfg:mode").Value("raw").Build())
		waitFor(t, time.Second, func() bool { s, _, _ := reader.GetString(c, "mode"); return s == "raw" }, "reader never saw the raw write")
		if _, err := writer.Delete(c, "mode"); err != nil {
			t.Fatal(err)
		}
		waitFor(t, time.Second, func() bool { _, ok, _ := reader.Get(c, "mode"); return !ok }, "reader never saw the delete")
	})
}

func TestKVWrongTypeChangesNothing(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		key := e.Prefix + "fleet:kv:ns:hash"
		e.do(t, e.Raw.B().Hset().Key(key).FieldValue().FieldValue("f", "v").Build())
		kv := e.F.KV("ns")
		c := ctx(t)
		if _, _, err := kv.Get(c, "hash"); !errors.Is(err, fleet.ErrWrongType) {
			t.Fatalf("Get on a hash: %v, want ErrWrongType", err)
		}
		if err := kv.Set(c, "hash", "x", 0); !errors.Is(err, fleet.ErrWrongType) {
			t.Fatalf("Set on a hash: %v, want ErrWrongType", err)
		}
		if v, _ := e.Raw.Do(c, e.Raw.B().Hget().Key(key).Field("f").Build()).ToString(); v != "v" {
			t.Fatalf("hash changed: f=%q", v)
		}
		// A value that does not decode into T.
		if err := kv.Set(c, "text", "not json", 0); err != nil {
			t.Fatal(err)
		}
		if _, _, err := fleet.GetAs[harvestState](c, kv, "text"); !errors.Is(err, fleet.ErrDecode) {
			t.Fatalf("GetAs of text: %v, want ErrDecode", err)
		}
		if err := kv.Set(c, "bad", make(chan int), 0); !errors.Is(err, fleet.ErrInvalidArgument) {
			t.Fatalf("Set of a channel: %v, want ErrInvalidArgument", err)
		}
		if err := kv.Set(c, "neg", "x", -time.Second); !errors.Is(err, fleet.ErrInvalidArgument) {
			t.Fatalf("Set with negative ttl: %v, want ErrInvalidArgument", err)
		}
		if _, ok := e.get(t, e.Prefix+"fleet:kv:ns:neg"); ok {
			t.Fatal("a refused Set wrote")
		}
		var raw json.RawMessage
		if raw, _, _ = fleet.GetAs[json.RawMessage](c, kv, "text"); string(raw) != `"not json"` {
			// json.RawMessage gets the stored bytes: the string as JSON.
			t.Fatalf("GetAs RawMessage = %q", raw)
		}
	})
}

// A read right after a write in the same process sees the write, though the
// write's invalidation of the cached value may not have arrived yet.
func TestKVReadYourWrites(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		kv := e.F.KV("ryw")
		c := ctx(t)
		for i := range 500 {
			want := strconv.Itoa(i)
			if err := kv.Set(c, "k", want, 0); err != nil {
				t.Fatal(err)
			}
			if got, _, err := kv.GetString(c, "k"); err != nil || got != want {
				t.Fatalf("write %d: read %q, %v", i, got, err)
			}
		}
		if _, err := kv.Delete(c, "k"); err != nil {
			t.Fatal(err)
		}
		if _, ok, err := kv.Get(c, "k"); ok || err != nil {
			t.Fatalf("read after delete: %v, %v", ok, err)
		}
	})
}

// getCalls counts the GETs that reached s (a cached read that misses sends
// its GET inside MULTI/EXEC; one that hits sends nothing).
func getCalls(t *testing.T, s *fleettest.Server) int64 {
	t.Helper()
	out, err := s.Cli(context.Background(), "INFO", "commandstats")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(out, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_get:calls="); ok {
			v, _, _ := strings.Cut(rest, ",")
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}

// A process that writes a key and then reads it again and again reads
// through the client-side cache: after the one read that fetches the new
// value, the reads cost no round trip (they used to skip the cache for a
// second after each own write). Each read still sees the last write.
func TestKVSetThenGetReadsThroughCache(t *testing.T) {
	s, f := ownServer(t, fleet.Options{})
	kv := f.KV("own")
	c := ctx(t)
	const rounds, reads = 50, 10
	if err := kv.Set(c, "k", "warm", 0); err != nil {
		t.Fatal(err)
	}
	if _, _, err := kv.GetString(c, "k"); err != nil {
		t.Fatal(err)
	}
	before := getCalls(t, s)
	for i := range rounds {
		want := strconv.Itoa(i)
		if err := kv.Set(c, "k", want, 0); err != nil {
			t.Fatal(err)
		}
		for j := range reads {
			if got, _, err := kv.GetString(c, "k"); err != nil || got != want {
				t.Fatalf("round %d read %d: %q, %v; want %q", i, j, got, err, want)
			}
		}
	}
	// One fetch per write, and one more when a read comes before the
	// write's invalidation: at most 2 of the 10 reads of a round.
	if n := getCalls(t, s) - before; n > 2*rounds {
		t.Fatalf("%d GETs reached the server for %d writes and %d reads; want <= %d", n, rounds, rounds*reads, 2*rounds)
	}
}

// A read right after a write by another process (another Fleet, another
// connection) sees the write once the server's invalidation has reached the
// reader, which takes well under a round trip; a second reader that had the
// value cached too sees it as well.
func TestKVReadAfterOtherProcessWrite(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		writer := openOn(t, tg, e.Prefix).KV("xp")
		reader := e.F.KV("xp")
		c := ctx(t)
		for i := range 100 {
			want := strconv.Itoa(i)
			if _, _, err := reader.GetString(c, "k"); err != nil { // cached, to be invalidated
				t.Fatal(err)
			}
			if err := writer.Set(c, "k", want, 0); err != nil {
				t.Fatal(err)
			}
			if got, _, _ := writer.GetString(c, "k"); got != want {
				t.Fatalf("write %d: the writer read %q", i, got)
			}
			waitFor(t, 100*time.Millisecond, func() bool { s, _, _ := reader.GetString(c, "k"); return s == want },
				"write %d: the reader never saw it", i)
		}
	})
}
