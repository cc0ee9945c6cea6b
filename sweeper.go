package fleet

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/fleet-go/fleet/internal/engine"
	"github.com/fleet-go/fleet/internal/keys"
	"github.com/fleet-go/fleet/internal/taskbody"
)

var (
	queueSweepScript   = newScript("queue_sweep.lua")
	queueRequeueScript = newScript("queue_requeue.lua")
	queueTrimScript    = newScript("queue_trim.lua")
)

// Defaults of SweeperOptions.
const (
	// DefaultSweepInterval is how often RunSweeper sweeps every queue.
	DefaultSweepInterval = 10 * time.Second
	// DefaultSweepBatch is how many expired reservations one script handles.
	DefaultSweepBatch = 500
)

// SweeperOptions configures RunSweeper and Sweep. The zero value of each
// field means its default; negative values are refused with
// ErrInvalidArgument.
type SweeperOptions struct {
	// Interval is the time between sweeps. Defaults to DefaultSweepInterval.
	Interval time.Duration
	// Batch is how many expired reservations one script re-queues.
	// Defaults to DefaultSweepBatch.
	Batch int
	// Queue holds the policy (MaxAttempts, DeadMax, DeadMaxAge) used for a
	// queue that has no stored policy (QueuePolicy) and that no NewQueue of
	// this process made; a queue's stored policy comes first, then the
	// options of a NewQueue of this process. Defaults to the QueueOptions
	// defaults.
	Queue QueueOptions
	// RemoveWorkersAfter, when set, makes each sweep remove the workers not
	// seen for this long (by last_seen, on the server's clock), with their
	// keys and index entries, as RemoveWorker does: for fleets whose
	// workers come and go under new ids (the default id is host-pid), which
	// the documented design otherwise keeps in wkrs:<type> and wkrs:all for
	// good. A worker that is in fact still running registers again on its
	// next heartbeat. Each sweep looks at up to RemoveBatch workers,
	// resuming where the last one stopped (Sweep walks them all). Defaults
	// to 0: workers are never forgotten.
	RemoveWorkersAfter time.Duration
	// RemoveBatch bounds how many workers one sweep looks at. Defaults to
	// DefaultRemoveBatch.
	RemoveBatch int
	// ShardGrace is how long a shard count stays in use after a handle of
	// a sharded queue with that count (QueueOptions.Shards) last
	// registered: a sweep lowers a queue's shard count below it only after
	// this long, and once the shards past the new count are empty. At least
	// 2s (a submitting handle registers about once a second). Defaults to
	// DefaultShardGrace.
	ShardGrace time.Duration
	// SubmitGrace is how long a submit of tasks that wait (a Flow, a
	// Batch's add, SubmitOptions.After) may take before a sweep takes its
	// process for dead: past it, a sweep rolls forward a submit that
	// committed and drops one that did not, and a late commit is refused
	// (docs/FLOWS.md, "The abort"). At least a second. Defaults to
	// DefaultSubmitGrace.
	SubmitGrace time.Duration
	// Logger receives sweep failures and counts. Defaults to the Fleet's
	// logger (silent unless Options.Logger was set).
	Logger *slog.Logger
}

// DefaultSubmitGrace is SweeperOptions.SubmitGrace's default.
const DefaultSubmitGrace = time.Minute

// DefaultRemoveBatch is SweeperOptions.RemoveBatch's default.
const DefaultRemoveBatch = 500

// DefaultShardGrace is SweeperOptions.ShardGrace's default.
const DefaultShardGrace = 30 * time.Second

func (o SweeperOptions) withDefaults(f *Fleet) (SweeperOptions, error) {
	if o.Interval < 0 || o.Batch < 0 || o.RemoveWorkersAfter < 0 || o.RemoveBatch < 0 {
		return o, fmt.Errorf("%w: SweeperOptions.Interval %v, Batch %d, RemoveWorkersAfter %v and RemoveBatch %d may not be negative",
			ErrInvalidArgument, o.Interval, o.Batch, o.RemoveWorkersAfter, o.RemoveBatch)
	}
	if o.RemoveBatch == 0 {
		o.RemoveBatch = DefaultRemoveBatch
	}
	if o.ShardGrace == 0 {
		o.ShardGrace = DefaultShardGrace
	}
	if o.SubmitGrace == 0 {
		o.SubmitGrace = DefaultSubmitGrace
	}
	if o.SubmitGrace < time.Second {
		return o, fmt.Errorf("%w: SweeperOptions.SubmitGrace %v is below 1s", ErrInvalidArgument, o.SubmitGrace)
	}
	if o.ShardGrace < 2*time.Second {
		return o, fmt.Errorf("%w: SweeperOptions.ShardGrace %v is below 2s", ErrInvalidArgument, o.ShardGrace)
	}
	if o.Interval == 0 {
		o.Interval = DefaultSweepInterval
	}
	if o.Batch == 0 {
		o.Batch = DefaultSweepBatch
	}
	o.Batch = min(o.Batch, 5000)
	var err error
	if o.Queue, err = o.Queue.withDefaults(); err != nil {
		return o, err
	}
	if o.Logger == nil {
		o.Logger = f.log
	}
	return o, nil
}

// SweepStats counts what one sweep did.
type SweepStats struct {
	// Queues is how many queues were swept.
	Queues int
	// Moved counts due scheduled tasks moved onto their queue.
	Moved int
	// Requeued counts reservations past their deadline put back on the queue.
	Requeued int
	// DeadLettered counts reservations past their deadline that had no attempts
	// left (or a body that is not a task) and went to the dead letters.
	DeadLettered int
	// Trimmed counts dead letters dropped by the count and age bounds.
	Trimmed int
	// WorkersRemoved counts the workers removed by RemoveWorkersAfter.
	WorkersRemoved int
	// PoolsFixed counts pool index entries fixed, and items freed whose
	// claim had ended, while reconciling pools with other clients' writes.
	PoolsFixed int
	// EndsPassed counts the ends of tracked tasks that the sweep passed on
	// to their dependents and flows (docs/FLOWS.md): the process that ended
	// them died or was late.
	EndsPassed int
	// SubmitsResolved counts the waiting tasks of submits that did not
	// commit in time: marked (the commit had happened) or dropped.
	SubmitsResolved int
}

// RunSweeper sweeps every queue of the fleet every opts.Interval, until ctx
// ends or the Fleet closes; then it returns nil, and none of its work
// outlives it. A sweep re-queues the reservations past their deadline
// (counting the attempt; past MaxAttempts they go to the dead letters),
// moves the due scheduled tasks onto their queue, and trims the dead
// letters to their bounds. It finds the queues through the registry
// fleet:queues (every queue that was submitted to, plus those made in this
// process). Any number of sweepers may run at once, in any processes: each
// change is checked and applied in one script, so none duplicates a task.
// A failed sweep is logged and retried at the next interval. May return
// ErrInvalidArgument for bad options.
func (f *Fleet) RunSweeper(ctx context.Context, opts SweeperOptions) error {
	if f == nil {
		return opErr("run sweeper", "", fmt.Errorf("%w: no Fleet", ErrInvalidArgument))
	}
	opts, err := opts.withDefaults(f)
	if err != nil {
		return opErr("run sweeper", "", err)
	}
	t := time.NewTimer(0)
	defer t.Stop()
	cursor := "0" // of the walk over wkrs:all, across sweeps
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-f.done:
			return nil
		case <-t.C:
		}
		st, err := sweep(ctx, f, opts)
		if opts.RemoveWorkersAfter > 0 && err == nil {
			var n int
			cursor, n, err = f.removeIdleWorkers(ctx, opts.RemoveWorkersAfter, cursor, opts.RemoveBatch)
			st.WorkersRemoved += n
		}
		switch {
		case err != nil && ctx.Err() == nil && !f.closed.Load():
			opts.Logger.Warn("fleet: sweep failed", "error", err)
		case st.Requeued+st.DeadLettered+st.Moved+st.Trimmed+st.WorkersRemoved+st.PoolsFixed+st.EndsPassed+st.SubmitsResolved > 0:
			opts.Logger.Debug("fleet: swept", "queues", st.Queues, "moved", st.Moved, "requeued", st.Requeued, "dead_lettered", st.DeadLettered,
				"trimmed", st.Trimmed, "workers_removed", st.WorkersRemoved, "pools_fixed", st.PoolsFixed,
				"ends_passed", st.EndsPassed, "submits_resolved", st.SubmitsResolved)
		}
		t.Reset(opts.Interval)
	}
}

// Sweep runs one sweep of every queue (see RunSweeper), for hosts that
// schedule their own. It goes on past a queue that fails and returns the
// first error with the counts of what it did.
func (f *Fleet) Sweep(ctx context.Context, opts SweeperOptions) (SweepStats, error) {
	if f == nil {
		return SweepStats{}, opErr("sweep", "", fmt.Errorf("%w: no Fleet", ErrInvalidArgument))
	}
	opts, err := opts.withDefaults(f)
	if err != nil {
		return SweepStats{}, opErr("sweep", "", err)
	}
	st, err := sweep(ctx, f, opts)
	for cursor := "0"; opts.RemoveWorkersAfter > 0 && err == nil; {
		var n int
		cursor, n, err = f.removeIdleWorkers(ctx, opts.RemoveWorkersAfter, cursor, opts.RemoveBatch)
		st.WorkersRemoved += n
		if cursor == "0" {
			break
		}
	}
	return st, err
}

// removeIdleWorkers looks at up to batch members of wkrs:all from cursor (an
// SSCAN cursor), and removes the workers among them whose last_seen is
// older than after by the server's clock, or who have none (index entries
// whose keys are gone). It returns the next cursor ("0" at the end of a
// pass) and how many it removed: a few round trips, whatever the number of
// workers.
func (f *Fleet) removeIdleWorkers(ctx context.Context, after time.Duration, cursor string, batch int) (string, int, error) {
	c := f.client
	cur, err := strconv.ParseUint(cursor, 10, 64)
	if err != nil {
		cur = 0
	}
	res := c.DoMulti(ctx,
		c.B().Sscan().Key(f.keys.AllWorkers()).Cursor(cur).Count(int64(batch)).Build(),
		c.B().Time().Build())
	e, err := res[0].AsScanEntry()
	if err != nil {
		return cursor, 0, opErr("remove idle workers", f.keys.AllWorkers(), err)
	}
	tm, err := res[1].AsStrSlice()
	if err != nil || len(tm) != 2 {
		return cursor, 0, opErr("remove idle workers", "TIME", fmt.Errorf("TIME: %v %w", tm, err))
	}
	now, _ := strconv.ParseInt(tm[0], 10, 64)
	cutoff := now - int64(after/time.Second)
	type member struct{ typ, id string }
	var ms []member
	var cmds rueidis.Commands
	for _, m := range e.Elements {
		typ, id, ok := strings.Cut(m, "|")
		if !ok || keys.Join(keys.Check(keys.KindType, typ), keys.Check(keys.KindWorker, id)) != nil {
			continue // not a worker fleet could have registered
		}
		ms = append(ms, member{typ, id})
		cmds = append(cmds, c.B().Hget().Key(f.keys.Worker(typ, id).State).Field("last_seen").Build())
	}
	forgot := 0
	if len(cmds) > 0 {
		for i, r := range c.DoMulti(ctx, cmds...) {
			s, err := r.ToString()
			if err != nil && !rueidis.IsRedisNil(err) {
				return cursor, forgot, opErr("remove idle workers", ms[i].typ+"|"+ms[i].id, err)
			}
			seen, perr := strconv.ParseInt(s, 10, 64)
			if err == nil && perr == nil && seen >= cutoff {
				continue
			}
			rr, err := f.removeWorker(ctx, ms[i].typ, ms[i].id)
			if err != nil {
				return cursor, forgot, opErr("remove idle workers", ms[i].typ+"|"+ms[i].id, err)
			}
			forgot += rr.Workers
		}
	}
	return strconv.FormatUint(e.Cursor, 10), forgot, nil
}

func sweep(ctx context.Context, f *Fleet, opts SweeperOptions) (SweepStats, error) {
	var st SweepStats
	if err := f.alive(ctx); err != nil {
		return st, opErr("sweep", "", err)
	}
	c := f.client
	names, err := c.Do(ctx, c.B().Smembers().Key(f.keys.Queues()).Build()).AsStrSlice()
	if err != nil {
		return st, opErr("sweep", f.keys.Queues(), err)
	}
	// Queues made here join the registry, in case it was lost.
	var local []string
	f.queues.Range(func(k, _ any) bool {
		if name := k.(string); !slices.Contains(names, name) {
			local = append(local, name)
		}
		return true
	})
	if len(local) > 0 {
		if err := c.Do(ctx, c.B().Sadd().Key(f.keys.Queues()).Member(local...).Build()).Error(); err != nil {
			return st, opErr("sweep", f.keys.Queues(), err)
		}
		names = append(names, local...)
	}
	slices.Sort(names)
	var first error
	// Pools: reconcile their indexes with what other clients wrote, a
	// bounded share of entries per sweep (pool_sweep.go).
	if ps, err := sweepPools(ctx, f, 0); err != nil {
		first = opErr("sweep pools", "", err)
	} else {
		st.PoolsFixed += ps.Fixed + ps.Freed
	}
	// Flows: the operations (cancels, batches' completions) a crash
	// stopped (flow_cancel.go).
	if _, err := f.sweepFlowOps(ctx, opts.Batch); err != nil && first == nil {
		first = opErr("sweep flows", "", err)
	}
	for _, name := range names {
		if keys.Check(keys.KindQueue, name) != nil {
			continue // not a queue fleet could have made
		}
		if err := f.coreOf(name, opts.Queue).sweep(ctx, opts, &st); err != nil && first == nil {
			first = opErr("sweep", name, err)
		}
		st.Queues++
		if f.alive(ctx) != nil {
			break
		}
	}
	return st, first
}

// sweep sweeps the queue: moves due scheduled tasks, re-queues or buries
// expired reservations, trims the dead letters, on each of its shards
// (lowering its shard count's high-water mark when it can); by its stored
// policy, else its options.
func (q *queueCore) sweep(ctx context.Context, opts SweeperOptions, st *SweepStats) error {
	f, qo := q.fleet, q.opts
	if p, ok, err := f.storedPolicy(ctx, q.key.Policy); err != nil {
		return err
	} else if ok {
		qo = qo.withPolicy(p)
	}
	f.histOf(q.name) // the flusher samples the depth of the queues swept (history.go)
	before := *st
	defer func() {
		e := SweepEvent{Queue: q.name, Requeued: st.Requeued - before.Requeued, DeadLettered: st.DeadLettered - before.DeadLettered,
			Moved: st.Moved - before.Moved, Trimmed: st.Trimmed - before.Trimmed}
		f.countEnd(q.name, TaskRetried, int64(e.Requeued)) // the queue's history (history.go)
		f.countEnd(q.name, TaskDeadLettered, int64(e.DeadLettered))
		f.swept(ctx, e)
	}()
	if !f.keys.Tagged() {
		return q.sweepShard(ctx, qo, opts, st)
	}
	// A sharded queue (internal/engine/shard.go): each shard in turn, then the
	// shard count's high-water mark lowered when it can be.
	span, used, err := f.eng.ShardState(ctx, q.key, opts.ShardGrace)
	if err != nil {
		return err
	}
	var first error
	for i := range span {
		if err := q.sub(i).sweepShard(ctx, qo, opts, st); err != nil && first == nil {
			first = err
		}
	}
	if first == nil && used < span {
		first = f.eng.LowerShards(ctx, q.name, span, used, opts.ShardGrace)
	}
	return first
}

// sweepShard sweeps q's shard (the queue itself when unsharded), by qo.
func (q *queueCore) sweepShard(ctx context.Context, qo QueueOptions, opts SweeperOptions, st *SweepStats) error {
	f, k, batch := q.fleet, &q.key, opts.Batch
	ks := engine.ScriptKeys(k)
	for range 100 { // bounds one sweep of one queue
		res, err := queueSweepScript.Exec(ctx, f.client, ks, []string{"1000", strconv.Itoa(batch)}).ToArray()
		if err != nil {
			return err
		}
		if len(res) == 0 || (len(res)-1)%3 != 0 {
			return unexpectedReply("sweep", len(res))
		}
		moved, _ := res[0].AsInt64()
		st.Moved += int(moved)
		args := []string{strconv.Itoa(qo.DeadMax)}
		for i := 1; i < len(res); i += 3 {
			id, _ := res[i].ToString()
			token, _ := res[i+1].ToString()
			body, _ := res[i+2].ToString()
			var next, bury string
			delay := "0"
			w, err := taskbody.Parse(body)
			switch attempts := w.Attempts + 1; {
			case err != nil:
				next, bury = taskbody.DeadEntry(body, attempts, "lease ran out, and "+err.Error()), "1"
			case leaseCanceled(token):
				// Queue.Cancel asked for it to stop while it ran: it never
				// runs again.
				next, bury = taskbody.DeadEntry(body, attempts, ErrCanceled.Error()+": its lease ran out before its worker ended it"), "c"
			case attempts >= qo.MaxAttempts && w.MaxAttempts <= 0, w.MaxAttempts > 0 && attempts >= w.MaxAttempts:
				next, bury = taskbody.DeadEntry(body, attempts, "lease ran out on the last attempt"), "1"
			default:
				if next, err = taskbody.Rewrite(body, map[string]any{"attempts": attempts, "error": "lease ran out"}); err != nil {
					next, bury = taskbody.DeadEntry(body, attempts, "lease ran out, and "+err.Error()), "1"
				} else {
					bury = "0"
					if d, ok := qo.expiredDelay(attempts, body); ok {
						delay = millis(d)
					}
				}
			}
			args = append(args, id, token, body, next, bury, w.Dedup, delay)
		}
		if len(args) > 1 {
			r, err := queueRequeueScript.Exec(ctx, f.client, ks, args).AsIntSlice()
			if err != nil {
				return err
			}
			if len(r) != 2 {
				return unexpectedReply("sweep", len(r))
			}
			st.Requeued += int(r[0])
			st.DeadLettered += int(r[1])
			if r[0] > 0 && !f.cache {
				if k.Shard > 0 {
					f.watch.PokeAll(k.Pending) // a sharded queue's waiters listen
				} else {
					f.watch.WakeOne(k.Pending)
				}
			}
		}
		if (len(res)-1)/3 < batch && moved < 1000 {
			break
		}
	}
	n, err := queueTrimScript.Exec(ctx, f.client, ks, []string{strconv.Itoa(qo.DeadMax), millis(qo.DeadMaxAge), "1000"}).AsInt64()
	if err != nil {
		return err
	}
	st.Trimmed += int(n)
	passed, resolved, err := q.sweepFlows(ctx, batch, opts.SubmitGrace) // flow_drive.go
	st.EndsPassed += passed
	st.SubmitsResolved += resolved
	return err
}
