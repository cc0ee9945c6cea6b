package mono

import (
	"testing"
	"time"
)

// Now never goes back, and Time spells a reading as the time.Time it is:
// a reading a second ahead is a second from now.
func TestNowAndTime(t *testing.T) {
	a := Now()
	b := Now()
	if b < a {
		t.Fatalf("Now went back: %d then %d", a, b)
	}
	at := Time(Now() + int64(time.Second))
	if d := time.Until(at); d <= 900*time.Millisecond || d > time.Second {
		t.Fatalf("time.Until(Time(Now()+1s)) = %v; want about 1s", d)
	}
	if past := Time(Now() - int64(time.Second)); !past.Before(time.Now()) {
		t.Fatalf("Time(Now()-1s) = %v, not before now", past)
	}
}
