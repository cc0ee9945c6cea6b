package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/fleet-go/fleet/internal/keys"
)

// The admin API: the manual operations of the documented schema ("Cleaning
// up": remove a worker, an automation type, a pool) and what an operator
// reads (workers, queue and pool counts, dead letters), in both layouts and
// on a cluster, without KEYS. Each finds what to remove through the indexes
// (wkrs:<type>, wkrs:all, the pool hash and its index sets), never by
// scanning the keyspace.

// delBatch bounds the keys of one DEL.
const delBatch = 500

// RemoveReport counts what a removal deleted. Removing what does not exist
// is not an error: it reports zeros.
type RemoveReport struct {
	// Workers counts the workers removed.
	Workers int `json:"workers"`
	// Items counts the pool items removed.
	Items int `json:"items"`
	// Keys counts the keys deleted.
	Keys int `json:"keys"`
	// Entries counts the members and fields removed from indexes,
	// registries and the catalog.
	Entries int `json:"entries"`
}

func (r *RemoveReport) add(o RemoveReport) {
	r.Workers += o.Workers
	r.Items += o.Items
	r.Keys += o.Keys
	r.Entries += o.Entries
}

// ints sums the integer replies of res into keys (DEL) or entries.
func sumInts(res []rueidis.RedisResult) (int, error) {
	n := 0
	for _, r := range res {
		v, err := r.AsInt64()
		if err != nil {
			return n, err
		}
		n += int(v)
	}
	return n, nil
}

// RemoveWorker deletes every key of worker id of type typ
// (wkr:<type>:<id>:{hardware,config,gen,state,stats}) and its entries in
// wkrs:<type> and wkrs:all. Stop the worker first: a worker still running
// writes its :state and :stats again on its next heartbeat, keys that no
// index then lists. May return ErrInvalidName, ErrUnavailable.
func (f *Fleet) RemoveWorker(ctx context.Context, typ, id string) (RemoveReport, error) {
	name := typ + "|" + id
	if err := keys.Join(keys.Check(keys.KindType, typ), keys.Check(keys.KindWorker, id)); err != nil {
		return RemoveReport{}, opErr("remove worker", name, err)
	}
	if err := f.alive(ctx); err != nil {
		return RemoveReport{}, opErr("remove worker", name, err)
	}
	r, err := f.removeWorker(ctx, typ, id)
	return r, opErr("remove worker", name, err)
}

// removeWorker deletes the worker's keys first and its index entries last
// (the reverse of a registration), so that no moment shows indexed keys
// that are half gone to a reader that starts from the indexes.
func (f *Fleet) removeWorker(ctx context.Context, typ, id string) (RemoveReport, error) {
	var r RemoveReport
	c, w := f.client, f.keys.Worker(typ, id)
	res := c.DoMulti(ctx,
		c.B().Del().Key(w.Hardware, w.Config, w.Gen, w.State, w.Stats).Build(),
		c.B().Srem().Key(f.keys.Workers(typ)).Member(id).Build(),
		c.B().Srem().Key(f.keys.AllWorkers()).Member(typ+"|"+id).Build())
	var err error
	if r.Keys, err = sumInts(res[:1]); err != nil {
		return r, err
	}
	if r.Entries, err = sumInts(res[1:]); err != nil {
		return r, err
	}
	if r.Keys+r.Entries > 0 {
		r.Workers = 1
	}
	return r, nil
}

// typeWorkers returns the ids of the workers of type typ: the members of
// wkrs:<type> and the wkrs:all entries of the type, sorted.
func (f *Fleet) typeWorkers(ctx context.Context, typ string) ([]string, error) {
	c := f.client
	res := c.DoMulti(ctx,
		c.B().Smembers().Key(f.keys.Workers(typ)).Build(),
		c.B().Smembers().Key(f.keys.AllWorkers()).Build())
	ids, err := res[0].AsStrSlice()
	if err != nil {
		return nil, err
	}
	all, err := res[1].AsStrSlice()
	if err != nil {
		return nil, err
	}
	for _, m := range all {
		if t, id, ok := strings.Cut(m, "|"); ok && t == typ {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return slices.Compact(ids), nil
}

// RemoveType removes all state of automation type typ, as the documented
// manual clean-up does: every worker of the type (found in wkrs:<type> and
// wkrs:all) with its keys and index entries, wkrs:<type>, the stream
// stream:<type>, the queue named typ with all its keys (derived ones too:
// its done-record index and the history of its last 25 hours and 31 days,
// spelled by name) and its registry entry, and the type's catalog entry.
// Per-task keys (a retained record, a task's log) are left to run out with
// their TTL. Worker keys that no index names are not found (Sync does not index them either); stop the
// type's workers first, or they register again. May return ErrInvalidName,
// ErrUnavailable.
func (f *Fleet) RemoveType(ctx context.Context, typ string) (RemoveReport, error) {
	var r RemoveReport
	if err := keys.Check(keys.KindType, typ); err != nil {
		return r, opErr("remove type", typ, err)
	}
	if err := keys.Check(keys.KindQueue, typ); err != nil {
		return r, opErr("remove type", typ, err)
	}
	if err := f.alive(ctx); err != nil {
		return r, opErr("remove type", typ, err)
	}
	ids, err := f.typeWorkers(ctx, typ)
	if err != nil {
		return r, opErr("remove type", typ, err)
	}
	for _, id := range ids {
		if keys.Check(keys.KindWorker, id) != nil {
			continue // an entry fleet could not have written: its keys cannot be spelled
		}
		wr, err := f.removeWorker(ctx, typ, id)
		r.add(wr)
		if err != nil {
			return r, opErr("remove type", typ, err)
		}
	}
	c, q := f.client, f.keys.Queue(typ)
	span, err := f.eng.QueueSpan(ctx, typ)
	if err != nil {
		return r, opErr("remove type", typ, err)
	}
	dels := rueidis.Commands{
		c.B().Del().Key(f.keys.Workers(typ)).Build(),
		c.B().Del().Key(f.keys.Stream(typ)).Build(),
		c.B().Del().Key(q.Pending, q.Processing, q.Body, q.Lease, q.Scheduled, q.Dead, q.Dedup, q.Policy, q.Retained).Build(),
		c.B().Del().Key(f.historyKeys(typ)...).Build(),
	}
	if span > 1 {
		// A sharded queue (QueueOptions.Shards): every shard, and the count.
		for _, s := range f.eng.ShardKeys(typ, span)[1:] {
			dels = append(dels, c.B().Del().Key(s.Pending, s.Processing, s.Body, s.Lease, s.Scheduled, s.Dead, s.Dedup, s.Policy, s.Retained).Build())
		}
		dels = append(dels, c.B().Del().Key(q.Shards).Build())
	}
	res := c.DoMulti(ctx, append(dels,
		c.B().Srem().Key(f.keys.Queues()).Member(typ).Build(),
		c.B().Hdel().Key(f.keys.Catalog()).Field(typ).Build())...)
	n, err := sumInts(res[:len(dels)])
	r.Keys += n
	if err != nil {
		return r, opErr("remove type", typ, err)
	}
	n, err = sumInts(res[len(dels):])
	r.Entries += n
	return r, opErr("remove type", typ, err)
}

// RemovePool removes pool name: its items (the hash), every claim and claim
// owner key of the items it holds or indexes, every derived index key
// (fleet:pidx:<name>:...: the item, expiry and tag index sets, the
// wake-up counter, the reindex cursor) and its entry in fleet:pools. Claim
// and owner keys are found from the ids in the pool hash, the item set and
// the expiry index, never by SCAN; a claim on an item that was already gone
// from all three runs out with its hold. A Put that runs meanwhile may
// leave its item behind. May return ErrInvalidName, ErrWrongType,
// ErrUnavailable.
func (f *Fleet) RemovePool(ctx context.Context, name string) (RemoveReport, error) {
	var r RemoveReport
	if err := keys.Check(keys.KindPool, name); err != nil {
		return r, opErr("remove pool", name, err)
	}
	if err := f.alive(ctx); err != nil {
		return r, opErr("remove pool", name, err)
	}
	err := f.dropPool(ctx, name, &r)
	return r, opErr("remove pool", name, err)
}

func (f *Fleet) dropPool(ctx context.Context, name string, r *RemoveReport) error {
	c := f.client
	hash, idx, claim := f.keys.Pool(name), f.keys.PoolIndex(name), f.keys.PoolClaimPrefix(name)
	ids := map[string]bool{}
	n, err := c.Do(ctx, c.B().Hlen().Key(hash).Build()).AsInt64()
	if err != nil {
		return err
	}
	r.Items = int(n)
	scan := func(cmd func(cursor uint64) rueidis.Completed, pairs bool) error {
		for cursor := uint64(0); ; {
			e, err := c.Do(ctx, cmd(cursor)).AsScanEntry()
			if err != nil {
				return err
			}
			for i := 0; i < len(e.Elements); i++ {
				ids[e.Elements[i]] = true
				if pairs {
					i++
				}
			}
			if cursor = e.Cursor; cursor == 0 {
				return nil
			}
		}
	}
	if err := scan(func(cur uint64) rueidis.Completed {
		return c.B().Hscan().Key(hash).Cursor(cur).Count(scanCount).Build()
	}, true); err != nil {
		return err
	}
	if err := scan(func(cur uint64) rueidis.Completed {
		return c.B().Sscan().Key(idx.All).Cursor(cur).Count(scanCount).Build()
	}, false); err != nil {
		return err
	}
	if err := scan(func(cur uint64) rueidis.Completed {
		return c.B().Zscan().Key(idx.Exp).Cursor(cur).Count(scanCount).Build()
	}, true); err != nil {
		return err
	}
	tags, err := c.Do(ctx, c.B().Smembers().Key(idx.Tags).Build()).AsStrSlice()
	if err != nil {
		return err
	}
	// Every key below shares the pool's slot in the tagged layout (the
	// compat layout runs on a single node only), so one DEL may take many.
	del := []string{hash, idx.All, idx.Exp, idx.Signal, idx.Scan, idx.Free, idx.Held, idx.Bad, idx.Foreign, idx.Fields, idx.Sweep}
	for _, t := range tags {
		if strings.HasPrefix(t, idx.Base+"t:") {
			del = append(del, t)
		}
	}
	for _, id := range sortedKeys(ids) {
		del = append(del, claim+id, idx.Base+"own:"+id)
	}
	// A claim's token key is named by its token, which its owner key holds.
	var gets rueidis.Commands
	for _, id := range sortedKeys(ids) {
		gets = append(gets, c.B().Get().Key(idx.Base+"own:"+id).Build())
	}
	for _, r := range c.DoMulti(ctx, gets...) {
		if tok, err := r.ToString(); err == nil {
			del = append(del, idx.Base+"tok:"+tok)
		}
	}
	del = append(del, idx.Tags) // last: a failure midway leaves the tag sets findable
	for len(del) > 0 {
		batch := del[:min(delBatch, len(del))]
		del = del[len(batch):]
		n, err := c.Do(ctx, c.B().Del().Key(batch...).Build()).AsInt64()
		r.Keys += int(n)
		if err != nil {
			return err
		}
	}
	n, err = c.Do(ctx, c.B().Srem().Key(f.keys.Pools()).Member(name).Build()).AsInt64()
	r.Entries += int(n)
	return err
}

// register adds the pool to the registry fleet:pools, at most about once a
// second per handle, so that Sync, Overview and an operator find it. On a
// cluster the registry lives in another slot than the pool, so this is a
// command of its own, never part of a pool script.
func (c *poolCore) register(ctx context.Context) error {
	now := time.Now().UnixMilli()
	last := c.registered.Load()
	if now-last < 1000 || !c.registered.CompareAndSwap(last, now) {
		return nil
	}
	cl := c.f.client
	if err := cl.Do(ctx, cl.B().Sadd().Key(c.f.keys.Pools()).Member(c.name).Build()).Error(); err != nil {
		c.registered.Store(0)
		return err
	}
	return nil
}

// WorkersFilter selects the workers that Workers lists. The zero value
// selects every worker.
type WorkersFilter struct {
	// Type selects the workers of one type (from wkrs:<type>); empty for
	// every type (from wkrs:all).
	Type string
	// ActiveWithin keeps the workers seen within this long (by last_seen,
	// on the server's clock); 0 keeps all.
	ActiveWithin time.Duration
}

// WorkerInfo is what Workers reads of one worker.
type WorkerInfo struct {
	// Type is the worker's automation type.
	Type string `json:"type"`
	// ID is the worker's id, unique within its type.
	ID string `json:"id"`
	// State is IDLE, RUNNING or ERROR; empty when the worker has no state.
	State WorkerState `json:"state"`
	// LastSeen is the worker's last heartbeat; zero when unknown.
	LastSeen time.Time `json:"last_seen"`
	// LastError is the worker's last error text.
	LastError string `json:"last_error,omitempty"`
	// Gen is the worker's stored config generation (wkr:<type>:<id>:gen):
	// the newest config pushed to it; 0 when it has none.
	Gen int64 `json:"gen"`
	// AppliedGen is the generation of the config the worker runs (the
	// applied_gen field of its :state hash, which fleet derives). It is
	// below Gen while the worker has not yet seen the newest config, or
	// after it refused it (see LastError); 0 when the worker never
	// recorded one (a worker of another client).
	AppliedGen int64 `json:"applied_gen"`
	// Chunk is a chunk worker's ChunkOptions, as it registered them in
	// its :hardware (Hardware.Chunk); nil for any other worker.
	Chunk *ChunkOptions `json:"chunk,omitempty"`
}

// Workers lists the indexed workers that filter selects, sorted by type
// and id, with their state, last_seen, last_error, gen, applied gen and a chunk
// worker's ChunkOptions (its :hardware), read in one
// pipelined round trip after the index (and a TIME). May return ErrInvalidName,
// ErrInvalidArgument, ErrUnavailable.
func (f *Fleet) Workers(ctx context.Context, filter WorkersFilter) ([]WorkerInfo, error) {
	if filter.Type != "" {
		if err := keys.Check(keys.KindType, filter.Type); err != nil {
			return nil, opErr("workers", filter.Type, err)
		}
	}
	if filter.ActiveWithin < 0 {
		return nil, opErr("workers", filter.Type, fmt.Errorf("%w: ActiveWithin %v is negative", ErrInvalidArgument, filter.ActiveWithin))
	}
	if err := f.alive(ctx); err != nil {
		return nil, opErr("workers", filter.Type, err)
	}
	c := f.client
	var list []WorkerInfo
	if filter.Type != "" {
		ids, err := c.Do(ctx, c.B().Smembers().Key(f.keys.Workers(filter.Type)).Build()).AsStrSlice()
		if err != nil {
			return nil, opErr("workers", filter.Type, err)
		}
		for _, id := range ids {
			list = append(list, WorkerInfo{Type: filter.Type, ID: id})
		}
	} else {
		all, err := c.Do(ctx, c.B().Smembers().Key(f.keys.AllWorkers()).Build()).AsStrSlice()
		if err != nil {
			return nil, opErr("workers", "", err)
		}
		for _, m := range all {
			if t, id, ok := strings.Cut(m, "|"); ok {
				list = append(list, WorkerInfo{Type: t, ID: id})
			}
		}
	}
	list = slices.DeleteFunc(list, func(w WorkerInfo) bool {
		return keys.Join(keys.Check(keys.KindType, w.Type), keys.Check(keys.KindWorker, w.ID)) != nil
	})
	slices.SortFunc(list, func(a, b WorkerInfo) int {
		return strings.Compare(a.Type+"|"+a.ID, b.Type+"|"+b.ID)
	})
	cmds := make(rueidis.Commands, 0, 3*len(list))
	for _, w := range list {
		k := f.keys.Worker(w.Type, w.ID)
		cmds = append(cmds,
			c.B().Hmget().Key(k.State).Field("state", "last_seen", "last_error", "applied_gen").Build(),
			c.B().Get().Key(k.Gen).Build(),
			c.B().Get().Key(k.Hardware).Build())
	}
	// TIME has no slot: a cluster client refuses it beside keyed commands.
	now, err := timeReply(c.Do(ctx, c.B().Time().Build()))
	if err != nil {
		return nil, opErr("workers", filter.Type, err)
	}
	res := c.DoMulti(ctx, cmds...)
	out := list[:0]
	for i, w := range list {
		st, err := res[3*i].ToArray()
		if err != nil {
			return nil, opErr("workers", w.Type+"|"+w.ID, err)
		}
		vals := make([]string, 4)
		for j := range min(len(st), 4) {
			vals[j], _ = st[j].ToString() // nil fields stay ""
		}
		w.State, w.LastError = WorkerState(vals[0]), vals[2]
		w.AppliedGen, _ = strconv.ParseInt(vals[3], 10, 64)
		if s, err := strconv.ParseFloat(vals[1], 64); err == nil {
			w.LastSeen = time.UnixMilli(int64(s * 1000))
		}
		if g, err := res[3*i+1].ToString(); err == nil {
			w.Gen, _ = strconv.ParseInt(g, 10, 64)
		} else if !rueidis.IsRedisNil(err) {
			return nil, opErr("workers", w.Type+"|"+w.ID, err)
		}
		if hw, err := res[3*i+2].ToString(); err == nil {
			var h struct {
				Chunk *ChunkOptions `json:"chunk"`
			}
			if json.Unmarshal([]byte(hw), &h) == nil { // another client's record may hold anything
				w.Chunk = h.Chunk
			}
		} else if !rueidis.IsRedisNil(err) {
			return nil, opErr("workers", w.Type+"|"+w.ID, err)
		}
		if filter.ActiveWithin > 0 && (w.LastSeen.IsZero() || now.Sub(w.LastSeen) > filter.ActiveWithin) {
			continue
		}
		out = append(out, w)
	}
	return out, nil
}

// QueueNames returns the names of the queues in the fleet-wide registry
// (fleet:queues), sorted; names that fleet could not have made are left
// out. May return ErrWrongType, ErrUnavailable.
func (f *Fleet) QueueNames(ctx context.Context) ([]string, error) {
	if err := f.alive(ctx); err != nil {
		return nil, opErr("queue names", "", err)
	}
	c := f.client
	names, err := c.Do(ctx, c.B().Smembers().Key(f.keys.Queues()).Build()).AsStrSlice()
	if err != nil {
		return nil, opErr("queue names", f.keys.Queues(), err)
	}
	names = slices.DeleteFunc(names, func(n string) bool { return keys.Check(keys.KindQueue, n) != nil })
	slices.Sort(names)
	return names, nil
}
