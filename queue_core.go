package fleet

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/fleet-go/fleet/internal/engine"
	"github.com/fleet-go/fleet/internal/keys"
)

// PriorityStep is how much earlier a task of priority p counts as ready
// than it became ready, per level (SubmitOptions.Priority): a task of
// priority 9 goes before the normal tasks that became ready less than 9
// minutes before it, and after older ones.
const PriorityStep = time.Minute

// queueCore is the root's untyped queue, or one shard of it: the engine's
// core (internal/engine: reserve, take, the ends, shards, the rate limit,
// the group commit) and what the root's features read of the queue: its
// Fleet, name, keys and QueueOptions, and the error every call returns
// for a bad name or options. Queue[T] is a queueCore and a codec; the
// worker, the sweeper, Sync and the admin calls (Fleet.Queue) reach the
// queue through it. The root's queue features are its methods, in files
// of their own (submit, cancel, lookup, pause, groups, the dead letters).
type queueCore struct {
	fleet *Fleet
	name  string
	key   keys.Queue // the keys of the shard
	opts  QueueOptions
	err   error
	// byName: made by Fleet.Queue for an operator's call, not by NewQueue:
	// Pause and Resume refuse a queue the registry does not know.
	byName bool
	e      *engine.Queue // nil only without a Fleet (err says so)

	root *queueCore // the queueCore a shard's belongs to; nil for a queue's own
	subs sync.Map   // shard index -> *queueCore, the shards' made so far
}

// newQueueCore returns the core of queue name with opts (defaults not yet
// filled in): a bad name or options is kept in err.
func newQueueCore(f *Fleet, name string, opts QueueOptions) *queueCore {
	c := &queueCore{fleet: f, name: name}
	c.opts, c.err = opts.withDefaults()
	if err := keys.Check(keys.KindQueue, name); err != nil {
		c.err = err
	}
	if c.err == nil && c.opts.Shards > 1 && !f.keys.Tagged() {
		c.err = fmt.Errorf("%w: QueueOptions.Shards %d needs the tagged layout: the compat layout's keys carry no hash tag, so its shards could not spread over a cluster (open the Fleet with Layout: LayoutTagged)", ErrInvalidOptions, c.opts.Shards)
	}
	if err := c.opts.rateLimit(f); err != nil && c.err == nil {
		c.err = err
	}
	o := c.opts
	eo := engine.Options{MaxAttempts: o.MaxAttempts, Lease: o.Lease, BackoffBase: o.BackoffBase, BackoffMax: o.BackoffMax,
		DeadMax: o.DeadMax, MaxPayloadBytes: o.MaxPayloadBytes, Retention: o.Retention, Shards: o.Shards,
		GlobalCap: o.GlobalConcurrency, Policy: o.policyJSON()}
	if o.RateLimit != nil && c.err == nil {
		eo.RateLimit = queueLimiter{o.RateLimit}
	}
	c.e = f.eng.Queue(name, eo)
	c.key = *c.e.Key()
	return c
}

// coreOf returns the core of queue name: the one of the NewQueue that
// this process made for the name, else a core of its own with opts,
// marked byName.
func (f *Fleet) coreOf(name string, opts QueueOptions) *queueCore {
	if e, ok := f.queues.Load(name); ok {
		return e.(queueEntry).core()
	}
	c := newQueueCore(f, name, opts)
	c.byName = true
	return c
}

// shardCore returns the root's core of e, a shard's engine core that a
// reservation names: the one of the NewQueue this process made for its
// queue (coreOf), at e's shard.
func (f *Fleet) shardCore(e *engine.Queue) *queueCore {
	return f.coreOf(e.Name(), QueueOptions{}).sub(e.Shard())
}

// Name returns the queue's name.
func (q *queueCore) Name() string { return q.name }

// Err returns the error every call of the Queue would return for its name
// or options (ErrInvalidName, ErrInvalidArgument), or nil.
func (q *queueCore) Err() error { return q.err }

// Options returns the options in force, defaults filled in.
func (q *queueCore) Options() QueueOptions { return q.opts }

func (q *queueCore) ready(ctx context.Context) error {
	if q.err != nil {
		return q.err
	}
	return q.fleet.alive(ctx)
}

// known refuses, with ErrQueueNotFound, an operator's call on a handle of
// Fleet.Queue (byName) for a queue that the registry (fleet:queues) does
// not know, before it writes anything; a NewQueue handle's queue is known.
func (q *queueCore) known(ctx context.Context) error {
	if !q.byName {
		return nil
	}
	c := q.fleet.client
	known, err := c.Do(ctx, c.B().Sismember().Key(q.fleet.keys.Queues()).Member(q.name).Build()).AsBool()
	if err != nil {
		return err
	}
	if !known {
		return fmt.Errorf("%w: %q is not in the queue registry", ErrQueueNotFound, q.name)
	}
	return nil
}

// Policy returns the policy stored for the queue, which every process
// applies, and whether one is stored (none until a handle of the queue
// first reached Redis). May return ErrUnavailable.
func (q *queueCore) Policy(ctx context.Context) (QueuePolicy, bool, error) {
	if err := q.ready(ctx); err != nil {
		return QueuePolicy{}, false, opErr("policy", q.name, err)
	}
	p, ok, err := q.fleet.storedPolicy(ctx, q.key.Policy)
	return p, ok, opErr("policy", q.name, err)
}

// register adds the queue to the registry and stores its policy
// (engine.Queue.Register).
func (q *queueCore) register(ctx context.Context) error { return q.e.Register(ctx) }

// keys returns the keys of q's shard as every queue script takes them,
// then extra (engine.Queue.Keys).
func (q *queueCore) keys(extra ...string) []string { return q.e.Keys(extra...) }

// wakeLocal wakes a local waiter after a push when invalidations are off.
func (q *queueCore) wakeLocal() { q.e.WakeLocal() }

// sub returns the handle of shard i (q itself for shard 0).
func (q *queueCore) sub(i int) *queueCore {
	if q.root != nil {
		return q.root.sub(i)
	}
	if i == 0 {
		return q
	}
	if s, ok := q.subs.Load(i); ok {
		return s.(*queueCore)
	}
	e := q.e.Sub(i)
	s := &queueCore{fleet: q.fleet, name: q.name, key: *e.Key(), opts: q.opts, err: q.err, byName: q.byName, e: e, root: q}
	got, _ := q.subs.LoadOrStore(i, s)
	return got.(*queueCore)
}

// top returns the queue's own handle.
func (q *queueCore) top() *queueCore {
	if q.root != nil {
		return q.root
	}
	return q
}

// spanOf returns how many shards the reserves of the queue look at
// (engine.Queue.SpanOf).
func (q *queueCore) spanOf(ctx context.Context) int { return q.e.SpanOf(ctx) }

// shardsOf returns the handles of every shard the queue's reserves look at.
func (q *queueCore) shardsOf(ctx context.Context) []*queueCore {
	n := q.spanOf(ctx)
	out := make([]*queueCore, n)
	for i := range out {
		out[i] = q.sub(i)
	}
	return out
}

// pick returns the shard handle a submit goes to: by key (hashed) when
// one is given, else round-robin (engine.Queue.Pick).
func (q *queueCore) pick(key string) *queueCore { return q.sub(q.e.Pick(key).Shard()) }

// rateLimit checks QueueOptions.RateLimit against the queue's Fleet.
func (o QueueOptions) rateLimit(f *Fleet) error {
	switch l := o.RateLimit; {
	case l == nil:
		return nil
	case l.f != f:
		return fmt.Errorf("%w: QueueOptions.RateLimit %q belongs to another Fleet", ErrInvalidArgument, l.name)
	case l.err != nil:
		return within("QueueOptions.RateLimit", l.err)
	}
	return nil
}

// queueLimiter is a Limiter as the engine takes a queue's rate limit.
type queueLimiter struct{ l *Limiter }

// Book takes up to n of the limiter's tokens for a reserve.
func (a queueLimiter) Book(ctx context.Context, n int) (int, time.Duration, error) {
	return a.l.book(ctx, n)
}

// Refund gives back n tokens a reserve took and did not use, within
// refundTimeout.
func (a queueLimiter) Refund(ctx context.Context, n int) error {
	ctx, cancel := context.WithTimeout(ctx, refundTimeout)
	defer cancel()
	return a.l.refund(ctx, n)
}
