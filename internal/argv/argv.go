// Package argv spells values as fleet's scripts take them in ARGV:
// durations in whole milliseconds, booleans as "1" and "0", and the random
// tokens that leases and calls are known by. The root package and the
// engine both spell their arguments here, so that a script reads one
// spelling whoever calls it.
package argv

import (
	crand "crypto/rand"
	"encoding/base64"
	"strconv"
	"time"
)

// Millis spells d in whole milliseconds for Redis, rounding a positive d up
// so that a sub-millisecond TTL never turns into "no TTL".
func Millis(d time.Duration) string {
	ms := d.Milliseconds()
	if d > 0 && time.Duration(ms)*time.Millisecond < d {
		ms++
	}
	return strconv.FormatInt(ms, 10)
}

// Bool spells b as the scripts read a flag: "1" or "0".
func Bool(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// Token returns a random token of 24 URL-safe characters (144 bits).
func Token() string {
	var b [18]byte
	_, _ = crand.Read(b[:]) // crypto/rand.Read never fails
	return base64.RawURLEncoding.EncodeToString(b[:])
}
