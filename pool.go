package fleet

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/fleet-go/fleet/internal/keys"
)

// Defaults of PoolOptions.
const (
	// DefaultPoolMaxPayloadBytes bounds the JSON of one payload.
	DefaultPoolMaxPayloadBytes = 512 << 10
	// DefaultPoolPruneBatch bounds how many expired items one Put removes.
	DefaultPoolPruneBatch = 100
	// DefaultPoolPollInterval is how often a waiting claim looks again
	// when no wake-up came (a missed invalidation, a lease that ran out).
	DefaultPoolPollInterval = time.Second
)

// How much one script call may examine, so that no call stalls the server
// on a huge pool: candidates per claim call, entries per reindex or check
// step.
const (
	poolClaimBudget = 512
	poolIndexStep   = 256
)

// PoolOptions configures a Pool. The zero value means every default.
type PoolOptions struct {
	// MaxPayloadBytes bounds the JSON encoding of a payload; Put refuses a
	// larger one with ErrPayloadTooLarge. Defaults to
	// DefaultPoolMaxPayloadBytes.
	MaxPayloadBytes int
	// PruneBatch bounds how many expired items each Put removes (expired
	// items are never handed out or listed either way). Defaults to
	// DefaultPoolPruneBatch.
	PruneBatch int
	// PollInterval is how often a waiting Claim looks again without a
	// wake-up. With client-side caching a put or release anywhere wakes it
	// at once; without, it polls with a backoff capped at PollInterval.
	// Defaults to DefaultPoolPollInterval.
	PollInterval time.Duration
}

func (o *PoolOptions) withDefaults() (PoolOptions, error) {
	c := *o
	if c.MaxPayloadBytes < 0 || c.PruneBatch < 0 || c.PollInterval < 0 {
		return c, fmt.Errorf("%w: PoolOptions.MaxPayloadBytes, PruneBatch and PollInterval may not be negative", ErrInvalidOptions)
	}
	if c.MaxPayloadBytes == 0 {
		c.MaxPayloadBytes = DefaultPoolMaxPayloadBytes
	}
	if c.PruneBatch == 0 {
		c.PruneBatch = DefaultPoolPruneBatch
	}
	if c.PollInterval == 0 {
		c.PollInterval = DefaultPoolPollInterval
	}
	return c, nil
}

// Pool is a named bag of items (fleet:pool:<name>) that producers fill and
// consumers borrow: each item is a payload P with tags T (a struct; its JSON
// fields are what Where filters on) and an optional expiry. Reading is
// non-destructive (List, Get); Claim takes an exclusive lease on one item.
// Expired items are never listed or handed out, and each Put prunes some.
//
// Besides the documented keys, a pool keeps derived indexes under
// fleet:pidx:<name> (SCHEMA.md; Sync makes them again from the pool
// hash): the free items, the claimed items by claim deadline, and, for each
// tag field that T marks with the struct tag fleet:"index", one set of free
// items per value. A claim reads only free items, so its cost does not grow
// with the number of claimed items. A filter on an unmarked field is
// checked on each free item it reads (of the smallest marked filter's set,
// or of every free item): it costs up to one read per free item, in
// bounded script calls. Every process that writes a pool should use the
// same tags type; after changing the marks, run Sync.
//
// Another client that writes only the documented keys (the pool hash and
// claim keys) is supported: its items are found by List at once, and by
// Claim, which checks the whole hash in bounded steps before it answers
// "none" whenever the hash's size disagrees with the indexes or such a
// client was seen in the last 24 hours (and RunSweeper reconciles the
// indexes a bounded share at a time).
//
// A Pool is safe for concurrent use.
type Pool[P, T any] struct {
	core   *poolCore
	fields map[string]tagField
	err    error
}

// NewPool returns the pool name with payloads P and tags T. A bad name
// (ErrInvalidName), bad options (ErrInvalidOptions), a T that is not a
// struct or marks fleet:"index" on a field that cannot be indexed (not a
// string, bool or number) (ErrInvalidArgument) is kept, returned by every
// call and by Err.
func NewPool[P, T any](f *Fleet, name string, opts PoolOptions) *Pool[P, T] {
	o, err := opts.withDefaults()
	p := &Pool[P, T]{core: newPoolCore(f, name, o)}
	tt := reflect.TypeFor[T]()
	switch {
	case err != nil:
	case keys.Check(keys.KindPool, name) != nil:
		err = keys.Check(keys.KindPool, name)
	case tt.Kind() != reflect.Struct:
		err = fmt.Errorf("%w: pool tags type %s is not a struct", ErrInvalidArgument, tt)
	default:
		p.fields = tagFields(tt)
		p.core.fields, err = indexedFields(p.fields)
	}
	p.err = err
	return p
}

// Err returns the error that every call of the pool returns (a bad name,
// options or tags type), or nil.
func (p *Pool[P, T]) Err() error { return p.err }

// Name returns the pool's name.
func (p *Pool[P, T]) Name() string { return p.core.name }

// Item is one item of a pool.
type Item[P, T any] struct {
	// ID is the item's id in the pool hash.
	ID string
	// Payload is the item's payload, decoded.
	Payload P
	// Tags are the item's tags, decoded.
	Tags T
	// ExpiresAt is when the item expires; zero for never.
	ExpiresAt time.Time
}

// poolCore is the untyped part of a pool: keys, scripts, raw items.
type poolCore struct {
	f     *Fleet
	name  string
	opts  PoolOptions
	hash  string
	claim string // claim key prefix
	idx   keys.PoolIndex
	// fields is the JSON array of the tag fields with index sets (the tags
	// type's fleet:"index" fields); "" for an untyped core (Sync, the
	// sweeper), whose scripts read the array the pool's puts stored.
	fields string

	registered atomic.Int64 // unix ms of the last SADD to fleet:pools (admin.go)
	waiters    waiters      // this handle's waiting claims (pool_claim.go)
}

func newPoolCore(f *Fleet, name string, o PoolOptions) *poolCore {
	return &poolCore{f: f, name: name, opts: o, hash: f.keys.Pool(name),
		claim: f.keys.PoolClaimPrefix(name), idx: f.keys.PoolIndex(name)}
}

var (
	poolPutScript     = newScript("pool_put.lua")
	poolClaimScript   = newScript("pool_claim.lua")
	poolMarkBadScript = newScript("pool_markbad.lua")
	poolDeleteScript  = newScript("pool_delete.lua")
	poolIndexScript   = newScript("pool_index.lua")
	poolCleanScript   = newScript("pool_clean.lua")
	poolPruneScript   = newScript("pool_prune.lua")
	poolReleaseScript = newScript("pool_release.lua")
	poolExtendScript  = newScript("pool_extend.lua")
	poolAbandonScript = newScript("pool_abandon.lua")
	poolCheckScript   = newScript("pool_check.lua")
)

// std returns the KEYS[1..11] and ARGV[1..3] that every lib_pool script
// takes, with room for more.
func (c *poolCore) std(extraKeys ...string) ([]string, []string) {
	k := make([]string, 0, 11+len(extraKeys)+4)
	k = append(k, c.hash, c.idx.All, c.idx.Exp, c.idx.Tags, c.idx.Signal, c.idx.Scan,
		c.idx.Free, c.idx.Held, c.idx.Bad, c.idx.Foreign, c.idx.Fields)
	return append(k, extraKeys...), []string{c.idx.Base, c.claim, c.fields}
}

func (c *poolCore) owner(id string) string { return c.idx.Base + "own:" + id }

func (c *poolCore) tokenKey(token string) string { return c.idx.Base + "tok:" + token }

// decodeItem decodes an entry of the pool hash, {"p": base64 of the
// payload's JSON, "t": tags, "x": expires_at in unix seconds or null}; the
// error says why an entry is bad.
func decodeItem[P, T any](id, raw string) (Item[P, T], error) {
	it := Item[P, T]{ID: id}
	var w map[string]json.RawMessage
	if err := json.Unmarshal([]byte(raw), &w); err != nil {
		return it, fmt.Errorf("not a JSON object: %w", err)
	}
	rp, okP := w["p"]
	rt, okT := w["t"]
	rx, okX := w["x"]
	if !okP || !okT || !okX {
		return it, fmt.Errorf(`lacks one of the fields "p", "t", "x"`)
	}
	var p string
	if err := json.Unmarshal(rp, &p); err != nil || string(rp) == "null" {
		return it, fmt.Errorf(`"p" is not a string`)
	}
	b, err := base64.StdEncoding.DecodeString(p)
	if err != nil {
		return it, fmt.Errorf(`"p" is not base64: %w`, err)
	}
	if err := json.Unmarshal(b, &it.Payload); err != nil {
		return it, fmt.Errorf("payload does not decode into %T: %w", it.Payload, err)
	}
	if len(rt) == 0 || rt[0] != '{' {
		return it, fmt.Errorf(`"t" is not an object`)
	}
	if err := json.Unmarshal(rt, &it.Tags); err != nil {
		return it, fmt.Errorf("tags do not decode into %T: %w", it.Tags, err)
	}
	if string(rx) != "null" {
		x, err := strconv.ParseFloat(string(rx), 64)
		if err != nil || math.IsInf(x, 0) {
			return it, fmt.Errorf(`"x" is neither a number nor null`)
		}
		it.ExpiresAt = time.UnixMilli(int64(math.Round(x * 1000)))
	}
	return it, nil
}

func newItemID() string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// Put stores payload with tags as a new item and returns its id. A ttl of 0
// keeps the item until it is deleted or marked bad; a negative ttl is
// ErrInvalidArgument. Every Put also prunes up to PoolOptions.PruneBatch
// expired items, and indexes a bounded share of any items that another
// client wrote without fleet's indexes. May return ErrPayloadTooLarge,
// ErrInvalidArgument (a payload or tags that cannot be encoded as JSON),
// ErrWrongType.
func (p *Pool[P, T]) Put(ctx context.Context, payload P, tags T, ttl time.Duration) (string, error) {
	if err := p.ready(ctx); err != nil {
		return "", opErr("pool put", p.core.name, err)
	}
	if ttl < 0 {
		return "", opErr("pool put", p.core.name, fmt.Errorf("%w: ttl %v is negative", ErrInvalidArgument, ttl))
	}
	pb, err := json.Marshal(payload)
	if err != nil {
		return "", opErr("pool put", p.core.name, fmt.Errorf("%w: cannot encode payload %T as JSON: %w", ErrInvalidArgument, payload, err))
	}
	if len(pb) > p.core.opts.MaxPayloadBytes {
		return "", opErr("pool put", p.core.name, fmt.Errorf("%w: %d bytes of JSON, the limit is %d", ErrPayloadTooLarge, len(pb), p.core.opts.MaxPayloadBytes))
	}
	tb, err := json.Marshal(tags)
	if err != nil || len(tb) == 0 || tb[0] != '{' {
		return "", opErr("pool put", p.core.name, fmt.Errorf("%w: tags %T do not encode as a JSON object (%v)", ErrInvalidArgument, tags, err))
	}
	id := newItemID()
	return id, opErr("pool put", p.core.name, p.core.put(ctx, id, base64.StdEncoding.EncodeToString(pb), string(tb), ttl))
}

func (p *Pool[P, T]) ready(ctx context.Context) error {
	if p.err != nil {
		return p.err
	}
	return p.core.f.alive(ctx)
}

func (c *poolCore) put(ctx context.Context, id, b64, tags string, ttl time.Duration) error {
	if err := c.register(ctx); err != nil {
		return err
	}
	k, a := c.std()
	a = append(a, id, b64, tags, millis(ttl), strconv.Itoa(c.opts.PruneBatch))
	res, err := poolPutScript.Exec(ctx, c.f.client, k, a).AsIntSlice()
	if err != nil {
		return err
	}
	if len(res) != 3 {
		return unexpectedReply("pool put", len(res))
	}
	if !c.f.cache {
		c.f.watch.WakeOne(c.idx.Signal)
	}
	if res[0] > res[1] {
		// The hash holds entries the index lacks (written by another
		// client, or not valid items): index a bounded share of them.
		_, _, err := c.indexStep(ctx, "", false)
		return err
	}
	return nil
}

// indexStep runs one bounded step of pool_index.lua: from the kept cursor
// when cursor is "", and returns the next cursor and how many items it added.
func (c *poolCore) indexStep(ctx context.Context, cursor string, force bool) (next string, added int64, err error) {
	k, a := c.std()
	f := "0"
	if force {
		f = "1"
	}
	a = append(a, cursor, strconv.Itoa(poolIndexStep), f)
	res, err := poolIndexScript.Exec(ctx, c.f.client, k, a).ToArray()
	if err != nil {
		return "", 0, err
	}
	if len(res) != 4 {
		return "", 0, unexpectedReply("pool index", len(res))
	}
	next, err = res[0].ToString()
	if err != nil {
		return "", 0, err
	}
	added, _ = res[1].AsInt64()
	if added > 0 && !c.f.cache {
		c.f.watch.WakeOne(c.idx.Signal)
	}
	return next, added, nil
}

// serverNow reads the server's clock, which every expiry is measured on.
func (c *poolCore) serverNow(ctx context.Context) (time.Time, error) {
	return timeReply(c.f.client.Do(ctx, c.f.client.B().Time().Build()))
}

func checkItemID(id string) error { return keys.Check(keys.KindItem, id) }

// Get returns the item id. A missing or expired item is not an error: ok is
// false and err nil. An entry that is not a valid item returns an error
// wrapping ErrBadItem.
func (p *Pool[P, T]) Get(ctx context.Context, id string) (item Item[P, T], ok bool, err error) {
	if err := p.ready(ctx); err != nil {
		return item, false, opErr("pool get", p.core.name, err)
	}
	if err := checkItemID(id); err != nil {
		return item, false, opErr("pool get", p.core.name, err)
	}
	c := p.core
	rs := c.f.client.DoMulti(ctx, c.f.client.B().Hget().Key(c.hash).Field(id).Build(), c.f.client.B().Time().Build())
	raw, err := rs[0].ToString()
	if rueidis.IsRedisNil(err) {
		return item, false, nil
	}
	if err != nil {
		return item, false, opErr("pool get", c.name, err)
	}
	now, err := timeReply(rs[1])
	if err != nil {
		return item, false, opErr("pool get", c.name, err)
	}
	item, err = decodeItem[P, T](id, raw)
	if err != nil {
		return item, false, opErr("pool get", c.name, fmt.Errorf("%w: item %q %w", ErrBadItem, id, err))
	}
	if !item.ExpiresAt.IsZero() && !item.ExpiresAt.After(now) {
		return Item[P, T]{}, false, nil
	}
	return item, true, nil
}

// Delete removes the item id, its index entries and any claim on it. It
// reports whether there was such an item.
func (p *Pool[P, T]) Delete(ctx context.Context, id string) (bool, error) {
	if err := p.ready(ctx); err != nil {
		return false, opErr("pool delete", p.core.name, err)
	}
	if err := checkItemID(id); err != nil {
		return false, opErr("pool delete", p.core.name, err)
	}
	c := p.core
	k, a := c.std(c.claim+id, c.owner(id))
	n, err := poolDeleteScript.Exec(ctx, c.f.client, k, append(a, id)).AsInt64()
	if err != nil {
		return false, opErr("pool delete", c.name, err)
	}
	return n == 1, nil
}

// Size returns how many items the pool holds and have not expired: the
// hash's length less the indexed items past their expiry. Entries that are
// not valid items count too; List tells them apart.
func (p *Pool[P, T]) Size(ctx context.Context) (int64, error) {
	if err := p.ready(ctx); err != nil {
		return 0, opErr("pool size", p.core.name, err)
	}
	c := p.core
	now, err := c.serverNow(ctx)
	if err != nil {
		return 0, opErr("pool size", c.name, err)
	}
	cl := c.f.client
	rs := cl.DoMulti(ctx,
		cl.B().Hlen().Key(c.hash).Build(),
		cl.B().Zcount().Key(c.idx.Exp).Min("-inf").Max(strconv.FormatInt(now.UnixMilli(), 10)).Build())
	n, err := rs[0].AsInt64()
	if err != nil {
		return 0, opErr("pool size", c.name, err)
	}
	gone, err := rs[1].AsInt64()
	if err != nil {
		return 0, opErr("pool size", c.name, err)
	}
	return max(n-gone, 0), nil
}

// Sync makes the pool's derived indexes (fleet:pidx:<name>:...) again
// from the pool hash, the authoritative record, in bounded steps that never
// stall the server: it indexes every valid item, drops expired ones, and
// removes index entries of items that are gone or whose tags changed. Use
// it after manual changes to Redis, and after changing which tag fields
// the tags type marks fleet:"index"; puts and claims index items written
// by other clients on their own, a bounded share at a time. Claims stay
// correct while it runs.
func (p *Pool[P, T]) Sync(ctx context.Context) error {
	if err := p.ready(ctx); err != nil {
		return opErr("pool rebuild", p.core.name, err)
	}
	return opErr("pool rebuild", p.core.name, p.core.rebuild(ctx))
}

func (c *poolCore) rebuild(ctx context.Context) error {
	if c.fields != "" {
		// The indexed fields of this tags type, for the untyped readers
		// (Sync, the sweeper), as a put stores them.
		if err := c.f.client.Do(ctx, c.f.client.B().Set().Key(c.idx.Fields).Value(c.fields).Build()).Error(); err != nil {
			return err
		}
	}
	for cursor := "0"; ; {
		next, _, err := c.indexStep(ctx, cursor, true)
		if err != nil {
			return err
		}
		if cursor = next; cursor == "0" {
			break
		}
	}
	sets, err := c.f.client.Do(ctx, c.f.client.B().Smembers().Key(c.idx.Tags).Build()).AsStrSlice()
	if err != nil {
		return err
	}
	for _, set := range []string{c.idx.All, c.idx.Free, c.idx.Bad} {
		if err := c.clean(ctx, set, "", ""); err != nil {
			return err
		}
	}
	tp := c.idx.Base + "t:"
	for _, s := range sets {
		field, canon, ok := strings.Cut(strings.TrimPrefix(s, tp), ":")
		if !ok || !strings.HasPrefix(s, tp) {
			continue
		}
		if err := c.clean(ctx, s, field, canon); err != nil {
			return err
		}
	}
	return nil
}

func (c *poolCore) clean(ctx context.Context, set, field, canon string) error {
	for cursor := "0"; ; {
		k, a := c.std(set)
		res, err := poolCleanScript.Exec(ctx, c.f.client, k, append(a, cursor, strconv.Itoa(poolIndexStep), field, canon)).ToArray()
		if err != nil {
			return err
		}
		if len(res) != 2 {
			return unexpectedReply("pool clean", len(res))
		}
		if cursor, err = res[0].ToString(); err != nil {
			return err
		}
		if cursor == "0" {
			return nil
		}
		if err := c.f.alive(ctx); err != nil {
			return err
		}
	}
}
