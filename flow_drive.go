package fleet

import (
	"cmp"
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/fleet-go/fleet/internal/engine"
)

// Passing on the ends of tracked tasks (docs/FLOWS.md, "The steps of an
// edge", steps 2 to 5): the flow driver of the process that ended them
// does it at once, in the background; the sweeper does it for the ends
// left in an outbox (the process died, or is late), and resolves the
// submits that look dead.

// flowEnds is f's flow driver (Fleet.flows, flow_driver.go).
func (f *Fleet) flowEnds() *flowDriver { return &f.flows }

// passOn hands the end of task id of shard c to the flow driver, and
// starts its loop on the first.
func (f *Fleet) passOn(c *queueCore, id string) {
	if c == nil || id == "" {
		return
	}
	d := &f.flows
	start, ok := d.add(c.e, id)
	if !ok {
		return
	}
	if start && !f.spawn(f.driveLoop) {
		d.stopped()
		return
	}
	poke(d.wake)
}

// driveLoop drives what is added until the Fleet closes. A drive that
// fails is tried again after a pause, a few times; then the sweeper has
// it.
func (f *Fleet) driveLoop() {
	d := &f.flows
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-f.done
		cancel()
	}()
	var retry map[*queueCore][]string
	tries := 0
	for {
		var timer <-chan time.Time
		if retry != nil {
			timer = time.After(time.Duration(50<<min(tries, 5)) * time.Millisecond)
		}
		select {
		case <-f.done:
			return
		case <-d.wake:
		case <-timer:
		}
		items := map[*queueCore][]string{}
		for e, ids := range d.take() {
			c := f.shardCore(e)
			items[c] = append(items[c], ids...)
		}
		for c, ids := range retry {
			items[c] = append(items[c], ids...)
		}
		retry = nil
		if len(items) == 0 {
			continue
		}
		dctx, dcancel := context.WithTimeout(ctx, 10*time.Second)
		err := f.drive(dctx, items)
		dcancel()
		if err != nil && f.alive(ctx) == nil {
			if tries++; tries <= 6 {
				retry = items
			} else {
				tries = 0
				f.log.Warn("fleet: flow ends not passed on yet: the sweeper will", "err", err)
			}
			continue
		}
		tries = 0
	}
}

// taskRunEnded is the queue engine's ended hook (engine.Hooks, wired by
// Open): the end of a task's run counts in the history and reaches the
// Observer (recordEnd), and a tracked task's dead letter is handed to the
// driver (an ack's was, by flowAcked).
func (f *Fleet) taskRunEnded(ctx context.Context, r *engine.Reservation, o engine.Outcome, ok bool) {
	outcome := TaskProcessed
	switch o {
	case engine.Retried:
		outcome = TaskRetried
	case engine.DeadLettered:
		outcome = TaskDeadLettered
	}
	f.recordEnd(ctx, r.Queue().Name(), r.ID(), outcome, ok)
	if ok && outcome == TaskDeadLettered && r.Tracked() > 0 {
		f.passOn(f.shardCore(r.Queue()), r.ID())
	}
}

// flowAcked hands the end of r, which an ack step acked, to the driver
// when r is tracked: the queue engine's acked hook (engine.Hooks, wired by
// Open).
func (f *Fleet) flowAcked(r *engine.Reservation) {
	if r.Tracked() > 0 {
		f.passOn(f.shardCore(r.Queue()), r.ID())
	}
}

// released tells the Observer that a call of this process released task
// id of c from its dependencies.
func (f *Fleet) released(c *queueCore, id string) {
	if f.obs != nil && f.obs.Released != nil {
		f.obs.Released(context.Background(), ReleaseEvent{Queue: c.name, ID: id})
	}
}

// outRec is one task's part of flow_out's answer.
type outRec struct {
	c                  *queueCore
	id, state, detail  string
	flow, cursor, from string // from: the cursor this page was read at
	refs               []string
}

// drive passes on the ends of tasks ids (by shard): every page of their
// dependents told, their flows counted (and completed, with their
// callbacks), then their outbox entries and records gone. It returns the
// first error; what it did not finish stays in the outboxes.
func (f *Fleet) drive(ctx context.Context, items map[*queueCore][]string) error {
	cursors := map[*queueCore]map[string]string{}
	for c, ids := range items {
		m := map[string]string{}
		for _, id := range ids {
			m[id] = "0"
		}
		cursors[c] = m
	}
	all := cursors
	for len(cursors) > 0 {
		recs, err := f.readOuts(ctx, cursors)
		if err != nil {
			return err
		}
		quads := map[*queueCore][]string{}
		counts := map[string][]string{}
		var kids []childDelivery
		next := map[*queueCore]map[string]string{}
		for _, r := range recs {
			if r.state == "-" {
				continue
			}
			from := refOf(r.c, r.id)
			for _, ref := range r.refs {
				if pref, ok := strings.CutPrefix(ref, childRef); ok {
					if pc, pid, ok := f.coreOfRef(pref); ok { // a child's parent (children.go)
						kids = append(kids, childDelivery{c: pc, parent: pid, child: r.id, state: r.state, detail: r.detail})
					}
					continue
				}
				if tc, tid, ok := f.coreOfRef(ref); ok {
					quads[tc] = append(quads[tc], tid, from, r.state, r.detail)
				}
			}
			if r.from == "0" && r.flow != "" {
				counts[r.flow] = append(counts[r.flow], from, r.state)
			}
			if r.cursor != "0" {
				if next[r.c] == nil {
					next[r.c] = map[string]string{}
				}
				next[r.c][r.id] = r.cursor
			}
		}
		if _, err := f.applyAll(ctx, quads); err != nil {
			return err
		}
		if err := f.deliverChildren(ctx, kids); err != nil {
			return err
		}
		if err := f.countAll(ctx, counts); err != nil {
			return err
		}
		cursors = next
	}
	var execs []rueidis.LuaExec
	for c, m := range all {
		ids := make([]string, 0, len(m))
		for id := range m {
			ids = append(ids, id)
		}
		for chunk := range slices.Chunk(ids, flowPage) {
			execs = append(execs, rueidis.LuaExec{Keys: c.keys(), Args: chunk})
		}
	}
	var first error
	for _, r := range flowOutDoneScript.ExecMulti(ctx, f.client, execs...) {
		first = cmpErr(first, r.Error())
	}
	return first
}

// readOuts runs flow_out.lua for the tasks at their cursors.
func (f *Fleet) readOuts(ctx context.Context, cursors map[*queueCore]map[string]string) ([]outRec, error) {
	var execs []rueidis.LuaExec
	var cores []*queueCore
	for c, m := range cursors {
		args := []string{strconv.Itoa(flowPage)}
		for id, cur := range m {
			args = append(args, id, cur)
			if len(args) > 2*flowPage {
				execs, cores = append(execs, rueidis.LuaExec{Keys: c.keys(), Args: args}), append(cores, c)
				args = []string{strconv.Itoa(flowPage)}
			}
		}
		if len(args) > 1 {
			execs, cores = append(execs, rueidis.LuaExec{Keys: c.keys(), Args: args}), append(cores, c)
		}
	}
	var out []outRec
	for i, r := range flowOutScript.ExecMulti(ctx, f.client, execs...) {
		got, err := r.AsStrSlice()
		if err != nil {
			return nil, err
		}
		c := cores[i]
		for j := 0; j+5 < len(got); {
			rec := outRec{c: c, id: got[j], state: got[j+1], detail: got[j+2], flow: got[j+3], cursor: got[j+4], from: cursors[c][got[j]]}
			n, _ := strconv.Atoi(got[j+5])
			j += 6
			if j+n > len(got) {
				return nil, unexpectedReply("flow out", len(got))
			}
			rec.refs = got[j : j+n]
			j += n
			out = append(out, rec)
		}
	}
	return out, nil
}

// countAll counts the members' ends in their flows (flow_count.lua), and
// completes the flows that are done: their callbacks applied, then
// flow_fin.lua.
func (f *Fleet) countAll(ctx context.Context, counts map[string][]string) error {
	if len(counts) == 0 {
		return nil
	}
	ids := make([]string, 0, len(counts))
	execs := make([]rueidis.LuaExec, 0, len(counts))
	for id, pairs := range counts {
		ids = append(ids, id)
		execs = append(execs, rueidis.LuaExec{Keys: f.flowKeys(id), Args: pairs})
	}
	var first error
	for i, r := range flowCountScript.ExecMulti(ctx, f.client, execs...) {
		got, err := r.AsStrSlice()
		if err == nil && len(got) != 3 {
			err = unexpectedReply("flow count", len(got))
		}
		if err != nil {
			first = cmpErr(first, err)
			continue
		}
		if got[0] == "done" {
			first = cmpErr(first, f.completeFlow(ctx, ids[i], got[1], got[2]))
		}
	}
	return first
}

// completeFlow applies the callbacks of done flow id (cbs: its callbacks
// as flow_new took them; status: flow_status's JSON), then flow_fin.lua.
func (f *Fleet) completeFlow(ctx context.Context, id, cbs, status string) error {
	var list [][2]string
	if cbs != "" {
		if err := json.Unmarshal([]byte(cbs), &list); err != nil {
			return err
		}
	}
	var st FlowStatus
	_ = json.Unmarshal([]byte(status), &st)
	quads := map[*queueCore][]string{}
	for _, cb := range list {
		c, tid, ok := f.coreOfRef(cb[0])
		if !ok {
			continue
		}
		outcome, detail := "ok", status
		if cb[1] == "success" && st.Failed+st.Canceled > 0 {
			outcome, detail = "x", "the batch had "+strconv.Itoa(st.Failed)+" failed and "+strconv.Itoa(st.Canceled)+" cancelled tasks"
		}
		quads[c] = append(quads[c], tid, flowRef(id), outcome, detail)
	}
	if _, err := f.applyAll(ctx, quads); err != nil {
		return err
	}
	return flowFinScript.Exec(ctx, f.client, f.flowKeys(id), nil).Error()
}

// applyArgs are flow_apply.lua's and flow_mark.lua's first arguments.
func applyArgs(c *queueCore) []string {
	return []string{ErrDependencyFailed.Error(), strconv.Itoa(c.opts.DeadMax)}
}

// applyAll runs flow_apply.lua on each shard for its quads (id, ref,
// outcome, detail), flowPage at a time, in one round trip; it wakes the
// shards where a task was released, and hands the tasks that failed to the
// driver (their end is to be passed on). It returns the codes per shard.
func (f *Fleet) applyAll(ctx context.Context, quads map[*queueCore][]string) (map[*queueCore]string, error) {
	var execs []rueidis.LuaExec
	var cores []*queueCore
	var ids [][]string
	for c, qs := range quads {
		for chunk := range slices.Chunk(qs, 4*flowPage) {
			execs = append(execs, rueidis.LuaExec{Keys: c.keys(), Args: append(applyArgs(c), chunk...)})
			cores = append(cores, c)
			var is []string
			for i := 0; i < len(chunk); i += 4 {
				is = append(is, chunk[i])
			}
			ids = append(ids, is)
		}
	}
	out := map[*queueCore]string{}
	var first error
	for i, r := range flowApplyScript.ExecMulti(ctx, f.client, execs...) {
		codes, err := r.ToString()
		if err != nil {
			first = cmpErr(first, err)
			continue
		}
		out[cores[i]] += codes
		f.afterRelease(cores[i], ids[i], codes)
	}
	return out, first
}

// afterRelease acts on the codes of flow_apply or flow_mark for ids of c:
// the released ones wake c's reserves, the failed ones are passed on.
func (f *Fleet) afterRelease(c *queueCore, ids []string, codes string) {
	woke := false
	for j := 0; j < len(codes) && j < len(ids); j++ {
		switch codes[j] {
		case '2':
			if !woke {
				c.wakeLocal()
				c.e.LookSoon()
				woke = true
			}
			f.released(c, ids[j])
		case '3':
			f.passOn(c, ids[j])
		}
	}
}

// sweepFlows is the sweep of q's shard for its flows (flow_sweep.lua):
// it passes on the ends older than flowDriveAfter, resolves the submits
// uncommitted for SweeperOptions.SubmitGrace, and drops a page of progress values
// whose task is no longer reserved.
// It returns how many ends it passed on and submits it resolved.
func (q *queueCore) sweepFlows(ctx context.Context, batch int, grace time.Duration) (passed, resolved int, err error) {
	f := q.fleet
	cur := "0"
	if v, ok := f.progress.Load(q.key.Progress); ok {
		cur = v.(string)
	}
	after, g := f.flowEnds().timings()
	grace = cmp.Or(g, grace)
	got, err := flowSweepScript.Exec(ctx, f.client, q.keys(),
		[]string{millis(after), millis(grace), strconv.Itoa(batch), cur}).AsStrSlice()
	if err != nil {
		return 0, 0, err
	}
	n, _ := strconv.Atoi(got[0])
	if len(got) < n+3 {
		return 0, 0, unexpectedReply("flow sweep", len(got))
	}
	outs := got[1 : 1+n]
	m, _ := strconv.Atoi(got[1+n])
	stale := got[2+n : len(got)-1]
	if len(stale) != 2*m {
		return 0, 0, unexpectedReply("flow sweep", len(got))
	}
	f.progress.Store(q.key.Progress, got[len(got)-1])
	if len(outs) > 0 {
		if err := f.drive(ctx, map[*queueCore][]string{q: outs}); err != nil {
			return 0, 0, err
		}
		passed = len(outs)
	}
	if len(stale) > 0 {
		resolved, err = f.resolve(ctx, q, stale)
	}
	return passed, resolved, err
}

// resolve decides the records of q that stayed uncommitted past the grace
// (pairs of id and flow, or "" for a lone task): a task its flow lists is
// marked (the commit happened), any other is dropped (docs/FLOWS.md, "The
// abort"). It returns how many it resolved.
func (f *Fleet) resolve(ctx context.Context, q *queueCore, pairs []string) (int, error) {
	byFlow := map[string][]string{}
	drop := map[*queueCore][]string{}
	for i := 0; i+1 < len(pairs); i += 2 {
		id, flow := pairs[i], pairs[i+1]
		if flow == "" {
			drop[q] = append(drop[q], id)
			continue
		}
		byFlow[flow] = append(byFlow[flow], id)
	}
	var mark []string
	for flow, ids := range byFlow {
		refs := make([]string, len(ids))
		for i, id := range ids {
			refs[i] = refOf(q, id)
		}
		codes, err := flowResolveScript.Exec(ctx, f.client, f.flowKeys(flow), refs).ToString()
		if err != nil {
			return 0, err
		}
		for i, id := range ids {
			if i < len(codes) && codes[i] == 'k' {
				mark = append(mark, id)
			} else {
				drop[q] = append(drop[q], id)
			}
		}
	}
	n := 0
	if len(mark) > 0 {
		codes, err := flowMarkScript.Exec(ctx, f.client, q.keys(), append(applyArgs(q), mark...)).ToString()
		if err != nil {
			return n, err
		}
		f.afterRelease(q, mark, codes)
		n += len(mark)
	}
	if len(drop[q]) > 0 {
		n += f.dropRecords(ctx, drop)
	}
	return n, nil
}

// timings returns the sweep's bounds: flowDriveAfter, and the grace a
// test set (0: SweeperOptions.SubmitGrace's).
func (d *flowDriver) timings() (driveAfter, grace time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return cmp.Or(d.driveAfter, flowDriveAfter), d.grace
}
