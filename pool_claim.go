package fleet

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/fleet-go/fleet/internal/lease"
	"github.com/fleet-go/fleet/internal/mono"
)

// poolTombMargin is how much longer than the hold a claim's token key (and
// the tombstone of a claim given up in flight) lives: a claim script that
// reaches the server later than that could still take an item under a
// token nobody holds, for at most the hold.
const poolTombMargin = time.Minute

// ClaimOptions says how to claim an item.
type ClaimOptions struct {
	// Hold is the lease: a crashed holder's claim frees the item after
	// Hold. Required, > 0.
	Hold time.Duration
	// Wait bounds how long Claim waits for a matching item to be put or
	// released when none is free. Zero returns at once. A waiting claim is
	// woken by the put or release itself (client-side caching
	// invalidation; one waiter of each process per change, which hands the
	// wake-up on to a waiter with other filters when it finds no match),
	// with a poll every PoolOptions.PollInterval as the fallback; without
	// caching it polls with a backoff. ctx bounds the wait too. When the
	// wait runs out, the last look checks the whole hash if another client
	// wrote the pool lately, so that "none" means none is free.
	Wait time.Duration
	// KeepAlive makes Do extend the claim's lease every Hold/3 while its
	// function runs. Without it, the lease ends at its deadline and so
	// does the function's context.
	KeepAlive bool
}

// Claim is an exclusive lease on one item. It ends by Release, by MarkBad,
// or by its lease running out. Its methods are safe for concurrent use.
type Claim[P, T any] struct {
	// Item is the claimed item.
	Item  Item[P, T]
	core  *poolCore
	token string
	ended atomic.Bool
	clock lease.Clock // the lease: from the send of the claim or last extend (internal/lease)
}

// Deadline returns the end of the claim's lease that this process can
// prove: Hold after the claim (or the last successful Extend) was sent, on
// this process's monotonic clock, so no later than the server lets the
// claim expire. A claim that ended (Release, MarkBad, an Extend that found
// it lost) ends at once. Past the deadline another may hold the item.
func (c *Claim[P, T]) Deadline() time.Time { return c.clock.Deadline() }

// Token returns the claim's random token, kept in the derived owner key
// fleet:pidx:<name>:own:<id> while the claim lasts.
func (c *Claim[P, T]) Token() string { return c.token }

// Claim takes an exclusive lease of opts.Hold on one free, unexpired item
// of the pool (Pool.Claim) or of the query. When none is free it waits up
// to opts.Wait for one; then, finding none, it returns nil and a nil error:
// "none" is a normal result, said only when no matching item is free. It
// returns ErrInvalidArgument for Hold <= 0 or Wait < 0, the query's error,
// and ctx's error when ctx ends first.
//
// A claim reads only free items (of its smallest indexed filter's set), in
// bounded script calls, so its cost does not grow with the pool or with
// the share of it that is claimed. When the pool hash's size disagrees
// with the indexes, or another client wrote the pool without them in the
// last 24 hours, a claim that would find none first checks the whole hash
// in bounded steps.
//
// A ctx that ends while a claim script is on its way cannot stop the
// script: Claim then undoes it in the background (the item is free again,
// or the late script takes nothing), retrying until the Fleet closes.
func (q *Query[P, T]) Claim(ctx context.Context, opts ClaimOptions) (*Claim[P, T], error) {
	if err := q.ready(ctx); err != nil {
		return nil, opErr("pool claim", q.pool.core.name, err)
	}
	if opts.Hold <= 0 || opts.Wait < 0 {
		return nil, opErr("pool claim", q.pool.core.name,
			fmt.Errorf("%w: hold %v must be > 0 and wait %v not negative", ErrInvalidArgument, opts.Hold, opts.Wait))
	}
	start := q.pool.core.f.obsStart()
	cl, err := q.try(ctx, opts.Hold, opts.Wait == 0)
	if cl == nil && err == nil && opts.Wait > 0 {
		cl, err = q.wait(ctx, opts)
	}
	q.pool.core.f.claimWaited(ctx, q.pool.core.name, start, cl != nil, err)
	return cl, opErr("pool claim", q.pool.core.name, err)
}

// Claim claims any item of the pool: Where().Claim.
func (p *Pool[P, T]) Claim(ctx context.Context, opts ClaimOptions) (*Claim[P, T], error) {
	return p.Where().Claim(ctx, opts)
}

// claimReply is what pool_claim.lua answered when it claimed nothing.
type claimReply struct {
	cursor, set                 string
	hlen, known, foreign, freed int64
	more                        bool
}

// try claims an item now, or returns nil when none is free. With full, a
// pool that another client wrote lately is checked whole before "none";
// without, only when the hash's size disagrees with the indexes.
func (q *Query[P, T]) try(ctx context.Context, hold time.Duration, full bool) (*Claim[P, T], error) {
	c := q.pool.core
	var extra []string
	for _, f := range q.filters {
		if f.key != "" {
			extra = append(extra, f.key)
		}
	}
	token := newToken()
	cursor, set, badSeen := "", "0", 0
	checkCursor, checked := "0", false
	for {
		sent := mono.Now()
		k, a := c.std(extra...)
		a = append(a, token, millis(hold), millis(hold+poolTombMargin), cursor, set,
			strconv.Itoa(poolClaimBudget), strconv.Itoa(len(extra)))
		for _, f := range q.filters {
			a = append(a, f.field, f.canon)
		}
		res, err := poolClaimScript.Exec(ctx, c.f.client, k, a).ToArray()
		if err != nil {
			if outcomeUnknown(err) {
				c.abandon(token, hold)
			}
			return nil, err
		}
		if len(res) == 0 {
			return nil, errors.New("empty reply to pool claim")
		}
		switch kind, _ := res[0].AsInt64(); kind {
		case 1:
			if len(res) != 3 {
				return nil, unexpectedReply("pool claim", len(res))
			}
			id, _ := res[1].ToString()
			raw, _ := res[2].ToString()
			it, err := decodeItem[P, T](id, raw)
			if err == nil {
				cl := &Claim[P, T]{Item: it, core: c, token: token}
				cl.clock.Prove(sent, hold)
				return cl, nil
			}
			// Valid to the script, but not for P or T: never hand it out.
			// The claim stays, so that the next attempts (ours and
			// others') skip it for hold; List reports it.
			if badSeen++; badSeen >= 16 {
				return nil, nil
			}
			token, cursor, set = newToken(), "", "0"
			continue
		case 2:
			return nil, nil // our own tombstone: cannot happen in a live call
		}
		r, err := parseClaimReply(res)
		if err != nil {
			return nil, err
		}
		resumed := cursor != ""
		cursor, set = r.cursor, r.set
		if r.more || (r.freed > 0 && resumed) {
			// Ended claims were found after this pass began (or more
			// wait): start again, so that no freed item is passed over.
			cursor, set = "", "0"
			continue
		}
		if cursor != "0" {
			continue
		}
		// A whole pass over the index found none. The index cannot miss
		// fleet's own writes; another client's it can: check the hash.
		if checked || (r.hlen == r.known && (r.foreign == 0 || !full)) {
			return nil, nil
		}
		var freed int64
		for {
			if err := c.f.alive(ctx); err != nil {
				return nil, err
			}
			var n int64
			if checkCursor, n, err = c.checkStep(ctx, checkCursor); err != nil {
				return nil, err
			}
			freed += n
			if checkCursor == "0" {
				checked = true
			}
			if freed > 0 || checked {
				break
			}
		}
		if checked && r.hlen < r.known {
			// Entries gone from the hash behind the indexes' back.
			for _, s := range []string{c.idx.All, c.idx.Bad} {
				if err := c.clean(ctx, s, "", ""); err != nil {
					return nil, err
				}
			}
		}
		if freed == 0 {
			return nil, nil
		}
		cursor, set = "", "0"
	}
}

func parseClaimReply(res []rueidis.RedisMessage) (claimReply, error) {
	var r claimReply
	if len(res) != 8 {
		return r, unexpectedReply("pool claim", len(res))
	}
	var err error
	if r.cursor, err = res[1].ToString(); err != nil {
		return r, err
	}
	si, _ := res[2].AsInt64()
	r.set = strconv.FormatInt(si, 10)
	r.hlen, _ = res[3].AsInt64()
	r.known, _ = res[4].AsInt64()
	r.foreign, _ = res[5].AsInt64()
	r.freed, _ = res[6].AsInt64()
	more, _ := res[7].AsInt64()
	r.more = more == 1
	return r, nil
}

// checkStep runs one bounded step of pool_check.lua and returns the next
// cursor and how many items became free.
func (c *poolCore) checkStep(ctx context.Context, cursor string) (string, int64, error) {
	next, freed, _, err := c.checkStepFixed(ctx, cursor, poolIndexStep)
	return next, freed, err
}

func (c *poolCore) checkStepFixed(ctx context.Context, cursor string, count int) (next string, freed, fixed int64, err error) {
	k, a := c.std()
	res, err := poolCheckScript.Exec(ctx, c.f.client, k, append(a, cursor, strconv.Itoa(count))).ToArray()
	if err != nil {
		return "", 0, 0, err
	}
	if len(res) != 3 {
		return "", 0, 0, unexpectedReply("pool check", len(res))
	}
	if next, err = res[0].ToString(); err != nil {
		return "", 0, 0, err
	}
	freed, _ = res[1].AsInt64()
	fixed, _ = res[2].AsInt64()
	if freed > 0 && !c.f.cache {
		c.f.watch.WakeOne(c.idx.Signal)
	}
	return next, freed, fixed, nil
}

// abandon undoes, in the background, a claim whose script may still run
// (or have run) under token after its caller gave up: pool_abandon.lua
// frees the item if the token took it, and otherwise leaves a tombstone
// that makes the late script take nothing. It retries until it gets an
// answer, the hold and margin have passed, or the Fleet closes.
func (c *poolCore) abandon(token string, hold time.Duration) {
	k, a := c.std(c.tokenKey(token))
	a = append(a, token, millis(hold+poolTombMargin))
	c.f.abandon("claim "+c.name, hold+poolTombMargin, func(ctx context.Context) error {
		return poolAbandonScript.Exec(ctx, c.f.client, k, a).Error()
	})
}

// waiters is the chain of a pool handle's waiting claims: a wake-up reaches
// one of them, which hands it on, when it finds no match, to the next
// waiter with other filters, until each kind of query has looked once. A
// failed look tells nothing about a waiter with other filters, but all
// about those with the same.
type waiters struct {
	mu   sync.Mutex
	list []*waiter
}

type waiter struct {
	key   string               // the query's filters, canonical
	relay chan map[string]bool // a wake-up handed on, with the keys that looked
}

func (w *waiters) add(key string) *waiter {
	me := &waiter{key: key, relay: make(chan map[string]bool, 1)}
	w.mu.Lock()
	w.list = append(w.list, me)
	w.mu.Unlock()
	return me
}

func (w *waiters) remove(me *waiter) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i, x := range w.list {
		if x == me {
			w.list = append(w.list[:i], w.list[i+1:]...)
			return
		}
	}
}

// pass hands a wake-up that me looked at in vain on to the next waiter
// whose filters have not looked yet.
func (w *waiters) pass(me *waiter, looked map[string]bool) {
	if looked == nil {
		looked = map[string]bool{}
	}
	looked[me.key] = true
	w.mu.Lock()
	defer w.mu.Unlock()
	i := slices.Index(w.list, me)
	for j := 1; i >= 0 && j < len(w.list); j++ {
		next := w.list[(i+j)%len(w.list)]
		if !looked[next.key] {
			select {
			case next.relay <- looked:
			default:
			}
			return
		}
	}
}

// waitKey is the query's filters, canonical: waiters with equal keys find
// the same items.
func (q *Query[P, T]) waitKey() string {
	var b strings.Builder
	for _, f := range q.filters {
		b.WriteString(f.field)
		b.WriteByte(0)
		b.WriteString(f.canon)
		b.WriteByte(0)
	}
	return b.String()
}

// wait claims an item as soon as one is put or released, within opts.Wait.
func (q *Query[P, T]) wait(ctx context.Context, opts ClaimOptions) (*Claim[P, T], error) {
	c := q.pool.core
	f := c.f
	deadline := time.NewTimer(opts.Wait)
	defer deadline.Stop()
	sig := f.watch.Join(c.idx.Signal)
	defer f.watch.Leave(c.idx.Signal, sig)
	// A put by a client that does not bump the signal still changes the hash.
	hash := f.watch.Join(c.hash)
	defer f.watch.Leave(c.hash, hash)
	me := c.waiters.add(q.waitKey())
	defer c.waiters.remove(me)
	bo := backoff{min: 5 * time.Millisecond, max: c.opts.PollInterval}
	woken, looked := false, map[string]bool(nil) // by a wake-up; who looked at it
	for {
		wait := bo.next()
		if f.cache {
			// Arm the server's invalidations before looking, so that a put
			// or release after the look wakes us.
			if _, err := f.hint(ctx, c.idx.Signal); err != nil && ctx.Err() == nil {
				return nil, err
			}
			r := f.client.DoCache(ctx, noTTL(f.client.B().Hlen().Key(c.hash).Cache()), hintTTL)
			if err := r.Error(); err != nil && !rueidis.IsRedisNil(err) && ctx.Err() == nil {
				return nil, err
			}
			wait = c.opts.PollInterval
		}
		if err := f.alive(ctx); err != nil {
			return nil, err
		}
		cl, err := q.try(ctx, opts.Hold, false)
		if cl != nil || err != nil {
			return cl, err
		}
		if woken {
			c.waiters.pass(me, looked)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-deadline.C:
			t.Stop()
			// The last look checks the whole hash if another client wrote
			// it lately: "none" means none is free.
			return q.try(ctx, opts.Hold, true)
		case <-f.done:
			t.Stop()
			return nil, ErrClosed
		case <-sig.One():
			woken, looked = true, nil
		case <-hash.One():
			woken, looked = true, nil
		case looked = <-me.relay:
			woken = true
		case <-t.C:
			woken, looked = false, nil
		}
		t.Stop()
	}
}

// Release ends the claim: the item is free for others at once. It returns
// ErrLeaseLost, changing nothing, when the claim already ended or its
// lease ran out.
func (c *Claim[P, T]) Release(ctx context.Context) error {
	p := c.core
	if err := p.f.alive(ctx); err != nil {
		return opErr("pool release", p.name, err)
	}
	id := c.Item.ID
	k, a := p.std(p.claim+id, p.owner(id), p.tokenKey(c.token))
	n, err := poolReleaseScript.Exec(ctx, p.f.client, k, append(a, c.token, id)).AsInt64()
	if err != nil {
		return opErr("pool release", p.name, err)
	}
	c.clock.Lose()
	if n != 1 {
		return opErr("pool release", p.name, fmt.Errorf("%w: item %q", ErrLeaseLost, id))
	}
	c.ended.Store(true)
	if !p.f.cache {
		p.f.watch.WakeOne(p.idx.Signal)
	}
	return nil
}

// Extend sets the claim's lease to hold from now. It returns
// ErrLeaseLost, changing nothing, when the claim already ended or its
// lease ran out; ErrInvalidArgument for hold <= 0.
func (c *Claim[P, T]) Extend(ctx context.Context, hold time.Duration) error {
	p := c.core
	if err := p.f.alive(ctx); err != nil {
		return opErr("pool extend", p.name, err)
	}
	if hold <= 0 {
		return opErr("pool extend", p.name, fmt.Errorf("%w: hold %v must be > 0", ErrInvalidArgument, hold))
	}
	id := c.Item.ID
	k, a := p.std(p.claim+id, p.owner(id))
	sent := mono.Now()
	n, err := poolExtendScript.Exec(ctx, p.f.client, k, append(a, c.token, millis(hold), id)).AsInt64()
	if err != nil {
		return opErr("pool extend", p.name, err)
	}
	if n != 1 {
		c.clock.Lose()
		return opErr("pool extend", p.name, fmt.Errorf("%w: item %q", ErrLeaseLost, id))
	}
	c.clock.Prove(sent, hold)
	return nil
}

// MarkBad removes the claimed item from the pool for good, for every
// reader, and ends the claim: for an item found unusable (a rejected
// cookie, a dead account). reason is for the caller's own logs: the
// documented schema has no place for it, so fleet does not store it. It
// returns ErrLeaseLost, changing nothing, when the claim already ended
// or its lease ran out.
func (c *Claim[P, T]) MarkBad(ctx context.Context, reason string) error {
	_ = reason
	p := c.core
	if err := p.f.alive(ctx); err != nil {
		return opErr("pool mark bad", p.name, err)
	}
	id := c.Item.ID
	k, a := p.std(p.claim+id, p.owner(id), p.tokenKey(c.token))
	n, err := poolMarkBadScript.Exec(ctx, p.f.client, k, append(a, c.token, id)).AsInt64()
	if err != nil {
		return opErr("pool mark bad", p.name, err)
	}
	c.clock.Lose()
	if n != 1 {
		return opErr("pool mark bad", p.name, fmt.Errorf("%w: item %q", ErrLeaseLost, id))
	}
	c.ended.Store(true)
	return nil
}

// Do claims an item as Claim does, runs fn with it, and always ends the
// claim afterwards (Release, unless fn already released it or marked it
// bad), even when fn panics: Go's form of the
// `async with pool.where(...).claim(...) as item` of fleet's own design.
// fn's context ends, with cause ErrLeaseLost, a small margin (Hold/10, at
// most 1 s) before the claim's Deadline, as Lock.Do's does; with
// opts.KeepAlive the claim is extended every Hold/3 while fn runs, so the
// context ends only when extensions fail for a whole lease (Redis
// unreachable) or one finds the claim lost. It reports whether an item was
// claimed; when none was, fn does not run and the error is nil. The error
// is fn's, joined with a failed release's, or with ErrLeaseLost when the
// lease was lost while fn ran.
func (q *Query[P, T]) Do(ctx context.Context, opts ClaimOptions, fn func(ctx context.Context, c *Claim[P, T]) error) (claimed bool, err error) {
	c, err := q.Claim(ctx, opts)
	if c == nil || err != nil {
		return false, err
	}
	keep := lease.Keep{Clock: &c.clock, Margin: lease.Margin(opts.Hold),
		Extend: func(ctx context.Context) error { return c.Extend(ctx, opts.Hold) }}
	if opts.KeepAlive {
		keep.Every = max(opts.Hold/3, time.Millisecond)
	}
	return true, runLeased(ctx, leased{op: "pool do", name: c.core.name, keep: keep, hold: opts.Hold,
		end: func(ctx context.Context) error {
			if c.ended.Load() {
				return nil
			}
			return c.Release(ctx)
		},
		abandon: func() {
			if !c.ended.Load() {
				c.core.abandon(c.token, opts.Hold)
			}
		}}, func(ctx context.Context) error { return fn(ctx, c) })
}

// Do claims any item of the pool and runs fn with it: Where().Do.
func (p *Pool[P, T]) Do(ctx context.Context, opts ClaimOptions, fn func(ctx context.Context, c *Claim[P, T]) error) (bool, error) {
	return p.Where().Do(ctx, opts, fn)
}
