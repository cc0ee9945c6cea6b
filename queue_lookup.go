package fleet

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/redis/rueidis"

	"github.com/fleet-go/fleet/internal/keys"
	"github.com/fleet-go/fleet/internal/script"
)

var queueLookupScript = newScript("queue_lookup.lua", script.ReadOnly)

// TaskRecord is what Lookup found of a task.
type TaskRecord struct {
	// ID is the task's id.
	ID string `json:"id"`
	// Status is where the task is.
	Status TaskStatus `json:"status"`
	// Payload is the task's payload as stored (JSON); empty for a done
	// task, whose body is gone.
	Payload json.RawMessage `json:"payload,omitempty"`
	// Attempts counts the failed runs so far.
	Attempts int `json:"attempts"`
	// LastError is the error of the last failed run, if any.
	LastError string `json:"last_error,omitempty"`
	// Worker is the worker ("type|id") that holds an active task's lease,
	// or that acked a done one; empty when the task was reserved by a
	// Reserve of your own, or by a client of the documented schema.
	Worker string `json:"worker,omitempty"`
	// Deadline is an active task's lease deadline (server clock).
	Deadline time.Time `json:"deadline,omitzero"`
	// CancelRequested says that Queue.Cancel asked an active task to stop
	// and its worker has not ended it yet.
	CancelRequested bool `json:"cancel_requested,omitempty"`
	// ReadyAt is when a scheduled task becomes ready.
	ReadyAt time.Time `json:"ready_at,omitzero"`
	// SubmittedAt is when the task was submitted, read from its id (a
	// UUIDv7, to the millisecond); zero for an id fleet did not make.
	SubmittedAt time.Time `json:"submitted_at,omitzero"`
	// DoneAt is when a done task was acked (server clock).
	DoneAt time.Time `json:"done_at,omitzero"`
	// DeadAt is when a dead or canceled task died (server clock).
	DeadAt time.Time `json:"dead_at,omitzero"`
	// Result is a done task's result (JSON); "null" when none was set.
	Result json.RawMessage `json:"result,omitempty"`
	// Metadata, Priority, Group and ExpiresAt are the task's options
	// (SubmitOptions), while its body is known (not for a done task).
	Metadata  map[string]string `json:"metadata,omitempty"`
	Priority  int               `json:"priority,omitempty"`
	Group     string            `json:"group,omitempty"`
	ExpiresAt time.Time         `json:"expires_at,omitzero"`
	// DedupKey is the task's SubmitOptions.DedupKey, while its body is
	// known: the key that a Replace or Debounce submit names it by.
	DedupKey string `json:"dedup_key,omitempty"`
	// Debounce is the SubmitOptions.Debounce of the submit that last
	// wrote a pending or scheduled task's body, nil for none; DebounceUntil
	// is the latest it starts: its first submit (SubmittedAt) plus the
	// max wait. The window runs from the last submit: a scheduled task's
	// ReadyAt is when it starts if no submit comes before.
	Debounce      *Debounce `json:"debounce,omitempty"`
	DebounceUntil time.Time `json:"debounce_until,omitzero"`
	// Progress is an active task's last progress value (Task.Progress,
	// JSON) stored by the reservation that holds it now; empty for none.
	Progress json.RawMessage `json:"progress,omitempty"`
	// Flow is the flow or batch of a waiting task, "" for none.
	Flow string `json:"flow,omitempty"`
	// Dependencies are what a waiting task waits for, and how those that
	// ended ended (Status TaskWaiting for the others; no results).
	Dependencies []DependencyState `json:"dependencies,omitempty"`
	// Logs are the task's per-run logs (Logger), oldest first, while they
	// are kept (QueueOptions.Logs): Lookup reads them; the lists and
	// FindByMeta leave them out.
	Logs []TaskLog `json:"logs,omitempty"`
	// Steps are a durable task's recorded steps and sleeps (Step, Sleep),
	// in order, while they are kept (as its logs are): Lookup reads them;
	// the lists and FindByMeta leave them out.
	Steps []StepRecord `json:"steps,omitempty"`
}

// Lookup finds task id of the queue and returns its record: pending,
// scheduled, active (with the worker and the lease's deadline), dead or
// canceled (while its dead letter is kept), or done (while its record is
// retained, see QueueOptions.Retention), with its logs (Logger) and
// durable steps (Step). It reads
// the queue in one read-only script, O(N) in the tasks waiting and dead,
// then the task's log and steps: a call for operators and status pages, not for
// every task. May return
// ErrTaskNotFound, ErrInvalidArgument (an empty id), ErrUnavailable.
func (q *queueCore) Lookup(ctx context.Context, id string) (TaskRecord, error) {
	const op = "lookup"
	r := TaskRecord{ID: id}
	if err := q.ready(ctx); err != nil {
		return r, opErr(op, q.name, err)
	}
	if id == "" || len(id) > 1024 {
		return r, opErr(op, q.name, fmt.Errorf("%w: task id of %d bytes", ErrInvalidArgument, len(id)))
	}
	// A sharded queue: every shard is asked at once (internal/engine/shard.go), and
	// the shard that holds the task answers.
	shards := q.shardsOf(ctx)
	execs := make([]rueidis.LuaExec, len(shards))
	for i, s := range shards {
		execs[i] = rueidis.LuaExec{Keys: s.keys(s.key.Result + id), Args: []string{id}}
	}
	var res []string
	at := 0
	for i, rr := range queueLookupScript.ExecMulti(ctx, q.fleet.client, execs...) {
		got, err := rr.AsStrSlice()
		if err != nil {
			return r, opErr(op, q.name, err)
		}
		if len(got) > 0 && got[0] != "none" && (len(res) == 0 || res[0] == "none") {
			res, at = got, i
		}
	}
	if len(res) == 0 || res[0] == "none" {
		return r, opErr(op, q.name, fmt.Errorf("%w: %s", ErrTaskNotFound, id))
	}
	r = q.record(id, res)
	// Its log and steps, in the shard that holds it: a second round trip.
	logs, steps, err := q.readOwn(ctx, shards[at].key, id)
	if err != nil {
		return r, opErr(op, q.name, err)
	}
	r.Logs, r.Steps = logs, steps
	return r, nil
}

// record reads queue_lookup.lua's answer res for task id of q (recordOf),
// its sealed values opened where this process can.
func (q *queueCore) record(id string, res []string) TaskRecord {
	r := recordOf(id, res)
	q.fleet.openRecord(q.name, &r)
	return r
}

// recordOf reads queue_lookup.lua's answer res (not 'none') for task id.
func recordOf(id string, res []string) TaskRecord {
	r := TaskRecord{ID: id}
	if u, err := uuid.Parse(id); err == nil && u.Version() == 7 {
		sec, nsec := u.Time().UnixTime()
		r.SubmittedAt = time.Unix(sec, nsec)
	}
	r.Status = TaskStatus(res[0])
	var body struct {
		Payload  json.RawMessage   `json:"payload"`
		Attempts int               `json:"attempts"`
		Error    string            `json:"error"`
		DeadAt   float64           `json:"dead_at"`
		Result   json.RawMessage   `json:"result"`
		DoneAt   float64           `json:"done_at"`
		Worker   string            `json:"worker"`
		Meta     map[string]string `json:"meta"`
		Priority int               `json:"priority"`
		Group    string            `json:"group"`
		Expires  float64           `json:"expires_at"`
		Status   string            `json:"status"`
		Dedup    string            `json:"dedup"`
		DebMS    int64             `json:"debounce_ms"`
		DebMaxMS int64             `json:"debounce_max_ms"`
	}
	if len(res) > 1 {
		_ = json.Unmarshal([]byte(res[1]), &body) // a body of another client may hold anything
	}
	r.Payload, r.Attempts, r.LastError = body.Payload, body.Attempts, body.Error
	r.Metadata, r.Priority, r.Group, r.ExpiresAt = body.Meta, body.Priority, body.Group, floatTime(body.Expires)
	r.DedupKey = body.Dedup
	if body.DebMS > 0 && (r.Status == TaskPending || r.Status == TaskScheduled) {
		r.Debounce = &Debounce{Window: time.Duration(body.DebMS) * time.Millisecond, MaxWait: time.Duration(body.DebMaxMS) * time.Millisecond}
		if !r.SubmittedAt.IsZero() {
			r.DebounceUntil = r.SubmittedAt.Add(r.Debounce.MaxWait)
		}
	}
	switch r.Status {
	case TaskActive:
		if len(res) > 3 {
			tok, worker, canceled := parseLeaseEntry(res[2])
			r.Worker, r.CancelRequested = worker, canceled
			r.Deadline = scoreTime(res[3])
			// A progress value shows while its reservation holds the task.
			if len(res) > 4 && tok != "" {
				if v, ok := strings.CutPrefix(res[4], tok+" "); ok {
					r.Progress = json.RawMessage(v)
				}
			}
		}
	case TaskWaiting:
		if len(res) > 2 {
			r.Flow = res[2]
		}
		for i := 3; i+1 < len(res); i += 2 {
			d := DependencyState{Policy: FailDependent, Status: TaskWaiting}
			if id, ok := strings.CutPrefix(res[i], ":f "); ok {
				d.ID = id
			} else if name, _, id, ok := parseRef(res[i]); ok {
				d.Queue, d.ID = name, id
			}
			if v := res[i+1]; v != "" {
				if v[0] == 'i' {
					d.Policy = IgnoreFailure
				}
				if len(v) > 1 {
					d.Status = outcomeStatus(v[1:])
				}
			}
			r.Dependencies = append(r.Dependencies, d)
		}
		slices.SortFunc(r.Dependencies, func(a, b DependencyState) int {
			return cmp.Or(strings.Compare(a.Queue, b.Queue), strings.Compare(a.ID, b.ID))
		})
	case TaskScheduled:
		if len(res) > 2 {
			r.ReadyAt = scoreTime(res[2])
		}
	case TaskDone:
		r.Payload, r.Result, r.Worker, r.DoneAt = nil, body.Result, body.Worker, floatTime(body.DoneAt)
		switch body.Status {
		case string(TaskDead), string(TaskCanceled):
			// A tracked task's end that was not a success (docs/FLOWS.md).
			r.Status, r.Result, r.DeadAt, r.DoneAt = TaskStatus(body.Status), nil, r.DoneAt, time.Time{}
		}
	case TaskDead:
		r.DeadAt = floatTime(body.DeadAt)
		if strings.HasPrefix(body.Error, ErrCanceled.Error()) {
			r.Status = TaskCanceled
		}
	}
	return r
}

func scoreTime(s string) time.Time {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return time.Time{}
	}
	return floatTime(f)
}

func floatTime(f float64) time.Time {
	if f <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(int64(f*1000 + 0.5))
}

// ResultOf returns the result of task id of q, decoded into R: the task
// must be done with its end recorded (QueueOptions.Retention, or a tracked
// task: SubmitOptions.Track, After, a Flow, a Batch). With Await it waits
// for the task to end (Queue.Wait). Called in the handler of a task that
// waited for id (SubmitOptions.After, a Flow's edge), with the ctx the
// worker gave the handler, it reads the result the task's own record
// keeps for it, however long ago the dependency ended (and answers
// ErrDependencyFailed for a dependency that failed, under IgnoreFailure).
// May return ErrTaskNotFound (unknown, expired, or not done yet: Lookup
// says which), ErrTaskFailed and ErrCanceled (with Await: the task did not
// succeed), ErrDecode (the result does not decode into R), ErrUnavailable.
func ResultOf[R, T any](ctx context.Context, q *Queue[T], id string, opts ...ResultOption) (R, error) {
	var r R
	var o resultOptions
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	if q == nil || q.queueCore == nil {
		return r, opErr("result", "", fmt.Errorf("%w: ResultOf needs a queue", ErrInvalidArgument))
	}
	var raw []byte
	res, found, err := dependencyResult(ctx, q.name, id)
	if err != nil {
		return r, opErr("result", q.name, err)
	}
	if found {
		raw = res
	}
	if raw == nil {
		var rec TaskRecord
		var err error
		if o.wait {
			rec, err = q.Wait(ctx, id)
		} else {
			rec, err = q.Lookup(ctx, id)
		}
		if err != nil {
			return r, err
		}
		if rec.Status != TaskDone {
			return r, opErr("result", q.name, fmt.Errorf("%w: task %s is %s, not done", ErrTaskNotFound, id, rec.Status))
		}
		raw = rec.Result
	}
	raw, err = open(q.opts.Sealer, q.name, sealResult, raw)
	if err != nil {
		return r, opErr("result", q.name, fmt.Errorf("result of task %s: %w", id, err))
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		return r, opErr("result", q.name, fmt.Errorf("%w: result of task %s into %T: %w", ErrDecode, id, r, err))
	}
	return r, nil
}

// openRecord opens what r, a record of queue, holds sealed, where this
// process can (shown).
func (f *Fleet) openRecord(queue string, r *TaskRecord) {
	r.Payload = f.shown(queue, sealPayload, r.Payload)
	r.Result = f.shown(queue, sealResult, r.Result)
	r.Progress = f.shown(queue, sealProgress, r.Progress)
}

// readOwn reads what task id keeps of its own in shard k: its log
// (LRANGE), its entries opened where this process can, and its durable
// steps (HGETALL; step.go), in one round trip.
func (q *queueCore) readOwn(ctx context.Context, k keys.Queue, id string) ([]TaskLog, []StepRecord, error) {
	c := q.fleet.client
	rs := c.DoMulti(ctx, c.B().Lrange().Key(k.Log+id).Start(0).Stop(-1).Build(), c.B().Hgetall().Key(k.Steps+id).Build())
	raw, err := rs[0].AsStrSlice()
	if err != nil {
		return nil, nil, err
	}
	steps, err := rs[1].AsStrMap()
	if err != nil {
		return nil, nil, err
	}
	var out []TaskLog
	for _, e := range raw {
		out = append(out, q.fleet.logEntry(q.name, []byte(e)))
	}
	var recs []StepRecord
	if len(steps) > 0 {
		recs = q.fleet.stepRecords(q.name, steps)
	}
	return out, recs, nil
}
