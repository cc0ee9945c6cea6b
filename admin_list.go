package fleet

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/fleet-go/fleet/internal/keys"
	"github.com/fleet-go/fleet/internal/taskbody"
)

// Reads for an operator's dashboard (fleetui) that the rest of the admin
// API lacks: the registries by name, the tasks waiting on a queue, the
// workers' stats frames, a pool's counts by tag value and the newest
// entries of a stream. Each reads one page or one entity, never the
// keyspace.

// WaitingTask is one task that waits on a queue, as PendingTasks and
// ScheduledTasks read it.
type WaitingTask struct {
	// ID is the task's id; empty when the body is not a task (poison that
	// the next reserve sends to the dead letters).
	ID string `json:"id"`
	// Payload is the task's payload as stored (JSON).
	Payload json.RawMessage `json:"payload"`
	// Attempts counts the failed runs so far.
	Attempts int `json:"attempts"`
	// ReadyAt is when a scheduled task becomes due (server clock); zero for
	// a pending task.
	ReadyAt time.Time `json:"ready_at"`
	// Raw is the body exactly as stored.
	Raw string `json:"raw"`
}

// waitingTask reads raw, a body of q, its payload opened where this
// process can (Fleet.shown).
func (q *queueCore) waitingTask(raw string) WaitingTask {
	t := WaitingTask{Raw: raw}
	if b, err := taskbody.Parse(raw); err == nil {
		t.ID, t.Payload, t.Attempts = b.ID, q.fleet.shown(q.name, sealPayload, b.Payload), b.Attempts
	}
	return t
}

func checkPage(offset, count int) error {
	if offset < 0 || count < 0 {
		return fmt.Errorf("%w: offset %d and count %d may not be negative", ErrInvalidArgument, offset, count)
	}
	return nil
}

// Pending lists up to count pending tasks of the queue from offset, in
// the order reserves take them (the head of fleet:queue:<name> first), in
// one LRANGE (of a sharded queue: shard by shard, shard 0 first, in two
// round trips). A queue that does not exist lists none. May return
// ErrInvalidName, ErrInvalidArgument, ErrWrongType, ErrUnavailable.
func (q *queueCore) Pending(ctx context.Context, offset, count int) ([]WaitingTask, error) {
	if err := keys.Join(q.ready(ctx), checkPage(offset, count)); err != nil {
		return nil, opErr("pending tasks", q.name, err)
	}
	if count == 0 {
		return nil, nil
	}
	shards := q.shardsOf(ctx)
	lists := make([]string, len(shards))
	for i, s := range shards {
		lists[i] = s.key.Pending
	}
	raws, err := q.fleet.concatRange(ctx, lists, offset, offset+count-1)
	if err != nil {
		return nil, opErr("pending tasks", q.name, err)
	}
	out := make([]WaitingTask, len(raws))
	for i, r := range raws {
		out[i] = q.waitingTask(r)
	}
	return out, nil
}

// Scheduled lists up to count scheduled tasks of the queue from offset,
// the soonest due first (fleet:queue:<name>:scheduled by rank), in one
// ZRANGE (of a sharded queue: the first offset+count of each shard,
// merged). A queue that does not exist lists none. May return
// ErrInvalidName, ErrInvalidArgument, ErrWrongType, ErrUnavailable.
func (q *queueCore) Scheduled(ctx context.Context, offset, count int) ([]WaitingTask, error) {
	if err := keys.Join(q.ready(ctx), checkPage(offset, count)); err != nil {
		return nil, opErr("scheduled tasks", q.name, err)
	}
	if count == 0 {
		return nil, nil
	}
	c := q.fleet.client
	// A sharded queue: the first offset+count of each shard, merged by
	// when they are due.
	shards := q.shardsOf(ctx)
	cmds := make(rueidis.Commands, len(shards))
	for i, s := range shards {
		cmds[i] = c.B().Zrange().Key(s.key.Scheduled).Min("0").Max(strconv.Itoa(offset + count - 1)).Withscores().Build()
	}
	var zs []rueidis.ZScore
	for _, r := range c.DoMulti(ctx, cmds...) {
		z, err := r.AsZScores()
		if err != nil {
			return nil, opErr("scheduled tasks", q.name, err)
		}
		zs = append(zs, z...)
	}
	if len(shards) > 1 {
		slices.SortStableFunc(zs, func(a, b rueidis.ZScore) int { return cmp.Compare(a.Score, b.Score) })
	}
	zs = zs[min(offset, len(zs)):min(offset+count, len(zs))]
	out := make([]WaitingTask, len(zs))
	for i, z := range zs {
		out[i] = q.waitingTask(z.Member)
		out[i].ReadyAt = fromUnixSeconds(z.Score)
	}
	return out, nil
}

// Registered reports whether the registry of kind names an entity: queue
// name in fleet:queues, pool name in fleet:pools, or worker name
// "<type>|<id>" as id in wkrs:<type> or as name in wkrs:all. A name fleet
// could not have made is not registered. An unknown kind is
// ErrInvalidArgument. May return ErrWrongType, ErrUnavailable.
func (f *Fleet) Registered(ctx context.Context, kind RegistryKind, name string) (bool, error) {
	c := f.client
	var cmds rueidis.Commands
	switch kind {
	case RegistryQueue:
		if keys.Check(keys.KindQueue, name) != nil {
			return false, nil
		}
		cmds = append(cmds, c.B().Sismember().Key(f.keys.Queues()).Member(name).Build())
	case RegistryPool:
		if keys.Check(keys.KindPool, name) != nil {
			return false, nil
		}
		cmds = append(cmds, c.B().Sismember().Key(f.keys.Pools()).Member(name).Build())
	case RegistryWorker:
		typ, id, ok := strings.Cut(name, "|")
		if !ok || keys.Join(keys.Check(keys.KindType, typ), keys.Check(keys.KindWorker, id)) != nil {
			return false, nil
		}
		cmds = append(cmds,
			c.B().Sismember().Key(f.keys.Workers(typ)).Member(id).Build(),
			c.B().Sismember().Key(f.keys.AllWorkers()).Member(name).Build())
	default:
		return false, opErr("registered", name, fmt.Errorf("%w: unknown registry kind %d", ErrInvalidArgument, kind))
	}
	if err := f.alive(ctx); err != nil {
		return false, opErr("registered", name, err)
	}
	for _, r := range f.client.DoMulti(ctx, cmds...) {
		in, err := r.AsBool()
		if err != nil {
			return false, opErr("registered", name, err)
		}
		if in {
			return true, nil
		}
	}
	return false, nil
}

// RegistryKind names a registry that Registered reads.
type RegistryKind int

// The registries of Registered.
const (
	// RegistryQueue is fleet:queues.
	RegistryQueue RegistryKind = iota + 1
	// RegistryPool is fleet:pools.
	RegistryPool
	// RegistryWorker is wkrs:<type> and wkrs:all; the name is "<type>|<id>".
	RegistryWorker
)

// StatsFrames reads the last stats frame (wkr:<type>:<id>:stats) of each
// worker of ws, in one pipelined round trip, in the order of ws. A worker
// without a frame, or whose frame does not decode, gets the zero
// WorkerStats (TS 0). May return ErrWrongType, ErrUnavailable.
func (f *Fleet) StatsFrames(ctx context.Context, ws []WorkerInfo) ([]WorkerStats, error) {
	out := make([]WorkerStats, len(ws))
	if err := f.alive(ctx); err != nil {
		return out, opErr("stats frames", "", err)
	}
	c := f.client
	cmds := make(rueidis.Commands, 0, len(ws))
	idx := make([]int, 0, len(ws))
	for i, w := range ws {
		if keys.Join(keys.Check(keys.KindType, w.Type), keys.Check(keys.KindWorker, w.ID)) != nil {
			continue
		}
		cmds = append(cmds, c.B().Get().Key(f.keys.Worker(w.Type, w.ID).Stats).Build())
		idx = append(idx, i)
	}
	if len(cmds) == 0 {
		return out, nil
	}
	for j, r := range c.DoMulti(ctx, cmds...) {
		s, err := r.ToString()
		if rueidis.IsRedisNil(err) {
			continue
		}
		if err != nil {
			w := ws[idx[j]]
			return out, opErr("stats frames", w.Type+"|"+w.ID, err)
		}
		var st WorkerStats
		if json.Unmarshal([]byte(s), &st) == nil {
			out[idx[j]] = st
		}
	}
	return out, nil
}

// TagCount counts a pool's live items that carry one tag value.
type TagCount struct {
	// Field is the tag's JSON field name; Value its value as JSON
	// ("\"eu\"", "3", "true").
	Field string `json:"field"`
	Value string `json:"value"`
	// Items counts the items that have not expired; Claimed those of them
	// with a live claim.
	Items   int64 `json:"items"`
	Claimed int64 `json:"claimed"`
}

// PoolTagCounts counts the live items of pool name and their claims by
// tag value, sorted by field and value. It walks the pool hash with HSCAN
// and checks the claims with one EXISTS per item in pipelined batches, so
// its cost grows with the pool: a dashboard read, not a hot-path one.
// Entries that are not valid items are left out; tags that are not scalars
// (objects, arrays) are counted by their JSON text. May return
// ErrInvalidName, ErrWrongType, ErrUnavailable.
func (f *Fleet) PoolTagCounts(ctx context.Context, name string) ([]TagCount, error) {
	if err := keys.Check(keys.KindPool, name); err != nil {
		return nil, opErr("pool tag counts", name, err)
	}
	if err := f.alive(ctx); err != nil {
		return nil, opErr("pool tag counts", name, err)
	}
	c := f.client
	now, err := timeReply(c.Do(ctx, c.B().Time().Build()))
	if err != nil {
		return nil, opErr("pool tag counts", name, err)
	}
	type item struct {
		id   string
		tags map[string]json.RawMessage
	}
	var items []item
	hash := f.keys.Pool(name)
	for cursor := uint64(0); ; {
		e, err := c.Do(ctx, c.B().Hscan().Key(hash).Cursor(cursor).Count(scanCount).Build()).AsScanEntry()
		if err != nil {
			return nil, opErr("pool tag counts", name, err)
		}
		for i := 0; i+1 < len(e.Elements); i += 2 {
			it, err := decodeItem[json.RawMessage, map[string]json.RawMessage](e.Elements[i], e.Elements[i+1])
			if err != nil || (!it.ExpiresAt.IsZero() && !it.ExpiresAt.After(now)) {
				continue
			}
			items = append(items, item{id: it.ID, tags: it.Tags})
		}
		if cursor = e.Cursor; cursor == 0 {
			break
		}
	}
	// HSCAN may return an entry twice: count each item once.
	slices.SortFunc(items, func(a, b item) int { return strings.Compare(a.id, b.id) })
	items = slices.CompactFunc(items, func(a, b item) bool { return a.id == b.id })
	claimed := make([]bool, len(items))
	prefix := f.keys.PoolClaimPrefix(name)
	for start := 0; start < len(items); start += delBatch {
		batch := items[start:min(start+delBatch, len(items))]
		cmds := make(rueidis.Commands, len(batch))
		for j, it := range batch {
			cmds[j] = c.B().Exists().Key(prefix + it.id).Build()
		}
		for j, r := range c.DoMulti(ctx, cmds...) {
			n, err := r.AsInt64()
			if err != nil {
				return nil, opErr("pool tag counts", name, err)
			}
			claimed[start+j] = n > 0
		}
	}
	type fv struct{ field, value string }
	counts := map[fv]*TagCount{}
	for i, it := range items {
		for field, raw := range it.tags {
			value, err := json.Marshal(raw) // compacts the JSON text
			if err != nil {
				value = raw
			}
			k := fv{field, string(value)}
			tc := counts[k]
			if tc == nil {
				tc = &TagCount{Field: field, Value: k.value}
				counts[k] = tc
			}
			tc.Items++
			if claimed[i] {
				tc.Claimed++
			}
		}
	}
	out := make([]TagCount, 0, len(counts))
	for _, tc := range counts {
		out = append(out, *tc)
	}
	slices.SortFunc(out, func(a, b TagCount) int {
		if a.Field != b.Field {
			return strings.Compare(a.Field, b.Field)
		}
		return strings.Compare(a.Value, b.Value)
	})
	return out, nil
}

// StreamTail reads stream:<typ> without changing it. With since zero it
// returns the newest n entries; otherwise up to n entries pushed at or
// after since (by score), so a tail that passes the Time of the last entry
// it saw gets that entry again (entries of one PushMany with Envelope share
// a score) and drops the ones it has. Entries are oldest first, decoded as
// StreamEntry[json.RawMessage] (a bare member, written without fleet's
// envelope, has no ID); members that decode as neither are reported in a
// *StreamDecodeError beside the others. n <= 0 is ErrInvalidArgument. May
// return ErrInvalidName, ErrWrongType, ErrUnavailable.
func (f *Fleet) StreamTail(ctx context.Context, typ string, since time.Time, n int) ([]StreamEntry[json.RawMessage], error) {
	s := NewStream[json.RawMessage](f, typ, StreamOptions{})
	if err := s.checkN(ctx, n); err != nil {
		return nil, opErr("stream tail", typ, err)
	}
	c := f.client
	var cmd rueidis.Completed
	if since.IsZero() {
		cmd = c.B().Zrange().Key(s.key).Min("+inf").Max("-inf").Byscore().Rev().Limit(0, int64(n)).Withscores().Build()
	} else {
		// Scores are to the microsecond (bare members) or the millisecond
		// (envelopes): since, to the microsecond, misses neither.
		from := strconv.FormatFloat(float64(since.UnixMicro())/1e6, 'f', 6, 64)
		cmd = c.B().Zrange().Key(s.key).Min(from).Max("+inf").Byscore().Limit(0, int64(n)).Withscores().Build()
	}
	zs, err := c.Do(ctx, cmd).AsZScores()
	if err != nil {
		return nil, opErr("stream tail", typ, err)
	}
	if since.IsZero() {
		slices.Reverse(zs)
	}
	return s.decode(zs)
}
