// Package keys is the only place that spells a Redis key of fleet, for both
// layouts.
//
// The compat layout spells the documented keys byte for byte (SCHEMA.md). The
// tagged layout puts a hash tag around the entity name of every key that a
// script touches together with others (a queue, a pool, a lock, a worker), so
// that each entity's keys share one Redis Cluster slot while different
// entities spread over the cluster. Keys that fleet adds beyond the documented
// ones are derived: they can be rebuilt from the documented keys, and each is
// listed in docs/SCHEMA.md.
//
// Every key starts with the Keys' prefix (empty by default).
package keys

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// ErrInvalidName is returned for a name that could steer another name's slot
// or collide with another name's keys.
var ErrInvalidName = errors.New("fleet: invalid name")

// MaxNameLen bounds every name, in bytes.
const MaxNameLen = 512

// Keys spells keys for one layout and prefix. The zero value is the compat
// layout with no prefix.
type Keys struct {
	prefix string
	tagged bool
}

// New returns the Keys of a layout.
func New(prefix string, tagged bool) Keys { return Keys{prefix: prefix, tagged: tagged} }

// Tagged reports whether this is the tagged layout.
func (k Keys) Tagged() bool { return k.tagged }

// Prefix returns the prefix before every key.
func (k Keys) Prefix() string { return k.prefix }

// tag wraps an entity name in a hash tag in the tagged layout.
func (k Keys) tag(name string) string {
	if k.tagged {
		return "{" + name + "}"
	}
	return name
}

// Kind names what a name is for, in errors.
type Kind string

// The kinds of names, and what each may hold. Segment kinds stand between
// other parts of a key, so they may not hold ':' either (compat keys would
// collide: queue "a:dead" against the dead letters of queue "a").
const (
	KindNamespace Kind = "kv namespace"  // segment
	KindKey       Kind = "kv key"        // last segment
	KindCounter   Kind = "counter name"  // last segment
	KindLock      Kind = "lock name"     // last segment
	KindQueue     Kind = "queue name"    // segment
	KindPool      Kind = "pool name"     // segment
	KindItem      Kind = "pool item id"  // last segment
	KindType      Kind = "type"          // segment, no '|'
	KindWorker    Kind = "worker id"     // segment, no '|'
	KindTopic     Kind = "event topic"   // last segment
	KindStream    Kind = "stream name"   // last segment
	KindField     Kind = "tag field"     // segment
	KindSchedule  Kind = "schedule name" // segment
	KindGroup     Kind = "group name"    // segment
	KindFlow      Kind = "flow id"       // segment
)

func (c Kind) segment() bool {
	switch c {
	case KindNamespace, KindQueue, KindPool, KindType, KindWorker, KindField, KindSchedule, KindGroup, KindFlow:
		return true
	}
	return false
}

// Check returns an error wrapping ErrInvalidName, naming the bad name, when
// name is empty, too long, not UTF-8, or holds '{', '}', white space or a
// control character; a segment kind may not hold ':', and types and worker
// ids may not hold '|'.
func Check(kind Kind, name string) error {
	bad := func(why string) error {
		return fmt.Errorf("%w: %s %q %s", ErrInvalidName, kind, name, why)
	}
	switch {
	case name == "":
		return fmt.Errorf("%w: %s is empty", ErrInvalidName, kind)
	case len(name) > MaxNameLen:
		return fmt.Errorf("%w: %s of %d bytes is longer than %d", ErrInvalidName, kind, len(name), MaxNameLen)
	}
	if asciiPlain(name, kind) {
		return nil // printable ASCII is valid UTF-8
	}
	if !utf8.ValidString(name) {
		return bad("is not valid UTF-8")
	}
	for _, r := range name {
		switch {
		case r == '{' || r == '}':
			return bad("holds a brace ('{' or '}')")
		case unicode.IsSpace(r):
			return bad("holds white space")
		case unicode.IsControl(r):
			return bad("holds a control character")
		case r == ':' && kind.segment():
			return bad("holds ':', which would make its keys collide with another name's")
		case r == '|' && (kind == KindType || kind == KindWorker):
			return bad("holds '|', the separator of wkrs:all")
		}
	}
	return nil
}

// asciiPlain is Check's fast path: true when name is printable ASCII with
// none of the characters kind forbids.
func asciiPlain(name string, kind Kind) bool {
	seg, bar := kind.segment(), kind == KindType || kind == KindWorker
	for i := 0; i < len(name); i++ {
		switch c := name[i]; {
		case c <= ' ' || c >= 0x7f || c == '{' || c == '}':
			return false
		case c == ':' && seg, c == '|' && bar:
			return false
		}
	}
	return true
}

// Join checks every name in turn and returns the first error.
func Join(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func (k Keys) join(parts ...string) string {
	return k.prefix + strings.Join(parts, ":")
}

// KV is fleet:kv:<ns>:<key> (string).
func (k Keys) KV(ns, key string) string { return k.prefix + "fleet:kv:" + ns + ":" + key }

// Counter is fleet:counter:<name> (string, integer).
func (k Keys) Counter(name string) string { return k.prefix + "fleet:counter:" + name }

// Lock is fleet:lock:<name> (string: the holder's token, TTL = hold).
func (k Keys) Lock(name string) string { return k.join("fleet", "lock", k.tag(name)) }

// LockFence is fleet:fence:<name> (string, integer; derived): the last
// fencing token handed out for lock name. Its slot is the lock's.
func (k Keys) LockFence(name string) string { return k.join("fleet", "fence", k.tag(name)) }

// LockTomb is fleet:locktomb:<name> (zset: token -> server time in ms until
// which it holds; derived): the tokens of acquires abandoned while their
// script was in flight, which that script must not take the lock for. Its
// slot is the lock's; its TTL is its last member's.
func (k Keys) LockTomb(name string) string { return k.join("fleet", "locktomb", k.tag(name)) }

// Catalog is fleet:catalog (hash: type -> JSON schemas).
func (k Keys) Catalog() string { return k.join("fleet", "catalog") }

// Meta is fleet:meta (hash: layout, schema; derived): the layout marker.
func (k Keys) Meta() string { return k.join("fleet", "meta") }

// Stream is stream:<type> (zset: score = unix time, member = JSON).
func (k Keys) Stream(typ string) string { return k.join("stream", typ) }

// Event is the pub/sub channel event:<topic>.
func (k Keys) Event(topic string) string { return k.join("event", topic) }
