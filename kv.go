package fleet

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/redis/rueidis"

	"github.com/fleet-go/fleet/internal/keys"
	"github.com/fleet-go/fleet/internal/mono"
)

// KV is a namespace of named values with optional TTLs
// (fleet:kv:<ns>:<key>). Reads go through client-side caching: a repeated
// read costs no round trip, and a write by any client reaches the next read
// through the server's invalidation.
//
// What a cached read guarantees: it sees every write made through its own
// Fleet (read your writes); a write made elsewhere once the server's
// invalidation has reached this Fleet, which may lag the write's
// acknowledgement by its delivery time; and never a value that was
// overwritten more than Options.CacheTTL (2s by default) before the read,
// also while this Fleet's connection is stalled or partitioned. For a read
// that is linearizable with every write, make it under WithFreshReads.
// A KV is safe for concurrent use.
type KV struct {
	f    *Fleet
	ns   string
	base string // every key of the namespace: base + key
	err  error
}

// KV returns the namespace ns. A bad ns makes every call of the KV return
// ErrInvalidName.
func (f *Fleet) KV(ns string) *KV {
	return &KV{f: f, ns: ns, base: f.keys.KV(ns, ""), err: keys.Check(keys.KindNamespace, ns)}
}

func (kv *KV) key(ctx context.Context, key string) (string, error) {
	if kv.err != nil {
		return "", kv.err
	}
	if err := keys.Check(keys.KindKey, key); err != nil {
		return "", err
	}
	if err := kv.f.alive(ctx); err != nil {
		return "", err
	}
	return kv.base + key, nil
}

// encode turns a value into the bytes stored: []byte and json.RawMessage
// as they are, anything else as JSON, a string too (as a JSON string, so
// that a client that JSON-decodes every value reads it).
func encode(v any) ([]byte, error) {
	switch x := v.(type) {
	case []byte:
		return x, nil
	case json.RawMessage:
		return x, nil
	case string:
		return jsonString(x), nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("%w: cannot encode %T as JSON: %w", ErrInvalidArgument, v, err)
	}
	return b, nil
}

// jsonString spells s as a JSON string, without escaping '<', '>' and '&'
// (JSON clients read either spelling; this one is the shorter).
func jsonString(s string) []byte {
	if plainJSON(s) {
		b := make([]byte, 0, len(s)+2)
		return append(append(append(b, '"'), s...), '"')
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

// plainJSON reports whether s needs no escaping inside a JSON string: no
// quote, backslash, control character or invalid UTF-8.
func plainJSON(s string) bool {
	ascii := true
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20, c == '"', c == '\\':
			return false
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return ascii || utf8.ValidString(s)
}

// textOf reads a stored value as text: a JSON string gives its content
// (what Set stores for a Go string, and what JSON-speaking clients write);
// any other value, such as raw text written by an older fleet or by a
// client that does not speak JSON, gives its bytes unchanged.
func textOf(s string) string {
	if len(s) < 2 || s[0] != '"' || s[len(s)-1] != '"' {
		return s
	}
	if in := s[1 : len(s)-1]; plainJSON(in) {
		return in
	}
	var out string
	if json.Unmarshal([]byte(s), &out) != nil {
		return s
	}
	return out
}

// Set stores value under key: []byte and json.RawMessage as they are,
// anything else as JSON. A string is stored as a JSON string (Set of
// "hello" stores "\"hello\""), so that clients that JSON-decode every value,
// as the documented schema allows, read it; store text unquoted with
// []byte(s). A ttl of 0 keeps the value until deleted; a negative ttl is
// ErrInvalidArgument.
func (kv *KV) Set(ctx context.Context, key string, value any, ttl time.Duration) error {
	k, err := kv.key(ctx, key)
	if err != nil {
		return opErr("kv set", key, err)
	}
	if ttl < 0 {
		return opErr("kv set", key, fmt.Errorf("%w: ttl %v is negative", ErrInvalidArgument, ttl))
	}
	b, err := encode(value)
	if err != nil {
		return opErr("kv set", key, err)
	}
	return opErr("kv set", key, kv.f.setString(ctx, k, rueidis.BinaryString(b), ttl))
}

// setString sets a string key, refusing (ErrWrongType, nothing changed) to
// replace a key of another type, which a plain SET would do: SET with GET
// reads the old value first, and a key of another type fails that read
// before anything is written. One command, no script.
func (f *Fleet) setString(ctx context.Context, key, value string, ttl time.Duration) error {
	f.watch.WroteCached(key, mono.Now())
	c := f.client
	var cmd rueidis.Completed
	if ttl > 0 {
		cmd = c.B().Set().Key(key).Value(value).Get().PxMilliseconds(max(ttl.Milliseconds(), 1)).Build()
	} else {
		cmd = c.B().Set().Key(key).Value(value).Get().Build()
	}
	if err := c.Do(ctx, cmd).Error(); err != nil && !rueidis.IsRedisNil(err) {
		return err
	}
	return nil
}

// How KV reads its own writes through the client-side cache, never stale:
// the local cache can hold a key only if this process read it through the
// cache within the cache TTL. KV notes each such read (the watcher's
// ReadCached, internal/wake) before it is sent. A write to a key read
// lately marks it dirty, before the write is sent, until the server's
// invalidation of it arrives (WroteCached, Wrote). A read in between waits
// for the invalidation (settleFor at most), then goes through the cache;
// past the wait it goes to the server, since the local cache may still
// hold the old value. (Marked after the write, the invalidation could come
// first and leave the key dirty for a second.) A write to a key not read
// lately marks nothing, as no cached copy can be stale and no invalidation
// will come: the next read goes through the cache at once (a miss that
// fetches and caches the new value). So a set-then-get costs one fetch per
// write and cached reads after it; the one-second fallback of a dirty key
// only applies when a key read lately gets no invalidation (a cached read
// that raced the write on the server).

// settleFor bounds how long a read of a key that this process just wrote
// waits for the write's invalidation (it comes as the server runs the
// write, so within about a round trip) before it reads past the cache.
const settleFor = 2 * time.Millisecond

// Get returns the bytes stored under key, as they are (a string that Set
// stored reads back as its JSON, quotes included). A missing key is not an
// error: ok is false and err nil.
func (kv *KV) Get(ctx context.Context, key string) (value []byte, ok bool, err error) {
	s, ok, err := kv.get(ctx, key)
	if !ok {
		return nil, ok, err
	}
	return []byte(s), true, nil
}

// GetString returns the value under key as text: a value that is a JSON
// string (what Set stores for a Go string, and what a JSON-speaking client
// writes) gives its content, without the quotes; any other value gives its
// bytes as they are, so raw text written by an older fleet or by a client
// that does not speak JSON still reads back. A missing key is not an
// error: ok is false and err nil.
func (kv *KV) GetString(ctx context.Context, key string) (string, bool, error) {
	s, ok, err := kv.get(ctx, key)
	if !ok {
		return "", ok, err
	}
	return textOf(s), true, nil
}

type freshReadsKey struct{}

// WithFreshReads returns a ctx under which KV reads (Get, GetString,
// GetAs) skip the client-side cache and read the server's value, as a
// Fleet with Options.DisableCache does: such a read costs a round trip,
// and is linearizable with every write on a single Redis node (it returns
// the value of the last write acknowledged before it began, or of one
// concurrent with it).
func WithFreshReads(ctx context.Context) context.Context {
	freshCalls.Store(true)
	return context.WithValue(ctx, freshReadsKey{}, true)
}

// freshCalls says whether WithFreshReads was ever called in this process:
// until it is, no read looks for it in its ctx.
var freshCalls atomic.Bool

// freshRead says whether ctx asks for fresh reads.
func freshRead(ctx context.Context) bool {
	return freshCalls.Load() && ctx.Value(freshReadsKey{}) != nil
}

// get reads the stored text of key.
func (kv *KV) get(ctx context.Context, key string) (string, bool, error) {
	k, err := kv.key(ctx, key)
	if err != nil {
		return "", false, opErr("kv get", key, err)
	}
	c := kv.f.client
	var res rueidis.RedisResult
	w := kv.f.watch
	cached := kv.f.cache && !freshRead(ctx)
	if cached && w.Stale(k) {
		w.Settle(ctx, k, settleFor)
	}
	if cached && !w.Stale(k) {
		w.ReadCached(k, kv.f.cacheTTL, mono.Now())
		res = c.DoCache(ctx, c.B().Get().Key(k).Cache(), kv.f.cacheTTL)
	} else {
		res = c.Do(ctx, c.B().Get().Key(k).Build())
	}
	s, err := res.ToString()
	if rueidis.IsRedisNil(err) {
		return "", false, nil
	}
	if err != nil {
		return "", false, opErr("kv get", key, err)
	}
	return s, true, nil
}

// GetAs decodes the value under key into a T. A string T reads as
// GetString does (a JSON string's content, any other value as it is);
// []byte and json.RawMessage get the stored bytes as they are; any other T
// is decoded from JSON. A missing key gives ok false and no error; a value
// that does not decode gives ErrDecode.
func GetAs[T any](ctx context.Context, kv *KV, key string) (value T, ok bool, err error) {
	s, ok, err := kv.get(ctx, key)
	if err != nil || !ok {
		return value, ok, err
	}
	switch p := any(&value).(type) {
	case *string:
		*p = textOf(s)
	case *[]byte:
		*p = []byte(s)
	case *json.RawMessage:
		*p = json.RawMessage(s)
	default:
		if err := json.Unmarshal([]byte(s), &value); err != nil {
			return value, false, opErr("kv get", key, fmt.Errorf("%w: into %T: %w", ErrDecode, value, err))
		}
	}
	return value, true, nil
}

// Delete removes key and reports whether it existed.
func (kv *KV) Delete(ctx context.Context, key string) (bool, error) {
	k, err := kv.key(ctx, key)
	if err != nil {
		return false, opErr("kv delete", key, err)
	}
	kv.f.watch.WroteCached(k, mono.Now())
	n, err := kv.f.client.Do(ctx, kv.f.client.B().Del().Key(k).Build()).AsInt64()
	return n == 1, opErr("kv delete", key, err)
}

// TTL returns the time left on key: 0 for a key without expiry, and ok
// false for a missing key.
func (kv *KV) TTL(ctx context.Context, key string) (ttl time.Duration, ok bool, err error) {
	k, err := kv.key(ctx, key)
	if err != nil {
		return 0, false, opErr("kv ttl", key, err)
	}
	ms, err := kv.f.client.Do(ctx, kv.f.client.B().Pttl().Key(k).Build()).AsInt64()
	switch {
	case err != nil:
		return 0, false, opErr("kv ttl", key, err)
	case ms == -2:
		return 0, false, nil
	case ms == -1:
		return 0, true, nil
	}
	return time.Duration(ms) * time.Millisecond, true, nil
}

// Err returns the error every call of the KV would return for its name
// (ErrInvalidName), or nil.
func (kv *KV) Err() error { return kv.err }
