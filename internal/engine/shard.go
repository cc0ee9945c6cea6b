package engine

import (
	"context"
	"hash/fnv"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/redis/rueidis"

	"github.com/fleet-go/fleet/internal/argv"
	"github.com/fleet-go/fleet/internal/fault"
	"github.com/fleet-go/fleet/internal/keys"
	"github.com/fleet-go/fleet/internal/mono"
	"github.com/fleet-go/fleet/internal/wake"
)

// Sharded queues (QueueOptions.Shards; docs/SCALING.md).
//
// A queue of K shards keeps its tasks in K sets of the queue's keys: shard
// 0 is the queue's own keys (fleet:queue:{<name>}...), shard i > 0 has its
// own hash tag (keys.QueueShard), so that on a cluster the shards spread
// over the masters. Each shard is a plain queue of its own: every script
// runs on one shard, and a task lives in one shard from its submit to its
// end (a retry, a re-queue by the sweeper, a dead letter and its re-queue
// stay in its shard). A shard has a core of its own (sub), a Queue
// with the shard's keys whose root is the queue's core; a reserved task's
// core is its shard's, so Ack, Nack, Extend, Snooze and the rest reach its
// shard with no more work.
//
// Task ids stay plain UUIDv7s: a call by id (Lookup, Cancel, RequeueDead)
// asks every shard in one pipelined round trip (K <= 1024, and each shard
// answers in parallel on its master), rather than spell the shard in the
// id, which would break ids that callers already parse as UUIDs and tie an
// id to a shard count that may change.
//
// fleet:queue:{<name>}:shards holds the high-water mark "max": every handle
// of the queue reserves from shards 0..max-1, whatever its own K, so when K
// changes the old shards drain. A handle of K > 1 raises the mark as it
// registers (before its first push, then about once a second while it
// submits) and stamps "at:<K>"; the sweeper lowers the mark to the highest
// K stamped within SweeperOptions.ShardGrace (a handle registers at
// most a second before each push, so a push lands in a shard past the mark
// only if it takes longer than the grace), once the shards past it are empty.

// spanEvery is how often a handle re-reads the stored mark.
const spanEvery = time.Second

// sub returns the handle of shard i (q itself for shard 0).
func (q *Queue) Sub(i int) *Queue {
	if q.root != nil {
		return q.root.Sub(i)
	}
	if i == 0 {
		return q
	}
	if s, ok := q.subs.Load(i); ok {
		return s.(*Queue)
	}
	s := &Queue{env: q.env, name: q.name, key: q.env.Keys.QueueShard(q.name, i), opts: q.opts, root: q, shard: i}
	s.key.Paused = q.key.Paused // the queue's one pause flag
	s.skeys = ScriptKeys(&s.key)
	s.sched = q.env.schedLook(q.name + ":" + strconv.Itoa(i)) // ':' is no queue name's
	got, _ := q.subs.LoadOrStore(i, s)
	return got.(*Queue)
}

// Shard returns the index of q's shard: 0 for the queue's own core.
func (q *Queue) Shard() int { return q.shard }

// top returns the queue's own handle.
func (q *Queue) top() *Queue {
	if q.root != nil {
		return q.root
	}
	return q
}

// SpanOf returns how many shards the reserves of the queue look at: the
// handle's own count or the stored mark, whichever is higher, re-read at
// most once per spanEvery (a failed read keeps the last one). Always 1 in
// the compat layout.
func (q *Queue) SpanOf(ctx context.Context) int {
	q = q.top()
	if !q.env.Keys.Tagged() {
		return 1
	}
	now := mono.Now()
	if last := q.spanSeenAt.Load(); last == 0 || now-last >= int64(spanEvery) {
		if q.spanSeenAt.CompareAndSwap(last, now) {
			c := q.env.Client
			m, err := c.Do(ctx, c.B().Hget().Key(q.key.Shards).Field("max").Build()).AsInt64()
			switch {
			case rueidis.IsRedisNil(err):
				q.spanSeen.Store(1)
			case err == nil:
				q.spanSeen.Store(min(max(m, 1), keys.MaxShards))
			}
			q.growListeners(max(q.opts.Shards, int(q.spanSeen.Load())))
		}
	}
	return max(q.opts.Shards, int(q.spanSeen.Load()))
}

// knownSpan is SpanOf without a read: what the handle knows now.
func (q *Queue) knownSpan() int {
	q = q.top()
	return max(q.opts.Shards, int(q.spanSeen.Load()), 1)
}

// ShardKeys returns the keys of the n first shards of queue name.
func (f *Env) ShardKeys(name string, n int) []keys.Queue {
	ks := make([]keys.Queue, n)
	for i := range ks {
		ks[i] = f.Keys.QueueShard(name, i)
	}
	return ks
}

// QueueSpan reads the stored mark of queue name (1 without one, and always
// in the compat layout), for calls by name.
func (f *Env) QueueSpan(ctx context.Context, name string) (int, error) {
	if !f.Keys.Tagged() {
		return 1, nil
	}
	c := f.Client
	m, err := c.Do(ctx, c.B().Hget().Key(f.Keys.Queue(name).Shards).Field("max").Build()).AsInt64()
	if rueidis.IsRedisNil(err) {
		return 1, nil
	}
	if err != nil {
		return 1, err
	}
	return int(min(max(m, 1), keys.MaxShards)), nil
}

// shardsOf returns the handles of every shard the queue's reserves look at.
func (q *Queue) shardsOf(ctx context.Context) []*Queue {
	n := q.SpanOf(ctx)
	out := make([]*Queue, n)
	for i := range out {
		out[i] = q.Sub(i)
	}
	return out
}

// pick returns the shard handle a submit goes to: by key (hashed) when
// one is given, else round-robin.
func (q *Queue) Pick(key string) *Queue {
	k := q.opts.Shards
	if k <= 1 || q.root != nil {
		return q
	}
	if key != "" {
		return q.Sub(shardOf(key, k))
	}
	return q.Sub(int(q.submitTurn.Add(1) % uint64(k)))
}

// shardOf is the shard of key among k: FNV-1a of the key, modulo k.
func shardOf(key string, k int) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return int(h.Sum32() % uint32(k))
}

// shardRegister is register's part for a sharded queue: the shard count
// is stamped (and the mark raised), and the policy goes to every shard of
// the handle past shard 0.
func (q *Queue) shardRegister(ctx context.Context, nx bool) error {
	c := q.env.Client
	m, err := queueShardsScript.Exec(ctx, c, []string{q.key.Shards}, []string{"reg", strconv.Itoa(q.opts.Shards)}).AsInt64()
	if err != nil {
		return err
	}
	q.spanSeen.Store(min(max(m, 1), keys.MaxShards))
	q.spanSeenAt.Store(mono.Now())
	q.growListeners(q.knownSpan())
	cmds := make(rueidis.Commands, 0, q.opts.Shards)
	for i := 1; i < q.opts.Shards; i++ {
		k := q.Sub(i).key.Policy
		if nx {
			cmds = append(cmds, c.B().Set().Key(k).Value(q.opts.Policy).Nx().Build())
		} else {
			cmds = append(cmds, c.B().Set().Key(k).Value(q.opts.Policy).Build())
		}
	}
	for _, r := range c.DoMulti(ctx, cmds...) {
		if err := r.Error(); err != nil && !rueidis.IsRedisNil(err) {
			return err
		}
	}
	return nil
}

// ListenPending returns a channel that receives after each change of the
// pending list, or of the signal (keys.Queue.Signal: grouped or
// prioritized work), of any of the queue's shards (its wake-ups coalesce),
// and the function that stops it. When the queue's shard count grows
// later (SpanOf reads a higher mark), the listener joins the new shards,
// and is poked once.
func (q *Queue) ListenPending(ctx context.Context) (<-chan struct{}, func()) {
	w := q.env.Watch
	l := &shardListener{ch: make(chan struct{}, 1)}
	if !q.env.Keys.Tagged() {
		l.join(w, q)
		return l.ch, func() { l.leave(w) }
	}
	r := q.top()
	r.listenersMu.Lock()
	if r.listeners == nil {
		r.listeners = map[*shardListener]struct{}{}
	}
	r.listeners[l] = struct{}{}
	r.listenersMu.Unlock()
	r.growListeners(r.SpanOf(ctx))
	return l.ch, func() {
		r.listenersMu.Lock()
		delete(r.listeners, l)
		r.listenersMu.Unlock()
		l.leave(w)
	}
}

// shardListener is one ListenPending: its channel, the shards it listens
// to, and the gates of their keys.
type shardListener struct {
	ch     chan struct{}
	shards int
	keys   []string
	gates  []*wake.Gate
}

// join makes l listen to shard s's pending list and signal, and on the
// queue's own shard to the fleet-wide permits when it has them (a permit
// given back wakes the reserves it turned away: permit.go).
func (l *shardListener) join(w *wake.Watcher, s *Queue) {
	ks := []string{s.key.Pending, s.key.Signal}
	if s.opts.GlobalCap > 0 && s.key.Permits != "" {
		ks = append(ks, s.key.Permits)
	}
	for _, k := range ks {
		g := w.AddListener(k, l.ch)
		l.keys, l.gates = append(l.keys, k), append(l.gates, g)
	}
	l.shards++
}

// leave stops l listening.
func (l *shardListener) leave(w *wake.Watcher) {
	w.RemoveListener(l.ch, l.gates...)
	for i, g := range l.gates {
		w.Leave(l.keys[i], g)
	}
}

// growListeners makes every listener of the queue listen to its first n
// shards.
func (q *Queue) growListeners(n int) {
	w := q.env.Watch
	q.listenersMu.Lock()
	defer q.listenersMu.Unlock()
	for l := range q.listeners {
		if l.shards >= n {
			continue
		}
		grew := l.shards > 0
		for i := l.shards; i < n; i++ {
			l.join(w, q.Sub(i))
		}
		if grew {
			select { // tasks may wait on the new shards already
			case l.ch <- struct{}{}:
			default:
			}
		}
	}
}

// CachedPending returns how many tasks may wait in every shard the
// reserves look at, and per shard, read through the client-side cache
// (which arms the invalidation of each shard's pending list and signal):
// a shard's pending list's length (unless signalOnly: GlobalConcurrency
// holds the list), plus one when its signal moved since its last reserve
// saw it (grouped or prioritized work came, or a permit came back). On a
// sharded queue with fleet-wide permits (permit.go) it reads their count
// too (arming its invalidation): with a permit free, the pending lists
// count even when signalOnly.
func (q *Queue) CachedPending(ctx context.Context, signalOnly bool) (int64, []int64, error) {
	f := q.env
	n := q.SpanOf(ctx)
	cmds := make([]rueidis.CacheableTTL, 0, 2*n+1)
	for i := range n {
		s := q.Sub(i)
		cmds = append(cmds, rueidis.CT(wake.NoTTL(f.Client.B().Llen().Key(s.key.Pending).Cache()), wake.HintTTL),
			rueidis.CT(wake.NoTTL(f.Client.B().Get().Key(s.key.Signal).Cache()), wake.HintTTL))
	}
	top := q.top()
	permits := top.opts.GlobalCap > 0 && n > 1
	if permits {
		cmds = append(cmds, rueidis.CT(wake.NoTTL(f.Client.B().Zcard().Key(top.key.Permits).Cache()), wake.HintTTL))
	}
	res := f.Client.DoMultiCache(ctx, cmds...)
	if permits {
		held, err := res[2*n].AsInt64()
		if err != nil {
			return 0, nil, err
		}
		if held < int64(top.opts.GlobalCap) {
			signalOnly = false // a permit is free: the shards' tasks may go
		}
	}
	lens := make([]int64, n)
	var sum int64
	for i := range n {
		l, err := res[2*i].AsInt64()
		if err != nil {
			return 0, nil, err
		}
		sig, err := res[2*i+1].AsInt64()
		if err != nil && !rueidis.IsRedisNil(err) {
			return 0, nil, err
		}
		l = q.Sub(i).mayPend(l, sig, signalOnly)
		lens[i] = l
		sum += l
	}
	return sum, lens, nil
}

// ArmedPending is CachedPending after an armed take (st.Armed: a queue of
// one shard): the pending list's length that the take read (unless
// signalOnly), plus one when the signal moved since the take saw it, read
// through the local cache, which costs no round trip while its entry
// lives (and with it the signal's invalidation).
func (q *Queue) ArmedPending(ctx context.Context, st Reserved, signalOnly bool) (int64, error) {
	f := q.env
	sig, err := f.Client.DoCache(ctx, wake.NoTTL(f.Client.B().Get().Key(q.key.Signal).Cache()), wake.HintTTL).AsInt64()
	if err != nil && !rueidis.IsRedisNil(err) {
		return 0, err
	}
	return q.mayPend(st.Pending, sig, signalOnly), nil
}

// mayPend is what may be pending in q's shard, from its pending list's
// length l (left out when signalOnly) and its signal sig as read: plus one
// when the signal moved since q's last reserve saw it.
func (q *Queue) mayPend(l, sig int64, signalOnly bool) int64 {
	if signalOnly {
		l = 0
	}
	if sig != q.sched.signal.Load() {
		l++
	}
	return l
}

// spread is reserve on a sharded queue: it tries the shards
// in turn from a starting shard that rotates with every call (so each
// shard is drained as often as the others), and stops at the first shard
// that gives tasks. The starting shard is tried blind (a busy queue costs
// one round trip per reserve); past it, when the Fleet caches, the shards
// whose pending list the local cache says is empty, and whose scheduled
// tasks it need not look at yet, are skipped. Three times in four a
// reserve starts from the shard that gave this handle's last reserve its
// tasks, the fourth from the next in turn: fewer probes of empty shards,
// and no shard waits long.
func (q *Queue) spread(ctx context.Context, req Req) (Reserved, error) {
	req.Arm = false // one take arms one shard; the caller arms them all (CachedPending)
	shards := q.shardsOf(ctx)
	k := len(shards)
	start := int(q.reserveTurn.Add(1) % uint64(k))
	if rand.IntN(4) != 0 {
		// A reserve starts from the shard that gave the last one tasks:
		// it likely has more (a SubmitMany fills one shard).
		if last := int(q.last.Load()); last < k {
			start = last
		}
	}
	st := Reserved{NextReady: -1}
	// The starting shard first, blind: on a busy queue it has tasks, and
	// the call costs one round trip. Then the others, skipping those that
	// the local cache says are empty (when the Fleet caches).
	var lens []int64
	now := mono.Now()
	var firstErr error
	for j := range k {
		i := (start + j) % k
		s := shards[i]
		if j == 1 && q.env.Cache {
			if _, l, err := q.CachedPending(ctx, false); err == nil && len(l) == k {
				lens = l
			}
		}
		if j > 0 && lens != nil && lens[i] == 0 && !s.sched.now(now) {
			continue
		}
		ss, err := s.take(ctx, req)
		if ss.NextReady >= 0 && (st.NextReady < 0 || ss.NextReady < st.NextReady) {
			st.NextReady = ss.NextReady
		}
		if ss.Blocked > 0 && (st.Blocked == 0 || ss.Blocked < st.Blocked) {
			st.Blocked = ss.Blocked
		}
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		if len(ss.Tasks) > 0 {
			q.last.Store(int64(i))
			st.Tasks = ss.Tasks
			return st, nil // st.Drained false: others may hold tasks
		}
	}
	st.Drained = firstErr == nil
	return st, firstErr
}

// ShardState reads a queue's shard high-water mark and the highest shard
// count in use (registered within grace); 1 and 1 for a queue never
// sharded.
func (f *Env) ShardState(ctx context.Context, k keys.Queue, grace time.Duration) (mark, used int, err error) {
	res, err := queueShardsScript.Exec(ctx, f.Client, []string{k.Shards}, []string{"state", argv.Millis(grace)}).AsIntSlice()
	if err != nil {
		return 1, 1, err
	}
	if len(res) != 2 {
		return 1, 1, fault.UnexpectedReply("shards", len(res))
	}
	return int(min(max(res[0], 1), keys.MaxShards)), int(min(max(res[1], 1), keys.MaxShards)), nil
}

// LowerShards lowers queue name's high-water mark from mark to used when
// the shards used..mark-1 hold nothing (no task pending, scheduled, in
// flight or dead, no lease, no dedup key); the script checks again that no
// handle of more than used shards registered meanwhile. The policy keys of
// the shards let go are deleted after.
func (f *Env) LowerShards(ctx context.Context, name string, mark, used int, grace time.Duration) error {
	c := f.Client
	extra := f.ShardKeys(name, mark)[used:]
	cmds := make(rueidis.Commands, len(extra))
	for i, s := range extra {
		cmds[i] = c.B().Exists().Key(s.Pending, s.Processing, s.Body, s.Lease, s.Scheduled, s.Dead, s.Dedup).Build()
	}
	for _, r := range c.DoMulti(ctx, cmds...) {
		n, err := r.AsInt64()
		if err != nil {
			return err
		}
		if n > 0 {
			return nil // still draining
		}
	}
	k := f.Keys.Queue(name)
	got, err := queueShardsScript.Exec(ctx, c, []string{k.Shards}, []string{"lower", argv.Millis(grace), strconv.Itoa(used)}).AsInt64()
	if err != nil || int(got) != used {
		return err
	}
	cmds = cmds[:0]
	for _, s := range extra {
		cmds = append(cmds, c.B().Del().Key(s.Policy).Build())
	}
	for _, r := range c.DoMulti(ctx, cmds...) {
		if err := r.Error(); err != nil {
			return err
		}
	}
	return nil
}
