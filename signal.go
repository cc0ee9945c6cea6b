package fleet

// Signals: a value sent to a durable task by name from any process
// (Queue.Signal), and a step that waits for it, parked like a sleep
// (WaitSignal). Both live in the task's steps hash (step.go): the signal
// in a field of its own until the wait takes it (scripts/queue_signal.lua,
// scripts/queue_step.lua), so that a signal sent before the wait is kept,
// and the wait's record and the task's snooze see a signal that came
// between them (queue_end.lua: no lost wake-up). docs/DURABLE.md.

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/rueidis"
)

var queueSignalScript = newScript("queue_signal.lua")

// signalKeep is how long a signal sent before its wait is kept at least
// (longer when the queue keeps dead letters or records longer).
const signalKeep = 7 * 24 * time.Hour

// Signal sends the signal name, with value v (JSON, at most MaxStepBytes;
// sealed on a queue that seals), to task id of q, for its handler's
// WaitSignal(ctx, t, name, ...) to return. A task parked waiting for it is
// made ready at once; one that has not reached its wait yet (running,
// pending, scheduled, sleeping, waiting for other signals or for its
// dependencies) keeps it until it does (at least 7 days, or
// QueueOptions.DeadMaxAge or Retention when longer). Each name is
// delivered to a task once: a second Signal of a name is ErrSignalSent
// (as is one whose wait timed out), and nothing changes.
//
// A task that is running or parked is found at once; a pending or
// scheduled one is looked for as Lookup does (O(N) in the tasks waiting).
// May return ErrTaskNotFound (no such task; an ended task that kept no
// record), ErrTaskFinished (it ended: its record is kept, or it is a dead
// letter), ErrSignalSent, ErrInvalidArgument (an empty id, a bad name, a
// value that does not encode or is too large), ErrUnavailable. A Signal
// whose reply was lost may be sent again: the second says ErrSignalSent.
func (q *queueCore) Signal(ctx context.Context, id, name string, v any) error {
	const op = "signal"
	if err := q.ready(ctx); err != nil {
		return opErr(op, q.name, err)
	}
	if id == "" || len(id) > 1024 {
		return opErr(op, q.name, fmt.Errorf("%w: task id of %d bytes", ErrInvalidArgument, len(id)))
	}
	if err := checkStepName(name); err != nil {
		return opErr(op, q.name, err)
	}
	b, err := json.Marshal(v)
	switch {
	case err != nil:
		return opErr(op, q.name, fmt.Errorf("%w: signal %q: its value does not encode as JSON: %w", ErrInvalidArgument, name, err))
	case len(b) > MaxStepBytes:
		return opErr(op, q.name, fmt.Errorf("%w: signal %q: its value is %d bytes of JSON, more than MaxStepBytes %d", ErrInvalidArgument, name, len(b), MaxStepBytes))
	}
	if b, err = seal(q.opts.Sealer, q.name, sealStep, b); err != nil {
		return opErr(op, q.name, err)
	}
	keep := strconv.FormatInt(max(signalKeep, q.opts.DeadMaxAge, q.opts.Retention).Milliseconds(), 10)
	// A sharded queue: every shard is asked at once, and only the one
	// that holds the task writes.
	shards := q.shardsOf(ctx)
	execs := make([]rueidis.LuaExec, len(shards))
	for i, s := range shards {
		execs[i] = rueidis.LuaExec{Keys: s.keys(s.key.Result + id), Args: []string{id, name, string(b), keep, ""}}
	}
	res := []string{"none"}
	for i, rr := range queueSignalScript.ExecMulti(ctx, q.fleet.client, execs...) {
		got, err := rr.AsStrSlice()
		if err != nil {
			return opErr(op, q.name, err)
		}
		if len(got) > 0 && got[0] != "none" {
			res = got
		}
		if len(got) > 0 && got[0] == "woken" {
			shards[i].wakeLocal() // this process's reserves take it at once
		}
	}
	switch res[0] {
	case "woken", "kept":
		return nil
	case "sent":
		why := "already sent"
		switch {
		case len(res) > 1 && res[1] == "d":
			why = "already delivered"
		case len(res) > 1 && res[1] == "t":
			why = "its wait timed out"
		}
		return opErr(op, q.name, fmt.Errorf("%w: task %s: signal %q: %s", ErrSignalSent, id, name, why))
	case "finished":
		return opErr(op, q.name, fmt.Errorf("%w: task %s", ErrTaskFinished, id))
	}
	return opErr(op, q.name, fmt.Errorf("%w: %s", ErrTaskNotFound, id))
}

// WaitSignal waits, as a step of task t named after the signal, for the
// signal name (Queue.Signal), and returns its value. A signal already
// sent (before the wait, or while the task was parked) is returned at
// once. Else the wait is recorded and WaitSignal returns a *SleepError
// (ErrSuspended) with Signal set, which the handler returns: the worker
// parks the task, holding no slot, lease or goroutine, until the signal
// comes (it is made ready at once) or timeout passes (it runs again, and
// WaitSignal returns ErrWaitTimeout, which is ErrPermanent). The task
// runs from the top each time, its recorded steps returned without
// running; the signal's value and a timeout are recorded as the step's
// result, so every later run returns the same.
//
// The rules of Step hold: name is the step's name (1 to 200 bytes of
// UTF-8, the same place in every run), and a task has one wait per name.
// A value that does not decode into V is ErrInvalidArgument (and
// ErrPermanent); it stays recorded (Lookup shows it). timeout must be > 0.
func WaitSignal[V any](ctx context.Context, t Durable, name string, timeout time.Duration) (V, error) {
	var zero V
	r, err := checkStep(t, name)
	if err != nil {
		return zero, err
	}
	raw, err := r.wait(ctx, "wait", name, timeout, name)
	if err != nil {
		return zero, err
	}
	return signalValue[V](r, name, raw)
}

// wait is a wait step named name of r (WaitSignal, AwaitChildren) for the
// signals names (mode "wait": one, whose value is the result; "all": the
// array of their values): the recorded result once taken, ErrWaitTimeout
// once timed out, or a *SleepError while it waits.
func (r *reservation) wait(ctx context.Context, mode, name string, timeout time.Duration, names ...string) (json.RawMessage, error) {
	q := r.core
	if timeout <= 0 {
		return nil, opErr("wait", q.name, fmt.Errorf("%w: wait %q: timeout %v must be > 0", ErrInvalidArgument, name, timeout))
	}
	s, err := r.stepsOf(ctx)
	if err != nil {
		return nil, opErr("wait", q.name, err)
	}
	rec, ok, i, err := s.place(r.id(), name, StepWaiting)
	if err != nil {
		return nil, opErr("wait", q.name, err)
	}
	switch {
	case ok && rec.S == StepSignaled:
		return rec.R, nil
	case ok && rec.S == StepTimedOut:
		return nil, opErr("wait", q.name, timedOut(r.id(), name, rec.W))
	}
	now := time.Now()
	if !ok {
		rec = stepRec{I: i, S: StepWaiting, At: now.UnixMilli(), W: now.Add(timeout).UnixMilli()}
	}
	waiting, _ := json.Marshal(rec)
	taken, _ := json.Marshal(stepRec{I: i, S: StepSignaled, At: now.UnixMilli(), W: rec.W})
	prefix := string(taken[:len(taken)-1]) + `,"r":`
	var late string
	if !now.Before(time.UnixMilli(rec.W)) {
		b, _ := json.Marshal(stepRec{I: i, S: StepTimedOut, At: now.UnixMilli(), W: rec.W})
		late = string(b)
	}
	s.mu.Lock()
	mark := !s.marked
	s.mu.Unlock()
	r.r.MarkLogged() // before the write: the ack must delete or keep the steps
	ttl := max(time.Until(time.UnixMilli(rec.W))+time.Hour, q.opts.DeadMaxAge, q.opts.Retention, r.r.Retention())
	args := append([]string{r.id(), r.r.Token(), name, string(waiting),
		strconv.FormatInt(max(ttl.Milliseconds(), 1), 10), flag(mark), mode, prefix, late}, names...)
	raw, err := queueStepScript.Exec(ctx, q.fleet.client, q.keys(), args).ToArray()
	if err == nil {
		err = stepCode(raw, r.id())
	}
	if err != nil {
		return nil, opErr("wait", q.name, err)
	}
	got := ""
	if len(raw) > 1 {
		got, _ = raw[1].ToString()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.marked = true
	s.names[i] = name
	switch got {
	case "signal":
		v, _ := raw[2].ToString()
		s.recs[name] = stepRec{I: i, S: StepSignaled, At: now.UnixMilli(), W: rec.W, R: json.RawMessage(v)}
		return json.RawMessage(v), nil
	case "timeout":
		s.recs[name] = stepRec{I: i, S: StepTimedOut, At: now.UnixMilli(), W: rec.W}
		return nil, opErr("wait", q.name, timedOut(r.id(), name, rec.W))
	}
	s.recs[name] = rec
	se := &SleepError{Name: name, Until: time.UnixMilli(rec.W)}
	if mode == "wait" {
		se.Signal = names[0]
	}
	return nil, se
}

// signalValue decodes a signal's recorded value (opened on a queue that
// seals) into V.
func signalValue[V any](r *reservation, name string, raw json.RawMessage) (V, error) {
	var v V
	b, err := open(r.core.opts.Sealer, r.core.name, sealStep, raw)
	if err == nil {
		err = json.Unmarshal(b, &v)
	}
	if err != nil {
		var zero V
		return zero, opErr("wait", r.core.name, fmt.Errorf("%w: task %s: signal %q: its value does not decode into %T: %w (%w)", ErrInvalidArgument, r.id(), name, v, err, ErrPermanent))
	}
	return v, nil
}

func timedOut(id, name string, wake int64) error {
	return fmt.Errorf("%w: task %s: wait %q ended at %s", ErrWaitTimeout, id, name, time.UnixMilli(wake).UTC().Format(time.RFC3339Nano))
}
