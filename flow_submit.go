package fleet

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

// The submit of tracked tasks (docs/FLOWS.md, "Submitting"), which a
// Flow, SubmitOptions.After and Track, and a Batch share: a plan of
// records, put in their queues' slots, committed in their flow's, then
// marked.

// flowPlan is what a submit of tracked tasks writes (docs/FLOWS.md,
// "Submitting"): a flow's steps, a batch's callbacks or an add's tasks, or
// lone tasks (mode "").
type flowPlan struct {
	mode  string // "flow", "batch", "add", or "" (tasks without a flow)
	flow  string // the flow's (batch's) id
	keep  time.Duration
	cbs   string // a batch's callbacks as JSON (flow_new.lua)
	tasks []*flowTask
	ext   map[string]*extDep // dependencies outside the plan, by queue and id
	order []*extDep          // ext in the order they were named
	// stopAt, set by a test (export_flow_test.go), ends the submit after
	// that step, undoing nothing: as if its process died there.
	stopAt int
	// idem: the flow's (batch's) id was chosen by the caller (FlowOptions.ID,
	// BatchOptions.ID): one that exists is this submit made already.
	idem bool
}

// errFlowExists is submitPlan's answer when the caller-chosen id of its
// flow (batch) names one that exists (live, or done within its
// retention): nothing was written, and the caller answers success.
var errFlowExists = errors.New("the flow exists already")

// openFlow is step 1 of a submit: it opens the plan's flow (flow_new.lua).
// A flow of a caller-chosen id (p.idem) that exists gives errFlowExists,
// once it left state new: while another submit of the same id is under
// way, openFlow waits (on a capped backoff, bounded by ctx) until that one
// committed (errFlowExists) or gave up (its record gone: it opens the
// flow itself). One uncommitted for longer than SweeperOptions.SubmitGrace's
// default gives ErrUnavailable: its submitter likely died, and its record
// holds the id until it expires (flowNewTTL).
func (f *Fleet) openFlow(ctx context.Context, p *flowPlan) error {
	bo := backoff{min: 2 * time.Millisecond, max: 100 * time.Millisecond}
	_, grace := f.flowEnds().timings()
	for {
		got, err := flowNewScript.Exec(ctx, f.client, f.flowKeys(p.flow)[:1],
			[]string{p.mode, millis(p.keep), p.cbs, millis(flowNewTTL)}).AsStrSlice()
		if err != nil {
			return err
		}
		if len(got) == 1 && got[0] == "made" {
			return nil
		}
		if len(got) != 4 {
			return unexpectedReply("flow new", len(got))
		}
		age, _ := strconv.ParseInt(got[3], 10, 64)
		switch kind, state := got[1], got[2]; {
		case !p.idem:
			return fmt.Errorf("flow %s exists already", p.flow) // cannot happen: a new id
		case kind != p.mode:
			return fmt.Errorf("%w: id %s names a %s, not a %s", ErrInvalidArgument, p.flow, kind, p.mode)
		case state != "new":
			return errFlowExists
		case time.Duration(age)*time.Millisecond > cmp.Or(grace, DefaultSubmitGrace):
			return fmt.Errorf("%w: a submit of %s %s began %v ago and has not committed: its process may have died; if it did, the id is free again once its record expires, %v after that submit began",
				ErrUnavailable, p.mode, p.flow, time.Duration(age)*time.Millisecond, flowNewTTL)
		}
		if err := f.sleep(ctx, bo.next()); err != nil {
			return err
		}
	}
}

// flowTask is one task of a plan.
type flowTask struct {
	c     *queueCore // its shard's
	id    string
	body  string
	flow  string // its flow (member), or ""
	cb    string // the batch whose callback it is, or ""
	ready time.Time
	now   bool // no flow, no dependency (SubmitOptions.Track): committed and released at put
	deps  []flowDep
	outs  []string // the refs of its dependents in the plan
	idx   int
	// idem: its id was chosen by the caller (SubmitOptions.ID) for a task
	// without a flow, so a record or end of that id that exists is an
	// earlier submit of this one. taken is flow_put's code when it found
	// the id taken ('0': made by another submit, 'u': that submit is under
	// way): the rest of this submit leaves the task alone (it is not its
	// own to mark or drop); a task that is not idem fails the submit.
	idem  bool
	taken byte
}

// flowDep is one dependency of a plan's task.
type flowDep struct {
	ref    string
	policy string  // "f", "i", "s"
	from   int     // the index of an in-plan dependency, or -1
	ext    *extDep // a dependency outside the plan, or nil
}

// extDep is a dependency outside the plan: a task that exists already.
type extDep struct {
	c       *queueCore // its queue's
	id      string
	at      *queueCore // the shard that holds it, once looked at
	state   string     // flow_watch's answer: "live", "ok", "x", "c"
	detail  string     // its result or error, once ended
	waiters []int      // the plan's tasks that wait for it
	fails   bool       // one of them waits under FailDependent
}

func (p *flowPlan) addExt(d Dependency, task int) {
	key := d.Queue + " " + d.ID
	e := p.ext[key]
	if e == nil {
		e = &extDep{c: p.tasks[task].c.fleet.coreOf(d.Queue, QueueOptions{}).top(), id: d.ID}
		p.ext[key] = e
		p.order = append(p.order, e)
	}
	e.waiters = append(e.waiters, task)
	e.fails = e.fails || d.Policy == FailDependent
	p.tasks[task].deps = append(p.tasks[task].deps, flowDep{policy: d.Policy.code(), from: -1, ext: e})
}

// cycle returns a cycle of the plan's in-plan edges, spelled as task ids,
// or "".
func (p *flowPlan) cycle() string {
	const (
		white = iota
		grey
		black
	)
	color := make([]int, len(p.tasks))
	var path []int
	var found []int
	var visit func(i int) bool
	visit = func(i int) bool {
		color[i] = grey
		path = append(path, i)
		for _, d := range p.tasks[i].deps {
			if d.from < 0 {
				continue
			}
			switch color[d.from] {
			case grey:
				k := slices.Index(path, d.from)
				found = append(slices.Clone(path[k:]), d.from)
				return true
			case white:
				if visit(d.from) {
					return true
				}
			}
		}
		path = path[:len(path)-1]
		color[i] = black
		return false
	}
	for i := range p.tasks {
		if color[i] == white && visit(i) {
			ids := make([]string, len(found))
			for j, k := range found {
				ids[j] = p.tasks[k].id
			}
			return strings.Join(ids, " waits for ") // each waits for the next
		}
	}
	return ""
}

// submitPlan writes a plan (docs/FLOWS.md, "Submitting"): it looks at the
// dependencies outside it, opens the flow, puts the records, watches the
// dependencies, tells the records what ended already, commits, and marks.
// A failure before the commit drops what it wrote.
func (f *Fleet) submitPlan(ctx context.Context, p *flowPlan) error {
	for i, t := range p.tasks {
		t.idx = i
	}
	// 0. The dependencies outside the plan.
	if err := f.lookExt(ctx, p); err != nil {
		return err
	}
	for _, t := range p.tasks {
		for i, d := range t.deps {
			if d.ext != nil {
				t.deps[i].ref = refOf(d.ext.at, d.ext.id)
			}
		}
	}
	// 1. The flow.
	if p.mode == "flow" || p.mode == "batch" {
		if err := f.openFlow(ctx, p); err != nil {
			return err
		}
		// Each queue joins the registry (fleet:queues), so that a sweeper
		// finds its flows' keys (an add's and a lone task's submit did).
		seen := map[*queueCore]bool{}
		for _, t := range p.tasks {
			if top := t.c.top(); !seen[top] {
				seen[top] = true
				if err := top.register(ctx); err != nil {
					_ = flowForgetScript.Exec(ctx, f.client, f.flowKeys(p.flow), nil).Error()
					return err
				}
			}
		}
	}
	committed := false
	defer func() {
		if !committed {
			f.abortPlan(ctx, p)
		}
	}()
	died := func(step int) bool {
		if p.stopAt != step {
			return false
		}
		committed = true // a test's crash: nothing is undone
		return true
	}
	if died(1) {
		return nil
	}
	// 2. The records.
	if err := f.putPlan(ctx, p); err != nil {
		return err
	}
	if died(2) {
		return nil
	}
	// 3 and 4. Watch the live dependencies; tell the records what ended.
	if err := f.watchExt(ctx, p); err != nil {
		return err
	}
	if died(3) {
		return nil
	}
	// 5. Commit.
	if p.mode != "" {
		args := []string{p.mode, "0"}
		var cbs []string
		for _, t := range p.tasks {
			if t.cb != "" {
				cbs = append(cbs, refOf(t.c, t.id))
			}
		}
		args[1] = strconv.Itoa(len(cbs))
		args = append(args, cbs...)
		for _, t := range p.tasks {
			if t.flow != "" {
				args = append(args, refOf(t.c, t.id))
			}
		}
		res, err := flowCommitScript.Exec(ctx, f.client, f.flowKeys(p.flow), args).ToString()
		if err != nil {
			return err
		}
		switch res {
		case "ok":
		case "closed":
			return fmt.Errorf("%w: batch %s", ErrBatchClosed, p.flow)
		case "gone":
			return fmt.Errorf("%w: %s is gone (its submit took longer than %v, or the batch is done)", ErrFlowNotFound, p.flow, flowNewTTL)
		default:
			return fmt.Errorf("the submit of flow %s was aborted: it took longer than the sweepers' SubmitGrace to commit", p.flow)
		}
	}
	committed = true
	if died(4) {
		return nil
	}
	// 6. Mark: the tasks with nothing to wait for go to their queues.
	return f.markPlan(ctx, p)
}

// flowKeys returns the keys of flow id, as its scripts take them.
func (f *Fleet) flowKeys(id string) []string {
	k := f.keys.Flow(id)
	return []string{k.Record, k.Members}
}

// lookExt looks at every dependency outside the plan (flow_watch.lua,
// without adding a ref), on every shard of its queue, and refuses what
// cannot be waited for.
func (f *Fleet) lookExt(ctx context.Context, p *flowPlan) error {
	if len(p.order) == 0 {
		return nil
	}
	type look struct {
		e *extDep
		s *queueCore
	}
	var looks []look
	var execs []rueidis.LuaExec
	for _, e := range p.order {
		for _, s := range e.c.shardsOf(ctx) {
			looks = append(looks, look{e, s})
			execs = append(execs, rueidis.LuaExec{Keys: s.keys(s.key.Result + e.id), Args: []string{e.id, ""}})
		}
	}
	rank := func(s string) int {
		switch s {
		case "none":
			return 0
		case "plain":
			return 1
		}
		return 2
	}
	best := map[*extDep][]string{}
	for i, r := range flowWatchScript.ExecMulti(ctx, f.client, execs...) {
		got, err := r.AsStrSlice()
		if err != nil {
			return err
		}
		if len(got) == 0 {
			return unexpectedReply("flow watch", 0)
		}
		lk := looks[i]
		if old, ok := best[lk.e]; !ok || rank(got[0]) > rank(old[0]) {
			best[lk.e] = got
			lk.e.at = lk.s
		}
	}
	for _, e := range p.order {
		got := best[e]
		switch got[0] {
		case "none":
			return fmt.Errorf("%w: task %s of queue %s is unknown, or ended without a record of its end: its outcome is not known", ErrTaskNotFound, e.id, e.c.name)
		case "plain":
			return fmt.Errorf("%w: task %s of queue %s is not tracked: its end will not be recorded (submit it with SubmitOptions.Track, or in a Flow)", ErrInvalidArgument, e.id, e.c.name)
		}
		e.state, e.detail = endOf(got)
		if e.state != "live" && e.state != "ok" && e.fails {
			return fmt.Errorf("%w: task %s of queue %s ended as %s: %s", ErrDependencyFailed, e.id, e.c.name, outcomeStatus(e.state), e.detail)
		}
	}
	return nil
}

// endOf reads flow_watch's answer: "live", or how the task ended ("ok",
// "x", "c") with its result or error.
func endOf(got []string) (state, detail string) {
	arg := func() string {
		if len(got) > 1 {
			return got[1]
		}
		return ""
	}
	switch got[0] {
	case "live", "ok", "x", "c":
		return got[0], arg()
	case "rec":
		return recordEnd(arg())
	case "dead":
		var d struct {
			Error string `json:"error"`
		}
		_ = json.Unmarshal([]byte(arg()), &d)
		if strings.HasPrefix(d.Error, ErrCanceled.Error()) {
			return "c", d.Error
		}
		return "x", d.Error
	}
	return "x", "unknown end " + got[0]
}

// recordEnd reads an end record (:result:<id>): how the task ended and
// its result or error.
func recordEnd(rec string) (state, detail string) {
	var r struct {
		Status string          `json:"status"`
		Result json.RawMessage `json:"result"`
		Error  string          `json:"error"`
	}
	_ = json.Unmarshal([]byte(rec), &r)
	switch r.Status {
	case "", string(TaskDone):
		if len(r.Result) == 0 {
			return "ok", "null"
		}
		return "ok", string(r.Result)
	case string(TaskCanceled):
		return "c", r.Error
	}
	return "x", r.Error
}

// outcomeStatus is the TaskStatus of an outcome code.
func outcomeStatus(code string) TaskStatus {
	switch code {
	case "ok", "+":
		return TaskDone
	case "x":
		return TaskDead
	case "c":
		return TaskCanceled
	}
	return TaskWaiting
}

// putPlan puts the plan's records (flow_put.lua), one script per shard
// and flowPage tasks, in one round trip.
func (f *Fleet) putPlan(ctx context.Context, p *flowPlan) error {
	type rec struct {
		ID   string     `json:"id"`
		B    string     `json:"b"`
		N    string     `json:"n"`
		F    string     `json:"f"`
		CB   string     `json:"cb"`
		At   string     `json:"at"`
		Keep string     `json:"keep"`
		D    [][]string `json:"d"`
		O    []string   `json:"o"`
		K    string     `json:"k,omitempty"`
	}
	var execs []rueidis.LuaExec
	var who [][]*flowTask
	for c, ts := range p.byCore() {
		for chunk := range slices.Chunk(ts, flowPage) {
			args := make([]string, 0, len(chunk))
			for _, t := range chunk {
				r := rec{ID: t.id, B: t.body, N: strconv.Itoa(len(t.deps)), F: t.flow, CB: t.cb, At: "0",
					Keep: strconv.FormatInt(keepFor(t.c, p.keep), 10), D: make([][]string, len(t.deps)), O: t.outs}
				if r.O == nil {
					r.O = []string{}
				}
				if t.now {
					r.K = "1"
				}
				if !t.ready.IsZero() {
					r.At = strconv.FormatInt(t.ready.UnixMilli(), 10)
				}
				for i, d := range t.deps {
					r.D[i] = []string{d.ref, d.policy}
				}
				b, err := json.Marshal(r)
				if err != nil {
					return err
				}
				args = append(args, string(b))
			}
			execs = append(execs, rueidis.LuaExec{Keys: c.keys(), Args: args})
			who = append(who, chunk)
		}
	}
	var first error
	for i, r := range flowPutScript.ExecMulti(ctx, f.client, execs...) {
		got, err := r.ToString()
		if err != nil {
			first = cmpErr(first, err)
			continue
		}
		ids := make([]string, len(who[i]))
		for j, t := range who[i] {
			ids[j] = t.id
			switch {
			case j >= len(got):
				first = cmpErr(first, unexpectedReply("flow put", len(got)))
			case got[j] != '0' && got[j] != 'u':
			default:
				// Not this submit's: never marked or dropped by it. A task
				// that is not idem is a step whose id the caller chose (a
				// new id cannot be taken): the submit fails.
				t.taken = got[j]
				if !t.idem {
					first = cmpErr(first, fmt.Errorf("%w: the id %s of a step (queue %s) names a task that lives or whose end is kept", ErrDuplicate, t.id, t.c.name))
				}
			}
		}
		f.afterRelease(who[i][0].c, ids, got)
	}
	return first
}

// byCore groups the plan's tasks by their shard, in a stable order.
func (p *flowPlan) byCore() map[*queueCore][]*flowTask {
	out := map[*queueCore][]*flowTask{}
	for _, t := range p.tasks {
		out[t.c] = append(out[t.c], t)
	}
	return out
}

// watchExt adds the plan's tasks to the dependents of the live dependencies
// outside it (flow_watch.lua), then tells the tasks the outcomes of those
// that ended (flow_apply.lua), all before the commit.
func (f *Fleet) watchExt(ctx context.Context, p *flowPlan) error {
	type watch struct {
		e *extDep
		t *flowTask
	}
	var ws []watch
	var execs []rueidis.LuaExec
	for _, e := range p.order {
		if e.state != "live" {
			continue
		}
		for _, i := range e.waiters {
			t := p.tasks[i]
			if t.taken != 0 {
				continue
			}
			ws = append(ws, watch{e, t})
			execs = append(execs, rueidis.LuaExec{Keys: e.at.keys(e.at.key.Result + e.id), Args: []string{e.id, refOf(t.c, t.id)}})
		}
	}
	type tell struct {
		t                    *flowTask
		ref, outcome, detail string
	}
	var tells []tell
	for i, r := range flowWatchScript.ExecMulti(ctx, f.client, execs...) {
		got, err := r.AsStrSlice()
		if err != nil {
			return err
		}
		if len(got) == 0 {
			return unexpectedReply("flow watch", 0)
		}
		if got[0] == "live" {
			continue
		}
		st, detail := endOf(got)
		ws[i].e.state, ws[i].e.detail = st, detail // ended meanwhile
	}
	for _, e := range p.order {
		if e.state == "live" {
			continue
		}
		if e.state != "ok" && e.fails {
			return fmt.Errorf("%w: task %s of queue %s ended as %s: %s", ErrDependencyFailed, e.id, e.c.name, outcomeStatus(e.state), e.detail)
		}
		for _, i := range e.waiters {
			if p.tasks[i].taken != 0 {
				continue
			}
			tells = append(tells, tell{t: p.tasks[i], ref: refOf(e.at, e.id), outcome: e.state, detail: e.detail})
		}
	}
	if len(tells) == 0 {
		return nil
	}
	byCore := map[*queueCore][]string{}
	for _, tl := range tells {
		byCore[tl.t.c] = append(byCore[tl.t.c], tl.t.id, tl.ref, tl.outcome, tl.detail)
	}
	_, err := f.applyAll(ctx, byCore)
	return err
}

// markPlan marks the plan's records committed (flow_mark.lua).
func (f *Fleet) markPlan(ctx context.Context, p *flowPlan) error {
	var execs []rueidis.LuaExec
	var cores []*queueCore
	var ids [][]string
	for c, ts := range p.byCore() {
		ts = slices.DeleteFunc(slices.Clone(ts), func(t *flowTask) bool { return t.now || t.taken != 0 }) // committed at put, or not this submit's
		for chunk := range slices.Chunk(ts, flowPage) {
			is := make([]string, len(chunk))
			for i, t := range chunk {
				is[i] = t.id
			}
			execs = append(execs, rueidis.LuaExec{Keys: c.keys(), Args: append(applyArgs(c), is...)})
			cores, ids = append(cores, c), append(ids, is)
		}
	}
	var first error
	for i, r := range flowMarkScript.ExecMulti(ctx, f.client, execs...) {
		codes, err := r.ToString()
		if err != nil {
			first = cmpErr(first, err)
			continue
		}
		if p.mode == "" && strings.Contains(codes, "0") {
			// A lone task's mark is its commit: a record gone is one that
			// a sweeper aborted (its submit looked dead).
			first = cmpErr(first, errors.New("the submit was aborted: it took longer than the sweepers' SubmitGrace"))
		}
		f.afterRelease(cores[i], ids[i], codes)
	}
	return first
}

// abortPlan drops what a submit that did not commit wrote (flow_drop.lua,
// flow_unwatch.lua, flow_forget.lua), within a few seconds whether or not
// ctx ended. What it cannot drop, the sweeper drops after SweeperOptions.SubmitGrace.
func (f *Fleet) abortPlan(ctx context.Context, p *flowPlan) {
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	byCore := map[*queueCore][]string{}
	for c, ts := range p.byCore() {
		for _, t := range ts {
			if t.taken == 0 { // a record of an earlier submit of its id is not this one's to drop
				byCore[c] = append(byCore[c], t.id)
			}
		}
	}
	f.dropRecords(actx, byCore)
	if p.mode == "flow" || p.mode == "batch" {
		_ = flowForgetScript.Exec(actx, f.client, f.flowKeys(p.flow), nil).Error()
	}
}

// dropRecords drops the uncommitted records of ids, by shard
// (flow_drop.lua), and takes their refs out of the dependents of the
// dependencies they named (flow_unwatch.lua). It returns how many it
// dropped.
func (f *Fleet) dropRecords(ctx context.Context, ids map[*queueCore][]string) int {
	var execs []rueidis.LuaExec
	var cores []*queueCore
	why := ErrCanceled.Error() + ": its submit was aborted"
	for c, is := range ids {
		for chunk := range slices.Chunk(is, flowPage) {
			execs = append(execs, rueidis.LuaExec{Keys: c.keys(), Args: append([]string{why}, chunk...)})
			cores = append(cores, c)
		}
	}
	unwatch := map[*queueCore][]string{}
	dropped := 0
	for i, r := range flowDropScript.ExecMulti(ctx, f.client, execs...) {
		got, err := r.AsStrSlice()
		if err != nil {
			continue
		}
		// Per task dropped: its id, the count of its dependencies, their refs.
		for j := 0; j+1 < len(got); {
			f.passOn(cores[i], got[j]) // one that ended cancelled (xo) is passed on; another is a no-op
			ref := refOf(cores[i], got[j])
			n, _ := strconv.Atoi(got[j+1])
			j += 2
			dropped++
			for ; n > 0 && j < len(got); n-- {
				if dc, did, ok := f.coreOfRef(got[j]); ok {
					unwatch[dc] = append(unwatch[dc], did, ref)
				}
				j++
			}
		}
	}
	var uexecs []rueidis.LuaExec
	for c, ps := range unwatch {
		for chunk := range slices.Chunk(ps, 2*flowPage) {
			uexecs = append(uexecs, rueidis.LuaExec{Keys: c.keys(), Args: chunk})
		}
	}
	for _, r := range flowUnwatchScript.ExecMulti(ctx, f.client, uexecs...) {
		_ = r.Error() // a ref left goes with its dependency's record; told, it is a no-op
	}
	return dropped
}
