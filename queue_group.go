package fleet

// The groups of a queue (SubmitOptions.Group): their limits, their pause,
// and what they hold. The reserve's round over them is take_fair in
// scripts/lib_queue.lua.

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
	"github.com/fleet-go/fleet/internal/script"
)

var queueGroupScript = newScript("queue_group.lua", script.Retryable)

// SetGroupLimit gives group its own limits, in place of the queue's
// (QueueOptions.Groups), fleet-wide and at once: a group held back by its
// old limit is looked at again at the next reserve. The limits hold until
// RemoveGroupLimit, whether or not the group has tasks. On a handle of
// Fleet.Queue for a queue that the registry (fleet:queues) does not know,
// it is refused with ErrQueueNotFound. May return ErrInvalidArgument (a
// bad name or limit, naming the field; nothing is written),
// ErrUnavailable.
func (q *queueCore) SetGroupLimit(ctx context.Context, group string, l GroupLimits) error {
	s, err := l.check("GroupLimits")
	if err != nil {
		return opErr("set group limit", q.name, err)
	}
	b, _ := json.Marshal(s) // plain numbers always encode
	return opErr("set group limit", q.name, q.setGroup(ctx, group, "limit", string(b)))
}

// RemoveGroupLimit removes group's own limits: it runs under the queue's
// again. The errors are SetGroupLimit's.
func (q *queueCore) RemoveGroupLimit(ctx context.Context, group string) error {
	return opErr("remove group limit", q.name, q.setGroup(ctx, group, "unlimit", ""))
}

// PauseGroup pauses one group of the queue: reserves take none of its
// tasks (the others run on) until ResumeGroup, fleet-wide; its running
// tasks run to their end, and submits to it are accepted. The errors are
// SetGroupLimit's.
func (q *queueCore) PauseGroup(ctx context.Context, group string) error {
	return opErr("pause group", q.name, q.setGroup(ctx, group, "pause", ""))
}

// ResumeGroup resumes a paused group (one that is not paused stays as it
// is). The errors are SetGroupLimit's.
func (q *queueCore) ResumeGroup(ctx context.Context, group string) error {
	return opErr("resume group", q.name, q.setGroup(ctx, group, "resume", ""))
}

// setGroup runs queue_group.lua on group's shard.
func (q *queueCore) setGroup(ctx context.Context, group, mode, limits string) error {
	if err := q.ready(ctx); err != nil {
		return err
	}
	if err := keys.Check(keys.KindGroup, group); err != nil {
		return fmt.Errorf("%w: group: %w", ErrInvalidArgument, err)
	}
	if err := q.known(ctx); err != nil {
		return err
	}
	s := q.pick(group)
	if err := queueGroupScript.Exec(ctx, q.fleet.client, s.keys(), []string{mode, group, limits}).Error(); err != nil {
		return err
	}
	if !q.fleet.cache {
		s.wakeLocal()
	}
	return nil
}

// GroupInfo is what Queue.Groups says of one group.
type GroupInfo struct {
	// Name is the group's name (SubmitOptions.Group).
	Name string `json:"name"`
	// Pending counts its tasks waiting to run (its scheduled ones wait in
	// the queue's :scheduled, counted there).
	Pending int64 `json:"pending"`
	// Running counts the permits its running tasks hold (GroupLimits.
	// Concurrency), a sequential group's task that waits for its retry
	// included.
	Running int64 `json:"running"`
	// Limits are the limits it runs under: its own (Own), or the queue's.
	Limits GroupLimits `json:"limits"`
	// Own says the limits are the group's own (SetGroupLimit).
	Own bool `json:"own"`
	// Paused says the group is paused (PauseGroup).
	Paused bool `json:"paused"`
	// State is where the group stands in the reserves' round: "ready" (in
	// the round), "concurrency" or "rate" (out of it, at that limit),
	// "paused", or "idle" (no tasks pending).
	State string `json:"state"`
	// Latency is how long its next task has waited since it was submitted
	// (0 when none waits).
	Latency time.Duration `json:"latency"`
}

// groupStates are GroupInfo.State's names of the states a group has in
// :gstate (lib_queue.lua).
var groupStates = map[string]string{"r": "ready", "c": "concurrency", "t": "rate", "p": "paused"}

// Groups lists the queue's groups that have tasks pending, limits of their
// own, or a pause, sorted by name (every shard's, for a sharded queue). It
// reads each group's keys in a pipeline: O(groups), an operator's call.
// May return ErrWrongType, ErrUnavailable.
func (q *queueCore) Groups(ctx context.Context) ([]GroupInfo, error) {
	if err := q.ready(ctx); err != nil {
		return nil, opErr("groups", q.name, err)
	}
	var out []GroupInfo
	for _, s := range q.shardsOf(ctx) {
		gs, err := s.groups(ctx, time.Now())
		if err != nil {
			return nil, opErr("groups", q.name, err)
		}
		out = append(out, gs...)
	}
	slices.SortFunc(out, func(a, b GroupInfo) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// groups is Groups on one shard.
func (q *queueCore) groups(ctx context.Context, now time.Time) ([]GroupInfo, error) {
	c, k := q.fleet.client, q.key
	res := c.DoMulti(ctx,
		c.B().Hgetall().Key(k.GroupState).Build(),
		c.B().Hgetall().Key(k.GroupLimits).Build(),
		c.B().Smembers().Key(k.GroupPaused).Build(),
		c.B().Get().Key(k.Policy).Build())
	states, err := res[0].AsStrMap()
	if err != nil {
		return nil, err
	}
	own, err := res[1].AsStrMap()
	if err != nil {
		return nil, err
	}
	paused, err := res[2].AsStrSlice()
	if err != nil {
		return nil, err
	}
	var def GroupLimits
	if raw, err := res[3].ToString(); err == nil {
		var p QueuePolicy
		if json.Unmarshal([]byte(raw), &p) == nil {
			def = QueueOptions{}.withPolicy(p).Groups
		}
	}
	names := map[string]bool{}
	for g := range states {
		names[g] = true
	}
	for g := range own {
		names[g] = true
	}
	for _, g := range paused {
		names[g] = true
	}
	var list []string
	for g := range names {
		if keys.Check(keys.KindGroup, g) == nil { // not '' (the ungrouped tasks' turn) nor CAP_WAIT
			list = append(list, g)
		}
	}
	if len(list) == 0 {
		return nil, nil
	}
	cmds := make(rueidis.Commands, 0, 3*len(list))
	for _, g := range list {
		cmds = append(cmds, c.B().Llen().Key(k.Group+g).Build(), c.B().Zcard().Key(k.GroupRun+g).Build(),
			c.B().Lindex().Key(k.Group+g).Index(0).Build())
	}
	res = c.DoMulti(ctx, cmds...)
	out := make([]GroupInfo, len(list))
	for i, g := range list {
		gi := GroupInfo{Name: g, Limits: def, Paused: slices.Contains(paused, g), State: "idle"}
		if st, ok := groupStates[states[g]]; ok {
			gi.State = st
		}
		if gi.Paused && gi.State != "idle" {
			gi.State = "paused" // one still in the round leaves it at its next visit
		}
		if raw, ok := own[g]; ok {
			var s storedLimits
			if json.Unmarshal([]byte(raw), &s) == nil {
				gi.Limits, gi.Own = s.limits(), true
			}
		}
		if gi.Pending, err = res[3*i].AsInt64(); err != nil {
			return nil, err
		}
		if gi.Running, err = res[3*i+1].AsInt64(); err != nil {
			return nil, err
		}
		if head, err := res[3*i+2].ToString(); err == nil {
			gi.Latency = waited(head, now)
		}
		out[i] = gi
	}
	return out, nil
}

// waited is how long the task of body has waited at now, by the time of
// its UUIDv7 id (0 for a body without one).
func waited(body string, now time.Time) time.Duration {
	var b struct {
		ID string `json:"id"`
	}
	if json.Unmarshal([]byte(body), &b) != nil {
		return 0
	}
	ms, ok := uuidMillis(b.ID)
	if !ok {
		return 0
	}
	return max(now.Sub(time.UnixMilli(ms)), 0)
}

// uuidMillis returns the unix ms of a UUIDv7 (fleet's task ids).
func uuidMillis(id string) (int64, bool) {
	if len(id) != 36 || id[14] != '7' {
		return 0, false
	}
	ms, err := strconv.ParseInt(id[0:8]+id[9:13], 16, 64)
	return ms, err == nil
}
