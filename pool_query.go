package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
)

// Filter is one condition of a Query: a tag field, by its JSON name, equal
// to a value. Make one with Eq.
type Filter struct {
	field string
	value any
}

// Eq matches items whose tag field (its JSON name in the tags type) equals
// value. The field must be a string, bool or number field of the tags type,
// and value must fit it: a string for a string field, a bool for a bool
// field, an integer in range for an integer field, any number for a float
// field.
func Eq(field string, value any) Filter { return Filter{field: field, value: value} }

// Query selects the items of a pool whose tags match every filter (all of
// them when there are none). Where checks the filters against the tags type
// at once: Err returns what it found, and Claim, Do and List return that
// same error, so a Query can be built in one expression and used at once.
// A Query is safe for concurrent use.
type Query[P, T any] struct {
	pool    *Pool[P, T]
	filters []canonFilter
	err     error
}

// canonFilter is a checked filter: the field, the value's canonical form,
// and the index set that holds the items with it.
type canonFilter struct{ field, canon, key string }

// Where returns the query for items whose tags match every filter. A
// filter on a field the tags type does not have gives ErrUnknownField; a
// value that does not fit its field (or a field that cannot be matched
// exactly) gives ErrFilterType. The error is in Query.Err and is returned
// by every call of the query.
func (p *Pool[P, T]) Where(filters ...Filter) *Query[P, T] {
	q := &Query[P, T]{pool: p, err: p.err}
	if q.err != nil {
		return q
	}
	for _, fl := range filters {
		f, ok := p.fields[fl.field]
		if !ok {
			q.err = poolErr("pool where", p.core.name, fmt.Errorf("%w: %q is not a JSON field of the tags type", ErrUnknownField, fl.field))
			return q
		}
		c, err := f.canonOf(fl.value)
		if err != nil {
			q.err = poolErr("pool where", p.core.name, err)
			return q
		}
		q.filters = append(q.filters, canonFilter{field: f.name, canon: c,
			key: p.core.f.keys.PoolTagIndex(p.core.name, f.name, c)})
	}
	slices.SortFunc(q.filters, func(a, b canonFilter) int { return strings.Compare(a.key, b.key) })
	q.filters = slices.Compact(q.filters)
	return q
}

// Err returns the error of the query's filters (or of its pool), or nil.
func (q *Query[P, T]) Err() error { return q.err }

func (q *Query[P, T]) ready(ctx context.Context) error {
	if q.err != nil {
		return q.err
	}
	return q.pool.core.f.alive(ctx)
}

// List returns every item of the pool (Pool.List) or every item matching
// the query, in no particular order, without claiming any: expired items
// are left out, claimed ones are included. Like Put, it first prunes up to
// PoolOptions.PruneBatch expired items, as the documented pool does on
// every list. Entries of the pool hash that
// are not valid items are skipped and reported: the error is then a
// *BadItemsError (errors.Is(err, ErrBadItem)) and the items returned with
// it are all the good ones.
func (q *Query[P, T]) List(ctx context.Context) ([]Item[P, T], error) {
	if err := q.ready(ctx); err != nil {
		return nil, poolErr("pool list", q.pool.core.name, err)
	}
	c := q.pool.core
	k, a := c.std()
	if err := poolPruneScript.Exec(ctx, c.f.client, k, append(a, strconv.Itoa(c.opts.PruneBatch))).Error(); err != nil {
		return nil, poolErr("pool list", c.name, err)
	}
	now, err := c.serverNow(ctx)
	if err != nil {
		return nil, poolErr("pool list", c.name, err)
	}
	var items []Item[P, T]
	var bad *BadItemsError
	cl := c.f.client
	for cursor := uint64(0); ; {
		e, err := cl.Do(ctx, cl.B().Hscan().Key(c.hash).Cursor(cursor).Count(1000).Build()).AsScanEntry()
		if err != nil {
			return nil, poolErr("pool list", c.name, err)
		}
		for i := 0; i+1 < len(e.Elements); i += 2 {
			id, raw := e.Elements[i], e.Elements[i+1]
			it, err := decodeItem[P, T](id, raw)
			if err == nil && !q.matches(raw) {
				continue
			}
			if err != nil {
				if bad == nil {
					bad = &BadItemsError{Pool: c.name}
				}
				bad.IDs = append(bad.IDs, id)
				bad.Causes = append(bad.Causes, err)
				continue
			}
			if !it.ExpiresAt.IsZero() && !it.ExpiresAt.After(now) {
				continue
			}
			items = append(items, it)
		}
		if cursor = e.Cursor; cursor == 0 {
			break
		}
	}
	if bad != nil {
		return items, bad
	}
	return items, nil
}

// matches reports whether a valid entry's tags match every filter, the way
// pool_claim.lua checks them.
func (q *Query[P, T]) matches(raw string) bool {
	if len(q.filters) == 0 {
		return true
	}
	var w struct {
		T map[string]any `json:"t"`
	}
	if json.Unmarshal([]byte(raw), &w) != nil {
		return false
	}
	for _, f := range q.filters {
		c, ok := canonJSON(w.T[f.field])
		if !ok || c != f.canon {
			return false
		}
	}
	return true
}

func canonJSON(v any) (string, bool) {
	switch x := v.(type) {
	case string:
		return canonString(x), true
	case bool:
		if x {
			return "T", true
		}
		return "F", true
	case float64:
		return canonNumber(x), true
	}
	return "", false
}

// List returns every unexpired item of the pool: Where().List.
func (p *Pool[P, T]) List(ctx context.Context) ([]Item[P, T], error) { return p.Where().List(ctx) }

// ClaimOptions says how to claim an item.
type ClaimOptions struct {
	// Hold is the lease: a crashed holder's claim frees the item after
	// Hold. Required, > 0.
	Hold time.Duration
	// Wait bounds how long Claim waits for a matching item to be put or
	// released when none is free. Zero returns at once. A waiting claim is
	// woken by the put or release itself (client-side caching
	// invalidation), with a poll every PoolOptions.PollInterval as the
	// fallback; without caching it polls with a backoff. ctx bounds the
	// wait too.
	Wait time.Duration
}

// Claim is an exclusive lease on one item. It ends by Release, by MarkBad,
// or by its lease running out. Its methods are safe for concurrent use.
type Claim[P, T any] struct {
	// Item is the claimed item.
	Item  Item[P, T]
	core  *poolCore
	token string
	ended atomic.Bool
}

// Token returns the claim's random token, kept in the derived owner key
// fleet:pidx:<name>:own:<id> while the claim lasts.
func (c *Claim[P, T]) Token() string { return c.token }

// Claim takes an exclusive lease of opts.Hold on one free, unexpired item
// of the pool (Pool.Claim) or of the query. When none is free it waits up
// to opts.Wait for one; then, finding none, it returns nil and a nil error:
// "none" is a normal result. It returns ErrInvalidArgument for Hold <= 0 or
// Wait < 0, the query's error, and ctx's error when ctx ends first.
//
// A claim reads only the items its smallest filter index selects, in
// bounded script calls, so it stays fast on a large pool.
func (q *Query[P, T]) Claim(ctx context.Context, opts ClaimOptions) (*Claim[P, T], error) {
	if err := q.ready(ctx); err != nil {
		return nil, poolErr("pool claim", q.pool.core.name, err)
	}
	if opts.Hold <= 0 || opts.Wait < 0 {
		return nil, poolErr("pool claim", q.pool.core.name,
			fmt.Errorf("%w: hold %v must be > 0 and wait %v not negative", ErrInvalidArgument, opts.Hold, opts.Wait))
	}
	cl, err := q.try(ctx, opts.Hold)
	if cl != nil || err != nil || opts.Wait == 0 {
		return cl, poolErr("pool claim", q.pool.core.name, err)
	}
	cl, err = q.wait(ctx, opts)
	return cl, poolErr("pool claim", q.pool.core.name, err)
}

// Claim claims any item of the pool: Where().Claim.
func (p *Pool[P, T]) Claim(ctx context.Context, opts ClaimOptions) (*Claim[P, T], error) {
	return p.Where().Claim(ctx, opts)
}

// try claims an item now, or returns nil when none is free.
func (q *Query[P, T]) try(ctx context.Context, hold time.Duration) (*Claim[P, T], error) {
	c := q.pool.core
	extra := make([]string, len(q.filters))
	for i, f := range q.filters {
		extra[i] = f.key
	}
	token := newToken()
	cursor, badSeen, reindexed := "", 0, 0
	for {
		k, a := c.std(extra...)
		a = append(a, token, millis(hold), cursor, strconv.Itoa(poolClaimBudget))
		for _, f := range q.filters {
			a = append(a, f.field, f.canon)
		}
		res, err := poolClaimScript.Exec(ctx, c.f.client, k, a).ToArray()
		if err != nil {
			return nil, err
		}
		if len(res) < 3 {
			return nil, fmt.Errorf("fleet: pool claim: unexpected reply of %d elements", len(res))
		}
		if got, _ := res[0].AsInt64(); got == 1 {
			id, _ := res[1].ToString()
			raw, _ := res[2].ToString()
			it, err := decodeItem[P, T](id, raw)
			if err == nil {
				return &Claim[P, T]{Item: it, core: c, token: token}, nil
			}
			// Valid to the script, but not for P or T: never hand it out.
			// The claim stays, so that the next attempts (ours and
			// others') skip it for hold; List reports it.
			if badSeen++; badSeen >= 16 {
				return nil, nil
			}
			token, cursor = newToken(), ""
			continue
		}
		if cursor, err = res[1].ToString(); err != nil {
			return nil, err
		}
		if cursor != "0" {
			continue
		}
		// A whole pass found none. If the hash holds entries that the
		// index lacks, index a bounded share of them and look again.
		hlen, _ := res[2].AsInt64()
		nall, _ := res[3].AsInt64()
		if hlen <= nall || reindexed >= poolIndexOnClaim {
			return nil, nil
		}
		var added int64
		for added == 0 && reindexed < poolIndexOnClaim {
			reindexed++
			if _, added, err = c.indexStep(ctx, "", false); err != nil {
				return nil, err
			}
		}
		if added == 0 {
			return nil, nil
		}
		cursor = ""
	}
}

// wait claims an item as soon as one is put or released, within opts.Wait.
func (q *Query[P, T]) wait(ctx context.Context, opts ClaimOptions) (*Claim[P, T], error) {
	c := q.pool.core
	f := c.f
	deadline := time.NewTimer(opts.Wait)
	defer deadline.Stop()
	sig, stopSig := f.watch.listen(c.idx.Signal)
	defer stopSig()
	// A put by a client that does not bump the signal still changes the hash.
	hash, stopHash := f.watch.listen(c.hash)
	defer stopHash()
	bo := backoff{min: 5 * time.Millisecond, max: c.opts.PollInterval}
	for {
		wait := bo.next()
		if f.cache {
			// Arm the server's invalidations before looking, so that a put
			// or release after the look wakes us.
			if _, err := f.track(ctx, c.idx.Signal); err != nil && ctx.Err() == nil {
				return nil, err
			}
			r := f.client.DoCache(ctx, f.client.B().Hlen().Key(c.hash).Cache(), f.cacheTTL)
			if err := r.Error(); err != nil && !rueidis.IsRedisNil(err) && ctx.Err() == nil {
				return nil, err
			}
			wait = c.opts.PollInterval
		}
		if err := f.alive(ctx); err != nil {
			return nil, err
		}
		cl, err := q.try(ctx, opts.Hold)
		if cl != nil || err != nil {
			return cl, err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-deadline.C:
			t.Stop()
			return nil, nil
		case <-f.done:
			t.Stop()
			return nil, ErrClosed
		case <-sig:
		case <-hash:
		case <-t.C:
		}
		t.Stop()
	}
}

// Release ends the claim: the item is free for others at once. It returns
// ErrClaimNotHeld, changing nothing, when the claim already ended or its
// lease ran out.
func (c *Claim[P, T]) Release(ctx context.Context) error {
	p := c.core
	if err := p.f.alive(ctx); err != nil {
		return poolErr("pool release", p.name, err)
	}
	id := c.Item.ID
	n, err := poolReleaseScript.Exec(ctx, p.f.client, []string{p.claim + id, p.owner(id), p.idx.Signal}, []string{c.token}).AsInt64()
	if err != nil {
		return poolErr("pool release", p.name, err)
	}
	if n != 1 {
		return poolErr("pool release", p.name, fmt.Errorf("%w: item %q", ErrClaimNotHeld, id))
	}
	c.ended.Store(true)
	if !p.f.cache {
		p.f.watch.pokeAll(p.idx.Signal)
	}
	return nil
}

// Extend sets the claim's lease to hold from now. It returns
// ErrClaimNotHeld, changing nothing, when the claim already ended or its
// lease ran out; ErrInvalidArgument for hold <= 0.
func (c *Claim[P, T]) Extend(ctx context.Context, hold time.Duration) error {
	p := c.core
	if err := p.f.alive(ctx); err != nil {
		return poolErr("pool extend", p.name, err)
	}
	if hold <= 0 {
		return poolErr("pool extend", p.name, fmt.Errorf("%w: hold %v must be > 0", ErrInvalidArgument, hold))
	}
	id := c.Item.ID
	n, err := poolExtendScript.Exec(ctx, p.f.client, []string{p.claim + id, p.owner(id)}, []string{c.token, millis(hold)}).AsInt64()
	if err != nil {
		return poolErr("pool extend", p.name, err)
	}
	if n != 1 {
		return poolErr("pool extend", p.name, fmt.Errorf("%w: item %q", ErrClaimNotHeld, id))
	}
	return nil
}

// MarkBad removes the claimed item from the pool for good, for every
// reader, and ends the claim: for an item found unusable (a rejected
// cookie, a dead account). reason is for the caller's own logs: the
// documented schema has no place for it, so fleet does not store it. It
// returns ErrClaimNotHeld, changing nothing, when the claim already ended
// or its lease ran out.
func (c *Claim[P, T]) MarkBad(ctx context.Context, reason string) error {
	_ = reason
	p := c.core
	if err := p.f.alive(ctx); err != nil {
		return poolErr("pool mark bad", p.name, err)
	}
	id := c.Item.ID
	k, a := p.std(p.claim+id, p.owner(id))
	n, err := poolMarkBadScript.Exec(ctx, p.f.client, k, append(a, c.token, id)).AsInt64()
	if err != nil {
		return poolErr("pool mark bad", p.name, err)
	}
	if n != 1 {
		return poolErr("pool mark bad", p.name, fmt.Errorf("%w: item %q", ErrClaimNotHeld, id))
	}
	c.ended.Store(true)
	return nil
}

// Do claims an item as Claim does, runs fn with it, and always ends the
// claim afterwards (Release, unless fn already released it or marked it
// bad), even when fn panics: Go's form of the seed's
// `async with pool.where(...).claim(...) as item`. It reports whether an
// item was claimed; when none was, fn does not run and the error is nil.
// The error is fn's, joined with a failed release's (ErrClaimNotHeld when
// the lease ran out while fn ran).
func (q *Query[P, T]) Do(ctx context.Context, opts ClaimOptions, fn func(ctx context.Context, c *Claim[P, T]) error) (claimed bool, err error) {
	c, err := q.Claim(ctx, opts)
	if c == nil || err != nil {
		return false, err
	}
	defer func() {
		if c.ended.Load() {
			return
		}
		// Release with a context of its own: ctx may be why fn ended.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opts.Hold)
		defer cancel()
		if rerr := c.Release(rctx); rerr != nil {
			err = errors.Join(err, rerr)
		}
	}()
	return true, fn(ctx, c)
}

// Do claims any item of the pool and runs fn with it: Where().Do.
func (p *Pool[P, T]) Do(ctx context.Context, opts ClaimOptions, fn func(ctx context.Context, c *Claim[P, T]) error) (bool, error) {
	return p.Where().Do(ctx, opts, fn)
}
