package argv

import (
	"testing"
	"time"
)

// Millis rounds a positive duration up, so that a TTL under a millisecond
// is never "0" (no TTL); zero and negative durations spell as they are.
func TestMillis(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want string
	}{
		{0, "0"}, {time.Nanosecond, "1"}, {time.Millisecond, "1"}, {1500 * time.Microsecond, "2"},
		{time.Second, "1000"}, {-time.Millisecond, "-1"}, {-1500 * time.Microsecond, "-1"},
	} {
		if got := Millis(c.d); got != c.want {
			t.Errorf("Millis(%v) = %q, want %q", c.d, got, c.want)
		}
	}
}

func TestBool(t *testing.T) {
	if Bool(true) != "1" || Bool(false) != "0" {
		t.Errorf("Bool(true), Bool(false) = %q, %q, want \"1\", \"0\"", Bool(true), Bool(false))
	}
}

// Tokens are 24 URL-safe characters, and two are never equal.
func TestToken(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		tok := Token()
		if len(tok) != 24 {
			t.Fatalf("Token() = %q, %d characters, want 24", tok, len(tok))
		}
		for _, c := range tok {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				t.Fatalf("Token() = %q holds %q", tok, c)
			}
		}
		if seen[tok] {
			t.Fatalf("Token() returned %q twice", tok)
		}
		seen[tok] = true
	}
}
