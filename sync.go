package fleet

import (
	"context"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/rueidis"

	"github.com/fleet-go/fleet/internal/keys"
)

var syncPoolExpScript = newScript("sync_pool_exp.lua")

// scanCount is the COUNT hint of every SCAN that fleet runs.
const scanCount = 1000

// SyncReport says what Sync found and fixed, by kind. The Fixed method sums
// the repairs; a Sync right after another reports no repairs.
type SyncReport struct {
	// Queues, Pools and WorkerTypes count the entities Sync went through.
	Queues      int `json:"queues"`
	Pools       int `json:"pools"`
	WorkerTypes int `json:"worker_types"`
	// Workers counts the ids in every wkrs:<type>.
	Workers int `json:"workers"`

	// QueuesRegistered and PoolsRegistered count names added to the
	// registries fleet:queues and fleet:pools (found by SCAN).
	QueuesRegistered int `json:"queues_registered"`
	PoolsRegistered  int `json:"pools_registered"`
	// WorkersIndexed counts "<type>|<id>" entries added to wkrs:all;
	// WorkersUnindexed counts entries removed from it because their id is
	// in no wkrs:<type> set and the worker has no keys.
	WorkersIndexed   int `json:"workers_indexed"`
	WorkersUnindexed int `json:"workers_unindexed"`

	// LeasesRemoved counts lease entries of reservations that had ended.
	LeasesRemoved int `json:"leases_removed"`
	// LeasesMissing counts reservations without a lease entry. They are
	// not repaired (no worker holds a token for them): the sweeper
	// re-queues them when their deadline passes.
	LeasesMissing int `json:"leases_missing"`
	// DedupAdded, DedupRemoved and DedupFixed count dedup entries added for
	// live tasks, removed for tasks that are gone, and pointed at the live
	// task that carries the key.
	DedupAdded   int `json:"dedup_added"`
	DedupRemoved int `json:"dedup_removed"`
	DedupFixed   int `json:"dedup_fixed"`

	// PoolIndexed counts pool items added to the item set (tag and expiry
	// entries remade for items already in it are not counted); PoolUnindexed
	// counts stale index entries removed (items gone, tags changed, expiry
	// entries of items without one); PoolExpired counts expired items
	// dropped from pool hashes (they were never handed out any more).
	PoolIndexed   int `json:"pool_indexed"`
	PoolUnindexed int `json:"pool_unindexed"`
	PoolExpired   int `json:"pool_expired"`
	// PoolBad counts pool entries that are not valid items: left in place,
	// unindexed (Pool.List reports each).
	PoolBad int `json:"pool_bad"`

	// MarkerWritten is true when the layout marker fleet:meta was missing
	// and Sync wrote it.
	MarkerWritten bool `json:"marker_written"`
	// Skipped lists keys that a SCAN found in a registered family but
	// whose name fleet could not have made (an invalid name): left alone.
	Skipped []string `json:"skipped,omitempty"`
}

// Fixed returns how many repairs Sync made (LeasesMissing, PoolBad and
// Skipped are findings, not repairs).
func (r SyncReport) Fixed() int {
	n := r.QueuesRegistered + r.PoolsRegistered + r.WorkersIndexed + r.WorkersUnindexed +
		r.LeasesRemoved + r.DedupAdded + r.DedupRemoved + r.DedupFixed +
		r.PoolIndexed + r.PoolUnindexed + r.PoolExpired
	if r.MarkerWritten {
		n++
	}
	return n
}

// SyncProgress is what SyncOptions.Progress is told: Sync is at Done of
// Total steps of Stage ("scan", "queues", "pools", "workers").
type SyncProgress struct {
	// Stage is the part Sync is in: "scan", "queues", "pools", "workers",
	// then "done".
	Stage string
	// Done counts the steps of Stage finished so far: the key families
	// scanned, or the queues, pools or worker types gone through.
	Done int
	// Total is the number of steps of Stage.
	Total int
}

// SyncOptions configures SyncWith. The zero value is Sync's behaviour.
type SyncOptions struct {
	// Progress, when set, is called from Sync's goroutine as it goes, for a
	// progress indicator. It must return quickly.
	Progress func(SyncProgress)
}

// Sync rebuilds every derived key (docs/SCHEMA.md) from the documented,
// authoritative ones. It is a recovery
// tool for after interrupted writes, a lost key, or manual changes to
// Redis. It is idempotent and safe while workers run: every repair that a
// concurrent write could race is made inside one script on the entity's
// slot, or is add-only, or is re-checked after it is made (see the notes
// per key below). It returns what it found and fixed.
//
//   - Registries: fleet:queues and fleet:pools gain every queue and pool
//     that has keys, found by SCAN (per node on a cluster) of fleet:queue:*
//     and fleet:pool:*; registries are only added to, since a Submit or Put
//     registers its name before it writes.
//   - wkrs:all gains "<type>|<id>" for each id of every wkrs:<type> (types
//     from a SCAN of wkrs:* and from wkrs:all itself), and loses an entry
//     whose id is in no wkrs:<type> and whose worker has no keys; each such
//     removal is checked again afterwards and undone if a registration came
//     in between.
//   - Each registered queue: stale lease entries removed and dedup entries
//     rebuilt, in bounded steps (a few milliseconds each) with cursors, so
//     that Sync never blocks the server however long the queue; see
//     syncDedup for why no live task's entry is lost while tasks move.
//     Reservations without a lease are counted and left to the sweeper.
//   - Each registered pool: tag, item and expiry indexes rebuilt in bounded
//     steps, as Pool.Sync does; expired items are dropped. Claim owner
//     keys carry their claim's TTL and are not touched; a wake-up counter
//     (:sig) is bumped when items were indexed; the reindex cursor (:scan)
//     is transient.
//   - The layout marker fleet:meta is written when missing.
//   - Lock fences cannot be rebuilt and need not be: a missing fence is
//     re-seeded from the server's clock, above every earlier token.
//
// Sync goes on past an entity that fails and returns the first error with
// the report of everything else. May return ErrWrongType (a key of another
// type where a derived key should be), ErrUnavailable, ErrClosed.
func (f *Fleet) Sync(ctx context.Context) (SyncReport, error) {
	return f.SyncWith(ctx, SyncOptions{})
}

// SyncWith runs Sync with opts: a Progress callback told of each stage as
// it goes, and the SCAN batch size (see SyncOptions). Its report and errors
// are Sync's.
func (f *Fleet) SyncWith(ctx context.Context, opts SyncOptions) (SyncReport, error) {
	s := &syncer{f: f, opts: opts}
	err := s.run(ctx)
	return s.r, err
}

type syncer struct {
	f     *Fleet
	opts  SyncOptions
	r     SyncReport
	first error
}

func (s *syncer) progress(stage string, done, total int) {
	if s.opts.Progress != nil {
		s.opts.Progress(SyncProgress{Stage: stage, Done: done, Total: total})
	}
}

// fail keeps the first error; it reports whether Sync must stop (the Fleet
// closed or ctx ended).
func (s *syncer) fail(ctx context.Context, op, name string, err error) bool {
	if err == nil {
		return false
	}
	if s.first == nil {
		s.first = opErr(op, name, err)
	}
	return s.f.alive(ctx) != nil
}

func (s *syncer) run(ctx context.Context) error {
	f := s.f
	if err := f.alive(ctx); err != nil {
		return opErr("sync", "", err)
	}
	if err := s.marker(ctx); s.fail(ctx, "sync", f.keys.Meta(), err) {
		return s.first
	}
	queues, pools, types, err := s.registries(ctx)
	if s.fail(ctx, "sync", "registries", err) {
		return s.first
	}
	s.r.Queues, s.r.Pools, s.r.WorkerTypes = len(queues), len(pools), len(types)
	for i, name := range queues {
		s.progress("queues", i, len(queues))
		if s.fail(ctx, "sync queue", name, s.queue(ctx, name)) {
			return s.first
		}
	}
	for i, name := range pools {
		s.progress("pools", i, len(pools))
		if s.fail(ctx, "sync pool", name, s.pool(ctx, name)) {
			return s.first
		}
	}
	s.progress("workers", 0, len(types))
	if err := s.workers(ctx, types); s.fail(ctx, "sync", f.keys.AllWorkers(), err) {
		return s.first
	}
	s.progress("done", 1, 1)
	return s.first
}

// marker writes the layout marker when it is missing (HSETNX: a marker
// that another process writes meanwhile wins).
func (s *syncer) marker(ctx context.Context) error {
	m, err := s.f.ReadMarker(ctx)
	if err != nil || m.Found {
		return err
	}
	c, k := s.f.client, s.f.keys.Meta()
	res := c.DoMulti(ctx,
		c.B().Hsetnx().Key(k).Field("layout").Value(string(s.f.layout)).Build(),
		c.B().Hsetnx().Key(k).Field("schema").Value(strconv.Itoa(SchemaVersion)).Build())
	for _, r := range res {
		if err := r.Error(); err != nil {
			return err
		}
	}
	s.r.MarkerWritten = true
	return nil
}

// scanKeys calls fn with every key that matches pattern, on every node
// (a key may come twice: SCAN guarantees each key at least once).
func (f *Fleet) scanKeys(ctx context.Context, pattern string, fn func(key string)) error {
	addrs, nodes := f.nodes()
	for _, a := range addrs {
		n := nodes[a]
		var cursor uint64
		for {
			e, err := n.Do(ctx, n.B().Scan().Cursor(cursor).Match(pattern).Count(scanCount).Build()).AsScanEntry()
			if err != nil {
				if f.cluster && isReadonlyReplicaErr(err) {
					break
				}
				return err
			}
			for _, k := range e.Elements {
				fn(k)
			}
			if cursor = e.Cursor; cursor == 0 {
				break
			}
			if err := f.alive(ctx); err != nil {
				return err
			}
		}
	}
	return nil
}

func isReadonlyReplicaErr(err error) bool {
	re, ok := rueidis.IsRedisErr(err)
	return ok && (strings.HasPrefix(re.Error(), "MOVED") || strings.HasPrefix(re.Error(), "READONLY"))
}

// registries scans for queues, pools and worker types, adds what the
// registries lack, and returns every name sorted.
func (s *syncer) registries(ctx context.Context) (queues, pools, types []string, err error) {
	f, c := s.f, s.f.client
	skipped := map[string]bool{}
	collect := func(pattern string, parse func(string) (string, bool)) ([]string, error) {
		set := map[string]bool{}
		err := f.scanKeys(ctx, pattern, func(k string) {
			if name, ok := parse(k); ok {
				set[name] = true
			} else {
				skipped[k] = true
			}
		})
		return sortedKeys(set), err
	}
	s.progress("scan", 0, 3)
	found, err := collect(f.keys.QueuePattern(), f.keys.QueueName)
	if err != nil {
		return nil, nil, nil, err
	}
	if queues, s.r.QueuesRegistered, err = s.register(ctx, f.keys.Queues(), keys.KindQueue, found); err != nil {
		return nil, nil, nil, err
	}
	s.progress("scan", 1, 3)
	found, err = collect(f.keys.PoolPattern(), f.keys.PoolName)
	if err != nil {
		return nil, nil, nil, err
	}
	if pools, s.r.PoolsRegistered, err = s.register(ctx, f.keys.Pools(), keys.KindPool, found); err != nil {
		return nil, nil, nil, err
	}
	s.progress("scan", 2, 3)
	found, err = collect(f.keys.WorkersPattern(), func(k string) (string, bool) {
		if k == f.keys.AllWorkers() {
			return "", false
		}
		return f.keys.WorkersType(k)
	})
	if err != nil {
		return nil, nil, nil, err
	}
	delete(skipped, f.keys.AllWorkers())
	all, err := c.Do(ctx, c.B().Smembers().Key(f.keys.AllWorkers()).Build()).AsStrSlice()
	if err != nil {
		return nil, nil, nil, err
	}
	set := map[string]bool{}
	for _, t := range found {
		set[t] = true
	}
	for _, m := range all {
		if typ, _, ok := strings.Cut(m, "|"); ok && keys.Check(keys.KindType, typ) == nil {
			set[typ] = true
		}
	}
	types = sortedKeys(set)
	s.progress("scan", 3, 3)
	s.r.Skipped = sortedKeys(skipped)
	return queues, pools, types, nil
}

// register adds the found names that registry lacks, and returns every
// valid name of both, sorted, with how many it added.
func (s *syncer) register(ctx context.Context, registry string, kind keys.Kind, found []string) ([]string, int, error) {
	c := s.f.client
	have, err := c.Do(ctx, c.B().Smembers().Key(registry).Build()).AsStrSlice()
	if err != nil {
		return nil, 0, err
	}
	set := map[string]bool{}
	for _, n := range have {
		if keys.Check(kind, n) == nil {
			set[n] = true
		}
	}
	var add []string
	for _, n := range found {
		if !set[n] {
			add = append(add, n)
			set[n] = true
		}
	}
	if len(add) > 0 {
		if err := c.Do(ctx, c.B().Sadd().Key(registry).Member(add...).Build()).Error(); err != nil {
			return nil, 0, err
		}
	}
	return sortedKeys(set), len(add), nil
}

// pool rebuilds one pool's indexes, as poolCore.rebuild does, counting.
func (s *syncer) pool(ctx context.Context, name string) error {
	o, _ := (&PoolOptions{}).withDefaults()
	c := newPoolCore(s.f, name, o)
	for cursor := "0"; ; {
		k, a := c.std()
		res, err := poolIndexScript.Exec(ctx, s.f.client, k, append(a, cursor, strconv.Itoa(poolIndexStep), "1")).ToArray()
		if err != nil {
			return err
		}
		if len(res) != 4 {
			return unexpectedReply("pool index", len(res))
		}
		if cursor, err = res[0].ToString(); err != nil {
			return err
		}
		added, _ := res[1].AsInt64()
		bad, _ := res[2].AsInt64()
		pruned, _ := res[3].AsInt64()
		s.r.PoolIndexed += int(added)
		s.r.PoolBad += int(bad)
		s.r.PoolExpired += int(pruned)
		if added > 0 && !s.f.cache {
			s.f.watch.PokeAll(c.idx.Signal)
		}
		if cursor == "0" {
			break
		}
		if err := s.f.alive(ctx); err != nil {
			return err
		}
	}
	sets, err := s.f.client.Do(ctx, s.f.client.B().Smembers().Key(c.idx.Tags).Build()).AsStrSlice()
	if err != nil {
		return err
	}
	for _, set := range []string{c.idx.All, c.idx.Free, c.idx.Bad} {
		n, err := s.steps(ctx, func(cursor string) rueidis.RedisResult {
			k, a := c.std(set)
			return poolCleanScript.Exec(ctx, s.f.client, k, append(a, cursor, strconv.Itoa(poolIndexStep), "", ""))
		})
		s.r.PoolUnindexed += n
		if err != nil {
			return err
		}
	}
	tp := c.idx.Base + "t:"
	for _, set := range sets {
		field, canon, ok := strings.Cut(strings.TrimPrefix(set, tp), ":")
		if !ok || !strings.HasPrefix(set, tp) {
			continue
		}
		n, err := s.steps(ctx, func(cursor string) rueidis.RedisResult {
			k, a := c.std(set)
			return poolCleanScript.Exec(ctx, s.f.client, k, append(a, cursor, strconv.Itoa(poolIndexStep), field, canon))
		})
		s.r.PoolUnindexed += n
		if err != nil {
			return err
		}
	}
	n, err := s.steps(ctx, func(cursor string) rueidis.RedisResult {
		k, a := c.std()
		return syncPoolExpScript.Exec(ctx, s.f.client, k, append(a, cursor, strconv.Itoa(poolIndexStep)))
	})
	s.r.PoolUnindexed += n
	return err
}

// steps runs a {cursor, removed} script until its cursor comes back to "0"
// and returns the sum of removed.
func (s *syncer) steps(ctx context.Context, step func(cursor string) rueidis.RedisResult) (int, error) {
	total := 0
	for cursor := "0"; ; {
		res, err := step(cursor).ToArray()
		if err != nil {
			return total, err
		}
		if len(res) != 2 {
			return total, unexpectedReply("sync", len(res))
		}
		if cursor, err = res[0].ToString(); err != nil {
			return total, err
		}
		n, _ := res[1].AsInt64()
		total += int(n)
		if cursor == "0" {
			return total, nil
		}
		if err := s.f.alive(ctx); err != nil {
			return total, err
		}
	}
}

// workers makes wkrs:all hold "<type>|<id>" for exactly the ids of every
// wkrs:<type>, but for entries whose worker still has keys (an index
// written before its type set, or another client's).
func (s *syncer) workers(ctx context.Context, types []string) error {
	f, c := s.f, s.f.client
	cmds := make(rueidis.Commands, 0, len(types)+1)
	for _, t := range types {
		cmds = append(cmds, c.B().Smembers().Key(f.keys.Workers(t)).Build())
	}
	cmds = append(cmds, c.B().Smembers().Key(f.keys.AllWorkers()).Build())
	res := c.DoMulti(ctx, cmds...)
	want := map[string]bool{}
	for i, t := range types {
		ids, err := res[i].AsStrSlice()
		if err != nil {
			return within(f.keys.Workers(t), err)
		}
		for _, id := range ids {
			want[t+"|"+id] = true
		}
		s.r.Workers += len(ids)
	}
	have, err := res[len(types)].AsStrSlice()
	if err != nil {
		return err
	}
	haveSet := map[string]bool{}
	var stale []string
	for _, m := range have {
		haveSet[m] = true
		if !want[m] {
			stale = append(stale, m)
		}
	}
	var add []string
	for m := range want {
		if !haveSet[m] {
			add = append(add, m)
		}
	}
	slices.Sort(add)
	if len(add) > 0 {
		if err := c.Do(ctx, c.B().Sadd().Key(f.keys.AllWorkers()).Member(add...).Build()).Error(); err != nil {
			return err
		}
		s.r.WorkersIndexed += len(add)
	}
	for _, m := range stale {
		typ, id, _ := strings.Cut(m, "|")
		if keys.Check(keys.KindType, typ) != nil || keys.Check(keys.KindWorker, id) != nil {
			continue // not a worker fleet could have registered: leave it
		}
		if live, err := f.workerExists(ctx, typ, id); err != nil || live {
			if err != nil {
				return err
			}
			continue
		}
		if err := c.Do(ctx, c.B().Srem().Key(f.keys.AllWorkers()).Member(m).Build()).Error(); err != nil {
			return err
		}
		// A registration writes the worker's keys, then wkrs:<type>, then
		// wkrs:all; if one landed since the check above, put it back.
		if live, err := f.workerExists(ctx, typ, id); err != nil || live {
			if err != nil {
				return err
			}
			if err := c.Do(ctx, c.B().Sadd().Key(f.keys.AllWorkers()).Member(m).Build()).Error(); err != nil {
				return err
			}
			continue
		}
		s.r.WorkersUnindexed++
	}
	return nil
}

// workerExists reports whether worker typ/id is in wkrs:<type> or has any
// of its keys (one EXISTS: the keys share a slot in the tagged layout; the
// compat layout runs on a single node only).
func (f *Fleet) workerExists(ctx context.Context, typ, id string) (bool, error) {
	c, w := f.client, f.keys.Worker(typ, id)
	res := c.DoMulti(ctx,
		c.B().Sismember().Key(f.keys.Workers(typ)).Member(id).Build(),
		c.B().Exists().Key(w.Hardware, w.Config, w.Gen, w.State, w.Stats).Build())
	for _, r := range res {
		n, err := r.AsInt64()
		if err != nil {
			return false, err
		}
		if n > 0 {
			return true, nil
		}
	}
	return false, nil
}
