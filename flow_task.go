package fleet

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/fleet-go/fleet/internal/taskbody"
)

// The task's side of flows: what a tracked task's ack and end steps are
// told (retention, flowFlags), what a task that waited reads of its
// dependencies (Dependencies, and ResultOf in its handler), and the submit
// of tracked tasks through SubmitWith and SubmitManyWith.

// Dependencies returns what the task knows of the tasks it waited for
// (SubmitOptions.After, a Flow's edges; a batch's callback: the batch),
// read once from its flow record and kept: how each ended, with its result
// or error, in the order of their queues and ids. A task that waited for
// nothing has none. Under IgnoreFailure a dependency that failed has
// Status TaskDead or TaskCanceled. May return ErrUnavailable.
func (r *reservation) Dependencies(ctx context.Context) ([]DependencyState, error) {
	if p := r.deps.Load(); p != nil {
		return *p, nil
	}
	if r.r.Tracked() == 0 {
		return nil, nil
	}
	c := r.core.fleet.client
	m, err := c.Do(ctx, c.B().Hgetall().Key(r.core.key.Flow+r.id()).Build()).AsStrMap()
	if err != nil {
		return nil, opErr("dependencies", r.core.name, err)
	}
	var out []DependencyState
	for field, v := range m {
		ref, ok := strings.CutPrefix(field, "d:")
		if !ok || v == "" {
			continue
		}
		d := DependencyState{Policy: FailDependent, Status: TaskWaiting}
		if v[0] == 'i' {
			d.Policy = IgnoreFailure
		}
		if len(v) > 1 {
			d.Status = outcomeStatus(v[1:])
		}
		if id, ok := strings.CutPrefix(ref, ":f "); ok {
			d.ID = id
		} else if name, _, id, ok := parseRef(ref); ok {
			d.Queue, d.ID = name, id
		} else {
			continue
		}
		if res, ok := m["r:"+ref]; ok {
			d.Result = r.core.fleet.shown(d.Queue, sealResult, json.RawMessage(res))
		}
		d.Error = m["e:"+ref]
		out = append(out, d)
	}
	slices.SortFunc(out, func(a, b DependencyState) int {
		return cmp.Or(strings.Compare(a.Queue, b.Queue), strings.Compare(a.ID, b.ID))
	})
	r.deps.Store(&out)
	return out, nil
}

// dependencyResult finds, in the task that ctx carries, the result of its
// dependency id of queue: found reports whether it is one.
func dependencyResult(ctx context.Context, queue, id string) (res json.RawMessage, found bool, err error) {
	r, _ := ctx.Value(taskKey{}).(*reservation)
	if r == nil || r.r.Tracked() == 0 {
		return nil, false, nil
	}
	deps, err := r.Dependencies(ctx)
	if err != nil {
		return nil, false, err
	}
	for _, d := range deps {
		if d.Queue != queue || d.ID != id {
			continue
		}
		if d.Status != TaskDone {
			return nil, true, fmt.Errorf("%w: task %s of queue %s is %s: %s", ErrDependencyFailed, id, queue, d.Status, d.Error)
		}
		return d.Result, true, nil
	}
	return nil, false, nil
}

// submitTracked submits tracked tasks (SubmitOptions.After or Track) of q
// without a flow (docs/FLOWS.md): one plan, whose tasks with After are
// committed by their mark, those without at once. A task with a
// caller-chosen id (SubmitOptions.ID) that a record or end of its shard
// holds already is left alone (flow_put.lua decides, atomically in the
// slot): made by an earlier submit, the call answers its id; under way in
// another submit (its record not committed yet), the call waits on a
// capped backoff, bounded by ctx, and submits it again: it then finds it
// made, or makes it itself if that submit gave up.
func (q *queueCore) submitTracked(ctx context.Context, subs []submission) error {
	ids, bodies := make([]string, len(subs)), make([]string, len(subs))
	for i, s := range subs {
		ids[i], bodies[i] = s.id, s.body
	}
	done := q.fleet.observeSubmit(ctx, q.name, ids, bodies, time.Time{}, "")
	if err := q.register(ctx); err != nil {
		done.call(0, err)
		return err
	}
	made := 0
	bo := backoff{min: 2 * time.Millisecond, max: 100 * time.Millisecond}
	for len(subs) > 0 {
		n, again, err := q.submitTrackedOnce(ctx, subs, bodies)
		made += n
		if err != nil {
			done.call(made, err)
			return err
		}
		if len(again) == 0 {
			break
		}
		if err := q.fleet.sleep(ctx, bo.next()); err != nil {
			done.call(made, err)
			return err
		}
		subs, bodies = again, bodiesOf(again, subs, bodies)
	}
	done.call(made, nil)
	return nil
}

// bodiesOf returns the bodies of some (a subset of subs, in its order).
func bodiesOf(some, subs []submission, bodies []string) []string {
	out := make([]string, 0, len(some))
	j := 0
	for i := range subs {
		if j < len(some) && subs[i].id == some[j].id {
			out = append(out, bodies[i])
			j++
		}
	}
	return out
}

// submitTrackedOnce is one plan of submitTracked: it returns how many tasks
// it made, and those to submit again (their id's submit under way).
func (q *queueCore) submitTrackedOnce(ctx context.Context, subs []submission, bodies []string) (int, []submission, error) {
	taken, err := q.idsTaken(ctx, subs)
	if err != nil {
		return 0, nil, err
	}
	p := &flowPlan{keep: DefaultFlowRetention, ext: map[string]*extDep{}}
	var in []int // the plan's tasks, by their place in subs
	for i, s := range subs {
		if taken[i] {
			continue // made by an earlier submit: nothing to look at
		}
		c := q.pick(cmp.Or(s.opts.Group, s.opts.ID, s.opts.ShardKey))
		t := &flowTask{c: c, id: s.id, body: taskbody.WithTrack(bodies[i], keepFor(c, DefaultFlowRetention)),
			ready: s.opts.NotBefore, now: len(s.opts.After) == 0, idem: s.opts.ID != ""}
		if s.parent != "" {
			t.outs = []string{s.parent} // its end goes to the parent (children.go)
		}
		p.tasks = append(p.tasks, t)
		in = append(in, i)
		for _, d := range s.opts.After {
			p.addExt(d, len(p.tasks)-1)
		}
	}
	if len(p.tasks) == 0 {
		return 0, nil, nil
	}
	if err := q.fleet.submitPlan(ctx, p); err != nil {
		return 0, nil, err
	}
	made := 0
	var again []submission
	for j, t := range p.tasks {
		switch t.taken {
		case 0:
			made++
		case 'u':
			again = append(again, subs[in[j]])
		}
	}
	return made, again, nil
}

// idsTaken looks, for the tasks with a caller-chosen id and dependencies
// (After), whether their id is taken already by a committed record or a
// recorded end, before their dependencies are looked at: a repeat of a
// submit that was made answers its id even if a dependency failed since.
// (Without dependencies nothing refuses a submit before flow_put, which
// decides.) One round trip, and none when no task has both.
func (q *queueCore) idsTaken(ctx context.Context, subs []submission) ([]bool, error) {
	var at []int
	var cmds rueidis.Commands
	c := q.fleet.client
	for i, s := range subs {
		if s.opts.ID == "" || len(s.opts.After) == 0 {
			continue
		}
		sh := q.pick(cmp.Or(s.opts.Group, s.opts.ID, s.opts.ShardKey))
		at = append(at, i)
		cmds = append(cmds, c.B().Hget().Key(sh.key.Flow+s.id).Field("k").Build(), c.B().Exists().Key(sh.key.Result+s.id).Build())
	}
	taken := make([]bool, len(subs))
	if len(at) == 0 {
		return taken, nil
	}
	res := c.DoMulti(ctx, cmds...)
	for j, i := range at {
		k, err := res[2*j].ToString()
		if err != nil && !rueidis.IsRedisNil(err) {
			return nil, err
		}
		n, err := res[2*j+1].AsInt64()
		if err != nil {
			return nil, err
		}
		taken[i] = k == "1" || n > 0
	}
	return taken, nil
}
