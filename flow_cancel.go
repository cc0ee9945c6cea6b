package fleet

import (
	"context"
	"fmt"
	"slices"
	"strconv"

	"github.com/redis/rueidis"
)

// A flow's (or batch's) status, its cancel, and the registry of flows with
// an operation under way (fleet:flows), which the sweeper finishes
// (docs/FLOWS.md, "Cancel of a flow").

var flowOpsScript = newScript("flow_ops.lua")

// FlowState is where a flow (or batch) is in its life.
type FlowState string

// The states of a flow or batch.
const (
	// FlowOpen: a batch that tasks can still be added to (Batch.Close
	// closes it).
	FlowOpen FlowState = "open"
	// FlowClosed: its tasks run; it is done once every one ended.
	FlowClosed FlowState = "closed"
	// FlowCanceling: CancelFlow is cancelling its tasks.
	FlowCanceling FlowState = "canceling"
	// FlowCanceled: cancelled; it is done once every task ended.
	FlowCanceled FlowState = "canceled"
	// FlowDone: every task ended (and a batch's callbacks were released).
	FlowDone FlowState = "done"
)

// FlowStatus is the status of a flow or batch.
type FlowStatus struct {
	// ID is the flow's (batch's) id.
	ID string `json:"id"`
	// State is where it is.
	State FlowState `json:"state"`
	// Total counts its tasks (a batch's callbacks are not counted).
	Total int `json:"total"`
	// Pending counts those that have not ended.
	Pending int `json:"pending"`
	// Succeeded, Failed and Canceled count those that ended so.
	Succeeded int `json:"succeeded"`
	Failed    int `json:"failed"`
	Canceled  int `json:"canceled"`
}

// FlowStatus returns the status of flow (or batch) id: its state and the
// counts of its tasks, as its record holds them now. Each task's end is
// counted when it has been passed on (docs/FLOWS.md, step 4 of an edge),
// which follows the task's end in the background: read right after a
// task's end, the status may not count it yet. Read after Queue.Wait or
// ResultOf with Await of the task (which return once it was passed on),
// it counts it; to wait for the whole flow, use WaitFlow. May return
// ErrFlowNotFound (unknown, or done and past its retention), ErrUnavailable.
func (f *Fleet) FlowStatus(ctx context.Context, id string) (FlowStatus, error) {
	const op = "flow status"
	if err := f.alive(ctx); err != nil {
		return FlowStatus{ID: id}, opErr(op, id, err)
	}
	if err := checkFlowID(id); err != nil {
		return FlowStatus{ID: id}, opErr(op, id, err)
	}
	st, _, err := f.flowStatus(ctx, id)
	return st, opErr(op, id, err)
}

// flowStatus reads the status of flow id, and whether it is finished: done,
// and its callbacks (a batch's) released (flow_complete's "cbd").
func (f *Fleet) flowStatus(ctx context.Context, id string) (FlowStatus, bool, error) {
	st := FlowStatus{ID: id}
	m, err := f.client.Do(ctx, f.client.B().Hgetall().Key(f.keys.Flow(id).Record).Build()).AsStrMap()
	if err != nil {
		return st, false, err
	}
	if len(m) == 0 || m["state"] == "new" {
		return st, false, fmt.Errorf("%w: %s", ErrFlowNotFound, id)
	}
	num := func(k string) int { n, _ := strconv.Atoi(m[k]); return n }
	st.State, st.Total, st.Succeeded, st.Failed, st.Canceled = FlowState(m["state"]), num("total"), num("ok"), num("fail"), num("cancel")
	st.Pending = max(st.Total-st.Succeeded-st.Failed-st.Canceled, 0)
	return st, st.State == FlowDone && m["cbd"] == "1", nil
}

// checkFlowID checks a flow's (batch's) id.
func checkFlowID(id string) error {
	if id == "" || len(id) > 1024 || !isText(id) {
		return fmt.Errorf("%w: flow id of %d bytes", ErrInvalidArgument, len(id))
	}
	return nil
}

// CancelFlow cancels every task of flow (or batch) id that has not ended:
// those waiting for their dependencies first (so that none is released by
// a dependency's end meanwhile), then those on their queues (taken off) and
// those running (told to stop, as Queue.Cancel does: a handler that returns
// nil anyway finished its task). Each cancelled task's end is recorded and
// passed on; the flow counts it as cancelled, and is done once every task
// ended (a batch's OnComplete callback then runs; OnSuccess does not).
// A cancel stopped by a crash is finished by the sweeper. May return
// ErrFlowNotFound, ErrFlowFinished (nothing changes), ErrUnavailable.
func (f *Fleet) CancelFlow(ctx context.Context, id string) error {
	const op = "cancel flow"
	if err := f.alive(ctx); err != nil {
		return opErr(op, id, err)
	}
	if err := checkFlowID(id); err != nil {
		return opErr(op, id, err)
	}
	if err := f.flowOp(ctx, "add", id); err != nil {
		return opErr(op, id, err)
	}
	res, err := flowCancelScript.Exec(ctx, f.client, f.flowKeys(id), []string{"begin"}).ToString()
	if err != nil {
		return opErr(op, id, err)
	}
	switch res {
	case "none":
		_ = f.flowOp(ctx, "rem", id)
		return opErr(op, id, fmt.Errorf("%w: %s", ErrFlowNotFound, id))
	case "done":
		_ = f.flowOp(ctx, "rem", id)
		return opErr(op, id, fmt.Errorf("%w: %s", ErrFlowFinished, id))
	}
	return opErr(op, id, f.finishCancel(ctx, id))
}

// finishCancel walks a cancelling flow's pending tasks (docs/FLOWS.md:
// waiting ones first, then queued and running ones), ends the cancel
// (completing the flow when nothing is pending) and leaves the registry.
func (f *Fleet) finishCancel(ctx context.Context, id string) error {
	keys := f.flowKeys(id)
	byCore := map[*queueCore][]string{}
	for cur := "0"; ; {
		page, err := flowCancelScript.Exec(ctx, f.client, keys, []string{"page", cur, strconv.Itoa(flowPage)}).AsStrSlice()
		if err != nil {
			return err
		}
		if len(page) == 0 {
			return unexpectedReply("flow cancel", 0)
		}
		for _, ref := range page[1:] {
			if c, tid, ok := f.coreOfRef(ref); ok {
				byCore[c] = append(byCore[c], tid)
			}
		}
		if cur = page[0]; cur == "0" {
			break
		}
	}
	why := ErrCanceled.Error() + ": its flow " + id + " was cancelled"
	for _, pass := range []string{"w", "q"} {
		var execs []rueidis.LuaExec
		var cores []*queueCore
		var ids [][]string
		for c, tids := range byCore {
			for chunk := range slices.Chunk(tids, flowPage) {
				execs = append(execs, rueidis.LuaExec{Keys: c.keys(), Args: append([]string{pass, why}, chunk...)})
				cores, ids = append(cores, c), append(ids, chunk)
			}
		}
		for i, r := range flowCancelTasksScript.ExecMulti(ctx, f.client, execs...) {
			codes, err := r.ToString()
			if err != nil {
				return err
			}
			for j := 0; j < len(codes) && j < len(ids[i]); j++ {
				switch codes[j] {
				case '1':
					f.passOn(cores[i], ids[i][j])
				case 'r':
					if err := f.Publish(ctx, f.keys.CancelTopic(cores[i].name), ids[i][j]); err != nil {
						return err
					}
				}
			}
		}
	}
	got, err := flowCancelScript.Exec(ctx, f.client, keys, []string{"end"}).AsStrSlice()
	if err != nil {
		return err
	}
	if len(got) == 3 && got[0] == "done" {
		if err := f.completeFlow(ctx, id, got[1], got[2]); err != nil {
			return err
		}
	}
	return f.flowOp(ctx, "rem", id)
}

// flowOp adds flow id to the registry of flows with an operation under
// way, or removes it (flow_ops.lua).
func (f *Fleet) flowOp(ctx context.Context, mode, id string) error {
	return flowOpsScript.Exec(ctx, f.client, []string{f.keys.Flows()}, []string{mode, id}).Error()
}

// sweepFlowOps finishes the operations on flows (a cancel's walk, the
// callbacks of a batch that Close completed) that a crash stopped: the
// registry's entries older than flowDriveAfter, batch at most per sweep.
func (f *Fleet) sweepFlowOps(ctx context.Context, batch int) (int, error) {
	after, _ := f.flowEnds().timings()
	ids, err := flowOpsScript.Exec(ctx, f.client, []string{f.keys.Flows()},
		[]string{"due", millis(after), strconv.Itoa(batch)}).AsStrSlice()
	if err != nil {
		return 0, err
	}
	for _, id := range ids {
		state, err := f.client.Do(ctx, f.client.B().Hget().Key(f.keys.Flow(id).Record).Field("state").Build()).ToString()
		if err != nil && !rueidis.IsRedisNil(err) {
			return 0, err
		}
		if state == string(FlowCanceling) {
			err = f.finishCancel(ctx, id)
		} else {
			err = f.completeIfDone(ctx, id)
			if err == nil {
				err = f.flowOp(ctx, "rem", id)
			}
		}
		if err != nil {
			return 0, err
		}
	}
	return len(ids), nil
}

// completeIfDone applies the callbacks of flow id when it is done and they
// were not applied yet (flow_count.lua with nothing to count answers
// flow_complete's).
func (f *Fleet) completeIfDone(ctx context.Context, id string) error {
	got, err := flowCountScript.Exec(ctx, f.client, f.flowKeys(id), nil).AsStrSlice()
	if err != nil {
		return err
	}
	if len(got) == 3 && got[0] == "done" {
		return f.completeFlow(ctx, id, got[1], got[2])
	}
	return nil
}
