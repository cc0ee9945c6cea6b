package fleet

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/fleet-go/fleet/internal/argv"
)

// Small helpers that many files share: durations and times as the scripts
// spell them, tokens, backoff, sets of names.

// millis and newToken spell script arguments (internal/argv).
var (
	millis   = argv.Millis
	newToken = argv.Token
)

// backoff is a capped exponential backoff with full jitter.
type backoff struct {
	min, max time.Duration
	n        int
}

func (b *backoff) next() time.Duration {
	d := b.min << min(b.n, 16)
	if d > b.max || d <= 0 {
		d = b.max
	}
	b.n++
	return d/2 + randDuration(d/2)
}

// randDuration returns a random duration in [0, d].
func randDuration(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return rand.N(d + 1)
}

// poke sends a wake-up on ch without blocking: with a buffer of one,
// wake-ups coalesce.
func poke(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// timeReply reads the reply of TIME as a time.
func timeReply(r rueidis.RedisResult) (time.Time, error) {
	t, err := r.AsStrSlice()
	if err != nil {
		return time.Time{}, err
	}
	if len(t) != 2 {
		return time.Time{}, errors.New("TIME: unexpected reply")
	}
	s, err1 := strconv.ParseInt(t[0], 10, 64)
	us, err2 := strconv.ParseInt(t[1], 10, 64)
	if err1 != nil || err2 != nil {
		return time.Time{}, fmt.Errorf("TIME: unexpected reply %q", t)
	}
	return time.Unix(s, us*1000), nil
}

// sortedKeys returns the keys of m, sorted.
func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// setOf returns names as a set.
func setOf(names []string) map[string]bool {
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[n] = true
	}
	return m
}

// isText reports whether s is valid UTF-8 without control characters.
func isText(s string) bool {
	return strings.ToValidUTF8(s, "\uFFFD") == s && strings.IndexFunc(s, func(r rune) bool { return r < ' ' || r == 0x7f }) < 0
}

// secondsString spells t as unix seconds with milliseconds, the unit of the
// :processing and :scheduled scores.
func secondsString(t time.Time) string {
	return strconv.FormatFloat(unixSeconds(t), 'f', 3, 64)
}

// unixSeconds is t in unix seconds, to the millisecond.
func unixSeconds(t time.Time) float64 { return float64(t.UnixMilli()) / 1000 }

// cmpErr keeps the first error of a series: first, else err.
func cmpErr(first, err error) error {
	if first == nil {
		return err
	}
	return first
}

// parseLeaseEntry reads an entry of a queue's :processing:lease hash (its
// reservation's token, then " c" when Queue.Cancel asked the running task
// to stop; docs/SCHEMA.md): the token, the worker whose name goes before
// the token's last '/' ("" for a raw Reserve), and whether it was asked
// to stop.
func parseLeaseEntry(entry string) (token, worker string, canceled bool) {
	token, _, _ = strings.Cut(entry, " ")
	if i := strings.LastIndexByte(token, '/'); i > 0 {
		worker = token[:i]
	}
	return token, worker, leaseCanceled(entry)
}

// leaseCanceled reports whether a lease entry says Queue.Cancel asked its
// task to stop.
func leaseCanceled(entry string) bool { return strings.HasSuffix(entry, " c") }
