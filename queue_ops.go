package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/redis/rueidis"

	"github.com/fleet-go/fleet/internal/keys"
	"github.com/fleet-go/fleet/internal/taskbody"
)

var (
	queueDeadRequeueScript = newScript("queue_dead_requeue.lua")
	queueDeadPurgeScript   = newScript("queue_dead_purge.lua")
)

// QueueStats counts a queue's tasks by state.
type QueueStats struct {
	// Pending tasks wait to run: on the queue's documented list
	// (fleet:queue:<name>), and in its priorities and groups.
	Pending int64 `json:"pending"`
	// Prioritized and Grouped count the pending tasks with a priority
	// (SubmitOptions.Priority) and of a group (SubmitOptions.Group).
	Prioritized int64 `json:"prioritized"`
	Grouped     int64 `json:"grouped"`
	// InFlight tasks are reserved (fleet:queue:<name>:processing).
	InFlight int64 `json:"in_flight"`
	// Scheduled tasks wait for a retry or a delayed start
	// (fleet:queue:<name>:scheduled).
	Scheduled int64 `json:"scheduled"`
	// Dead letters (fleet:queue:<name>:dead).
	Dead int64 `json:"dead"`
	// Waiting tasks wait for the tasks they depend on (SubmitOptions.After,
	// a Flow; fleet:queue:<name>:waiting): they are on no list yet.
	Waiting int64 `json:"waiting"`
	// Paused says whether the queue is paused (Queue.Pause).
	Paused bool `json:"paused"`
	// Latency is how long the longest-waiting of the tasks that go next
	// (the documented list's head, the first by priority, each group's
	// head) has waited since its submit, by its UUIDv7 id, on this
	// process's clock: the usual signal for autoscaling and alerts. 0 when
	// none is pending.
	Latency time.Duration `json:"latency"`
}

// Stats counts the queue's tasks, in one round trip (in the tagged
// layout, plus a read of the queue's shard count at most once a second per
// handle; a sharded queue's counts are the sums over its shards), and one
// more for a queue with groups pending, which reads the head of each
// group's list. May return ErrWrongType, ErrUnavailable.
func (q *queueCore) Stats(ctx context.Context) (QueueStats, error) {
	if err := q.ready(ctx); err != nil {
		return QueueStats{}, opErr("stats", q.name, err)
	}
	ks := q.fleet.eng.ShardKeys(q.name, q.spanOf(ctx))
	c := q.fleet.client
	cmds := make(rueidis.Commands, 0, statCmds*len(ks)+1)
	for _, k := range ks {
		cmds = appendStatCmds(c, cmds, k)
	}
	cmds = append(cmds, c.B().Exists().Key(q.key.Paused).Build())
	s, err := q.fleet.readStats(ctx, c.DoMulti(ctx, cmds...), ks, time.Now())
	return s, opErr("stats", q.name, err)
}

// statCmds is how many commands appendStatCmds appends per shard.
const statCmds = 9

// appendStatCmds appends the commands that count the tasks of shard k
// (readStats reads their replies).
func appendStatCmds(c rueidis.Client, cmds rueidis.Commands, k keys.Queue) rueidis.Commands {
	return append(cmds,
		c.B().Llen().Key(k.Pending).Build(),
		c.B().Zcard().Key(k.Processing).Build(),
		c.B().Zcard().Key(k.Scheduled).Build(),
		c.B().Llen().Key(k.Dead).Build(),
		c.B().Zcard().Key(k.Prio).Build(),
		c.B().Get().Key(k.GroupPending).Build(),
		c.B().Lindex().Key(k.Pending).Index(0).Build(),
		c.B().Zrange().Key(k.Prio).Min("0").Max("0").Build(),
		c.B().Zcard().Key(k.Waiting).Build())
}

// readStats reads the replies of appendStatCmds for the shards ks of a
// queue, then its pause flag's EXISTS; for the shards with groups pending,
// it reads the heads of their groups (one more round trip) for Latency.
func (f *Fleet) readStats(ctx context.Context, res []rueidis.RedisResult, ks []keys.Queue, now time.Time) (QueueStats, error) {
	var s QueueStats
	var grouped []keys.Queue
	for i, k := range ks {
		r := res[statCmds*i : statCmds*(i+1)]
		var pending, prio int64
		if n, err := r[8].AsInt64(); err == nil {
			s.Waiting += n
		}
		for j, p := range []*int64{&pending, &s.InFlight, &s.Scheduled, &s.Dead, &prio} {
			n, err := r[j].AsInt64()
			if err != nil {
				return QueueStats{}, err
			}
			*p += n
		}
		groups, err := r[5].AsInt64()
		if err != nil && !rueidis.IsRedisNil(err) {
			return QueueStats{}, err
		}
		groups = max(groups, 0)
		s.Pending += pending + prio + groups
		s.Prioritized += prio
		s.Grouped += groups
		if head, err := r[6].ToString(); err == nil {
			s.Latency = max(s.Latency, waited(head, now))
		}
		if first, err := r[7].AsStrSlice(); err == nil && len(first) == 1 {
			s.Latency = max(s.Latency, waited(first[0], now))
		}
		if groups > 0 {
			grouped = append(grouped, k)
		}
	}
	p, err := res[statCmds*len(ks)].AsInt64()
	if err != nil {
		return QueueStats{}, err
	}
	s.Paused = p == 1
	for _, k := range grouped {
		l, err := f.groupsLatency(ctx, k, now)
		if err != nil {
			return QueueStats{}, err
		}
		s.Latency = max(s.Latency, l)
	}
	return s, nil
}

// groupsLatency is the longest wait of the heads of shard k's groups.
func (f *Fleet) groupsLatency(ctx context.Context, k keys.Queue, now time.Time) (time.Duration, error) {
	c := f.client
	names, err := c.Do(ctx, c.B().Hkeys().Key(k.GroupState).Build()).AsStrSlice()
	if err != nil {
		return 0, err
	}
	cmds := make(rueidis.Commands, 0, len(names))
	for _, g := range names {
		if keys.Check(keys.KindGroup, g) == nil {
			cmds = append(cmds, c.B().Lindex().Key(k.Group+g).Index(0).Build())
		}
	}
	var l time.Duration
	for _, r := range c.DoMulti(ctx, cmds...) {
		if head, err := r.ToString(); err == nil {
			l = max(l, waited(head, now))
		}
	}
	return l, nil
}

// DeadLetter is one entry of a queue's dead letters.
type DeadLetter struct {
	// ID is the task's id; empty for poison that had none.
	ID string
	// Payload is the task's payload as stored (JSON).
	Payload json.RawMessage
	// Attempts counts the failed runs.
	Attempts int
	// Error says why the task died: its last error, or why it is poison.
	Error string
	// DeadAt is when it died (zero when unknown).
	DeadAt time.Time
	// Raw is the entry exactly as stored: the task's body with "error" and
	// "dead_at" added, or {"body": <raw body>, "error", "dead_at"} for
	// poison that was not a task.
	Raw string
}

// Poison reports whether the entry is poison that cannot be re-queued.
func (d DeadLetter) Poison() bool { return d.ID == "" }

func parseDead(raw string) DeadLetter {
	d := DeadLetter{Raw: raw}
	var w struct {
		ID       string          `json:"id"`
		Payload  json.RawMessage `json:"payload"`
		Attempts int             `json:"attempts"`
		Error    string          `json:"error"`
		DeadAt   float64         `json:"dead_at"`
	}
	if json.Unmarshal([]byte(raw), &w) != nil {
		// Written by another client, perhaps: keep what we can.
		if b, err := taskbody.Parse(raw); err == nil {
			d.ID, d.Payload, d.Attempts = b.ID, b.Payload, b.Attempts
		}
		return d
	}
	d.ID, d.Payload, d.Attempts, d.Error = w.ID, w.Payload, w.Attempts, w.Error
	if w.DeadAt > 0 {
		d.DeadAt = time.UnixMilli(int64(w.DeadAt * 1000))
	}
	return d
}

// DeadLetters lists up to count dead letters from offset, oldest first (of
// a sharded queue: shard by shard, shard 0 first, oldest first in each).
// May return ErrInvalidArgument, ErrWrongType, ErrUnavailable.
func (q *queueCore) DeadLetters(ctx context.Context, offset, count int) ([]DeadLetter, error) {
	if err := q.ready(ctx); err != nil {
		return nil, opErr("dead letters", q.name, err)
	}
	if offset < 0 || count < 0 {
		return nil, opErr("dead letters", q.name, fmt.Errorf("%w: offset %d and count %d may not be negative", ErrInvalidArgument, offset, count))
	}
	if count == 0 {
		return nil, nil
	}
	raws, err := q.deadRange(ctx, offset, offset+count-1)
	if err != nil {
		return nil, opErr("dead letters", q.name, err)
	}
	out := make([]DeadLetter, len(raws))
	for i, r := range raws {
		out[i] = parseDead(r)
		out[i].Payload = q.fleet.shown(q.name, sealPayload, out[i].Payload)
	}
	return out, nil
}

// deadRange lists the dead letters from index from to index to (-1: the
// last), of a sharded queue in shard order (shard 0's first).
func (q *queueCore) deadRange(ctx context.Context, from, to int) ([]string, error) {
	n := q.spanOf(ctx)
	if n == 1 {
		return q.deadRangeOne(ctx, from, to)
	}
	ks := q.fleet.eng.ShardKeys(q.name, n)
	lists := make([]string, len(ks))
	for i, k := range ks {
		lists[i] = k.Dead
	}
	return q.fleet.concatRange(ctx, lists, from, to)
}

// deadRangeOne is deadRange on the shard of q's keys only.
func (q *queueCore) deadRangeOne(ctx context.Context, from, to int) ([]string, error) {
	c := q.fleet.client
	return c.Do(ctx, c.B().Lrange().Key(q.key.Dead).Start(int64(from)).Stop(int64(to)).Build()).AsStrSlice()
}

// concatRange reads the elements from index from to index to (-1: the
// last) of lists taken one after the other: their lengths in one round
// trip, then the ranges that overlap in another.
func (f *Fleet) concatRange(ctx context.Context, lists []string, from, to int) ([]string, error) {
	c := f.client
	cmds := make(rueidis.Commands, len(lists))
	for i, l := range lists {
		cmds[i] = c.B().Llen().Key(l).Build()
	}
	lens := make([]int64, len(lists))
	for i, r := range c.DoMulti(ctx, cmds...) {
		n, err := r.AsInt64()
		if err != nil {
			return nil, err
		}
		lens[i] = n
	}
	cmds = cmds[:0]
	var base int64
	for i, l := range lists {
		lo, hi := max(int64(from)-base, 0), lens[i]-1
		if to >= 0 {
			hi = min(hi, int64(to)-base)
		}
		if lo <= hi {
			cmds = append(cmds, c.B().Lrange().Key(l).Start(lo).Stop(hi).Build())
		}
		base += lens[i]
	}
	var out []string
	for _, r := range c.DoMulti(ctx, cmds...) {
		s, err := r.AsStrSlice()
		if err != nil {
			return nil, err
		}
		out = append(out, s...)
	}
	return out, nil
}

// revived returns the args of queue_dead_requeue for a dead letter: the
// entry as stored, the body it goes back on the queue as (attempts reset,
// "error" and "dead_at" dropped, the rest as it was), its id and its dedup
// key.
func revived(d DeadLetter) ([]string, bool) {
	if d.Poison() {
		return nil, false
	}
	b, err := taskbody.Rewrite(d.Raw, map[string]any{"attempts": 0, "error": nil, "dead_at": nil})
	if err != nil {
		return nil, false
	}
	w, _ := taskbody.Parse(b)
	return []string{d.Raw, b, d.ID, w.Dedup}, true
}

// requeueDead runs queue_dead_requeue on quads of revived args. It returns
// how many moved, and the dead letters left because a live task holds
// their dedup key (id -> the holder's id).
func (q *queueCore) requeueDead(ctx context.Context, args []string) (int, map[string]string, error) {
	res, err := queueDeadRequeueScript.Exec(ctx, q.fleet.client, q.keys(), args).ToArray()
	if err != nil {
		return 0, nil, err
	}
	if len(res)%2 != 1 {
		return 0, nil, unexpectedReply("requeue dead", len(res))
	}
	moved, _ := res[0].AsInt64()
	var held map[string]string
	for i := 1; i+1 < len(res); i += 2 {
		id, _ := res[i].ToString()
		holder, _ := res[i+1].ToString()
		if held == nil {
			held = map[string]string{}
		}
		held[id] = holder
	}
	if moved > 0 {
		q.wakeLocal()
	}
	return int(moved), held, nil
}

// RequeueDead puts the dead letter of task id back at the tail of the queue,
// with its attempts reset. A task submitted with a dedup key gets its key
// back, so a SubmitWith with that key finds it again; when another live
// task holds the key now, the dead letter stays where it is and
// RequeueDead returns ErrDuplicate, naming the holder. May return
// ErrDeadLetterNotFound (no such dead letter, or poison that cannot be re-queued),
// ErrDuplicate, ErrWrongType, ErrUnavailable.
func (q *queueCore) RequeueDead(ctx context.Context, id string) error {
	if err := q.ready(ctx); err != nil {
		return opErr("requeue dead", q.name, err)
	}
	// A sharded queue: the dead letter goes back on its own shard.
	for _, s := range q.shardsOf(ctx) {
		err := s.requeueDeadOne(ctx, id)
		if !errors.Is(err, ErrDeadLetterNotFound) {
			return err
		}
	}
	return opErr("requeue dead", q.name, fmt.Errorf("%w: task %q", ErrDeadLetterNotFound, id))
}

// requeueDeadOne is RequeueDead on the shard of q's keys.
func (q *queueCore) requeueDeadOne(ctx context.Context, id string) error {
	raws, err := q.deadRangeOne(ctx, 0, -1)
	if err != nil {
		return opErr("requeue dead", q.name, err)
	}
	for _, r := range raws {
		d := parseDead(r)
		if d.ID != id {
			continue
		}
		args, ok := revived(d)
		if !ok {
			break
		}
		n, held, err := q.requeueDead(ctx, args)
		if err != nil {
			return opErr("requeue dead", q.name, err)
		}
		if holder, ok := held[id]; ok {
			return opErr("requeue dead", q.name, fmt.Errorf("%w: task %q's dedup key %q is held by live task %q", ErrDuplicate, id, args[3], holder))
		}
		if n == 1 {
			return nil
		}
	}
	return opErr("requeue dead", q.name, fmt.Errorf("%w: task %q", ErrDeadLetterNotFound, id))
}

// RequeueAllDead puts every dead letter that is a task back on the queue,
// oldest first, attempts reset, dedup keys restored (see RequeueDead);
// poison, and tasks whose dedup key another live task holds, stay. It
// returns how many moved.
// May return ErrWrongType, ErrUnavailable.
func (q *queueCore) RequeueAllDead(ctx context.Context) (int, error) {
	if err := q.ready(ctx); err != nil {
		return 0, opErr("requeue dead", q.name, err)
	}
	total := 0
	for _, s := range q.shardsOf(ctx) { // a sharded queue: each shard's in it
		m, err := s.requeueAllDeadOne(ctx)
		total += m
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// requeueAllDeadOne is RequeueAllDead on the shard of q's keys.
func (q *queueCore) requeueAllDeadOne(ctx context.Context) (int, error) {
	raws, err := q.deadRangeOne(ctx, 0, -1)
	if err != nil {
		return 0, opErr("requeue dead", q.name, err)
	}
	moved := 0
	var args []string
	flush := func() error {
		if len(args) == 0 {
			return nil
		}
		n, _, err := q.requeueDead(ctx, args)
		moved += n
		args = args[:0]
		return err
	}
	for _, r := range raws {
		if a, ok := revived(parseDead(r)); ok {
			args = append(args, a...)
		}
		if len(args) >= 2000 {
			if err := flush(); err != nil {
				return moved, opErr("requeue dead", q.name, err)
			}
		}
	}
	if err := flush(); err != nil {
		return moved, opErr("requeue dead", q.name, err)
	}
	return moved, nil
}

// PurgeDead deletes every dead letter and returns how many there were. May
// return ErrWrongType, ErrUnavailable.
func (q *queueCore) PurgeDead(ctx context.Context) (int64, error) {
	if err := q.ready(ctx); err != nil {
		return 0, opErr("purge dead", q.name, err)
	}
	var total int64
	for _, s := range q.shardsOf(ctx) {
		n, err := queueDeadPurgeScript.Exec(ctx, q.fleet.client, s.keys(), nil).AsInt64()
		total += n
		if err != nil {
			return total, opErr("purge dead", q.name, err)
		}
	}
	return total, nil
}
