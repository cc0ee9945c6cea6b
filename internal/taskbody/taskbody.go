// Package taskbody spells and reads a task's body: the JSON object a queue
// keeps in Redis for each task (docs/SCHEMA.md), {"id":"<id>","payload":
// <json>,"attempts":0} plus the optional fields of its per-task options,
// "track", "trace", and on a retry or in the dead letters "error" and
// "dead_at". It writes that shape (New, WithTrack, Rewrite, DeadEntry) and
// reads it (Parse); only "trace" is still spelled outside, by the root's
// observe_trace.go (with WriteJSONString), and spliced in before the
// closing brace as WithTrack does, and "dead_at" by the scripts.
//
// It knows no fleet type: a body is a string, and the options it carries
// are an Options.
package taskbody

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Fields is the part of a body that fleet reads.
type Fields struct {
	ID       string          `json:"id"`
	Payload  json.RawMessage `json:"payload"`
	Attempts int             `json:"attempts"`
	Dedup    string          `json:"dedup"`
	UniqueMS int64           `json:"unique_ms"`
	Trace    json.RawMessage `json:"trace"` // the submit's trace context (the root's observe.go)
	// The per-task options (Options; docs/SCHEMA.md).
	Priority    int               `json:"priority"`
	MaxAttempts int               `json:"max_attempts"`
	Backoff     string            `json:"backoff"` // the root's ParseBackoff form
	TimeoutMS   int64             `json:"timeout_ms"`
	ExpiresAt   float64           `json:"expires_at"` // unix s
	Meta        map[string]string `json:"meta"`
	Group       string            `json:"group"`
	Track       int64             `json:"track"` // a tracked task: how long its end stays recorded (ms; WithTrack)
	// DebounceMS and DebounceMaxMS are the debounce the task was
	// submitted with (Options.Debounce): its window and max wait (ms).
	DebounceMS    int64 `json:"debounce_ms"`
	DebounceMaxMS int64 `json:"debounce_max_ms"`
	// Indexed is the body's "mx": the suffixes of the metadata index keys
	// its submit added it to (QueueOptions.IndexMeta), which its ack
	// removes it from.
	Indexed []string `json:"mx"`
	// Logged is the body's "lg": 1 when the task has a log (the root's
	// log.go), written while a reservation held it (queue_log.lua sets it).
	Logged int `json:"lg"`
}

// Options are the per-task options a body carries (the root's
// SubmitOptions, less those that only steer the submit). A zero field is
// left out of the body.
type Options struct {
	// DedupKey is written as "dedup".
	DedupKey string
	// UniqueFor is written as "unique_ms" (ms).
	UniqueFor time.Duration
	// Priority is written as "priority".
	Priority int
	// MaxAttempts is written as "max_attempts".
	MaxAttempts int
	// Backoff is written as "backoff": the root's Backoff as its
	// ParseBackoff reads it ("fixed:30s").
	Backoff string
	// Timeout is written as "timeout_ms" (ms, at least 1).
	Timeout time.Duration
	// ExpiresAt is written as "expires_at" (unix s, to the millisecond).
	ExpiresAt time.Time
	// Metadata is written as "meta", its keys sorted.
	Metadata map[string]string
	// Group is written as "group".
	Group string
	// Debounce and DebounceMaxWait are written as "debounce_ms" and
	// "debounce_max_ms" (ms) when Debounce is set: the root's
	// SubmitOptions.Debounce, for the operators' tools to show.
	Debounce, DebounceMaxWait time.Duration
	// Indexed is written as "mx": the suffixes (after the queue's
	// :meta:) of the metadata index keys the task is added to, each
	// "<key>:<canon>" (internal/keys MetaSuffix), which need no escaping.
	Indexed []string
}

// New spells a task body: {"id":...,"payload":...,"attempts":0}, plus
// the fields of o that are set: "dedup", "unique_ms", "priority",
// "max_attempts", "backoff", "timeout_ms", "expires_at" (unix s), "meta", "group",
// "debounce_ms", "debounce_max_ms" and "mx" (docs/SCHEMA.md). A body of no options is the documented one. payload
// must be one JSON value; id a UUID or other text that needs no escaping.
func New(id string, payload []byte, o Options) string {
	var b strings.Builder
	b.Grow(len(payload) + len(id) + len(o.DedupKey) + 48)
	b.WriteString(`{"id":`)
	b.WriteString(strconv.Quote(id)) // a UUID: no byte needs JSON escaping
	b.WriteString(`,"payload":`)
	b.Write(payload)
	b.WriteString(`,"attempts":0`)
	str := func(name, v string) {
		b.WriteString(`,"` + name + `":`)
		WriteJSONString(&b, v)
	}
	num := func(name string, v int64) {
		b.WriteString(`,"` + name + `":`)
		b.WriteString(strconv.FormatInt(v, 10))
	}
	if o.DedupKey != "" {
		str("dedup", o.DedupKey)
	}
	if o.UniqueFor > 0 {
		num("unique_ms", o.UniqueFor.Milliseconds())
	}
	if o.Priority > 0 {
		num("priority", int64(o.Priority))
	}
	if o.MaxAttempts > 0 {
		num("max_attempts", int64(o.MaxAttempts))
	}
	if o.Backoff != "" {
		str("backoff", o.Backoff)
	}
	if o.Timeout > 0 {
		num("timeout_ms", max(o.Timeout.Milliseconds(), 1))
	}
	if !o.ExpiresAt.IsZero() {
		// unix seconds with milliseconds, the unit of the queue's scores
		b.WriteString(`,"expires_at":`)
		b.WriteString(strconv.FormatFloat(float64(o.ExpiresAt.UnixMilli())/1000, 'f', 3, 64))
	}
	if len(o.Metadata) > 0 {
		b.WriteString(`,"meta":{`)
		for i, k := range slices.Sorted(maps.Keys(o.Metadata)) {
			if i > 0 {
				b.WriteByte(',')
			}
			WriteJSONString(&b, k)
			b.WriteByte(':')
			WriteJSONString(&b, o.Metadata[k])
		}
		b.WriteByte('}')
	}
	if o.Group != "" {
		str("group", o.Group)
	}
	if o.Debounce > 0 {
		num("debounce_ms", o.Debounce.Milliseconds())
		num("debounce_max_ms", o.DebounceMaxWait.Milliseconds())
	}
	if len(o.Indexed) > 0 {
		b.WriteString(`,"mx":[`)
		for i, x := range o.Indexed {
			if i > 0 {
				b.WriteByte(',')
			}
			WriteJSONString(&b, x)
		}
		b.WriteByte(']')
	}
	b.WriteByte('}')
	return b.String()
}

// WithTrack returns body with "track": ms, the field that makes a task
// tracked (docs/SCHEMA.md), before its closing brace. body must be one
// that New spelled.
func WithTrack(body string, ms int64) string {
	return body[:len(body)-1] + `,"track":` + strconv.FormatInt(ms, 10) + "}"
}

// WriteJSONString writes s as a JSON string: as it is when it is printable
// ASCII without quotes or backslashes (a traceparent always is), else as
// encoding/json spells it.
func WriteJSONString(b *strings.Builder, s string) {
	if htmlSafeASCII(s) {
		b.WriteByte('"')
		b.WriteString(s)
		b.WriteByte('"')
		return
	}
	q, _ := json.Marshal(s) // a string always encodes
	b.Write(q)
}

// htmlSafeASCII reports whether s needs no escaping in a JSON string, nor
// any in encoding/json's HTML-safe form.
func htmlSafeASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}

// Parse reads a body: the shape New writes for a task without options on
// a fast path (plain), any other through encoding/json. A body that is not
// a JSON object, or has no id, is an error; a negative "attempts" reads
// as 0.
func Parse(body string) (Fields, error) {
	if w, ok := plain(body); ok {
		return w, nil
	}
	var w Fields
	if err := json.Unmarshal([]byte(body), &w); err != nil {
		return w, fmt.Errorf("body is not a task: %w", err)
	}
	if w.ID == "" {
		return w, errors.New("body has no usable id")
	}
	if w.Attempts < 0 {
		w.Attempts = 0
	}
	return w, nil
}

// plain reads a body in the exact shape that New writes for a task
// without options, {"id":"<id>","payload":<json>,"attempts":0}, without
// encoding/json's reflection: most bodies of a busy queue are such. It
// reports false for anything else (another shape, an id that JSON would
// unescape or re-encode, a payload that is not one valid JSON value with
// nothing around it), which Parse then reads the slow way; where it says
// true, encoding/json reads the same (FuzzParseBody checks).
func plain(body string) (Fields, bool) {
	const head, mid, tail = `{"id":"`, `","payload":`, `,"attempts":0}`
	if len(body) < len(head)+len(mid)+len(tail)+2 || !strings.HasPrefix(body, head) || !strings.HasSuffix(body, tail) {
		return Fields{}, false
	}
	rest := body[len(head) : len(body)-len(tail)]
	end := strings.IndexByte(rest, '"')
	if end <= 0 || !strings.HasPrefix(rest[end:], mid) {
		return Fields{}, false
	}
	id := rest[:end]
	for i := range len(id) {
		if c := id[i]; c < 0x20 || c == '\\' || c >= utf8.RuneSelf {
			return Fields{}, false
		}
	}
	payload := rest[end+len(mid):]
	if payload == "" || isJSONSpace(payload[0]) || isJSONSpace(payload[len(payload)-1]) {
		return Fields{}, false
	}
	p := []byte(payload)
	if !plainString(payload) && !json.Valid(p) {
		return Fields{}, false
	}
	return Fields{ID: id, Payload: p}, true
}

// plainString reports whether s is a JSON string of letters, digits and
// ":._-" only, with no escape: valid JSON, told at a glance (one table
// load a byte, faster than encoding/json's scanner). A sealed payload (the
// root's seal.go) is one.
func plainString(s string) bool {
	if len(s) < 2 || s[0] != '"' || s[len(s)-1] != '"' {
		return false
	}
	for i := 1; i < len(s)-1; i++ {
		if !plainByte[s[i]] {
			return false
		}
	}
	return true
}

// plainByte says which bytes plainString accepts.
var plainByte = func() (t [256]bool) {
	for c := range 256 {
		t[c] = 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == ':' || c == '.' || c == '_' || c == '-'
	}
	return t
}()

func isJSONSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// Rewrite returns body with fields set (nil deletes one). Fields that
// fleet does not know are kept; the payload keeps its bytes (but for the
// white space between its tokens, which encoding/json compacts). The
// result's keys are sorted (encoding/json's map order); the fields kept
// are not HTML-escaped, the values of set are (json.Marshal). An error
// means body is not a JSON object (null included) or a value does not
// encode.
func Rewrite(body string, set map[string]any) (string, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(body), &m); err != nil {
		return "", err
	}
	if m == nil {
		return "", errors.New("body is null, not a JSON object")
	}
	for k, v := range set {
		if v == nil {
			delete(m, k)
			continue
		}
		b, err := json.Marshal(v)
		if err != nil {
			return "", err
		}
		m[k] = b
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(m); err != nil {
		return "", err
	}
	return strings.TrimSuffix(buf.String(), "\n"), nil
}

// DeadEntry is a body as it goes to the dead letters, but for "dead_at",
// which the script appends from the server's clock: the task's fields,
// attempts counted, plus "error".
func DeadEntry(body string, attempts int, cause string) string {
	s, err := Rewrite(body, map[string]any{"attempts": attempts, "error": cause, "dead_at": nil})
	if err != nil {
		// Not a JSON object: keep the raw body inside a wrapper, the shape
		// that queue_reserve.lua gives poison.
		b, _ := json.Marshal(map[string]any{"body": body, "error": cause})
		return string(b)
	}
	return s
}
