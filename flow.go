package fleet

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/fleet-go/fleet/internal/keys"
	"github.com/fleet-go/fleet/internal/taskbody"
)

// Flows: tasks that wait for other tasks, by id, in any queue
// (SubmitOptions.After, the Flow builder), and the submit protocol that
// batches share (batch.go). docs/FLOWS.md is the design: the states of a
// task that waits, its keys, and why a dependent never runs early, is
// released once, and is never stranded, across slots on a cluster.

// Defaults and bounds of flows.
const (
	// DefaultFlowRetention is how long the end of a tracked task (a task of
	// a flow or batch, one submitted with SubmitOptions.After or Track) stays
	// recorded (fleet:queue:<name>:result:<id>), for Queue.Wait, Lookup and
	// later dependencies; and how long a done flow's or batch's status
	// stays readable. A queue's longer QueueOptions.Retention wins.
	DefaultFlowRetention = time.Hour
	// MaxFlowSteps bounds the tasks of one Flow (and of one Batch.Add).
	MaxFlowSteps = 10_000
)

// The timings of the flows' recovery (docs/FLOWS.md).
const (
	// flowDriveAfter is how old an outbox entry must be before a sweeper
	// passes it on: the process that ended the task does it at once.
	flowDriveAfter = 2 * time.Second
	// flowNewTTL is how long a flow's record lives before its commit.
	flowNewTTL = time.Hour
	// flowPage is how many dependents, members or records one step handles.
	flowPage = 500
)

var (
	flowPutScript         = newScript("flow_put.lua")
	flowWatchScript       = newScript("flow_watch.lua")
	flowApplyScript       = newScript("flow_apply.lua")
	flowMarkScript        = newScript("flow_mark.lua")
	flowDropScript        = newScript("flow_drop.lua")
	flowUnwatchScript     = newScript("flow_unwatch.lua")
	flowNewScript         = newScript("flow_new.lua")
	flowForgetScript      = newScript("flow_forget.lua")
	flowCommitScript      = newScript("flow_commit.lua")
	flowCountScript       = newScript("flow_count.lua")
	flowFinScript         = newScript("flow_fin.lua")
	flowCloseScript       = newScript("flow_close.lua")
	flowResolveScript     = newScript("flow_resolve.lua")
	flowCancelScript      = newScript("flow_cancel.lua")
	flowCancelTasksScript = newScript("flow_cancel_tasks.lua")
	flowOutScript         = newScript("flow_out.lua")
	flowOutDoneScript     = newScript("flow_out_done.lua")
	flowSweepScript       = newScript("flow_sweep.lua")
)

// DependOn returns dependencies on the tasks ids of queue q (a *Queue[T],
// or anything with its name), under FailDependent.
func DependOn(q interface{ Name() string }, ids ...string) []Dependency {
	out := make([]Dependency, len(ids))
	for i, id := range ids {
		out[i] = Dependency{Queue: q.Name(), ID: id}
	}
	return out
}

// Ignoring returns deps under IgnoreFailure: the dependent runs whether
// they succeed or fail.
func Ignoring(deps ...Dependency) []Dependency {
	out := slices.Clone(deps)
	for i := range out {
		out[i].Policy = IgnoreFailure
	}
	return out
}

// refOf is the ref of task id of shard c (docs/FLOWS.md): "<queue> <id>",
// or "<queue>:<i> <id>" for shard i > 0 of a sharded queue.
func refOf(c *queueCore, id string) string {
	if c.key.Shard > 0 {
		return c.name + ":" + strconv.Itoa(c.key.Shard) + " " + id
	}
	return c.name + " " + id
}

// flowRef is the ref of flow (or batch) id, as its callbacks name it.
func flowRef(id string) string { return ":f " + id }

// parseRef takes a task's ref apart: its queue's name, its shard, its id.
func parseRef(ref string) (name string, shard int, id string, ok bool) {
	q, id, ok := strings.Cut(ref, " ")
	if !ok || id == "" || strings.HasPrefix(q, ":") {
		return "", 0, "", false
	}
	if n, s, cut := strings.Cut(q, ":"); cut {
		i, err := strconv.Atoi(s)
		if err != nil || i <= 0 || i >= keys.MaxShards {
			return "", 0, "", false
		}
		q, shard = n, i
	}
	return q, shard, id, keys.Check(keys.KindQueue, q) == nil
}

// coreOfRef returns the shard core and the id of a task's ref.
func (f *Fleet) coreOfRef(ref string) (*queueCore, string, bool) {
	name, shard, id, ok := parseRef(ref)
	if !ok || (shard > 0 && !f.keys.Tagged()) {
		return nil, "", false
	}
	return f.coreOf(name, QueueOptions{}).top().sub(shard), id, true
}

// keepFor is how long the end of a tracked task of c stays recorded: the
// flow's retention, or the queue's Retention when longer (ms).
func keepFor(c *queueCore, flow time.Duration) int64 {
	return max(flow, c.opts.Retention, time.Millisecond).Milliseconds()
}

// checkDeps checks dependencies: names, ids, policies, no repeats.
func checkDeps(deps []Dependency) error {
	seen := make(map[Dependency]bool, len(deps))
	for i, d := range deps {
		what := "SubmitOptions.After[" + strconv.Itoa(i) + "]"
		switch {
		case keys.Check(keys.KindQueue, d.Queue) != nil:
			return fmt.Errorf("%w: %s: queue %q is not a queue name", ErrInvalidArgument, what, d.Queue)
		case d.ID == "" || len(d.ID) > 1024 || strings.ContainsAny(d.ID, " \t\r\n") || !isText(d.ID):
			return fmt.Errorf("%w: %s: task id %q must be 1 to 1024 bytes of text without white space", ErrInvalidArgument, what, d.ID)
		case d.Policy != FailDependent && d.Policy != IgnoreFailure:
			return fmt.Errorf("%w: %s: policy %v is not FailDependent or IgnoreFailure", ErrInvalidArgument, what, d.Policy)
		}
		key := Dependency{Queue: d.Queue, ID: d.ID}
		if seen[key] {
			return fmt.Errorf("%w: %s: task %s of queue %s is named twice", ErrInvalidArgument, what, d.ID, d.Queue)
		}
		seen[key] = true
	}
	return nil
}

// checkFlowOptions refuses the options that a tracked task cannot have.
func checkFlowOptions(opts SubmitOptions) error {
	if opts.DedupKey != "" || opts.UniqueFor != 0 {
		return fmt.Errorf("%w: SubmitOptions.DedupKey and UniqueFor are not for a tracked task (After, Track, a Flow or a Batch)", ErrInvalidArgument)
	}
	return checkDeps(opts.After)
}

// Flow builds a set of tasks over any queues, each of which may wait for
// others (of the flow, or that exist already), and submits them in one
// call (Submit): all of them or none. Add its tasks with AddStep. A Flow is
// safe for concurrent use; it is submitted once.
type Flow struct {
	f    *Fleet
	id   string
	keep time.Duration
	idem bool // id chosen by the caller (FlowOptions.ID)

	mu        sync.Mutex
	steps     []*FlowStep
	byID      map[string]*FlowStep
	err       error
	submitted bool
}

// FlowOptions configures a Flow. The zero value means the defaults.
type FlowOptions struct {
	// Retention is how long the end of each of the flow's tasks stays
	// recorded once it ended, and the flow's status once the flow is done.
	// Defaults to DefaultFlowRetention.
	Retention time.Duration
	// ID, when set, is the flow's id, chosen by the caller (an order's id,
	// a request's idempotency key), as a workflow id is in Temporal or
	// DBOS: a Submit of a flow whose id names a flow that exists (under
	// way, or done and within its Retention) writes nothing and returns
	// nil, so that a retried request gives the same run. The steps' ids
	// then derive from it ("<id>/<n>", n counting AddStep's calls from 0,
	// unless a step's SubmitOptions.ID names it), so that the second
	// Flow's steps name the first's tasks. What the second Flow holds is
	// not compared with the first. At most MaxFlowIDLen bytes of text
	// without white space, '{' or '}'; a bad one is returned by Submit
	// (ErrInvalidArgument). Defaults to none: a new UUIDv7 per Flow.
	ID string
}

// MaxFlowIDLen bounds a caller-chosen flow or batch id (FlowOptions.ID,
// BatchOptions.ID): shorter than a task id's bound (1024 bytes), so that
// the steps' ids derived from it stay within it.
const MaxFlowIDLen = 1000

// NewFlow returns an empty flow of f. Bad options are kept and returned
// by Submit.
func NewFlow(f *Fleet, opts FlowOptions) *Flow {
	fl := &Flow{f: f, keep: opts.Retention, byID: map[string]*FlowStep{}, idem: opts.ID != ""}
	switch {
	case f == nil:
		fl.err = fmt.Errorf("%w: NewFlow needs a Fleet", ErrInvalidArgument)
	case opts.Retention < 0:
		fl.err = fmt.Errorf("%w: FlowOptions.Retention %v is negative", ErrInvalidArgument, opts.Retention)
	case opts.ID != "":
		fl.err = checkCallerID("FlowOptions.ID", opts.ID, MaxFlowIDLen)
	}
	if fl.keep == 0 {
		fl.keep = DefaultFlowRetention
	}
	fl.id = opts.ID
	if fl.id == "" {
		var err error
		if fl.id, err = newTaskID(); err != nil && fl.err == nil {
			fl.err = err
		}
	}
	return fl
}

// checkCallerID checks an id that the caller chose (what names the
// option): 1 to max bytes of valid text, without white space (a ref
// separates a queue from an id with a space) or braces (a hash tag).
func checkCallerID(what, id string, max int) error {
	if id == "" || len(id) > max || !isText(id) || strings.ContainsAny(id, "{}") || strings.IndexFunc(id, unicode.IsSpace) >= 0 {
		return fmt.Errorf("%w: %s %.64q (%d bytes) must be 1 to %d bytes of text without white space, '{' or '}'", ErrInvalidArgument, what, id, len(id), max)
	}
	return nil
}

// ID returns the flow's id (for CancelFlow and FlowStatus).
func (fl *Flow) ID() string { return fl.id }

// FlowStep is one task of a Flow.
type FlowStep struct {
	fl   *Flow
	c    *queueCore // its shard's
	id   string
	body string
	opts SubmitOptions
	deps []Dependency
	err  error
}

// ID returns the task's id, fixed when the step was added.
func (s *FlowStep) ID() string { return s.id }

// Queue returns the name of the task's queue.
func (s *FlowStep) Queue() string {
	if s.c == nil {
		return ""
	}
	return s.c.name
}

// Dependency returns the dependency on this step, under FailDependent.
func (s *FlowStep) Dependency() Dependency { return Dependency{Queue: s.Queue(), ID: s.id} }

// Steps returns the dependencies on steps, under FailDependent.
func Steps(steps ...*FlowStep) []Dependency {
	out := make([]Dependency, len(steps))
	for i, s := range steps {
		out[i] = s.Dependency()
	}
	return out
}

// After adds dependencies to the step (on steps of the flow, or tasks that
// exist already), after those of its SubmitOptions.After. It returns s.
func (s *FlowStep) After(deps ...Dependency) *FlowStep {
	s.fl.mu.Lock()
	defer s.fl.mu.Unlock()
	s.deps = append(s.deps, deps...)
	return s
}

// AddStep adds a task of queue q with payload to the flow, waiting for
// opts.After (and what FlowStep.After adds). Its payload and options are
// checked now; an error is kept in the step and returned by Submit.
// opts.DedupKey and UniqueFor are refused.
func AddStep[T any](fl *Flow, q *Queue[T], payload T, opts SubmitOptions) *FlowStep {
	s := &FlowStep{fl: fl, opts: opts, deps: slices.Clone(opts.After)}
	fl.mu.Lock()
	defer fl.mu.Unlock()
	s.err = func() error {
		switch {
		case q == nil || q.queueCore == nil:
			return fmt.Errorf("%w: AddStep needs a queue", ErrInvalidArgument)
		case q.err != nil:
			return q.err
		case fl.f != nil && q.fleet != fl.f:
			return fmt.Errorf("%w: queue %s is of another Fleet than the flow", ErrInvalidArgument, q.name)
		case fl.submitted:
			return fmt.Errorf("%w: the flow was submitted already", ErrInvalidArgument)
		}
		if err := q.checkSubmit(opts); err != nil {
			return err
		}
		if err := checkFlowOptions(opts); err != nil {
			return err
		}
		b, err := q.encodePayload(payload)
		if err != nil {
			return err
		}
		switch {
		case opts.ID != "":
			s.id = opts.ID
		case fl.idem:
			s.id = fl.id + "/" + strconv.Itoa(len(fl.steps))
		default:
			if s.id, err = newTaskID(); err != nil {
				return err
			}
		}
		if fl.byID[s.id] != nil {
			return fmt.Errorf("%w: step id %s is taken by another step of the flow", ErrInvalidArgument, s.id)
		}
		s.c = q.pick(cmp.Or(opts.Group, opts.ID, opts.ShardKey))
		s.body = taskbody.WithTrack(newBody(s.id, b, opts), keepFor(q.queueCore, fl.keep))
		return nil
	}()
	if s.err == nil {
		fl.byID[s.id] = s
	}
	fl.steps = append(fl.steps, s)
	return s
}

// Submit writes every task of the flow, each waiting for its dependencies,
// in one call: either all are written (and those that wait for nothing are
// on their queues) or none. A task that waits is not reservable until every
// dependency it waits for succeeded (under IgnoreFailure: ended); then it
// goes to its queue once. It may return ErrInvalidArgument (a bad step, a
// dependency named twice, a cycle, a step depending on itself, more than
// MaxFlowSteps tasks, a live dependency that is not tracked: nothing is
// written), ErrTaskNotFound (a dependency that is unknown, or ended without
// a record of its end), ErrDependencyFailed (a dependency under
// FailDependent that failed already), ErrUnavailable (the outcome is
// unknown: the flow may be written or not; a flow left half written is
// dropped by the sweeper), and the errors of Submit.
//
// A flow with a caller-chosen id (FlowOptions.ID) is submitted once: when
// a flow (or batch) of that id exists, under way or done within its
// retention, Submit writes nothing and returns nil (ErrInvalidArgument if
// the id names a batch); while another submit of it has not committed
// yet, Submit waits for it (bounded by ctx), and submits the flow itself
// if that one gave up. Once the flow's status expired, the id is free
// again (a step whose id is still taken, its end kept longer by a queue's
// Retention, is refused with ErrDuplicate).
func (fl *Flow) Submit(ctx context.Context) error {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	const op = "submit flow"
	if fl.err != nil {
		return opErr(op, fl.id, fl.err)
	}
	if fl.submitted {
		return opErr(op, fl.id, fmt.Errorf("%w: the flow was submitted already", ErrInvalidArgument))
	}
	if err := fl.f.alive(ctx); err != nil {
		return opErr(op, fl.id, err)
	}
	p, err := fl.plan()
	if err != nil {
		return opErr(op, fl.id, err)
	}
	fl.submitted = true
	if err := fl.f.submitPlan(ctx, p); err != nil && !errors.Is(err, errFlowExists) {
		return opErr(op, fl.id, err)
	}
	return nil
}

// plan checks the flow and makes its plan: every edge resolved, no cycle.
func (fl *Flow) plan() (*flowPlan, error) {
	switch n := len(fl.steps); {
	case n == 0:
		return nil, fmt.Errorf("%w: the flow has no step", ErrInvalidArgument)
	case n > MaxFlowSteps:
		return nil, fmt.Errorf("%w: the flow has %d steps, more than MaxFlowSteps %d", ErrInvalidArgument, n, MaxFlowSteps)
	}
	p := &flowPlan{mode: "flow", flow: fl.id, keep: fl.keep, ext: map[string]*extDep{}, idem: fl.idem}
	at := make(map[*FlowStep]int, len(fl.steps))
	for i, s := range fl.steps {
		if s.err != nil {
			return nil, within("step "+strconv.Itoa(i), s.err)
		}
		at[s] = i
		t := &flowTask{c: s.c, id: s.id, body: s.body, flow: fl.id, ready: s.opts.NotBefore}
		p.tasks = append(p.tasks, t)
	}
	for i, s := range fl.steps {
		if err := checkDeps(s.deps); err != nil {
			return nil, within("step "+strconv.Itoa(i), err)
		}
		t := p.tasks[i]
		for _, d := range s.deps {
			if o := fl.byID[d.ID]; o != nil {
				if o.c.name != d.Queue {
					return nil, within("step "+strconv.Itoa(i), fmt.Errorf("%w: task %s is a step of queue %s, not %s", ErrInvalidArgument, d.ID, o.c.name, d.Queue))
				}
				if o == s {
					return nil, within("step "+strconv.Itoa(i), fmt.Errorf("%w: task %s depends on itself", ErrInvalidArgument, s.id))
				}
				j := at[o]
				t.deps = append(t.deps, flowDep{ref: refOf(o.c, o.id), policy: d.Policy.code(), from: j})
				p.tasks[j].outs = append(p.tasks[j].outs, refOf(t.c, t.id))
				continue
			}
			p.addExt(d, i)
		}
	}
	if cyc := p.cycle(); cyc != "" {
		return nil, fmt.Errorf("%w: the flow has a cycle: %s", ErrInvalidArgument, cyc)
	}
	return p, nil
}
