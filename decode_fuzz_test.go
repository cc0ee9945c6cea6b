package fleet

// Fuzz targets for what fleet reads that another process wrote: dead
// letters, pool items, stream members, lease entries, stored policies and
// schedule specs, and the URLs Open parses (task bodies have theirs in
// internal/taskbody). Each must give a clear error or a value that encodes
// back consistently, never a panic or a hang. They touch no server, so
// nothing stored can change. CI runs each for a few seconds (.ci/fuzz);
// the seeds are real encodings.

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/fleet-go/fleet/internal/taskbody"
)

func FuzzParseDead(f *testing.F) {
	f.Add(`{"id":"t1","payload":{"a":1},"attempts":3,"error":"boom","dead_at":1764806400.5}`, "cause")
	f.Add(`{"id":"t2","payload":2,"attempts":1}`, "")
	f.Add(`garbage`, "x")
	f.Fuzz(func(t *testing.T, raw, cause string) {
		d := parseDead(raw)
		if d.Raw != raw {
			t.Fatalf("parseDead kept Raw %q, want %q", d.Raw, raw)
		}
		// A body that is a task dead-letters with its id, attempts and cause.
		w, err := taskbody.Parse(raw)
		if err != nil || !utf8Valid(cause) {
			return
		}
		entry := taskbody.DeadEntry(raw, 3, cause)
		d = parseDead(entry)
		if d.ID != w.ID || d.Attempts != 3 || d.Error != cause {
			t.Fatalf("DeadEntry(%q) reads back as id %q attempts %d error %q", raw, d.ID, d.Attempts, d.Error)
		}
	})
}

func utf8Valid(s string) bool { return strings.ToValidUTF8(s, "\uFFFD") == s }

func FuzzDecodeItem(f *testing.F) {
	p := base64.StdEncoding.EncodeToString([]byte(`{"cookies":{"a":"b"},"user_agent":"py"}`))
	f.Add(`{"p":"` + p + `","t":{"site":"x"},"x":null}`)
	f.Add(`{"p":"` + p + `","t":{},"x":1764806400}`)
	f.Add(`{"p":"not base64!","t":{},"x":null}`)
	f.Add(`{"p":1,"t":[],"x":"y"}`)
	f.Add(`[]`)
	f.Fuzz(func(t *testing.T, raw string) {
		it, err := decodeItem[json.RawMessage, map[string]string]("id1", raw)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("an error with no message")
			}
			return
		}
		if it.ID != "id1" {
			t.Fatalf("ID %q", it.ID)
		}
		// What decoded encodes back to an entry that decodes the same.
		tb, err := json.Marshal(it.Tags)
		if err != nil {
			t.Fatal(err)
		}
		x := "null"
		if !it.ExpiresAt.IsZero() {
			x = "1"
		}
		again := `{"p":"` + base64.StdEncoding.EncodeToString(it.Payload) + `","t":` + string(tb) + `,"x":` + x + `}`
		it2, err := decodeItem[json.RawMessage, map[string]string]("id1", again)
		if err != nil || string(it2.Payload) != string(it.Payload) || len(it2.Tags) != len(it.Tags) {
			t.Fatalf("re-encoded %q decodes as %+v, %v", again, it2, err)
		}
	})
}

func FuzzStreamEntry(f *testing.F) {
	f.Add(`{"url":"https://example.org","n":1}`)
	f.Add(`{"id":"1764806400123-0","ts":1764806400.123,"data":{"n":2}}`)
	f.Add(`{"id":"","ts":1,"data":1}`)
	f.Add(`{"id":"a","data":1}`)
	f.Fuzz(func(t *testing.T, member string) {
		var e StreamEntry[map[string]any]
		if err := json.Unmarshal([]byte(member), &e); err != nil {
			return
		}
		b, err := json.Marshal(e)
		if err != nil {
			return // a value JSON cannot encode (a float it read as ±Inf cannot happen; NaN neither)
		}
		var e2 StreamEntry[map[string]any]
		if err := json.Unmarshal(b, &e2); err != nil {
			t.Fatalf("%q decoded, encoded as %q, which does not decode: %v", member, b, err)
		}
		if e2.ID != e.ID || len(e2.Data) != len(e.Data) {
			t.Fatalf("%q round trip: %+v then %+v", member, e, e2)
		}
	})
}

func FuzzLeaseEntry(f *testing.F) {
	f.Add("w1/AbC.0")
	f.Add("worker-7/tok.3 c")
	f.Add("")
	f.Add("/x c")
	f.Fuzz(func(t *testing.T, entry string) {
		tok, worker, canceled := parseLeaseEntry(entry)
		if strings.Contains(tok, " ") {
			t.Fatalf("token %q holds a space", tok)
		}
		if worker != "" && !strings.HasPrefix(tok, worker+"/") {
			t.Fatalf("worker %q is not the token's %q prefix", worker, tok)
		}
		if canceled != strings.HasSuffix(entry, " c") {
			t.Fatalf("canceled %v for %q", canceled, entry)
		}
	})
}

func FuzzStoredPolicy(f *testing.F) {
	o, _ := QueueOptions{MaxAttempts: 5, DeadMax: 100, Lease: time.Minute}.withDefaults()
	f.Add(o.policyJSON())
	f.Add(`{"max_attempts":-1}`)
	f.Add(`[]`)
	f.Fuzz(func(t *testing.T, raw string) {
		var p QueuePolicy
		if json.Unmarshal([]byte(raw), &p) != nil {
			return
		}
		if _, err := json.Marshal(p); err != nil {
			t.Fatalf("a policy that decoded does not encode: %v", err)
		}
	})
}

func FuzzParseSpec(f *testing.F) {
	for _, s := range []string{"every 100", "every 0", "every -5", "cron */5 * * * *", "cron 0 9 * * MON-FRI",
		"cron CRON_TZ=Europe/Paris 0 9 * * *", "cron @every 1s", "cron CRON_TZ=UTC @every 1s", "cron @hourly", "hourly", "cron 61 * * * *"} {
		f.Add(s)
	}
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, text string) {
		s := parseSpec(text)
		if err := s.check(); err != nil {
			if !errors.Is(err, ErrInvalidArgument) {
				t.Fatalf("parseSpec(%q): %v is not ErrInvalidArgument", text, err)
			}
			return
		}
		if again := parseSpec(s.String()); again.check() != nil || again.String() != s.String() {
			t.Fatalf("%q stored as %q reads back as %q (%v)", text, s.String(), again.String(), again.check())
		}
		if n := s.next(now); !n.IsZero() && !n.After(now) {
			t.Fatalf("%q: next tick %v is not after %v", text, n, now)
		}
		if l := s.latest(now); l.After(now) {
			t.Fatalf("%q: latest tick %v is after %v", text, l, now)
		}
	})
}

func FuzzOpenURL(f *testing.F) {
	for _, s := range []string{"redis://127.0.0.1:6379", "rediss://user:pw@h:6380/2", "redis://h1:7000?addr=h2:7001&addr=h3:7002",
		"redis-sentinel://s1:26379,s2:26379/mymaster", "redis-sentinel://u:p@s1/mymaster/3?sentinel_password=x",
		"rediss-sentinel://s1:26379/m", "redis-sentinel:///m", "redis://", "http://x", "redis://h:notaport", "::"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		o := Options{URL: raw}
		err := o.validate()
		var co rueidis.ClientOption
		if err == nil {
			co, err = o.clientOption()
		}
		if err != nil {
			if !errors.Is(err, ErrInvalidOptions) {
				t.Fatalf("URL %q: %v is not ErrInvalidOptions", raw, err)
			}
			return
		}
		if len(co.InitAddress) == 0 {
			t.Fatalf("URL %q accepted with no address", raw)
		}
	})
}

// FuzzWorkerConfig: a stored worker config (wkr:<type>:<id>:config, which
// UpdateConfig and other clients write) decodes into a config struct with
// its validate tags, or says why not; a merge patch over it (UpdateConfig's
// way) never panics and encodes.
func FuzzWorkerConfig(f *testing.F) {
	f.Add([]byte(`{"user_agent":"bot/1","limit":3}`), []byte(`{"limit":null}`))
	f.Add([]byte(`{"user_agent":""}`), []byte(`[]`))
	f.Add([]byte(`not json`), []byte(`{"a":{"b":1}}`))
	type config struct {
		UserAgent string `json:"user_agent" validate:"required"`
		Limit     int    `json:"limit" validate:"gte=0"`
	}
	f.Fuzz(func(t *testing.T, stored, patch []byte) {
		if c, err := decodeConfig[config](stored); err == nil && (c.UserAgent == "" || c.Limit < 0) {
			t.Fatalf("%q decoded into %+v past its validate tags", stored, c)
		}
		target, err := decodeJSON(stored)
		if err != nil {
			return
		}
		p, err := decodeJSON(patch)
		if err != nil {
			return
		}
		if _, err := encodeJSON(mergePatch(target, p)); err != nil {
			t.Fatalf("a merge of decoded JSON does not encode: %v", err)
		}
	})
}
