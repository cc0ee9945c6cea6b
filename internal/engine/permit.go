package engine

// The fleet-wide GlobalConcurrency of a sharded queue (Options.GlobalCap).
// A queue of one shard bounds its running tasks in its reserve script (the
// :running zset, queue_reserve.lua), in its one slot. A sharded queue's
// shards live in slots of their own, so its permits live in one key of the
// queue's own slot, fleet:queue:<name>:permits (keys.Queue.Permits): a
// zset of permit token -> server ms when its lease ends, the layout and
// the scripts of a Semaphore (sem_acquire.lua with a count, sem_extend.lua,
// sem_release.lua with several tokens). A reserve takes permits first
// (expired ones are dropped by the take), then takes at most that many
// tasks from the shards (spread), and gives back the permits it did not
// use; each task holds its permit under a lease as long as its own (the
// queue's Lease, extended by Reservation.Extend), so a crashed holder's
// permit comes back when its lease runs out. A task's end (ack, nack,
// dead letter, release, snooze) gives its permit back after the end's
// call, in a call of its own: the slots differ.

import (
	"context"
	"strconv"
	"time"

	"github.com/fleet-go/fleet/internal/argv"
	"github.com/fleet-go/fleet/internal/fault"
	"github.com/fleet-go/fleet/internal/mono"
)

// permitCallTimeout bounds a give-back that no caller waits on.
const permitCallTimeout = 10 * time.Second

// capShared reports whether q (a queue's own core) bounds its running tasks
// with the fleet-wide permits: GlobalCap set on a queue of more than one
// shard.
func (q *Queue) capShared(ctx context.Context) bool {
	return q.opts.GlobalCap > 0 && q.root == nil && q.SpanOf(ctx) > 1
}

// permitSpread is spread under the queue's fleet-wide permits: it takes up
// to req.N permits, takes at most that many tasks from the shards, gives
// each task one, and gives back those left over. With no permit free it
// takes nothing and says Capped, Blocked until the first permit's lease
// ends (a give-back wakes the waiters sooner: the permits' key is among
// those ListenPending and CachedPending watch).
func (q *Queue) permitSpread(ctx context.Context, req Req) (Reserved, error) {
	prefix := argv.Token() + "."
	sent := mono.Now()
	res, err := semAcquireScript.Exec(ctx, q.env.Client, []string{q.key.Permits, q.key.Permits},
		[]string{prefix, argv.Millis(q.opts.Lease), strconv.Itoa(q.opts.GlobalCap), strconv.Itoa(req.N)}).AsIntSlice()
	if err != nil {
		return Reserved{NextReady: -1}, err
	}
	if len(res) != 2 {
		return Reserved{NextReady: -1}, fault.UnexpectedReply("permits take", len(res))
	}
	got := int(res[0])
	if got <= 0 {
		st := Reserved{NextReady: -1, Capped: true}
		if res[1] >= 0 {
			st.Blocked = max(time.Duration(res[1])*time.Millisecond, time.Millisecond)
		}
		return st, nil
	}
	req.N, req.permits = got, true
	st, err := q.spread(ctx, req)
	for i, r := range st.Tasks {
		r.gpermit = prefix + strconv.Itoa(i+1)
		// The permit's lease began before the task's: the task's
		// deadline is the earlier one's, so its work stops before
		// another may take its permit.
		r.clock.Prove(sent, q.opts.Lease)
	}
	if len(st.Tasks) < got {
		left := make([]string, 0, got-len(st.Tasks))
		for i := len(st.Tasks) + 1; i <= got; i++ {
			left = append(left, prefix+strconv.Itoa(i))
		}
		q.givePermits(ctx, left)
	}
	return st, err
}

// freePermits gives back the fleet-wide permits that rs hold (their ends'
// calls returned), in one call. A token given back twice is gone the
// second time (tokens are never reused); a call that fails leaves them to
// run out with their leases.
func freePermits(ctx context.Context, rs ...*Reservation) {
	var q *Queue
	var tokens []string
	for _, r := range rs {
		if r == nil || r.gpermit == "" {
			continue
		}
		q = r.core.top()
		tokens = append(tokens, r.gpermit)
	}
	if len(tokens) > 0 {
		q.givePermits(ctx, tokens)
	}
}

// givePermits runs sem_release.lua for tokens, bounded by
// permitCallTimeout whatever ctx says, and wakes this process's waiters.
func (q *Queue) givePermits(ctx context.Context, tokens []string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), permitCallTimeout)
	defer cancel()
	_ = semReleaseScript.Exec(ctx, q.env.Client, []string{q.key.Permits}, tokens).Error()
	if !q.env.Cache {
		q.env.Watch.PokeAll(q.key.Pending) // sharded waiters listen (ListenPending)
	}
}

// extendPermit pushes r's fleet-wide permit to lease from now, after its
// task's lease was extended (Reservation.Extend). It reports false when
// the permit's lease had run out (another task may hold it now).
func (r *Reservation) extendPermit(ctx context.Context, lease time.Duration) (bool, error) {
	if r.gpermit == "" {
		return true, nil
	}
	q := r.core.top()
	n, err := semExtendScript.Exec(ctx, q.env.Client, []string{q.key.Permits}, []string{r.gpermit, argv.Millis(lease)}).AsInt64()
	return n == 1, err
}
