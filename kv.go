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

// setString sets a string key, refusing (ErrWrongType, nothing changed) to
// replace a key of another type, which a plain SET would do: SET with GET
// reads the old value first, and a key of another type fails that read
// before anything is written. One command, no script.
func (f *Fleet) setString(ctx context.Context, key, value string, ttl time.Duration) error {
	f.watch.wroteCached(key)
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
// cache within the cache TTL. KV notes each such read (readCached) before
// it is sent. A write to a key read lately marks it dirty, before the write
// is sent, until the server's invalidation of it arrives (watcher.wrote).
// A read in between waits for the invalidation (settleFor at most), then
// goes through the cache; past the wait it goes to the server, since the
// local cache may still hold the old value. (Marked after the write, the
// invalidation could come first and leave the key dirty for a second.) A
// write to a key not read lately marks nothing, as no cached copy can be
// stale and no invalidation will come: the next read goes through the
// cache at once (a miss that fetches and caches the new value). So a
// set-then-get costs one fetch per write and cached reads after it; the
// one-second fallback of a dirty key only applies when a key read lately
// gets no invalidation (a cached read that raced the write on the server).

// settleFor bounds how long a read of a key that this process just wrote
// waits for the write's invalidation (it comes as the server runs the
// write, so within about a round trip) before it reads past the cache.
const settleFor = 2 * time.Millisecond

// cachedSlack is how much longer than the cache TTL a noted read is kept:
// rueidis counts an entry's TTL from when the reply arrived, after the
// read was noted.
const cachedSlack = 10 * time.Second

// readCached notes that key is about to be read through the client-side
// cache, which may then hold it for up to ttl.
func (w *watcher) readCached(key string, ttl time.Duration) {
	now := monoNow()
	if v, ok := w.reads.Load(key); ok && v.(int64)-now > int64(ttl/2)+int64(cachedSlack) {
		return // noted lately: good for at least another ttl/2
	}
	if _, loaded := w.reads.Swap(key, now+int64(ttl+cachedSlack)); !loaded && w.nreads.Add(1)%1024 == 0 {
		w.pruneReads(now)
	}
}

// pruneReads forgets reads whose cached copies have surely expired.
func (w *watcher) pruneReads(now int64) {
	w.reads.Range(func(k, v any) bool {
		if v.(int64) < now && w.reads.CompareAndDelete(k, v) {
			w.nreads.Add(-1)
		}
		return true
	})
}

// wroteCached marks key, about to be written by this process, dirty (see
// wrote) when the local cache may hold it.
func (w *watcher) wroteCached(key string) {
	if v, ok := w.reads.Load(key); ok && v.(int64) > monoNow() {
		w.wrote(key)
	}
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
	w := kv.f.watch
	if kv.f.cache && w.stale(k) {
		w.settle(ctx, k, settleFor)
	}
	if kv.f.cache && !w.stale(k) {
		w.readCached(k, kv.f.cacheTTL)
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
	kv.f.watch.wroteCached(k)
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
