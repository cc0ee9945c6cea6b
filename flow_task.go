package fleet

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

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
// committed by their mark, those without at once.
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
	p := &flowPlan{keep: DefaultFlowRetention, ext: map[string]*extDep{}}
	for i, s := range subs {
		c := q.pick(cmp.Or(s.opts.Group, s.opts.ShardKey))
		t := &flowTask{c: c, id: s.id, body: taskbody.WithTrack(bodies[i], keepFor(c, DefaultFlowRetention)),
			ready: s.opts.NotBefore, now: len(s.opts.After) == 0}
		if s.parent != "" {
			t.outs = []string{s.parent} // its end goes to the parent (children.go)
		}
		p.tasks = append(p.tasks, t)
		for _, d := range s.opts.After {
			p.addExt(d, i)
		}
	}
	err := q.fleet.submitPlan(ctx, p)
	if err != nil {
		done.call(0, err)
		return err
	}
	done.call(len(subs), nil)
	return nil
}
