package fleet

// Children: tasks that a durable task's handler starts (StartChild) and
// waits for (AwaitChildren), parked like a sleeper. A child is a tracked
// task whose dependents name its parent (":c <parent's ref>"), so that its
// end goes through the flows' edge outbox (flow_drive.go), which hands it
// to the parent's slot as a signal ("\xffc:<child id>": queue_signal.lua,
// mode 'child') on a Redis Cluster as on one node, and again after a
// crash until it is passed on. docs/DURABLE.md.

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/redis/rueidis"
)

// childRef is the prefix of a parent's ref among a child's dependents.
const childRef = ":c "

// Child is a task started by a durable task's handler (StartChild), for it
// to wait for (AwaitChildren).
type Child struct {
	// Queue is the child's queue.
	Queue string `json:"queue"`
	// ID is the child's task id.
	ID string `json:"id"`
}

// ChildResult is how a child ended (AwaitChildren).
type ChildResult struct {
	Child
	// Status is TaskDone, TaskDead or TaskCanceled.
	Status TaskStatus `json:"status"`
	// Result is a done child's result (Task.Result), or JSON null.
	Result json.RawMessage `json:"result,omitempty"`
	// Error is why a dead or cancelled child ended.
	Error string `json:"error,omitempty"`
}

// childEnd is a child's end as its parent's steps keep it.
type childEnd struct {
	S string          `json:"s"` // 'ok', 'x' failed, 'c' cancelled
	R json.RawMessage `json:"r,omitempty"`
	E string          `json:"e,omitempty"`
}

// StartChild submits payload to q as a child of task t, as a step named
// name (Step's rules hold): every later run of t gets the same Child
// without submitting again. The child's id is made from t's id and name
// (its SubmitOptions.ID: a caller-chosen id), so a run that died between
// the submit and the step's record submits nothing new the next time: a
// parent has each child once. The child is a
// tracked task (SubmitOptions.Track; with opts' other options: After,
// NotBefore, Group, Priority ... but not ID, DedupKey, UniqueFor, Replace
// or Debounce) on any queue, in any slot of a cluster; its end is handed to
// t (AwaitChildren) through the flows' outbox, even when a process dies
// on the way. May return ErrInvalidArgument (bad options, a payload that
// does not encode: nothing is submitted or recorded), and Step's and
// Submit's errors.
func StartChild[T any](ctx context.Context, t Durable, name string, q *Queue[T], payload T, opts SubmitOptions) (Child, error) {
	r, err := checkStep(t, name)
	if err != nil {
		return Child{}, err
	}
	if q == nil || q.queueCore == nil {
		return Child{}, fmt.Errorf("%w: StartChild needs a queue", ErrInvalidArgument)
	}
	if err := q.ready(ctx); err != nil {
		return Child{}, opErr("child", q.name, err)
	}
	if opts.ID != "" || opts.DedupKey != "" || opts.UniqueFor != 0 || opts.Replace || opts.Debounce != nil {
		return Child{}, opErr("child", q.name, fmt.Errorf("%w: a child takes no ID, DedupKey, UniqueFor, Replace or Debounce: its id is its own", ErrInvalidArgument))
	}
	opts.Track = true
	opts.ID = childID(r.id(), q.name, name) // a caller-chosen id: submitted again, it makes nothing
	if err := q.checkSubmit(opts); err != nil {
		return Child{}, opErr("child", q.name, err)
	}
	b, err := q.encodePayload(payload)
	if err != nil {
		return Child{}, opErr("child", q.name, err)
	}
	return Step(ctx, t, name, func(ctx context.Context) (Child, error) {
		id := opts.ID
		sub := submission{id: id, body: newBody(id, b, opts), opts: opts, parent: childRef + refOf(r.core, r.id())}
		if err := q.submitTracked(ctx, []submission{sub}); err != nil {
			return Child{}, opErr("child", q.name, err)
		}
		return Child{Queue: q.name, ID: id}, nil
	})
}

// childID is the id of parent's child of step name on queue: a UUIDv7 in
// form, with the parent's time (when its id is one) and the rest from a
// hash of the three, so that every run of the parent names the same child.
func childID(parent, queue, name string) string {
	h := sha256.Sum256([]byte(parent + "\x00" + queue + "\x00" + name))
	var u uuid.UUID
	copy(u[:], h[:16])
	if p, err := uuid.Parse(parent); err == nil && p.Version() == 7 {
		copy(u[:6], p[:6])
	}
	u[6] = u[6]&0x0f | 0x70
	u[8] = u[8]&0x3f | 0x80
	return u.String()
}

// AwaitChildren waits, as a step of task t named name, until every one of
// children (from StartChild) ended, and returns how each did, in order.
// While one has not, it returns a *SleepError (ErrSuspended), which the
// handler returns: the worker parks the task, holding no slot, lease or
// goroutine, until the last child's end makes it ready, or timeout passes
// (then it runs again and AwaitChildren returns ErrWaitTimeout, which is
// ErrPermanent). The ends are recorded as the step's result: every later
// run returns the same.
//
// A child that failed (dead-lettered) or was cancelled fails the wait as
// a flow's dependency does: the results come with an error that is
// ErrDependencyFailed and ErrPermanent (a handler that returns it has its
// task dead-lettered); a handler that ignores failed children reads the
// results and goes on. May return ErrInvalidArgument (no children, a
// child repeated, a timeout <= 0), and Step's errors.
func AwaitChildren(ctx context.Context, t Durable, name string, timeout time.Duration, children ...Child) ([]ChildResult, error) {
	r, err := checkStep(t, name)
	if err != nil {
		return nil, err
	}
	if len(children) == 0 || len(children) > MaxSteps {
		return nil, opErr("wait", r.core.name, fmt.Errorf("%w: AwaitChildren %q: %d children, want 1 to %d", ErrInvalidArgument, name, len(children), MaxSteps))
	}
	names := make([]string, len(children))
	seen := make(map[string]bool, len(children))
	for i, c := range children {
		if c.ID == "" || c.Queue == "" || seen[c.ID] {
			return nil, opErr("wait", r.core.name, fmt.Errorf("%w: AwaitChildren %q: child %d (%s %q) is empty or repeated", ErrInvalidArgument, name, i, c.Queue, c.ID))
		}
		seen[c.ID] = true
		names[i] = "\xffc:" + c.ID
	}
	raw, err := r.wait(ctx, "all", name, timeout, names...)
	if err != nil {
		return nil, err
	}
	var ends []childEnd
	if err := json.Unmarshal(raw, &ends); err != nil || len(ends) != len(children) {
		return nil, opErr("wait", r.core.name, fmt.Errorf("%w: task %s: AwaitChildren %q: its record does not decode (%d ends for %d children): %v (%w)", ErrInvalidArgument, r.id(), name, len(ends), len(children), err, ErrPermanent))
	}
	out := make([]ChildResult, len(children))
	var failed []string
	for i, e := range ends {
		c := children[i]
		out[i] = ChildResult{Child: c, Status: outcomeStatus(e.S), Error: e.E}
		if e.S == "ok" {
			out[i].Result = r.core.fleet.shown(c.Queue, sealResult, e.R)
		} else {
			failed = append(failed, fmt.Sprintf("%s %s: %s: %s", c.Queue, c.ID, out[i].Status, e.E))
		}
	}
	if len(failed) > 0 {
		return out, opErr("wait", r.core.name, fmt.Errorf("%w: task %s: %d of its children did not succeed: %s (%w)", ErrDependencyFailed, r.id(), len(failed), strings.Join(failed, "; "), ErrPermanent))
	}
	return out, nil
}

// deliverChildren hands the ends of children to their parents (the
// driver's, flow_drive.go): quads of the parent's shard core, id, the
// child's id and its end (flow_out.lua's state and detail). A repeat is a
// no-op; a parked parent whose last child ended is made ready.
func (f *Fleet) deliverChildren(ctx context.Context, ends []childDelivery) error {
	if len(ends) == 0 {
		return nil
	}
	execs := make([]rueidis.LuaExec, len(ends))
	for i, d := range ends {
		e := childEnd{S: d.state}
		if d.state == "ok" {
			e.R = json.RawMessage(d.detail)
			if !json.Valid(e.R) {
				e.R = json.RawMessage("null")
			}
		} else {
			e.E = d.detail
		}
		v, _ := json.Marshal(e)
		keep := max(signalKeep, d.c.opts.DeadMaxAge, d.c.opts.Retention).Milliseconds()
		execs[i] = rueidis.LuaExec{Keys: d.c.keys(d.c.key.Result + d.parent),
			Args: []string{d.parent, "\xffc:" + d.child, string(v), fmt.Sprint(keep), "child"}}
	}
	var first error
	for i, rr := range queueSignalScript.ExecMulti(ctx, f.client, execs...) {
		got, err := rr.AsStrSlice()
		if err != nil {
			first = cmpErr(first, err)
			continue
		}
		if len(got) > 0 && got[0] == "woken" {
			ends[i].c.wakeLocal()
		}
	}
	return first
}

// childDelivery is the end of a child, for its parent (deliverChildren).
type childDelivery struct {
	c             *queueCore // the parent's shard
	parent, child string
	state, detail string
}
