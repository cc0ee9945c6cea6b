package keys

import "testing"

// FuzzTranslate: a key that Translate re-spells in the other layout (and
// another prefix) translates back to itself, and one it refuses is
// refused both ways without a panic.
func FuzzTranslate(f *testing.F) {
	for _, s := range []string{"fleet:kv:ns:a:b", "fleet:lock:job", "fleet:lock:{job}", "fleet:queue:q:processing:body",
		"fleet:queue:{q}:processing:lease", "fleet:queue:{q:3:17}:dead", "fleet:pool:p:tag:site:x", "wkr:t:i:state",
		"wkrs:all", "fleet:stream:s", "fleet:queue:{q}:call:w/abc.", "fleet:", "", "{", "fleet:kv::"} {
		f.Add(s, false)
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, key string, tagged bool) {
		from, to := New("a:", tagged), New("b:", !tagged)
		out, ok := from.Translate("a:"+key, to)
		if !ok {
			return
		}
		back, ok := to.Translate(out, from)
		if !ok || back != "a:"+key {
			t.Fatalf("%q -> %q -> %q (%v)", "a:"+key, out, back, ok)
		}
	})
}
