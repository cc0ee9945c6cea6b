package fleet

import (
	"context"
	"encoding/json"
	"strconv"

	"github.com/redis/rueidis"

	"github.com/fleet-go/fleet/internal/keys"
)

// Queue returns an untyped handle on queue name, for the calls an
// operator makes by name (a dashboard, fleetctl): Stats, Lookup, Cancel,
// DeadLetters, RequeueDead, RequeueAllDead, PurgeDead, Pause, Resume,
// Paused, Pending and Scheduled are Queue's own, on json.RawMessage
// payloads. It is the handle of the NewQueue that this process made for
// the name, when there is one; else a handle with the default options,
// whose Pause and Resume refuse (with ErrQueueNotFound, writing nothing) a
// name that the registry fleet:queues does not know. Unlike NewQueue it
// records nothing in this process, so Fleet.SubmitJSON keeps decoding into
// the type that NewQueue gave. A bad name is kept and returned by every
// call (see Queue.Err).
func (f *Fleet) Queue(name string) *Queue[json.RawMessage] {
	return &Queue[json.RawMessage]{queueCore: f.coreOf(name, QueueOptions{})}
}

// QueueCounts is one queue's line of an Overview.
type QueueCounts struct {
	// Name is the queue's name.
	Name string `json:"name"`
	// QueueStats are its counts, as Queue.Stats reads them.
	QueueStats
}

// PoolCounts is one pool's line of an Overview.
type PoolCounts struct {
	// Name is the pool's name.
	Name string `json:"name"`
	// Items counts the items that have not expired (as Pool.Size).
	Items int64 `json:"items"`
	// Claimed counts the items with a live claim.
	Claimed int64 `json:"claimed"`
}

// Overview is the counts of every registered queue and pool, sorted by
// name.
type Overview struct {
	// Queues has one line per queue of fleet:queues.
	Queues []QueueCounts `json:"queues"`
	// Pools has one line per pool of fleet:pools.
	Pools []PoolCounts `json:"pools"`
}

// Overview counts every queue of fleet:queues and every pool of
// fleet:pools (run Sync first if a registry may be incomplete) in four
// pipelined round trips: the registries; TIME; the queue counts, the pool sizes
// and item ids; an EXISTS over each pool's claim keys (in the tagged
// layout a fifth, before the counts, reads the queues' shard counts: a
// sharded queue counts as one, its shards summed). Names in a registry
// that fleet could not have made are left out. May return ErrWrongType,
// ErrUnavailable.
func (f *Fleet) Overview(ctx context.Context) (Overview, error) {
	ov := Overview{Queues: []QueueCounts{}, Pools: []PoolCounts{}}
	if err := f.alive(ctx); err != nil {
		return ov, opErr("overview", "", err)
	}
	c := f.client
	res := c.DoMulti(ctx,
		c.B().Smembers().Key(f.keys.Queues()).Build(),
		c.B().Smembers().Key(f.keys.Pools()).Build())
	qs, err := res[0].AsStrSlice()
	if err != nil {
		return ov, opErr("overview", f.keys.Queues(), err)
	}
	ps, err := res[1].AsStrSlice()
	if err != nil {
		return ov, opErr("overview", f.keys.Pools(), err)
	}
	// TIME has no slot: a cluster client refuses it beside keyed commands.
	now, err := timeReply(c.Do(ctx, c.B().Time().Build()))
	if err != nil {
		return ov, opErr("overview", "", err)
	}
	valid := func(kind keys.Kind, names []string) []string {
		out := names[:0]
		for _, n := range names {
			if keys.Check(kind, n) == nil {
				out = append(out, n)
			}
		}
		return sortedKeys(setOf(out))
	}
	qs, ps = valid(keys.KindQueue, qs), valid(keys.KindPool, ps)
	var cmds rueidis.Commands
	spans := make([]int, len(qs))
	if f.keys.Tagged() && len(qs) > 0 {
		// Sharded queues (QueueOptions.Shards): one more round trip for
		// their shard counts.
		for _, n := range qs {
			cmds = append(cmds, c.B().Hget().Key(f.keys.Queue(n).Shards).Field("max").Build())
		}
		for i, r := range c.DoMulti(ctx, cmds...) {
			m, err := r.AsInt64()
			if err != nil && !rueidis.IsRedisNil(err) {
				return ov, opErr("overview", qs[i], err)
			}
			spans[i] = int(min(max(m, 1), keys.MaxShards))
		}
		cmds = cmds[:0]
	}
	for i, n := range qs {
		spans[i] = max(spans[i], 1)
		for _, k := range f.eng.ShardKeys(n, spans[i]) {
			cmds = appendStatCmds(c, cmds, k)
		}
		cmds = append(cmds, c.B().Exists().Key(f.keys.Queue(n).Paused).Build())
	}
	nowMs := strconv.FormatInt(now.UnixMilli(), 10)
	for _, n := range ps {
		idx := f.keys.PoolIndex(n)
		cmds = append(cmds,
			c.B().Hlen().Key(f.keys.Pool(n)).Build(),
			c.B().Zcount().Key(idx.Exp).Min("-inf").Max(nowMs).Build(),
			c.B().Hkeys().Key(f.keys.Pool(n)).Build())
	}
	res = c.DoMulti(ctx, cmds...)
	for i, n := range qs {
		st, err := f.readStats(ctx, res, f.eng.ShardKeys(n, spans[i]), now)
		if err != nil {
			return ov, opErr("overview", n, err)
		}
		res = res[statCmds*spans[i]+1:]
		ov.Queues = append(ov.Queues, QueueCounts{Name: n, QueueStats: st})
	}
	cmds = cmds[:0]
	var owners []int // pool index of each EXISTS
	for i, n := range ps {
		pc := PoolCounts{Name: n}
		items, err := res[3*i].AsInt64()
		if err != nil {
			return ov, opErr("overview", n, err)
		}
		gone, err := res[3*i+1].AsInt64()
		if err != nil {
			return ov, opErr("overview", n, err)
		}
		pc.Items = max(items-gone, 0)
		ids, err := res[3*i+2].AsStrSlice()
		if err != nil {
			return ov, opErr("overview", n, err)
		}
		prefix := f.keys.PoolClaimPrefix(n)
		for len(ids) > 0 {
			batch := ids[:min(delBatch, len(ids))]
			ids = ids[len(batch):]
			ks := make([]string, len(batch))
			for j, id := range batch {
				ks[j] = prefix + id
			}
			// One slot per pool in the tagged layout: one EXISTS per batch.
			cmds = append(cmds, c.B().Exists().Key(ks...).Build())
			owners = append(owners, i)
		}
		ov.Pools = append(ov.Pools, pc)
	}
	if len(cmds) > 0 {
		res = c.DoMulti(ctx, cmds...)
		for j, r := range res {
			n, err := r.AsInt64()
			if err != nil {
				return ov, opErr("overview", ps[owners[j]], err)
			}
			ov.Pools[owners[j]].Claimed += n
		}
	}
	return ov, nil
}
