package fleet

import (
	"context"
	"hash/maphash"
	"slices"
	"strconv"

	"github.com/redis/rueidis"

	"github.com/fleet-go/fleet/internal/keys"
)

// A queue's part of Sync: its lease hash checked and its dedup hash
// rebuilt, in bounded steps.

var (
	syncQueueLeasesScript = newScript("sync_queue_leases.lua")
	syncQueueWalkScript   = newScript("sync_queue_walk.lua")
	syncQueueDropScript   = newScript("sync_queue_drop.lua")
)

// syncQueueStep is how many elements one step of a queue's Sync reads:
// each step is one script of a few milliseconds at most.
const syncQueueStep = 500

// queue checks one queue's lease hash and rebuilds its dedup hash, in
// bounded steps (see syncDedup).
func (s *syncer) queue(ctx context.Context, name string) error {
	span, err := s.f.eng.QueueSpan(ctx, name)
	if err != nil {
		return err
	}
	// A sharded queue (QueueOptions.Shards): each shard is a queue of its
	// own here.
	q := s.f.coreOf(name, QueueOptions{})
	for i := range span {
		if err := s.queueShard(ctx, q.sub(i)); err != nil {
			return err
		}
	}
	return nil
}

// queueShard is queue on one shard of a queue.
func (s *syncer) queueShard(ctx context.Context, q *queueCore) error {
	ks := q.keys()
	for _, mode := range []string{"stale", "missing"} {
		n, err := s.steps(ctx, func(cursor string) rueidis.RedisResult {
			return syncQueueLeasesScript.Exec(ctx, s.f.client, ks, []string{mode, cursor, strconv.Itoa(syncQueueStep)})
		})
		if mode == "stale" {
			s.r.LeasesRemoved += n
		} else {
			s.r.LeasesMissing += n
		}
		if err != nil {
			return err
		}
	}
	return s.syncDedup(ctx, q)
}

// syncDedup makes a queue's :dedup hash name, for each dedup key, a live
// task that carries it, in bounded steps while the queue is busy:
//
//  1. It reads every entry of :dedup (HSCAN) and keeps each as a candidate
//     (as hashes, 16 bytes an entry).
//  2. It walks the live tasks (sync_queue_walk.lua): scheduled, then
//     pending (tail to head, and back over what was pushed meanwhile),
//     prioritized, each group's (as the pending list), then in flight, the
//     order in which tasks move on the hot path (a due task goes to the
//     pending tail, a reserved one from the pending head to in-flight), so
//     that a task that moves during the walk is still seen.
//     A missing entry is added in the step that sees its task; a candidate
//     whose key is seen with the id it names is confirmed.
//  3. If candidates are left, it walks again, to confirm what a task that
//     moved back (a nack to :scheduled, a release or a sweeper's re-queue
//     to pending) hid from the first walk.
//  4. Each candidate left is removed, or pointed at a live task seen with
//     its key, in a step that checks that the entry is unchanged and its
//     task not in flight (sync_queue_drop.lua).
//
// An entry made after step 1 (by a submit) is never a candidate: no live
// task's entry is removed because its task was submitted during Sync.
func (s *syncer) syncDedup(ctx context.Context, q *queueCore) error {
	k, ks := &q.key, q.keys()
	c := s.f.client
	seed := maphash.MakeSeed()
	h := func(s string) uint64 { return maphash.String(seed, s) }
	cand := map[uint64]uint64{} // hash(key) -> hash(id) of entries not yet confirmed
	for cursor := uint64(0); ; {
		e, err := c.Do(ctx, c.B().Hscan().Key(k.Dedup).Cursor(cursor).Count(syncQueueStep).Build()).AsScanEntry()
		if err != nil {
			return err
		}
		for i := 0; i+1 < len(e.Elements); i += 2 {
			cand[h(e.Elements[i])] = h(e.Elements[i+1])
		}
		if cursor = e.Cursor; cursor == 0 {
			break
		}
		if err := s.f.alive(ctx); err != nil {
			return err
		}
	}
	live := map[uint64]string{} // hash(key) -> a live id seen with it, for candidates naming another
	seen := func(key, id string) {
		hk := h(key)
		want, ok := cand[hk]
		switch {
		case !ok:
		case want == h(id):
			delete(cand, hk)
			delete(live, hk)
		default:
			live[hk] = id
		}
	}
	for pass := 0; pass < 2 && (pass == 0 || len(cand) > 0); pass++ {
		if err := s.walkQueue(ctx, k, ks, seen); err != nil {
			return err
		}
	}
	if len(cand) == 0 {
		return nil
	}
	// Drop what is left: find the candidates' keys again (HSCAN) and
	// remove or re-point each entry that still names the id seen in step 1.
	var batch []string
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		r, err := syncQueueDropScript.Exec(ctx, c, ks, batch).AsIntSlice()
		batch = batch[:0]
		if err != nil {
			return err
		}
		if len(r) != 2 {
			return unexpectedReply("sync queue", len(r))
		}
		s.r.DedupRemoved += int(r[0])
		s.r.DedupFixed += int(r[1])
		return nil
	}
	for cursor := uint64(0); ; {
		e, err := c.Do(ctx, c.B().Hscan().Key(k.Dedup).Cursor(cursor).Count(syncQueueStep).Build()).AsScanEntry()
		if err != nil {
			return err
		}
		for i := 0; i+1 < len(e.Elements); i += 2 {
			key, id := e.Elements[i], e.Elements[i+1]
			if want, ok := cand[h(key)]; ok && want == h(id) {
				batch = append(batch, key, id, live[h(key)])
				delete(cand, h(key))
			}
		}
		if len(batch) >= 3*syncQueueStep {
			if err := flush(); err != nil {
				return err
			}
		}
		if cursor = e.Cursor; cursor == 0 {
			break
		}
		if err := s.f.alive(ctx); err != nil {
			return err
		}
	}
	return flush()
}

// walkQueue runs sync_queue_walk.lua over a queue's scheduled, pending,
// prioritized, grouped and in-flight tasks, in that order, and calls seen
// with the dedup key and id of every task it reads that carries a key (a
// task may come more than once). k is the queue's keys, ks its scripts'.
func (s *syncer) walkQueue(ctx context.Context, k *keys.Queue, ks []string, seen func(key, id string)) error {
	regions := [][2]string{{"sched"}, {"pending"}, {"prio"}, {"groups"}, {"proc"}}
	for i := 0; i < len(regions); i++ {
		region, group := regions[i][0], regions[i][1]
		if region == "groups" {
			// The groups with tasks now (a group that comes later gets
			// them from :scheduled, walked already, or from a release,
			// whose task is in flight when the drop checks).
			c := s.f.client
			gs, err := c.Do(ctx, c.B().Hkeys().Key(k.GroupState).Build()).AsStrSlice()
			if err != nil {
				return err
			}
			var more [][2]string
			for _, g := range gs {
				if keys.Check(keys.KindGroup, g) == nil {
					more = append(more, [2]string{"group", g})
				}
			}
			regions = slices.Insert(regions, i+1, more...)
			continue
		}
		state := []string{"0", "", ""}
		for {
			res, err := syncQueueWalkScript.Exec(ctx, s.f.client, ks, append([]string{region, strconv.Itoa(syncQueueStep)}, append(state, group)...)).ToArray()
			if err != nil {
				return err
			}
			if len(res) < 5 || len(res)%2 == 0 {
				return unexpectedReply("sync queue walk", len(res))
			}
			str := make([]string, len(res))
			for i, r := range res {
				if i == 4 {
					n, _ := r.AsInt64()
					s.r.DedupAdded += int(n)
					continue
				}
				if str[i], err = r.ToString(); err != nil {
					return err
				}
			}
			for i := 5; i+1 < len(str); i += 2 {
				seen(str[i], str[i+1])
			}
			if str[0] == "1" {
				break
			}
			state = str[1:4]
			if err := s.f.alive(ctx); err != nil {
				return err
			}
		}
	}
	return nil
}
