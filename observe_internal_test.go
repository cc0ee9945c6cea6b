package fleet

import (
	"encoding/json"
	"maps"
	"testing"
)

// TestTraceField: the body field is what encoding/json would write, sorted
// keys and escapes included, and decodeTrace reads it back.
func TestTraceField(t *testing.T) {
	for _, tr := range []map[string]string{
		{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
		{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "tracestate": "k=v,l=w", "baggage": "a=<b>&c"},
		{"x": "quote \" back \\ nl \n é \u2028"},
	} {
		want, _ := json.Marshal(tr)
		got := traceField(tr)
		if got != `,"trace":`+string(want) {
			t.Fatalf("traceField(%q) = %s, want %s", tr, got, want)
		}
		if back := decodeTrace(json.RawMessage(got[len(`,"trace":`):])); !maps.Equal(back, tr) {
			t.Fatalf("decodeTrace: %q, want %q", back, tr)
		}
	}
	if traceField(nil) != "" || traceField(map[string]string{}) != "" {
		t.Fatal("an empty trace context writes a field")
	}
	// Spelled by other writers: white space, escapes, duplicate keys.
	for raw, want := range map[string]map[string]string{
		`{ "a" : "b" }`:     {"a": "b"},
		`{"a":"\u0041\n"}`:  {"a": "A\n"},
		`{"a":"b","a":"c"}`: {"a": "c"},
		`{"a":"é","b":"x"}`: {"a": "é", "b": "x"},
		`{"a":"b","c":"d"}`: {"a": "b", "c": "d"},
	} {
		if got := decodeTrace(json.RawMessage(raw)); !maps.Equal(got, want) {
			t.Fatalf("decodeTrace(%s) = %q, want %q", raw, got, want)
		}
	}
	for _, raw := range []string{``, `null`, `"00-x"`, `1`, `[]`, `{}`, `{"a":1}`, `{"a":"b"`, `{"a":"b",}`, `{"a""b"}`, `{"a":"b"}x`, `{"a":"b" "c":"d"}`} {
		if m := decodeTrace(json.RawMessage(raw)); m != nil {
			t.Fatalf("decodeTrace(%s) = %q", raw, m)
		}
	}
}
