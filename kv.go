package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/rueidis"

	"github.com/fleet-go/fleet/internal/keys"
)

// KV is a namespace of named values with optional TTLs
// (fleet:kv:<ns>:<key>). Reads go through client-side caching: a repeated
// read costs no round trip, and a write by any client reaches the next read
// through the server's invalidation. A KV is safe for concurrent use.
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

// encode turns a value into the bytes stored: []byte, string and
// json.RawMessage as they are, anything else as JSON.
func encode(v any) ([]byte, error) {
	switch x := v.(type) {
	case []byte:
		return x, nil
	case string:
		return []byte(x), nil
	case json.RawMessage:
		return x, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("%w: cannot encode %T as JSON: %w", ErrInvalidArgument, v, err)
	}
	return b, nil
}

// Set stores value under key: []byte, string and json.RawMessage as they
// are, anything else as JSON. A ttl of 0 keeps the value until deleted; a
// negative ttl is ErrInvalidArgument.
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

var setStringScript = script("set_string.lua")

// setString sets a string key, refusing (ErrWrongType, nothing changed) to
// replace a key of another type, as a plain SET would.
func (f *Fleet) setString(ctx context.Context, key, value string, ttl time.Duration) error {
	defer f.watch.wrote(key)
	return setStringScript.Exec(ctx, f.client, []string{key}, []string{value, millis(ttl)}).Error()
}

// Get returns the bytes stored under key. A missing key is not an error:
// ok is false and err nil.
func (kv *KV) Get(ctx context.Context, key string) (value []byte, ok bool, err error) {
	s, ok, err := kv.GetString(ctx, key)
	if !ok {
		return nil, ok, err
	}
	return []byte(s), true, nil
}

// GetString is Get for text; it saves Get's copy into a []byte.
func (kv *KV) GetString(ctx context.Context, key string) (string, bool, error) {
	k, err := kv.key(ctx, key)
	if err != nil {
		return "", false, opErr("kv get", key, err)
	}
	c := kv.f.client
	var res rueidis.RedisResult
	if kv.f.cache && !kv.f.watch.stale(k) {
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

// GetAs decodes the value under key into a T: JSON for most types, the raw
// bytes for string and []byte. A missing key gives ok false and no error;
// a value that does not decode gives ErrDecode.
func GetAs[T any](ctx context.Context, kv *KV, key string) (value T, ok bool, err error) {
	s, ok, err := kv.GetString(ctx, key)
	if err != nil || !ok {
		return value, ok, err
	}
	switch p := any(&value).(type) {
	case *string:
		*p = s
	case *[]byte:
		*p = []byte(s)
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
	n, err := kv.f.client.Do(ctx, kv.f.client.B().Del().Key(k).Build()).AsInt64()
	kv.f.watch.wrote(k)
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

// millis spells d in whole milliseconds for Redis, rounding a positive d up
// so that a sub-millisecond TTL never turns into "no TTL".
func millis(d time.Duration) string {
	ms := d.Milliseconds()
	if d > 0 && time.Duration(ms)*time.Millisecond < d {
		ms++
	}
	return strconv.FormatInt(ms, 10)
}

// Err returns the error every call of the KV would return for its name
// (ErrInvalidName), or nil.
func (kv *KV) Err() error { return kv.err }
