package taskbody

// Fuzz targets for the bodies fleet reads that another process wrote: each
// must give a clear error or a value that encodes back consistently, never
// a panic or a hang. CI runs each for a few seconds (.ci/fuzz); the seeds
// are real encodings. (FuzzParseDead, which reads a DeadEntry back through
// the root's parseDead, stays in the root's decode_fuzz_test.go.)

import (
	"encoding/json"
	"reflect"
	"testing"
)

func FuzzParseBody(f *testing.F) {
	for _, s := range []string{
		`{"id":"t1","payload":{"url":"https://example.org"},"attempts":0,"created_at":1764806400.123}`,
		`{"id":"t2","payload":1,"attempts":3,"error":"boom","priority":5,"group":"g","meta":{"k":"v"},"expires_at":1764806500.5,"max_attempts":4,"timeout":1500,"track":60000}`,
		`{"id":"","payload":null}`, `not json`, `{"id":7}`, `{"id":"x","attempts":-4}`, ``,
	} {
		f.Add(s)
	}
	f.Add(`{"id":"0199a0b6-7f3e-7cc1-9d2e-5b4c3a291807","payload":{"n":1,"attempts":0},"attempts":0}`)
	f.Add(`{"id":"u","payload":1,"attempts":5,"attempts":0}`)
	f.Add(`{"id":"s","payload":"fleet:sealed:1:k1:AbC-_09","attempts":0}`) // plainString's fast path
	f.Fuzz(func(t *testing.T, body string) {
		// The fast path reads what encoding/json reads, where it reads.
		if fast, ok := plain(body); ok {
			var slow Fields
			if err := json.Unmarshal([]byte(body), &slow); err != nil || !reflect.DeepEqual(fast, slow) {
				t.Fatalf("plain(%q) = %+v; encoding/json: %+v, %v", body, fast, slow, err)
			}
		}
		w, err := Parse(body)
		if err != nil {
			return
		}
		if w.ID == "" || w.Attempts < 0 {
			t.Fatalf("Parse(%q) = id %q attempts %d with no error", body, w.ID, w.Attempts)
		}
		// A rewrite keeps the id and sets what it was told to.
		next, err := Rewrite(body, map[string]any{"attempts": w.Attempts + 1, "error": "lease ran out"})
		if err != nil {
			t.Fatalf("Rewrite of a body Parse read: %v", err)
		}
		w2, err := Parse(next)
		if err != nil || w2.ID != w.ID || w2.Attempts != w.Attempts+1 {
			t.Fatalf("rewritten body %q reads %+v, %v; want id %q attempts %d", next, w2, err, w.ID, w.Attempts+1)
		}
	})
}
