package engine

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/fleet-go/fleet/internal/argv"
	"github.com/fleet-go/fleet/internal/fault"
	"github.com/fleet-go/fleet/internal/keys"
	"github.com/fleet-go/fleet/internal/lease"
	"github.com/fleet-go/fleet/internal/mono"
	"github.com/fleet-go/fleet/internal/taskbody"
)

// Queue is a queue, or one shard of it, untyped: its name, keys and
// options, the policy it stores, its shard state, and the one reserve
// (here) and the one end-of-reservation family (ack, nack, dead letter,
// release, snooze, extend: end.go) that every caller goes through. The
// root's Queue[T] is a Queue and a codec; the worker, the sweeper, Sync
// and the admin calls reach it through the root's queueCore. Read with
// scripts/queue_reserve.lua, scripts/queue_end.lua and
// scripts/lib_queue.lua, it is the whole queue; the root adds its
// features (submit, cancel, lookup, pause, the dead letters).
type Queue struct {
	env  *Env
	name string
	key  keys.Queue
	// skeys is key as every queue script takes it (KEYS[1..8], keys).
	skeys []string
	opts  Options

	published  atomic.Bool  // this handle's policy was written once
	registered atomic.Int64 // unix ms of the last registration (register)
	sched      *schedLook   // when reserves look at :scheduled (shared per name)
	booked     limitBooking // a rate-limit token booked ahead (limit.go)
	calls      callGroup    // Task.Ack's and Queue.Reserve's group commit (callgroup.go)

	// Sharding (shard.go).
	root        *Queue        // the core a shard's core belongs to; nil for a queue's own
	shard       int           // the shard's index (Sub); 0 for a queue's own
	subs        sync.Map      // shard index -> *Queue, the shards' cores made so far
	submitTurn  atomic.Uint64 // round-robin counter of submits
	reserveTurn atomic.Uint64 // rotation counter of reserves
	last        atomic.Int64  // the shard that gave the last reserve tasks
	listenersMu sync.Mutex
	listeners   map[*shardListener]struct{} // ListenPending's listeners, grown with the shard count
	spanSeen    atomic.Int64                // the stored shard high-water mark last read (0: none read)
	spanSeenAt  atomic.Int64                // mono.Now of that read
}

// Options are what the engine reads of a queue's options (the root's
// QueueOptions, defaults filled in and checked).
type Options struct {
	MaxAttempts     int
	Lease           time.Duration
	BackoffBase     time.Duration
	BackoffMax      time.Duration
	DeadMax         int
	MaxPayloadBytes int
	Retention       time.Duration
	Shards          int
	// GlobalCap is QueueOptions.GlobalConcurrency of a queue of more than
	// one shard: its fleet-wide permits (permit.go); 0: none (a queue of
	// one shard bounds its tasks in its reserve script).
	GlobalCap int
	// RateLimit, when not nil, limits the queue's reserves (limit.go).
	RateLimit Limiter
	// Policy is the policy these options spell, as stored in
	// fleet:queue:<name>:policy (register).
	Policy string
}

// Queue returns the core of queue name with o, which the caller checked
// (a valid name; Shards > 1 only in the tagged layout).
func (f *Env) Queue(name string, o Options) *Queue {
	c := &Queue{env: f, name: name, key: f.Keys.Queue(name), sched: f.schedLook(name), opts: o}
	c.skeys = ScriptKeys(&c.key)
	return c
}

// Name returns the queue's name.
func (q *Queue) Name() string { return q.name }

// Key returns the keys of q's shard.
func (q *Queue) Key() *keys.Queue { return &q.key }

// ready refuses a call once the Fleet closed, or once ctx ended.
func (q *Queue) ready(ctx context.Context) error { return q.env.Alive(ctx) }

// register adds the queue to the fleet-wide registry (fleet:queues), so
// that a sweeper finds it even after the registry was lost, and stores the
// queue's policy (fleet:queue:<name>:policy): the first time a handle
// reaches Redis (a submit or a reserve) it writes its own options over what
// is stored (the newest process wins), and later, from submits, only where
// none is stored (after a loss). It runs at most about once a second per
// handle, in one round trip. On a cluster the registry lives in another
// slot than the queue: these are commands of their own, never part of a
// queue script.
func (q *Queue) Register(ctx context.Context) error {
	q = q.top() // a shard's core: its queue's
	now := time.Now().UnixMilli()
	last := q.registered.Load()
	if now-last < 1000 || !q.registered.CompareAndSwap(last, now) {
		return nil
	}
	c := q.env.Client
	var pol rueidis.Completed
	if q.published.Load() {
		pol = c.B().Set().Key(q.key.Policy).Value(q.opts.Policy).Nx().Build()
	} else {
		pol = c.B().Set().Key(q.key.Policy).Value(q.opts.Policy).Build()
	}
	for _, r := range c.DoMulti(ctx, c.B().Sadd().Key(q.env.Keys.Queues()).Member(q.name).Build(), pol) {
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

// Req is what one reserve asks for.
type Req struct {
	N        int  // tasks to take at most; 0 with Acks: only ack
	WantLeft bool // learn whether tasks are left pending (Reserved.Drained)
	// Arm asks that the take arm the invalidation of the queue's pending
	// list in its own round trip (armedTake), when the Fleet caches and the
	// queue has never had groups or priorities: Reserved.Armed says it did,
	// and the caller needs no cached read of the list to arm it
	// (ArmedPending). A sharded queue's spread never arms.
	Arm   bool
	Owner string         // the worker ("type|id") whose name goes before the tokens; "" for none
	Acks  []*Reservation // acked first, in the same call: tasks of this core's shard
	// permits: the take's tasks hold the fleet-wide permits of a sharded
	// queue (permitSpread): its shard's script applies no bound of its own.
	permits bool
	// Shared: Queue.Reserve's, which may share a call with the raw calls
	// beside it (groupReserve) where the queue allows (Queue.Reserve).
	Shared bool
}

// Reserved is what one reserve did and learned.
type Reserved struct {
	Tasks     []*Reservation
	Drained   bool          // nothing was left pending (asked for with WantLeft)
	NextReady time.Duration // until the next scheduled task is due; -1: none, or not looked at
	Acks      []EndCode     // each ack's code, in order: EndDone, or EndLost (nil: the call failed)
	Limited   time.Duration // the rate limit has no token until then (limit.go); 0: none
	Capped    bool          // GlobalConcurrency is reached: the tasks wait for a permit (the signal moves when one comes back)
	Permits   bool          // the tasks taken hold GlobalConcurrency permits
	Blocked   time.Duration // every group with tasks is at its limit, or GlobalConcurrency is reached: none can go before then unless the queue's signal moves; 0: none
	Armed     bool          // the take armed the invalidation of the pending list (Req.Arm), which then held Pending tasks
	Pending   int64         // with Armed: the pending list's length read after the take
}

// Reserve is the queue's one reserve. It acks req.Acks and takes up to
// req.N tasks, in one script call per shard (take): from the queue's
// shards in turn when the queue is sharded (spread, shard.go), and
// under the queue's rate limit (QueueOptions.RateLimit) when it has one:
// it first takes the limiter's tokens (limitTake, limit.go), takes
// that many tasks at most, and gives back the tokens of the tasks it did
// not find, so an empty queue costs the limiter nothing. With no token to
// use yet it takes nothing, and says in reserved.Limited how long until it
// may: the fetcher and Reserve sleep that long instead of spinning (the
// token it booked meanwhile counts as taken, so a reserve that comes late
// loses no rate). A call with acks takes from a queue without either
// (TakesWithAcks). A shared reserve (Queue.Reserve's) of a queue without
// either shares its call with the raw calls beside it (groupReserve);
// on a sharded or rate-limited queue it goes alone, as before.
func (q *Queue) Reserve(ctx context.Context, req Req) (Reserved, error) {
	lim := q.opts.RateLimit
	if lim == nil || req.N == 0 || len(req.Acks) > 0 {
		if len(req.Acks) == 0 && q.root == nil && req.N > 0 && q.SpanOf(ctx) > 1 {
			if q.opts.GlobalCap > 0 {
				return q.permitSpread(ctx, req)
			}
			return q.spread(ctx, req)
		}
		if req.Shared && lim == nil && req.N > 0 && len(req.Acks) == 0 && req.Owner == "" && !req.WantLeft {
			return q.groupReserve(ctx, req)
		}
		return q.take(ctx, req)
	}
	got, wait, err := q.limitTake(ctx, req.N)
	if err != nil || got == 0 {
		return Reserved{NextReady: -1, Limited: wait}, err
	}
	req.N = got
	var res Reserved
	switch {
	case q.capShared(ctx):
		res, err = q.permitSpread(ctx, req)
	case q.root == nil && q.SpanOf(ctx) > 1:
		res, err = q.spread(ctx, req)
	default:
		res, err = q.take(ctx, req)
	}
	if unused := got - len(res.Tasks); unused > 0 {
		// A refund that fails only slows the limiter down for a moment;
		// the Limiter bounds it.
		_ = lim.Refund(context.WithoutCancel(ctx), unused)
	}
	return res, err
}

// TakesWithAcks reports whether a call that acks this queue's tasks may
// take its next tasks too: not on a sharded queue, whose reserves spread
// over the shards, nor on a rate-limited one, whose takes need tokens.
func (q *Queue) TakesWithAcks(ctx context.Context) bool {
	return q.root == nil && q.opts.RateLimit == nil && q.SpanOf(ctx) <= 1
}

// take runs queue_reserve.lua once on q's shard: it acks req.Acks, then
// moves the due scheduled tasks and takes up to req.N tasks, for owner
// (whose name goes before the lease tokens, owner/<random>.<i>, so that
// Lookup can say which worker holds a task). Tasks whose reply came too
// late to use their lease (less the margin: held back, a stalled server, a
// paused process) are handed back uncounted and not returned. When the
// call ends without a reply (ctx ended, the connection broke), the script
// may still run, or have run: abandonReserve hands back what it took. With
// nothing to take it only acks (ackOnly: queue_ack.lua, the same step).
func (q *Queue) take(ctx context.Context, req Req) (Reserved, error) {
	res := Reserved{NextReady: -1}
	if !q.top().published.Load() {
		// A consumer stores its policy once; after that only submits keep
		// the registration (so a reserve never waits on another round trip).
		if err := q.Register(ctx); err != nil {
			return res, err
		}
	}
	if req.N == 0 {
		return q.ackOnly(ctx, req)
	}
	prefix := argv.Token() + "."
	if req.Owner != "" {
		prefix = req.Owner + "/" + prefix
	}
	sent := mono.Now()
	args := reserveArgs{n: req.N, lease: q.opts.Lease, prefix: prefix, deadMax: q.opts.DeadMax}
	if req.WantLeft {
		args.flags |= flagLeft
	}
	if req.permits {
		args.flags |= flagUncapped
	}
	if q.sched.now(sent) {
		args.move = 1000
	}
	ks, argv, order := q.reserveCall(req.Acks, args)
	var raw []rueidis.RedisMessage
	var err error
	if req.Arm && q.env.Cache && q.sched.signal.Load() == 0 {
		raw, res.Armed, res.Pending, err = q.armedTake(ctx, ks, argv)
	} else {
		raw, err = queueReserveScript.Exec(ctx, q.env.Client, ks, argv).ToArray()
	}
	if err != nil {
		if fault.OutcomeUnknown(err) {
			q.abandonReserve(prefix)
		}
		return res, err
	}
	reply, err := readReserveReply(raw)
	res.Acks, _ = ackCodes(reply.acked, order) // nil when the reply has none: unknown
	q.acked(req.Acks, res.Acks)
	if err == nil {
		err = reply.failure()
	}
	if err != nil {
		return res, err
	}
	q.readLook(&reply, sent, &res)
	if q.sched.signal.Load() != 0 {
		res.Armed = false // grouped or prioritized work came: the caller arms the signal too (CachedPending)
	}
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
	res.Tasks, err = q.reservations(ctx, &reply, sent, res.Permits)
	return res, err
}

// armedTake runs queue_reserve.lua (ks, args) and, in the same round
// trip, CLIENT CACHING YES and LLEN of the pending list: the read arms the
// invalidation of the list's next change, which wakes this process's
// waiters (wake.Watcher), and says how many tasks the take left (pending).
// It replaces the round trip of the cached read (CachedPending) that armed
// an idle waiter after each take. The three commands go on one connection
// in this order, but other clients' commands may run between the take and
// the read: a task pushed before the read is counted in pending, one
// pushed after it invalidates the read. armed says the read armed it; on
// NOSCRIPT (a flushed or restarted server) the script goes again through
// Exec, which loads it, after the read: unarmed then.
func (q *Queue) armedTake(ctx context.Context, ks, args []string) (raw []rueidis.RedisMessage, armed bool, pending int64, err error) {
	c := q.env.Client
	res := c.DoMulti(ctx, c.B().Evalsha().Sha1(queueReserveScript.SHA1()).Numkeys(int64(len(ks))).Key(ks...).Arg(args...).Build(),
		c.B().ClientCaching().Yes().Build(), c.B().Llen().Key(q.key.Pending).Build())
	raw, err = res[0].ToArray()
	if e, ok := rueidis.IsRedisErr(err); ok && e.IsNoScript() {
		raw, err = queueReserveScript.Exec(ctx, c, ks, args).ToArray()
		return raw, false, 0, err
	}
	pending, lerr := res[2].AsInt64()
	return raw, err == nil && lerr == nil && res[1].Error() == nil, pending, err
}

// readLook reads what a take's reply says of the queue: whether tasks are
// left pending, when the next scheduled task is due (recorded in the
// queue's schedLook, so that the next reserves look at :scheduled only
// when something may be due), when a group's limit or GlobalConcurrency
// may let a task go (res.Blocked), and the queue's signal (schedLook's
// too: CachedPending compares it).
func (q *Queue) readLook(reply *reserveReply, sent int64, res *Reserved) {
	res.Permits = reply.permits()
	res.Drained, res.Capped = reply.drained(), reply.capped()
	if reply.hasSignal {
		q.sched.signal.Store(reply.signal)
	}
	if reply.wake != "" {
		if at, err := strconv.ParseFloat(reply.wake, 64); err == nil {
			res.Blocked = max(time.Duration(at-float64(reply.now))*time.Millisecond, time.Millisecond)
		}
	}
	switch next := reply.NextReady; next {
	case "-": // not looked at: what the last look saw still holds
		if due := q.sched.due.Load(); due != 0 {
			res.NextReady = max(time.Duration(due-sent), 0)
		}
	case "":
		q.sched.looked(sent, -1)
	default:
		if s, err := strconv.ParseFloat(next, 64); err == nil {
			res.NextReady = max(time.Duration(s*1000-float64(reply.now))*time.Millisecond, 0)
		}
		q.sched.looked(sent, res.NextReady)
	}
}

// reservations makes the reservations of the tasks a take's reply took,
// leased from sent (the reply's now is the server's clock in unix ms when
// the script ran); permits says the tasks hold GlobalConcurrency permits. A body that is not a task is poison, and a task
// whose ExpiresAt passed by the server's clock expired: either is buried
// under its very lease, uncounted, so that it never runs or loops; the
// error is the last burial's when no task is left.
func (q *Queue) reservations(ctx context.Context, reply *reserveReply, sent int64, permits bool) ([]*Reservation, error) {
	now := reply.now
	rs := make([]*Reservation, 0, reply.tasks())
	var buryErr error
	for i := range reply.tasks() {
		t := reply.task(i)
		r := &Reservation{core: q, permit: permits, id: t.id, token: t.token, body: t.body}
		r.clock.Prove(sent, q.opts.Lease)
		w, err := taskbody.Parse(r.body)
		if err == nil && w.ID != r.id {
			err = errors.New("body id changed") // cannot happen: the script read it
		}
		if err == nil && w.ExpiresAt > 0 {
			left := int64(w.ExpiresAt*1000) - now
			if left <= 0 {
				err = ErrExpired
			}
			r.expires = sent + left*int64(time.Millisecond)
		}
		r.attempts, r.dedup, r.group = w.Attempts, w.Dedup, w.Group // for the burial too
		if err != nil {
			if berr := r.Bury(ctx, err.Error()); berr != nil {
				buryErr = berr
			}
			continue
		}
		r.payload, r.unique, r.trace = w.Payload, w.UniqueMS, w.Trace
		r.maxAttempts, r.timeout, r.meta = w.MaxAttempts, time.Duration(w.TimeoutMS)*time.Millisecond, w.Meta
		r.track, r.indexed = w.Track, len(w.Indexed) > 0
		r.logged.Store(w.Logged != 0)
		rs = append(rs, r)
	}
	if len(rs) > 0 {
		buryErr = nil
	}
	return rs, buryErr
}

// ackOnly is take with nothing to take: the acks of req through
// queue_ack.lua, which runs the reserve's ack step alone.
func (q *Queue) ackOnly(ctx context.Context, req Req) (Reserved, error) {
	res := Reserved{NextReady: -1}
	keep, args, order := ackArgs(req.Acks, make([]string, 0, 1+3*len(req.Acks)))
	acked, err := queueAckScript.Exec(ctx, q.env.Client, q.Keys(keep...), args).ToString()
	if err != nil {
		return res, err
	}
	res.Acks, err = ackCodes(acked, order)
	q.acked(req.Acks, res.Acks)
	return res, err
}

// reserveCall spells a take's KEYS and ARGV (queue_reserve.lua): args,
// then the acks as ackArgs spells them.
func (q *Queue) reserveCall(acks []*Reservation, args reserveArgs) (ks, argv []string, order []int) {
	argv = args.appendTo(make([]string, 0, 7+3*len(acks)))
	keep, argv, order := ackArgs(acks, argv)
	return q.Keys(append([]string{q.key.Call + args.prefix}, keep...)...), argv, order
}

// abandonReserve hands back, in the background, what the reserve call with
// token prefix took, or tombstones the call so that it takes nothing if it
// runs later (queue_abandon.lua), for as long as a lease (after that the
// sweeper has the tasks anyway); see Fleet.abandon.
func (q *Queue) abandonReserve(prefix string) {
	ks := q.Keys(q.key.Call + prefix)
	args := []string{prefix, argv.Millis(q.opts.Lease + time.Minute)}
	q.env.Abandon("reserve "+q.name, q.opts.Lease, func(ctx context.Context) error {
		n, err := queueAbandonScript.Exec(ctx, q.env.Client, ks, args).AsInt64()
		if err == nil && n > 0 {
			q.WakeLocal()
		}
		return err
	})
}

// Keys returns the keys of q's shard in queueScriptKeys' order, then
// extra. The eight are spelled once per core (skeys); callers must not
// change the slice.
func (q *Queue) Keys(extra ...string) []string {
	if len(extra) == 0 {
		return q.skeys
	}
	out := make([]string, len(q.skeys), len(q.skeys)+len(extra))
	copy(out, q.skeys)
	return append(out, extra...)
}
