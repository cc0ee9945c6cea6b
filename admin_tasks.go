package fleet

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/fleet-go/fleet/internal/taskbody"
)

// Task reads and actions for an operator's dashboard (fleetui) that the
// rest of the admin API lacks: a task found by its dedup key, the running
// tasks a page at a time, the scheduled tasks a page at a time after a
// cursor that stays correct while the queue changes, and a scheduled task
// made due at once. Each reads or writes one page or one task.

// TaskCursor is where a page of a sorted list of tasks ended: the score
// (unix seconds: a running task's lease deadline, a scheduled task's ready
// time) and the id of its last task. The zero TaskCursor starts at the
// beginning. Because it names a position by score and id rather than by
// rank, a page read after it shows the tasks that follow it however many
// tasks came or went before it since.
type TaskCursor struct {
	// Score is the last task's score.
	Score float64
	// ID is the last task's id; "" for the beginning.
	ID string
}

// RunningTask is one task in flight, as Running reads it.
type RunningTask struct {
	// ID is the task's id.
	ID string `json:"id"`
	// Payload is the task's payload as stored (JSON); empty when its body
	// is not a task.
	Payload json.RawMessage `json:"payload"`
	// Attempts counts the failed runs before this one.
	Attempts int `json:"attempts"`
	// Worker is the worker ("type|id") that holds the lease; empty for a
	// reservation fleet's workers did not make.
	Worker string `json:"worker,omitempty"`
	// Deadline is the lease's deadline (server clock).
	Deadline time.Time `json:"deadline"`
	// CancelRequested says that Queue.Cancel asked the task to stop.
	CancelRequested bool `json:"cancel_requested,omitempty"`
	// Cursor is the task's position, to pass to Running for the next page.
	Cursor TaskCursor `json:"-"`
}

// maxPage bounds the count of one page of Running and ScheduledAfter.
const maxPage = 1000

func checkCursorPage(after TaskCursor, count int) error {
	if count < 0 || count > maxPage {
		return fmt.Errorf("%w: count %d is not within 0..%d", ErrInvalidArgument, count, maxPage)
	}
	if math.IsNaN(after.Score) || math.IsInf(after.Score, 0) || len(after.ID) > 1024 {
		return fmt.Errorf("%w: bad cursor", ErrInvalidArgument)
	}
	return nil
}

// zAfter reads up to count members of zset key that come after cursor
// after in the order (score, task id), which idOf reads from a member. A
// member's place thus never depends on its neighbours: a page after a
// cursor shows the tasks that follow it however many came or went before
// it. Members of one score sort by id, not by their text as in the zset,
// so every member of a score at either end of the page is read.
func (f *Fleet) zAfter(ctx context.Context, key string, after TaskCursor, count int, idOf func(string) string) ([]rueidis.ZScore, error) {
	if count == 0 {
		return nil, nil
	}
	c := f.client
	all := func(score float64) ([]rueidis.ZScore, error) {
		s := strconv.FormatFloat(score, 'f', -1, 64)
		return c.Do(ctx, c.B().Zrange().Key(key).Min(s).Max(s).Byscore().Withscores().Build()).AsZScores()
	}
	var out []rueidis.ZScore
	lo := "-inf"
	if after.ID != "" {
		eq, err := all(after.Score)
		if err != nil {
			return nil, err
		}
		for _, z := range eq {
			if idOf(z.Member) > after.ID {
				out = append(out, z)
			}
		}
		lo = "(" + strconv.FormatFloat(after.Score, 'f', -1, 64)
	}
	gt, err := c.Do(ctx, c.B().Zrange().Key(key).Min(lo).Max("+inf").Byscore().Limit(0, int64(count)).Withscores().Build()).AsZScores()
	if err != nil {
		return nil, err
	}
	if len(gt) == count {
		last := gt[len(gt)-1].Score
		eq, err := all(last)
		if err != nil {
			return nil, err
		}
		gt = slices.DeleteFunc(gt, func(z rueidis.ZScore) bool { return z.Score == last })
		gt = append(gt, eq...)
	}
	out = append(out, gt...)
	slices.SortFunc(out, func(a, b rueidis.ZScore) int { return zLess(a, b, idOf) })
	return out[:min(count, len(out))], nil
}

func memberID(m string) string { return m }

func bodyID(m string) string {
	b, err := taskbody.Parse(m)
	if err != nil {
		return ""
	}
	return b.ID
}

func zLess(a, b rueidis.ZScore, idOf func(string) string) int {
	return cmp.Or(cmp.Compare(a.Score, b.Score), strings.Compare(idOf(a.Member), idOf(b.Member)))
}

// Running lists up to count (at most 1000) tasks in flight after cursor
// after, the soonest lease deadline first (fleet:queue:<name>:processing
// by score, then id), with their bodies and the workers that hold them:
// three commands per shard. Pass the last task's Cursor for the next page;
// fewer than count tasks means the end. May return ErrInvalidName,
// ErrInvalidArgument, ErrWrongType, ErrUnavailable.
func (q *queueCore) Running(ctx context.Context, after TaskCursor, count int) ([]RunningTask, error) {
	const op = "running tasks"
	if err := q.ready(ctx); err != nil {
		return nil, opErr(op, q.name, err)
	}
	if err := checkCursorPage(after, count); err != nil {
		return nil, opErr(op, q.name, err)
	}
	var out []RunningTask
	c := q.fleet.client
	for _, s := range q.shardsOf(ctx) {
		zs, err := q.fleet.zAfter(ctx, s.key.Processing, after, count, memberID)
		if err != nil {
			return nil, opErr(op, q.name, err)
		}
		if len(zs) == 0 {
			continue
		}
		ids := make([]string, len(zs))
		for i, z := range zs {
			ids[i] = z.Member
		}
		rs := c.DoMulti(ctx, c.B().Hmget().Key(s.key.Body).Field(ids...).Build(), c.B().Hmget().Key(s.key.Lease).Field(ids...).Build())
		bodies, err := rs[0].ToArray()
		if err != nil {
			return nil, opErr(op, q.name, err)
		}
		leases, err := rs[1].ToArray()
		if err != nil {
			return nil, opErr(op, q.name, err)
		}
		for i, z := range zs {
			t := RunningTask{ID: z.Member, Deadline: fromUnixSeconds(z.Score), Cursor: TaskCursor{z.Score, z.Member}}
			if raw, err := bodies[i].ToString(); err == nil {
				if b, err := taskbody.Parse(raw); err == nil {
					t.Payload, t.Attempts = q.fleet.shown(q.name, sealPayload, b.Payload), b.Attempts
				}
			}
			if l, err := leases[i].ToString(); err == nil {
				_, t.Worker, t.CancelRequested = parseLeaseEntry(l)
			}
			out = append(out, t)
		}
	}
	slices.SortFunc(out, func(a, b RunningTask) int {
		return cmp.Or(cmp.Compare(a.Cursor.Score, b.Cursor.Score), strings.Compare(a.ID, b.ID))
	})
	return out[:min(count, len(out))], nil
}

// ScheduledAfter lists up to count (at most 1000) scheduled tasks after
// cursor after, the soonest due first (fleet:queue:<name>:scheduled by
// score), one ZRANGE BYSCORE per shard, and returns the cursor of the last
// one listed (the zero cursor when none was). Pass it back for the next
// page: unlike Scheduled's offsets it stays correct while tasks become
// due or are added. Fewer than count tasks means the end. May return
// ErrInvalidName, ErrInvalidArgument, ErrWrongType, ErrUnavailable.
func (q *queueCore) ScheduledAfter(ctx context.Context, after TaskCursor, count int) ([]WaitingTask, TaskCursor, error) {
	const op = "scheduled tasks"
	if err := q.ready(ctx); err != nil {
		return nil, TaskCursor{}, opErr(op, q.name, err)
	}
	if err := checkCursorPage(after, count); err != nil {
		return nil, TaskCursor{}, opErr(op, q.name, err)
	}
	var zs []rueidis.ZScore
	for _, s := range q.shardsOf(ctx) {
		z, err := q.fleet.zAfter(ctx, s.key.Scheduled, after, count, bodyID)
		if err != nil {
			return nil, TaskCursor{}, opErr(op, q.name, err)
		}
		zs = append(zs, z...)
	}
	slices.SortFunc(zs, func(a, b rueidis.ZScore) int { return zLess(a, b, bodyID) })
	zs = zs[:min(count, len(zs))]
	out := make([]WaitingTask, len(zs))
	var next TaskCursor
	for i, z := range zs {
		out[i] = q.waitingTask(z.Member)
		out[i].ReadyAt = fromUnixSeconds(z.Score)
		next = TaskCursor{z.Score, out[i].ID}
	}
	return out, next, nil
}

// DoneTask is one done task whose record is kept (QueueOptions.Retention),
// as Done reads it.
type DoneTask struct {
	// ID is the task's id.
	ID string `json:"id"`
	// DoneAt is when it was acked (server clock).
	DoneAt time.Time `json:"done_at"`
	// Attempts counts its failed runs before the one that ended it.
	Attempts int `json:"attempts"`
	// Worker is the worker ("type|id") that acked it; empty for a Task.Ack
	// of your own.
	Worker string `json:"worker,omitempty"`
	// Result is its result (JSON); "null" when none was set.
	Result json.RawMessage `json:"result"`
	// Cursor is the task's position, to pass to Done for the next page.
	Cursor TaskCursor `json:"-"`
}

// Done lists up to count (at most 1000) done tasks whose records are kept
// (QueueOptions.Retention) after cursor after, the oldest first (by ack
// time: fleet:queue:<name>:retained, then id), with their records: two
// commands per shard. A record that ran out since it was indexed is left
// out. Pass the last task's Cursor for the next page; fewer than count
// tasks means the end (or that records ran out meanwhile: an empty page
// is the end). May return ErrInvalidName, ErrInvalidArgument,
// ErrWrongType, ErrUnavailable.
func (q *queueCore) Done(ctx context.Context, after TaskCursor, count int) ([]DoneTask, error) {
	const op = "done tasks"
	if err := q.ready(ctx); err != nil {
		return nil, opErr(op, q.name, err)
	}
	if err := checkCursorPage(after, count); err != nil {
		return nil, opErr(op, q.name, err)
	}
	var out []DoneTask
	c := q.fleet.client
	for _, s := range q.shardsOf(ctx) {
		zs, err := q.fleet.zAfter(ctx, s.key.Retained, after, count, memberID)
		if err != nil {
			return nil, opErr(op, q.name, err)
		}
		if len(zs) == 0 {
			continue
		}
		ks := make([]string, len(zs))
		for i, z := range zs {
			ks[i] = s.key.Result + z.Member
		}
		recs, err := c.Do(ctx, c.B().Mget().Key(ks...).Build()).ToArray()
		if err != nil {
			return nil, opErr(op, q.name, err)
		}
		for i, z := range zs {
			raw, err := recs[i].ToString()
			if err != nil {
				continue // ran out
			}
			var rec struct {
				Result   json.RawMessage `json:"result"`
				Attempts int             `json:"attempts"`
				DoneAt   float64         `json:"done_at"`
				Worker   string          `json:"worker"`
			}
			_ = json.Unmarshal([]byte(raw), &rec) // a record of another client may hold anything
			out = append(out, DoneTask{ID: z.Member, DoneAt: fromUnixSeconds(z.Score), Attempts: rec.Attempts, Worker: rec.Worker,
				Result: q.fleet.shown(q.name, sealResult, rec.Result), Cursor: TaskCursor{z.Score, z.Member}})
		}
	}
	slices.SortFunc(out, func(a, b DoneTask) int {
		return cmp.Or(cmp.Compare(a.Cursor.Score, b.Cursor.Score), strings.Compare(a.ID, b.ID))
	})
	return out[:min(count, len(out))], nil
}

// DedupTask returns the id of the task that holds dedup key key
// (SubmitOptions.DedupKey) while it is pending, scheduled or in flight
// (fleet:queue:<name>:dedup), or that held it and was acked within its
// UniqueFor window (fleet:queue:<name>:unique:<key>): one HGET and one
// GET per shard, in one round trip. May return
// ErrTaskNotFound (no task holds the key), ErrInvalidArgument (an
// empty key), ErrInvalidName, ErrWrongType, ErrUnavailable.
func (q *queueCore) DedupTask(ctx context.Context, key string) (string, error) {
	const op = "dedup task"
	if err := q.ready(ctx); err != nil {
		return "", opErr(op, q.name, err)
	}
	if key == "" || len(key) > 1024 {
		return "", opErr(op, q.name, fmt.Errorf("%w: dedup key of %d bytes", ErrInvalidArgument, len(key)))
	}
	c := q.fleet.client
	shards := q.shardsOf(ctx)
	cmds := make(rueidis.Commands, 0, 2*len(shards))
	for _, s := range shards {
		cmds = append(cmds, c.B().Hget().Key(s.key.Dedup).Field(key).Build())
	}
	for _, s := range shards {
		cmds = append(cmds, c.B().Get().Key(s.key.Unique+key).Build())
	}
	for _, r := range c.DoMulti(ctx, cmds...) {
		id, err := r.ToString()
		if rueidis.IsRedisNil(err) {
			continue
		}
		if err != nil {
			return "", opErr(op, q.name, err)
		}
		return id, nil
	}
	return "", opErr(op, q.name, fmt.Errorf("%w: no live task holds dedup key %q", ErrTaskNotFound, key))
}

// RunNow makes scheduled task id due at once: its ready time in
// fleet:queue:<name>:scheduled becomes the server's now (ZADD XX), so the
// next reserve or sweep moves it to its pending list as it does any due
// task. Finding it reads the scheduled tasks (O(N)): a call for
// operators. May return ErrTaskNotFound (no scheduled task has the id:
// it may have become due meanwhile), ErrInvalidArgument (an empty id),
// ErrInvalidName, ErrWrongType, ErrUnavailable.
func (q *queueCore) RunNow(ctx context.Context, id string) error {
	const op = "run now"
	if err := q.ready(ctx); err != nil {
		return opErr(op, q.name, err)
	}
	if id == "" || len(id) > 1024 {
		return opErr(op, q.name, fmt.Errorf("%w: task id of %d bytes", ErrInvalidArgument, len(id)))
	}
	c := q.fleet.client
	now, err := timeReply(c.Do(ctx, c.B().Time().Build()))
	if err != nil {
		return opErr(op, q.name, err)
	}
	score := float64(now.UnixMicro()) / 1e6
	for _, s := range q.shardsOf(ctx) {
		members, err := c.Do(ctx, c.B().Zrange().Key(s.key.Scheduled).Min("0").Max("-1").Build()).AsStrSlice()
		if err != nil {
			return opErr(op, q.name, err)
		}
		for _, m := range members {
			if bodyID(m) != id {
				continue
			}
			n, err := c.Do(ctx, c.B().Zadd().Key(s.key.Scheduled).Xx().Ch().ScoreMember().ScoreMember(score, m).Build()).AsInt64()
			if err != nil {
				return opErr(op, q.name, err)
			}
			if n == 1 {
				return nil
			}
		}
	}
	return opErr(op, q.name, fmt.Errorf("%w: no scheduled task has id %s", ErrTaskNotFound, id))
}

// FlowMember is one task of a flow or batch, as FlowMembers reads it.
type FlowMember struct {
	// Queue and ID name the task; Queue is "" for a member fleet cannot
	// read as a task ref (ID is then the ref as stored).
	Queue string `json:"queue"`
	ID    string `json:"id"`
	// State is where the task is in the flow: "pending" (not ended),
	// "succeeded", "failed", "canceled", "aborted" (its submit took longer
	// than the grace) or "callback" (a batch's callback).
	State string `json:"state"`
}

// flowMemberStates names the states of fleet:flow:<id>:m.
var flowMemberStates = map[string]string{"p": "pending", "+": "succeeded", "x": "failed", "c": "canceled", "a": "aborted", "k": "callback"}

// FlowMembers lists the tasks of flow (or batch) id with their states
// (fleet:flow:<id>:m, one HGETALL), sorted by queue and id; none for an
// unknown flow (FlowStatus says whether it exists). For the edges between
// them, Queue.Lookup gives each waiting task's dependencies. May return
// ErrInvalidArgument (a bad id), ErrUnavailable.
func (f *Fleet) FlowMembers(ctx context.Context, id string) ([]FlowMember, error) {
	const op = "flow members"
	if err := f.alive(ctx); err != nil {
		return nil, opErr(op, id, err)
	}
	if err := checkFlowID(id); err != nil {
		return nil, opErr(op, id, err)
	}
	m, err := f.client.Do(ctx, f.client.B().Hgetall().Key(f.keys.Flow(id).Members).Build()).AsStrMap()
	if err != nil {
		return nil, opErr(op, id, err)
	}
	out := make([]FlowMember, 0, len(m))
	for ref, st := range m {
		fm := FlowMember{ID: ref, State: flowMemberStates[st]}
		if fm.State == "" {
			fm.State = st
		}
		if name, _, tid, ok := parseRef(ref); ok {
			fm.Queue, fm.ID = name, tid
		}
		out = append(out, fm)
	}
	slices.SortFunc(out, func(a, b FlowMember) int {
		return cmp.Or(strings.Compare(a.Queue, b.Queue), strings.Compare(a.ID, b.ID))
	})
	return out, nil
}
