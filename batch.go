package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/fleet-go/fleet/internal/taskbody"
)

// Batches: a set of tasks, in any queues, with callbacks on success (all
// succeeded) and on completion (all ended, with the counts). A batch is a
// flow that stays open until Close (docs/FLOWS.md, "Batches").

// Batch is a batch of tasks (not to be confused with a batch worker, which
// runs tasks one per slot): tasks are added while it is open (BatchAdd),
// and its callbacks run, each once, when it is closed (Close) and every
// task ended. Each callback is a task of a queue, made with NewBatch and
// waiting until then; its handler reads the batch's counts with
// Task.BatchStatus. Batch is safe for concurrent use.
type Batch struct {
	f  *Fleet
	id string
}

// BatchOptions configures NewBatch. The zero value means no callback and
// the default retention.
type BatchOptions struct {
	// OnSuccess runs when the batch is done and every task succeeded; it
	// is dropped (recorded as cancelled, never run) when any failed or was
	// cancelled. Defaults to none.
	OnSuccess *Callback
	// OnComplete runs when the batch is done, however its tasks ended.
	// Defaults to none.
	OnComplete *Callback
	// Retention is how long the end of each task stays recorded, and the
	// batch's status once it is done. Defaults to DefaultFlowRetention.
	Retention time.Duration
	// ID, when set, is the batch's id, chosen by the caller (an idempotency
	// key): a NewBatch whose id names a batch that exists (open, closed,
	// or done within its Retention) writes nothing (its callbacks are not
	// made again) and returns that batch's handle with a nil error, so that
	// a retried request gets the same batch. While another NewBatch of it
	// has not committed yet, NewBatch waits for it (bounded by ctx). What
	// the second call holds is not compared with the first. The rules of
	// FlowOptions.ID. Defaults to none: a new UUIDv7.
	ID string
}

// Callback is a batch's callback: a task of a queue, with its payload and
// options (NewCallback).
type Callback struct {
	c    *queueCore
	body func(id string, keep int64) string
	opts SubmitOptions
	err  error
}

// NewCallback returns a callback that submits payload to q (with opts:
// not After, DedupKey or UniqueFor), checked now; a bad one is refused by
// NewBatch.
func NewCallback[T any](q *Queue[T], payload T, opts SubmitOptions) *Callback {
	cb := &Callback{opts: opts}
	switch {
	case q == nil || q.queueCore == nil:
		cb.err = fmt.Errorf("%w: NewCallback needs a queue", ErrInvalidArgument)
		return cb
	case q.err != nil:
		cb.err = q.err
		return cb
	case len(opts.After) > 0:
		cb.err = fmt.Errorf("%w: a callback waits for its batch: SubmitOptions.After is not for it", ErrInvalidArgument)
		return cb
	case opts.ID != "":
		cb.err = fmt.Errorf("%w: SubmitOptions.ID is not for a callback (BatchOptions.ID makes NewBatch idempotent)", ErrInvalidArgument)
		return cb
	}
	cb.c = q.queueCore
	if cb.err = q.checkSubmit(opts); cb.err == nil {
		cb.err = checkFlowOptions(opts)
	}
	b, err := q.encodePayload(payload)
	if err != nil && cb.err == nil {
		cb.err = err
	}
	cb.body = func(id string, keep int64) string { return taskbody.WithTrack(newBody(id, b, opts), keep) }
	return cb
}

// NewBatch makes an open batch, with its callbacks waiting for it. With
// BatchOptions.ID, a batch of that id that exists is answered instead
// (ErrInvalidArgument if the id names a flow). May return
// ErrInvalidArgument (a bad callback or option: nothing is written),
// ErrUnavailable.
func (f *Fleet) NewBatch(ctx context.Context, opts BatchOptions) (*Batch, error) {
	const op = "new batch"
	if err := f.alive(ctx); err != nil {
		return nil, opErr(op, "", err)
	}
	if opts.Retention < 0 {
		return nil, opErr(op, "", fmt.Errorf("%w: BatchOptions.Retention %v is negative", ErrInvalidArgument, opts.Retention))
	}
	keep := opts.Retention
	if keep == 0 {
		keep = DefaultFlowRetention
	}
	id := opts.ID
	if id != "" {
		if err := checkCallerID("BatchOptions.ID", id, MaxFlowIDLen); err != nil {
			return nil, opErr(op, "", err)
		}
	} else {
		var err error
		if id, err = newTaskID(); err != nil {
			return nil, opErr(op, "", err)
		}
	}
	p := &flowPlan{mode: "batch", flow: id, keep: keep, ext: map[string]*extDep{}, idem: opts.ID != ""}
	var cbs [][2]string
	for _, c := range []struct {
		cb   *Callback
		kind string
	}{{opts.OnSuccess, "success"}, {opts.OnComplete, "complete"}} {
		if c.cb == nil {
			continue
		}
		if c.cb.err != nil {
			return nil, opErr(op, id, within("BatchOptions.On"+map[string]string{"success": "Success", "complete": "Complete"}[c.kind], c.cb.err))
		}
		if c.cb.c.fleet != f {
			return nil, opErr(op, id, fmt.Errorf("%w: a callback's queue is of another Fleet", ErrInvalidArgument))
		}
		tid, err := newTaskID()
		if err != nil {
			return nil, opErr(op, id, err)
		}
		sc := c.cb.c.pick(c.cb.opts.Group)
		policy := "i"
		if c.kind == "success" {
			policy = "s"
		}
		p.tasks = append(p.tasks, &flowTask{c: sc, id: tid, body: c.cb.body(tid, keepFor(sc, keep)), cb: id,
			ready: c.cb.opts.NotBefore, deps: []flowDep{{ref: flowRef(id), policy: policy, from: -1}}})
		cbs = append(cbs, [2]string{refOf(sc, tid), c.kind})
	}
	if len(cbs) > 0 {
		b, _ := json.Marshal(cbs)
		p.cbs = string(b)
	}
	if err := f.submitPlan(ctx, p); err != nil && !errors.Is(err, errFlowExists) {
		return nil, opErr(op, id, err)
	}
	return &Batch{f: f, id: id}, nil
}

// Batch returns the handle of batch id, made by NewBatch in any process.
// It does not touch Redis: a wrong id gives ErrFlowNotFound at the first
// call.
func (f *Fleet) Batch(id string) *Batch { return &Batch{f: f, id: id} }

// ID returns the batch's id.
func (b *Batch) ID() string { return b.id }

// BatchAdd submits payloads to q as tasks of batch b, in one call: all of
// them or none, and only while the batch is open. It returns their ids.
// opts apply to each (not After, DedupKey or UniqueFor). May return
// ErrBatchClosed (nothing is written), ErrFlowNotFound, ErrInvalidPayload,
// ErrInvalidArgument, ErrUnavailable (the outcome is unknown; tasks of an
// add that did not commit are dropped by the sweeper).
func BatchAdd[T any](ctx context.Context, b *Batch, q *Queue[T], payloads []T, opts SubmitOptions) ([]string, error) {
	const op = "batch add"
	if b == nil || b.f == nil || q == nil || q.queueCore == nil {
		return nil, opErr(op, "", fmt.Errorf("%w: BatchAdd needs a batch and a queue", ErrInvalidArgument))
	}
	if err := q.ready(ctx); err != nil {
		return nil, opErr(op, b.id, err)
	}
	switch {
	case q.fleet != b.f:
		return nil, opErr(op, b.id, fmt.Errorf("%w: queue %s is of another Fleet than the batch", ErrInvalidArgument, q.name))
	case len(payloads) > MaxFlowSteps:
		return nil, opErr(op, b.id, fmt.Errorf("%w: %d tasks, more than MaxFlowSteps %d", ErrInvalidArgument, len(payloads), MaxFlowSteps))
	case len(opts.After) > 0:
		return nil, opErr(op, b.id, fmt.Errorf("%w: SubmitOptions.After is not for a batch's task", ErrInvalidArgument))
	case opts.ID != "":
		return nil, opErr(op, b.id, fmt.Errorf("%w: SubmitOptions.ID is not for BatchAdd (one options for many tasks)", ErrInvalidArgument))
	}
	if err := checkFlowID(b.id); err != nil {
		return nil, opErr(op, b.id, err)
	}
	if err := q.checkSubmit(opts); err != nil {
		return nil, opErr(op, b.id, err)
	}
	if err := checkFlowOptions(opts); err != nil {
		return nil, opErr(op, b.id, err)
	}
	if len(payloads) == 0 {
		return nil, nil
	}
	f := b.f
	keep, err := b.state(ctx)
	if err != nil {
		return nil, opErr(op, b.id, err)
	}
	p := &flowPlan{mode: "add", flow: b.id, keep: keep, ext: map[string]*extDep{}}
	ids := make([]string, len(payloads))
	bodies := make([]string, len(payloads))
	for i, pl := range payloads {
		raw, err := q.encodePayload(pl)
		if err != nil {
			return nil, opErr(op, b.id, within("payload "+strconv.Itoa(i), err))
		}
		if ids[i], err = newTaskID(); err != nil {
			return nil, opErr(op, b.id, err)
		}
		bodies[i] = newBody(ids[i], raw, opts)
	}
	done := f.observeSubmit(ctx, q.name, ids, bodies, opts.NotBefore, "")
	if err := q.register(ctx); err != nil {
		done.call(0, err)
		return nil, opErr(op, b.id, err)
	}
	for i := range payloads {
		c := q.pick(opts.Group)
		p.tasks = append(p.tasks, &flowTask{c: c, id: ids[i], body: taskbody.WithTrack(bodies[i], keepFor(c, keep)), flow: b.id, ready: opts.NotBefore})
	}
	if err := f.submitPlan(ctx, p); err != nil {
		done.call(0, err)
		return nil, opErr(op, b.id, err)
	}
	done.call(len(ids), nil)
	return ids, nil
}

// state checks that the batch is open, and returns its retention.
func (b *Batch) state(ctx context.Context) (time.Duration, error) {
	c := b.f.client
	got, err := c.Do(ctx, c.B().Hmget().Key(b.f.keys.Flow(b.id).Record).Field("state", "keep", "kind").Build()).ToArray()
	if err != nil {
		return 0, err
	}
	state, _ := got[0].ToString()
	keepMS, _ := got[1].AsInt64()
	kind, _ := got[2].ToString()
	switch {
	case state == "" || state == "new" || kind != "batch":
		return 0, fmt.Errorf("%w: batch %s", ErrFlowNotFound, b.id)
	case state != string(FlowOpen):
		return 0, fmt.Errorf("%w: batch %s is %s", ErrBatchClosed, b.id, state)
	}
	return time.Duration(keepMS) * time.Millisecond, nil
}

// Close closes the batch: no task can be added any more, and once every
// task ended (at once, when they all did) its callbacks are released, each
// once. May return ErrBatchClosed (closed already, or cancelled: nothing
// changes), ErrFlowNotFound, ErrUnavailable (a Close cut off is finished
// by the sweeper, if it closed the batch).
func (b *Batch) Close(ctx context.Context) error {
	const op = "close batch"
	f := b.f
	if err := f.alive(ctx); err != nil {
		return opErr(op, b.id, err)
	}
	if err := checkFlowID(b.id); err != nil {
		return opErr(op, b.id, err)
	}
	if err := f.flowOp(ctx, "add", b.id); err != nil {
		return opErr(op, b.id, err)
	}
	got, err := flowCloseScript.Exec(ctx, f.client, f.flowKeys(b.id), nil).AsStrSlice()
	if err == nil && len(got) != 3 {
		err = unexpectedReply("close batch", len(got))
	}
	if err != nil {
		return opErr(op, b.id, err)
	}
	switch got[0] {
	case "none":
		err = fmt.Errorf("%w: batch %s", ErrFlowNotFound, b.id)
	case "refused":
		err = fmt.Errorf("%w: batch %s was closed already", ErrBatchClosed, b.id)
	case "done":
		if err = f.completeFlow(ctx, b.id, got[1], got[2]); err != nil {
			return opErr(op, b.id, err) // the sweeper finishes it
		}
	}
	if rerr := f.flowOp(ctx, "rem", b.id); err == nil {
		err = rerr
	}
	return opErr(op, b.id, err)
}

// Status returns the batch's status: its state and the counts of its tasks
// (FlowStatus). May return ErrFlowNotFound, ErrUnavailable.
func (b *Batch) Status(ctx context.Context) (FlowStatus, error) { return b.f.FlowStatus(ctx, b.id) }

// Wait blocks until the batch is done (closed, every task ended, its
// callbacks released) and returns its final status (Fleet.WaitFlow).
func (b *Batch) Wait(ctx context.Context) (FlowStatus, error) { return b.f.WaitFlow(ctx, b.id) }

// Cancel cancels the batch's tasks that have not ended (CancelFlow); its
// OnComplete callback runs once every task ended.
func (b *Batch) Cancel(ctx context.Context) error { return b.f.CancelFlow(ctx, b.id) }

// BatchStatus returns, in a batch's callback, the status of the batch it
// ran for: its counts as they were when the batch was done. It returns
// false for a task that is no batch's callback. May return ErrUnavailable.
func (r *reservation) BatchStatus(ctx context.Context) (FlowStatus, bool, error) {
	deps, err := r.Dependencies(ctx)
	if err != nil {
		return FlowStatus{}, false, err
	}
	for _, d := range deps {
		if d.Queue == "" {
			var st FlowStatus
			if err := json.Unmarshal(d.Result, &st); err != nil && d.Status == TaskDone {
				return st, false, opErr("batch status", r.core.name, fmt.Errorf("%w: %w", ErrDecode, err))
			}
			st.ID = d.ID
			st.Pending = max(st.Total-st.Succeeded-st.Failed-st.Canceled, 0)
			return st, true, nil
		}
	}
	return FlowStatus{}, false, nil
}
