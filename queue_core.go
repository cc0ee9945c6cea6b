package fleet

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/fleet-go/fleet/internal/keys"
	"github.com/fleet-go/fleet/internal/lease"
	"github.com/fleet-go/fleet/internal/mono"
	"github.com/fleet-go/fleet/internal/taskbody"
)

// queueCore is the untyped part of a queue, or of one shard of it: its
// name, keys and options, the policy it stores, its shard state, and the
// one reserve (here) and the one end-of-reservation family (ack, nack,
// dead letter, release, snooze, extend: queue_end.go) that every caller
// goes through: Queue[T] (which is a queueCore and a codec), the worker,
// the sweeper, Sync and the admin calls (Fleet.Queue). Its exported
// methods are Queue's. Read with scripts/queue_reserve.lua,
// scripts/queue_end.lua and scripts/lib_queue.lua, it is the whole queue;
// the other queue_*.go files add its features (submit, shards, limits,
// cancel, lookup, pause, the dead letters).
type queueCore struct {
	fleet *Fleet
	name  string
	key   keys.Queue
	// skeys is key as every queue script takes it (KEYS[1..8], keys).
	skeys []string
	opts  QueueOptions
	err   error
	// byName: made by Fleet.Queue for an operator's call, not by NewQueue:
	// Pause and Resume refuse a queue the registry does not know.
	byName bool

	policy     string       // the stored policy these options spell (policyJSON)
	published  atomic.Bool  // this handle's policy was written once
	registered atomic.Int64 // unix ms of the last registration (register)
	sched      *schedLook   // when reserves look at :scheduled (shared per name)
	booked     limitBooking // a rate-limit token booked ahead (queue_limit.go)
	calls      callGroup    // Task.Ack's and Queue.Reserve's group commit (queue_callgroup.go)

	// Sharding (queue_shard.go).
	root        *queueCore    // the core a shard's core belongs to; nil for a queue's own
	subs        sync.Map      // shard index -> *queueCore, the shards' cores made so far
	submitTurn  atomic.Uint64 // round-robin counter of submits
	reserveTurn atomic.Uint64 // rotation counter of reserves
	last        atomic.Int64  // the shard that gave the last reserve tasks
	listenersMu sync.Mutex
	listeners   map[*shardListener]struct{} // listenPending's listeners, grown with the shard count
	spanSeen    atomic.Int64                // the stored shard high-water mark last read (0: none read)
	spanSeenAt  atomic.Int64                // mono.Now of that read
}

// newQueueCore returns the core of queue name with opts (defaults not yet
// filled in): a bad name or options is kept in err.
func newQueueCore(f *Fleet, name string, opts QueueOptions) *queueCore {
	c := &queueCore{fleet: f, name: name, key: f.keys.Queue(name), sched: f.schedLook(name)}
	c.skeys = scriptKeys(&c.key)
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
	c.policy = c.opts.policyJSON()
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

// register adds the queue to the fleet-wide registry (fleet:queues), so
// that a sweeper finds it even after the registry was lost, and stores the
// queue's policy (fleet:queue:<name>:policy): the first time a handle
// reaches Redis (a submit or a reserve) it writes its own options over what
// is stored (the newest process wins), and later, from submits, only where
// none is stored (after a loss). It runs at most about once a second per
// handle, in one round trip. On a cluster the registry lives in another
// slot than the queue: these are commands of their own, never part of a
// queue script.
func (q *queueCore) register(ctx context.Context) error {
	q = q.top() // a shard's core: its queue's
	now := time.Now().UnixMilli()
	last := q.registered.Load()
	if now-last < 1000 || !q.registered.CompareAndSwap(last, now) {
		return nil
	}
	c := q.fleet.client
	var pol rueidis.Completed
	if q.published.Load() {
		pol = c.B().Set().Key(q.key.Policy).Value(q.policy).Nx().Build()
	} else {
		pol = c.B().Set().Key(q.key.Policy).Value(q.policy).Build()
	}
	for _, r := range c.DoMulti(ctx, c.B().Sadd().Key(q.fleet.keys.Queues()).Member(q.name).Build(), pol) {
		if err := r.Error(); err != nil && !rueidis.IsRedisNil(err) {
			q.registered.Store(0)
			return err
		}
	}
	if q.opts.Shards > 1 {
		if err := q.shardRegister(ctx, q.published.Load()); err != nil {
			q.registered.Store(0)
			return err
		}
	}
	q.published.Store(true)
	return nil
}

// reserveReq is what one reserve asks for.
type reserveReq struct {
	n        int            // tasks to take at most; 0 with acks: only ack
	wantLeft bool           // learn whether tasks are left pending (reserved.drained)
	owner    string         // the worker ("type|id") whose name goes before the tokens; "" for none
	acks     []*reservation // acked first, in the same call: tasks of this core's shard
	// shared: Queue.Reserve's, which may share a call with the raw calls
	// beside it (groupReserve) where the queue allows (queueCore.reserve).
	shared bool
}

// reserved is what one reserve did and learned.
type reserved struct {
	tasks     []*reservation
	drained   bool          // nothing was left pending (asked for with wantLeft)
	nextReady time.Duration // until the next scheduled task is due; -1: none, or not looked at
	acks      []endCode     // each ack's code, in order: endDone, or endLost (nil: the call failed)
	limited   time.Duration // the rate limit has no token until then (queue_limit.go); 0: none
	capped    bool          // GlobalConcurrency is reached: the tasks wait for a permit (the signal moves when one comes back)
	permits   bool          // the tasks taken hold GlobalConcurrency permits
	blocked   time.Duration // every group with tasks is at its limit, or GlobalConcurrency is reached: none can go before then unless the queue's signal moves; 0: none
}

// reserve is the queue's one reserve. It acks req.acks and takes up to
// req.n tasks, in one script call per shard (take): from the queue's
// shards in turn when the queue is sharded (spread, queue_shard.go), and
// under the queue's rate limit (QueueOptions.RateLimit) when it has one:
// it first takes the limiter's tokens (limitTake, queue_limit.go), takes
// that many tasks at most, and gives back the tokens of the tasks it did
// not find, so an empty queue costs the limiter nothing. With no token to
// use yet it takes nothing, and says in reserved.limited how long until it
// may: the fetcher and Reserve sleep that long instead of spinning (the
// token it booked meanwhile counts as taken, so a reserve that comes late
// loses no rate). A call with acks takes from a queue without either
// (takesWithAcks). A shared reserve (Queue.Reserve's) of a queue without
// either shares its call with the raw calls beside it (groupReserve);
// on a sharded or rate-limited queue it goes alone, as before.
func (q *queueCore) reserve(ctx context.Context, req reserveReq) (reserved, error) {
	lim := q.opts.RateLimit
	if lim == nil || req.n == 0 || len(req.acks) > 0 {
		if len(req.acks) == 0 && q.root == nil && req.n > 0 && q.spanOf(ctx) > 1 {
			return q.spread(ctx, req)
		}
		if req.shared && lim == nil && req.n > 0 && len(req.acks) == 0 && req.owner == "" && !req.wantLeft {
			return q.groupReserve(ctx, req)
		}
		return q.take(ctx, req)
	}
	got, wait, err := q.limitTake(ctx, req.n)
	if err != nil || got == 0 {
		return reserved{nextReady: -1, limited: wait}, err
	}
	req.n = got
	var res reserved
	if q.root == nil && q.spanOf(ctx) > 1 {
		res, err = q.spread(ctx, req)
	} else {
		res, err = q.take(ctx, req)
	}
	if unused := got - len(res.tasks); unused > 0 {
		// A refund that fails only slows the limiter down for a moment.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), refundTimeout)
		_ = lim.refund(rctx, unused)
		cancel()
	}
	return res, err
}

// takesWithAcks reports whether a call that acks this queue's tasks may
// take its next tasks too: not on a sharded queue, whose reserves spread
// over the shards, nor on a rate-limited one, whose takes need tokens.
func (q *queueCore) takesWithAcks(ctx context.Context) bool {
	return q.root == nil && q.opts.RateLimit == nil && q.spanOf(ctx) <= 1
}

// take runs queue_reserve.lua once on q's shard: it acks req.acks, then
// moves the due scheduled tasks and takes up to req.n tasks, for owner
// (whose name goes before the lease tokens, owner/<random>.<i>, so that
// Lookup can say which worker holds a task). Tasks whose reply came too
// late to use their lease (less the margin: held back, a stalled server, a
// paused process) are handed back uncounted and not returned. When the
// call ends without a reply (ctx ended, the connection broke), the script
// may still run, or have run: abandonReserve hands back what it took. With
// nothing to take it only acks (ackOnly: queue_ack.lua, the same step).
func (q *queueCore) take(ctx context.Context, req reserveReq) (reserved, error) {
	res := reserved{nextReady: -1}
	if !q.top().published.Load() {
		// A consumer stores its policy once; after that only submits keep
		// the registration (so a reserve never waits on another round trip).
		if err := q.register(ctx); err != nil {
			return res, err
		}
	}
	if req.n == 0 {
		return q.ackOnly(ctx, req)
	}
	prefix := newToken() + "."
	if req.owner != "" {
		prefix = req.owner + "/" + prefix
	}
	sent := mono.Now()
	args := reserveArgs{n: req.n, lease: q.opts.Lease, prefix: prefix, deadMax: q.opts.DeadMax, wantLeft: req.wantLeft}
	if q.sched.now(sent) {
		args.move = 1000
	}
	ks, argv, order := q.reserveCall(req.acks, args)
	raw, err := queueReserveScript.Exec(ctx, q.fleet.client, ks, argv).ToArray()
	if err != nil {
		if outcomeUnknown(err) {
			q.abandonReserve(prefix)
		}
		return res, err
	}
	reply, err := readReserveReply(raw)
	res.acks, _ = ackCodes(reply.acked, order) // nil when the reply has none: unknown
	q.acked(req.acks, res.acks)
	if err == nil {
		err = reply.failure()
	}
	if err != nil {
		return res, err
	}
	q.readLook(&reply, sent, &res)
	if reply.tasks() == 0 {
		return res, nil
	}
	var clock lease.Clock
	clock.Prove(sent, q.opts.Lease)
	if !clock.Usable(lease.Margin(q.opts.Lease)) {
		// The reply came too late: another may get these tasks any moment.
		// Never hand them out; give them back uncounted if still ours.
		q.abandonReserve(prefix)
		return res, nil
	}
	res.tasks, err = q.reservations(ctx, &reply, sent, res.permits)
	return res, err
}

// readLook reads what a take's reply says of the queue: whether tasks are
// left pending, when the next scheduled task is due (recorded in the
// queue's schedLook, so that the next reserves look at :scheduled only
// when something may be due), when a group's limit or GlobalConcurrency
// may let a task go (res.blocked), and the queue's signal (schedLook's
// too: cachedPending compares it).
func (q *queueCore) readLook(reply *reserveReply, sent int64, res *reserved) {
	res.permits = reply.permits()
	res.drained, res.capped = reply.drained(), reply.capped()
	if reply.hasSignal {
		q.sched.signal.Store(reply.signal)
	}
	if reply.wake != "" {
		if at, err := strconv.ParseFloat(reply.wake, 64); err == nil {
			res.blocked = max(time.Duration(at-float64(reply.now))*time.Millisecond, time.Millisecond)
		}
	}
	switch next := reply.nextReady; next {
	case "-": // not looked at: what the last look saw still holds
		if due := q.sched.due.Load(); due != 0 {
			res.nextReady = max(time.Duration(due-sent), 0)
		}
	case "":
		q.sched.looked(sent, -1)
	default:
		if s, err := strconv.ParseFloat(next, 64); err == nil {
			res.nextReady = max(time.Duration(s*1000-float64(reply.now))*time.Millisecond, 0)
		}
		q.sched.looked(sent, res.nextReady)
	}
}

// reservations makes the reservations of the tasks a take's reply took,
// leased from sent (the reply's now is the server's clock in unix ms when
// the script ran); permits says the tasks hold GlobalConcurrency permits. A body that is not a task is poison, and a task
// whose ExpiresAt passed by the server's clock expired: either is buried
// under its very lease, uncounted, so that it never runs or loops; the
// error is the last burial's when no task is left.
func (q *queueCore) reservations(ctx context.Context, reply *reserveReply, sent int64, permits bool) ([]*reservation, error) {
	now := reply.now
	rs := make([]*reservation, 0, reply.tasks())
	var buryErr error
	for i := range reply.tasks() {
		t := reply.task(i)
		r := &reservation{core: q, permit: permits, id: t.id, token: t.token, body: t.body}
		r.clock.Prove(sent, q.opts.Lease)
		w, err := taskbody.Parse(r.body)
		if err == nil && w.ID != r.id {
			err = errors.New("body id changed") // cannot happen: the script read it
		}
		if err == nil && w.ExpiresAt > 0 {
			left := int64(w.ExpiresAt*1000) - now
			if left <= 0 {
				err = errExpired
			}
			r.expires = sent + left*int64(time.Millisecond)
		}
		r.attempts, r.dedup, r.group = w.Attempts, w.Dedup, w.Group // for the burial too
		if err != nil {
			if berr := r.bury(ctx, err.Error()); berr != nil {
				buryErr = berr
			}
			continue
		}
		r.payload, r.unique, r.trace = w.Payload, w.UniqueMS, w.Trace
		r.maxAttempts, r.timeout, r.meta = w.MaxAttempts, time.Duration(w.TimeoutMS)*time.Millisecond, w.Meta
		r.track = w.Track
		rs = append(rs, r)
	}
	if len(rs) > 0 {
		buryErr = nil
	}
	return rs, buryErr
}

// ackOnly is take with nothing to take: the acks of req through
// queue_ack.lua, which runs the reserve's ack step alone.
func (q *queueCore) ackOnly(ctx context.Context, req reserveReq) (reserved, error) {
	res := reserved{nextReady: -1}
	keep, args, order := ackArgs(req.acks, make([]string, 0, 1+3*len(req.acks)))
	acked, err := queueAckScript.Exec(ctx, q.fleet.client, q.keys(keep...), args).ToString()
	if err != nil {
		return res, err
	}
	res.acks, err = ackCodes(acked, order)
	q.acked(req.acks, res.acks)
	return res, err
}

// reserveCall spells a take's KEYS and ARGV (queue_reserve.lua): args,
// then the acks as ackArgs spells them.
func (q *queueCore) reserveCall(acks []*reservation, args reserveArgs) (ks, argv []string, order []int) {
	argv = args.appendTo(make([]string, 0, 7+3*len(acks)))
	keep, argv, order := ackArgs(acks, argv)
	return q.keys(append([]string{q.key.Call + args.prefix}, keep...)...), argv, order
}

// abandonReserve hands back, in the background, what the reserve call with
// token prefix took, or tombstones the call so that it takes nothing if it
// runs later (queue_abandon.lua), for as long as a lease (after that the
// sweeper has the tasks anyway); see Fleet.abandon.
func (q *queueCore) abandonReserve(prefix string) {
	ks := q.keys(q.key.Call + prefix)
	args := []string{prefix, millis(q.opts.Lease + time.Minute)}
	q.fleet.abandon("reserve "+q.name, q.opts.Lease, func(ctx context.Context) error {
		n, err := queueAbandonScript.Exec(ctx, q.fleet.client, ks, args).AsInt64()
		if err == nil && n > 0 {
			q.wakeLocal()
		}
		return err
	})
}

var (
	queueReserveScript = newScript("queue_reserve.lua")
	queueAckScript     = newScript("queue_ack.lua")
	queueAbandonScript = newScript("queue_abandon.lua")
)

// keys returns the keys of q's shard in queueScriptKeys' order, then
// extra. The eight are spelled once per core (skeys); callers must not
// change the slice.
func (q *queueCore) keys(extra ...string) []string {
	if len(extra) == 0 {
		return q.skeys
	}
	out := make([]string, len(q.skeys), len(q.skeys)+len(extra))
	copy(out, q.skeys)
	return append(out, extra...)
}
