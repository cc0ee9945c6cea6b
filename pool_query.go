package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
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
// and, for a field marked fleet:"index", the set of the free items with
// that value ("" for an unmarked field: checked on each item read).
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
			q.err = opErr("pool where", p.core.name, fmt.Errorf("%w: %q is not a JSON field of the tags type", ErrUnknownField, fl.field))
			return q
		}
		c, err := f.canonOf(fl.value)
		if err != nil {
			q.err = opErr("pool where", p.core.name, err)
			return q
		}
		cf := canonFilter{field: f.name, canon: c}
		if f.indexed {
			cf.key = p.core.f.keys.PoolTagIndex(p.core.name, f.name, c)
		}
		q.filters = append(q.filters, cf)
	}
	// The indexed filters first (pool_claim.lua takes them in that order).
	slices.SortFunc(q.filters, func(a, b canonFilter) int {
		if (a.key == "") != (b.key == "") {
			if a.key == "" {
				return 1
			}
			return -1
		}
		return strings.Compare(a.field+"\x00"+a.canon, b.field+"\x00"+b.canon)
	})
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
		return nil, opErr("pool list", q.pool.core.name, err)
	}
	c := q.pool.core
	k, a := c.std()
	if err := poolPruneScript.Exec(ctx, c.f.client, k, append(a, strconv.Itoa(c.opts.PruneBatch))).Error(); err != nil {
		return nil, opErr("pool list", c.name, err)
	}
	now, err := c.serverNow(ctx)
	if err != nil {
		return nil, opErr("pool list", c.name, err)
	}
	var items []Item[P, T]
	var bad *BadItemsError
	cl := c.f.client
	for cursor := uint64(0); ; {
		e, err := cl.Do(ctx, cl.B().Hscan().Key(c.hash).Cursor(cursor).Count(1000).Build()).AsScanEntry()
		if err != nil {
			return nil, opErr("pool list", c.name, err)
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
