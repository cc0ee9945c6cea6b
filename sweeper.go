package fleet

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"time"

	"github.com/fleet-go/fleet/internal/keys"
)

var (
	queueSweepScript   = script("queue_sweep.lua")
	queueRequeueScript = script("queue_requeue.lua")
	queueTrimScript    = script("queue_trim.lua")
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
	// Logger receives sweep failures and counts. Defaults to the Fleet's
	// logger (silent unless Options.Logger was set).
	Logger *slog.Logger
}

func (o SweeperOptions) withDefaults(f *Fleet) (SweeperOptions, error) {
	if o.Interval < 0 || o.Batch < 0 {
		return o, fmt.Errorf("%w: SweeperOptions.Interval %v and Batch %d may not be negative", ErrInvalidArgument, o.Interval, o.Batch)
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
	// Buried counts reservations past their deadline that had no attempts
	// left (or a body that is not a task) and went to the dead letters.
	Buried int
	// Trimmed counts dead letters dropped by the count and age bounds.
	Trimmed int
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
func RunSweeper(ctx context.Context, f *Fleet, opts SweeperOptions) error {
	if f == nil {
		return fmt.Errorf("fleet: run sweeper: %w: no Fleet", ErrInvalidArgument)
	}
	opts, err := opts.withDefaults(f)
	if err != nil {
		return fmt.Errorf("fleet: run sweeper: %w", err)
	}
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-f.done:
			return nil
		case <-t.C:
		}
		st, err := sweep(ctx, f, opts)
		switch {
		case err != nil && ctx.Err() == nil && !f.closed.Load():
			opts.Logger.Warn("fleet: sweep failed", "error", err)
		case st.Requeued+st.Buried+st.Moved+st.Trimmed > 0:
			opts.Logger.Debug("fleet: swept", "queues", st.Queues, "moved", st.Moved, "requeued", st.Requeued, "buried", st.Buried, "trimmed", st.Trimmed)
		}
		t.Reset(opts.Interval)
	}
}

// Sweep runs one sweep of every queue (see RunSweeper), for hosts that
// schedule their own. It goes on past a queue that fails and returns the
// first error with the counts of what it did.
func Sweep(ctx context.Context, f *Fleet, opts SweeperOptions) (SweepStats, error) {
	if f == nil {
		return SweepStats{}, fmt.Errorf("fleet: sweep: %w: no Fleet", ErrInvalidArgument)
	}
	opts, err := opts.withDefaults(f)
	if err != nil {
		return SweepStats{}, fmt.Errorf("fleet: sweep: %w", err)
	}
	return sweep(ctx, f, opts)
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
	for _, name := range names {
		if keys.Check(keys.KindQueue, name) != nil {
			continue // not a queue fleet could have made
		}
		qo := opts.Queue
		if e, ok := f.queues.Load(name); ok {
			qo = e.(queueEntry).options()
		}
		if err := sweepQueue(ctx, f, name, qo, opts.Batch, &st); err != nil && first == nil {
			first = opErr("sweep", name, err)
		}
		st.Queues++
		if f.alive(ctx) != nil {
			break
		}
	}
	return st, first
}

// sweepQueue sweeps one queue: moves due scheduled tasks, re-queues or
// buries expired reservations, trims the dead letters.
func sweepQueue(ctx context.Context, f *Fleet, name string, qo QueueOptions, batch int, st *SweepStats) error {
	k := f.keys.Queue(name)
	if p, ok, err := f.storedPolicy(ctx, k.Policy); err != nil {
		return err
	} else if ok {
		qo = qo.withPolicy(p)
	}
	for range 100 { // bounds one sweep of one queue
		res, err := queueSweepScript.Exec(ctx, f.client, []string{k.Pending, k.Processing, k.Body, k.Lease, k.Scheduled},
			[]string{"1000", strconv.Itoa(batch)}).ToArray()
		if err != nil {
			return err
		}
		if len(res) == 0 || (len(res)-1)%3 != 0 {
			return fmt.Errorf("fleet: sweep: unexpected reply of %d elements", len(res))
		}
		moved, _ := res[0].AsInt64()
		st.Moved += int(moved)
		args := []string{strconv.Itoa(qo.DeadMax)}
		for i := 1; i < len(res); i += 3 {
			id, _ := res[i].ToString()
			token, _ := res[i+1].ToString()
			body, _ := res[i+2].ToString()
			var next, bury string
			w, err := parseBody(body)
			switch attempts := w.Attempts + 1; {
			case err != nil:
				next, bury = deadEntry(body, attempts, "lease ran out, and "+err.Error()), "1"
			case attempts >= qo.MaxAttempts:
				next, bury = deadEntry(body, attempts, "lease ran out on the last attempt"), "1"
			default:
				if next, err = rewriteBody(body, map[string]any{"attempts": attempts, "error": "lease ran out"}); err != nil {
					next, bury = deadEntry(body, attempts, "lease ran out, and "+err.Error()), "1"
				} else {
					bury = "0"
				}
			}
			args = append(args, id, token, body, next, bury, w.Dedup)
		}
		if len(args) > 1 {
			r, err := queueRequeueScript.Exec(ctx, f.client, []string{k.Pending, k.Processing, k.Body, k.Lease, k.Dead, k.Dedup}, args).AsIntSlice()
			if err != nil {
				return err
			}
			if len(r) != 2 {
				return fmt.Errorf("fleet: sweep: unexpected reply of %d elements", len(r))
			}
			st.Requeued += int(r[0])
			st.Buried += int(r[1])
			if r[0] > 0 && !f.cache {
				f.watch.wakeOne(k.Pending)
			}
		}
		if (len(res)-1)/3 < batch && moved < 1000 {
			break
		}
	}
	n, err := queueTrimScript.Exec(ctx, f.client, []string{k.Dead},
		[]string{strconv.Itoa(qo.DeadMax), millis(qo.DeadMaxAge), "1000"}).AsInt64()
	if err != nil {
		return err
	}
	st.Trimmed += int(n)
	return nil
}
