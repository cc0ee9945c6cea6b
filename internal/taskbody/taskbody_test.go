package taskbody

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

const (
	id      = "0199a0b6-7f3e-7cc1-9d2e-5b4c3a291807"
	payload = `{"url":"https://example.org/?a=1&b=<2>"}`
	head    = `{"id":"` + id + `","payload":` + payload + `,"attempts":0`
)

// TestNew pins New's output byte for byte: the strings are what the root's
// newBody wrote before it moved here.
func TestNew(t *testing.T) {
	exp := time.Date(2026, 12, 4, 12, 0, 0, 123456789, time.UTC)
	for _, c := range []struct {
		name string
		o    Options
		want string
	}{
		{"none", Options{}, head + `}`},
		{"dedup", Options{DedupKey: "k1"}, head + `,"dedup":"k1"}`},
		{"dedup escaped", Options{DedupKey: "a\"b\\c<d>&e\u00e9\n"}, head + `,"dedup":"a\"b\\c\u003cd\u003e\u0026eé\n"}`},
		{"unique", Options{UniqueFor: 90 * time.Second}, head + `,"unique_ms":90000}`},
		{"unique sub-ms", Options{UniqueFor: 1500 * time.Microsecond}, head + `,"unique_ms":1}`},
		{"priority", Options{Priority: 7}, head + `,"priority":7}`},
		{"max attempts", Options{MaxAttempts: 3}, head + `,"max_attempts":3}`},
		{"timeout", Options{Timeout: 2500 * time.Millisecond}, head + `,"timeout_ms":2500}`},
		{"timeout under 1ms", Options{Timeout: 300 * time.Microsecond}, head + `,"timeout_ms":1}`},
		{"expires", Options{ExpiresAt: exp}, head + `,"expires_at":1796385600.123}`},
		{"metadata", Options{Metadata: map[string]string{"z": "1", "a": "x<y>", "m\u00e9": "q\"\\"}}, head + `,"meta":{"a":"x\u003cy\u003e","mé":"q\"\\","z":"1"}}`},
		{"group", Options{Group: "acme"}, head + `,"group":"acme"}`},
		{"all", Options{DedupKey: "k", UniqueFor: time.Minute, Priority: 9, MaxAttempts: 4, Timeout: time.Second, ExpiresAt: exp, Metadata: map[string]string{"k": "v"}, Group: "g1"},
			head + `,"dedup":"k","unique_ms":60000,"priority":9,"max_attempts":4,"timeout_ms":1000,"expires_at":1796385600.123,"meta":{"k":"v"},"group":"g1"}`},
		{"negatives left out", Options{UniqueFor: -1, Priority: -1, MaxAttempts: -1, Timeout: -1, Metadata: map[string]string{}}, head + `}`},
	} {
		got := New(id, []byte(payload), c.o)
		if got != c.want {
			t.Errorf("%s: New =\n%s\nwant\n%s", c.name, got, c.want)
		}
		if !json.Valid([]byte(got)) {
			t.Errorf("%s: New wrote invalid JSON %s", c.name, got)
		}
	}
}

func TestWithTrack(t *testing.T) {
	for _, c := range []struct{ body, want string }{
		{New(id, []byte("1"), Options{}), `{"id":"` + id + `","payload":1,"attempts":0,"track":86400000}`},
		{New(id, []byte("1"), Options{Group: "g"}), `{"id":"` + id + `","payload":1,"attempts":0,"group":"g","track":1}`},
	} {
		ms := int64(86400000)
		if strings.Contains(c.body, "group") {
			ms = 1
		}
		if got := WithTrack(c.body, ms); got != c.want {
			t.Errorf("WithTrack(%s, %d) = %s, want %s", c.body, ms, got, c.want)
		}
		if w, err := Parse(WithTrack(c.body, ms)); err != nil || w.Track != ms {
			t.Errorf("WithTrack(%s, %d) reads back as %+v, %v", c.body, ms, w, err)
		}
	}
}

func TestParse(t *testing.T) {
	for _, c := range []struct {
		name, body string
		want       Fields
		plain      bool // read on the fast path
		err        string
	}{
		{"plain", New(id, []byte(payload), Options{}), Fields{ID: id, Payload: json.RawMessage(payload)}, true, ""},
		{"plain scalar", `{"id":"t1","payload":7,"attempts":0}`, Fields{ID: "t1", Payload: json.RawMessage(`7`)}, true, ""},
		{"every field", `{"id":"t2","payload":1,"attempts":3,"error":"boom","priority":5,"group":"g","meta":{"k":"v"},"expires_at":1764806500.5,"max_attempts":4,"timeout_ms":1500,"track":60000,"dedup":"d","unique_ms":9,"trace":{"traceparent":"00-ab"}}`,
			Fields{ID: "t2", Payload: json.RawMessage(`1`), Attempts: 3, Dedup: "d", UniqueMS: 9, Trace: json.RawMessage(`{"traceparent":"00-ab"}`),
				Priority: 5, MaxAttempts: 4, TimeoutMS: 1500, ExpiresAt: 1764806500.5, Meta: map[string]string{"k": "v"}, Group: "g", Track: 60000}, false, ""},
		{"options", New("t3", []byte(`[1]`), Options{DedupKey: "d", Priority: 2}), Fields{ID: "t3", Payload: json.RawMessage(`[1]`), Dedup: "d", Priority: 2}, false, ""},
		{"escaped id", `{"id":"a\u0062","payload":1,"attempts":0}`, Fields{ID: "ab", Payload: json.RawMessage(`1`)}, false, ""},
		{"spaced payload", `{"id":"t4","payload": 1 ,"attempts":0}`, Fields{ID: "t4", Payload: json.RawMessage(`1`)}, false, ""},
		{"payload with attempts inside", `{"id":"t5","payload":{"n":1,"attempts":0},"attempts":0}`, Fields{ID: "t5", Payload: json.RawMessage(`{"n":1,"attempts":0}`)}, true, ""},
		{"last attempts wins", `{"id":"u","payload":1,"attempts":5,"attempts":0}`, Fields{ID: "u", Payload: json.RawMessage(`1`)}, false, ""},
		{"negative attempts", `{"id":"x","attempts":-4}`, Fields{ID: "x"}, false, ""},
		{"no id", `{"id":"","payload":null}`, Fields{}, false, "body has no usable id"},
		{"empty object", `{}`, Fields{}, false, "body has no usable id"},
		{"id not a string", `{"id":7}`, Fields{}, false, "body is not a task: "},
		{"not json", `not json`, Fields{}, false, "body is not a task: "},
		{"empty", ``, Fields{}, false, "body is not a task: "},
	} {
		if _, ok := plain(c.body); ok != c.plain {
			t.Errorf("%s: plain(%s) reports %v, want %v", c.name, c.body, ok, c.plain)
		}
		got, err := Parse(c.body)
		if c.err != "" {
			if err == nil || !strings.HasPrefix(err.Error(), c.err) {
				t.Errorf("%s: Parse(%s) error %v, want one starting %q", c.name, c.body, err, c.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: Parse(%s) =\n%+v, %v\nwant\n%+v", c.name, c.body, got, err, c.want)
		}
	}
}

func TestRewrite(t *testing.T) {
	for _, c := range []struct {
		name, body string
		set        map[string]any
		want       string
	}{
		{"keeps unknown fields and payload bytes",
			`{"id":"t1","payload":{"z":1,"a":[1,2],"h":"<&>"},"attempts":2,"x_other":{"k":"v"},"error":"old","dead_at":5}`,
			map[string]any{"attempts": 3, "error": "lease ran out <now>", "dead_at": nil, "new": []int{1}},
			`{"attempts":3,"error":"lease ran out \u003cnow\u003e","id":"t1","new":[1],"payload":{"z":1,"a":[1,2],"h":"<&>"},"x_other":{"k":"v"}}`},
		{"compacts white space", `{"id":"t1", "payload": {"z": 1, "a": [1, 2 ]}}`, map[string]any{"attempts": 1},
			`{"attempts":1,"id":"t1","payload":{"z":1,"a":[1,2]}}`},
		{"deletes", New("t2", []byte("1"), Options{Group: "g"}), map[string]any{"group": nil, "missing": nil},
			`{"attempts":0,"id":"t2","payload":1}`},
		{"nothing to set", `{"b":1,"a":2}`, nil, `{"a":2,"b":1}`},
	} {
		got, err := Rewrite(c.body, c.set)
		if err != nil || got != c.want {
			t.Errorf("%s: Rewrite(%s) =\n%s, %v\nwant\n%s", c.name, c.body, got, err, c.want)
		}
	}
	for _, body := range []string{`not json`, `[1]`, `"s"`, ``, `null`, ` null `} {
		if got, err := Rewrite(body, map[string]any{"attempts": 1}); err == nil {
			t.Errorf("Rewrite(%q) = %s with no error", body, got)
		}
	}
	if got, err := Rewrite(`{"id":"t"}`, map[string]any{"bad": func() {}}); err == nil {
		t.Errorf("Rewrite with a value that does not encode = %s with no error", got)
	}
}

func TestDeadEntry(t *testing.T) {
	for _, c := range []struct {
		name, body string
		attempts   int
		cause      string
		want       string
	}{
		{"task", `{"id":"t1","payload":{"z":1,"h":"<&>"},"attempts":2,"x_other":{"k":"v"},"error":"old","dead_at":5}`, 4, "boom",
			`{"attempts":4,"error":"boom","id":"t1","payload":{"z":1,"h":"<&>"},"x_other":{"k":"v"}}`},
		{"plain task", New("t9", []byte("null"), Options{}), 10, "lease ran out on the last attempt",
			`{"attempts":10,"error":"lease ran out on the last attempt","id":"t9","payload":null}`},
		{"poison: not JSON", `not json`, 1, "payload does not decode", `{"body":"not json","error":"payload does not decode"}`},
		{"poison: not an object", `[1,2]`, 1, "x", `{"body":"[1,2]","error":"x"}`},
		{"poison: empty", ``, 2, "y<z>", `{"body":"","error":"y\u003cz\u003e"}`},
		{"poison: null", `null`, 1, "x", `{"body":"null","error":"x"}`},
		// An empty object is no task, but gets attempts and error set
		// like one: the wrapper is only for what Rewrite refuses.
		{"empty object", `{}`, 1, "x<y>", `{"attempts":1,"error":"x\u003cy\u003e"}`},
	} {
		if got := DeadEntry(c.body, c.attempts, c.cause); got != c.want {
			t.Errorf("%s: DeadEntry(%q, %d, %q) =\n%s\nwant\n%s", c.name, c.body, c.attempts, c.cause, got, c.want)
		}
	}
}

func TestWriteJSONString(t *testing.T) {
	for _, s := range []string{"", "plain ascii 0-9", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", `q"b\`, "<&>", "\u00e9\u2028\x00\x7f", "\xff"} {
		var b strings.Builder
		WriteJSONString(&b, s)
		want, _ := json.Marshal(s)
		if b.String() != string(want) {
			t.Errorf("WriteJSONString(%q) = %s, want encoding/json's %s", s, b.String(), want)
		}
	}
}
