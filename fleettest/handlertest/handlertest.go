// Package handlertest runs a batch handler once, as a worker would, for a
// handler's unit test: Run submits the payload to a queue of its own,
// runs the handler on it through the worker's own path (the payload's
// codec and validation, the middleware, the lease kept alive, the
// timeouts, the ends), and returns the Outcome: acked, nacked with its
// error and next retry, dead-lettered, snoozed, released, and what the run
// left (its result, its progress values, its emitted outputs). It then
// deletes every key it wrote, so a run leaves nothing in Redis.
//
// Run needs a Redis, the Fleet's: fleet's leases, results and ends are
// scripts on the server, and Run runs the real ones rather than a fake.
// Any Redis fleet runs on will do (a single node, a Redis Cluster, a
// sentinel's master). A test gets one from the parent package:
// fleettest.Start (FLEET_REDIS_URL, else a redis-server from PATH, else
// Docker), or fleettest.StartServer and StartCluster (redis-server and
// redis-cli on PATH: apt-get install -y redis-server).
//
// It is a package of its own, not a part of fleettest, because fleet's own
// tests use fleettest for their servers: were fleettest to import fleet,
// fleet's internal tests (package fleet) could not import it.
package handlertest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/internal/runone"
)

// Kind is how a run of a task ended.
type Kind string

// The kinds of Outcome.
const (
	// Acked: the handler returned nil and the task was acked (done).
	Acked Kind = "acked"
	// Nacked: the handler failed (an error, a panic, a TaskTimeout) and
	// the task is due again at Outcome.RetryAt, an attempt counted.
	Nacked Kind = "nacked"
	// DeadLettered: the task went to the dead letters, with
	// Outcome.Reason: its handler's error wraps fleet.ErrPermanent, or it
	// failed its last attempt (QueueOptions.MaxAttempts).
	DeadLettered Kind = "dead-lettered"
	// Snoozed: the handler returned fleet.RateLimited(d), and the task is
	// due again at Outcome.RetryAt, no attempt counted.
	Snoozed Kind = "snoozed"
	// Released: the run was interrupted, not failed, and the task went
	// back to its queue uncounted: its lease could no longer be proven
	// (Outcome.Err wraps fleet.ErrLeaseLost), or Run's ctx ended while the
	// handler ran (as a worker's hard stop).
	Released Kind = "released"
	// Canceled: Queue.Cancel asked the task to stop while it ran; it went
	// to the dead letters as cancelled.
	Canceled Kind = "canceled"
)

// Outcome is how one run of a handler ended and what it left. More of
// what a run leaves (such as a task's log lines) will come as fields of
// their own.
type Outcome struct {
	// Kind is how the run ended.
	Kind Kind
	// TaskID is the id of the task that ran.
	TaskID string
	// Err is what a worker's WorkerOptions.OnTaskEnd is told: nil when the
	// task was acked, else the handler's error (a *fleet.PanicError for a
	// panic; wrapping fleet.ErrTaskTimeout past a timeout), or why the run
	// was interrupted (fleet.ErrLeaseLost, ctx's error).
	Err error
	// Attempts counts the task's failed runs after this one: 1 after a
	// first nack, 0 after an ack, a snooze or a release.
	Attempts int
	// RetryAt is when the task is due again (server clock), for Nacked and
	// Snoozed; zero for a task due at once.
	RetryAt time.Time
	// Reason is the dead letter's reason, for DeadLettered and Canceled.
	Reason string
	// Result is the result the handler set (Task.SetResult), as JSON, for
	// Acked; "null" when it set none. See ResultAs.
	Result json.RawMessage
	// Progress are the progress values the run stored (Task.Progress, or a
	// middleware's TaskInfo.Progress), as JSON, in order.
	Progress []json.RawMessage
	// Emitted are the outputs the handler emitted (Slot.Emit), as JSON, in
	// order.
	Emitted []json.RawMessage
	// Logs are the lines the handler gave the task's logger (fleet.Logger,
	// Task.Logger), in order, within the queue's bounds
	// (QueueOptions.Logs), whatever the outcome.
	Logs []fleet.LogLine
	// Duration is how long the run took, from the handler's start to the
	// end's reply.
	Duration time.Duration
}

// Options configures Run. The zero value runs with fleet's defaults.
type Options struct {
	// Queue are the options of Run's queue (Lease, MaxAttempts, Backoff,
	// Validate...). Retention defaults to one hour (rather than none) so
	// that Outcome.Result can be read; the queue is deleted after the run.
	Queue fleet.QueueOptions
	// Submit are the task's options (Metadata, Timeout...). Submit.NotBefore
	// and tracking (After, Track) are refused: the task runs at once, on
	// its own.
	Submit fleet.SubmitOptions
	// Worker are the worker's options (Middleware, TaskTimeout,
	// LeaseExtend, Config, OnTaskEnd...). Type and ID are Run's own (the
	// queue's name and "handlertest"): set, they are refused.
	Worker fleet.WorkerOptions
}

// Run submits payload to a queue of its own on f and runs it once with a,
// as a batch worker's slot runs a task: the payload decoded and validated
// as a worker decodes it, under the task's lease kept alive, through
// opts.Worker.Middleware, with the task's timeouts, and ended as the
// worker ends it (ack, nack, dead letter, snooze, release). It returns how
// the run ended and what it left, then deletes the queue, the worker's
// keys and its output stream: nothing of the run stays in Redis, and no
// goroutine of it outlives the call.
//
// The run is a worker's in every way but these: nothing registers the
// worker (no heartbeat, no config watcher: the slot's config is
// opts.Worker.Config, decoded and validated as a first Start does), no
// other task is taken after the ack, and a Queue.Cancel reaches the
// handler only at its next lease extension. When ctx ends while the
// handler runs, its ctx ends too and the task is released, as a worker's
// hard stop releases it.
//
// A handler's failure is an Outcome, not an error. Run's error is for a
// run that could not be made: ErrInvalidArgument (a nil ctx, Fleet or
// handler, refused options), ErrInvalidPayload (payload fails the queue's
// validation, as Submit says), fleet.ErrInvalidConfig (opts.Worker.Config
// does not decode into C or fails its validation), ErrUnavailable,
// ErrClosed.
func Run[C, O, P any](ctx context.Context, f *fleet.Fleet, a fleet.BatchAutomation[C, O, P], payload P, opts Options) (*Outcome, error) {
	switch {
	case ctx == nil:
		return nil, fmt.Errorf("%w: handlertest.Run needs a ctx", fleet.ErrInvalidArgument)
	case f == nil:
		return nil, fmt.Errorf("%w: handlertest.Run needs a Fleet", fleet.ErrInvalidArgument)
	case isNil(a):
		return nil, fmt.Errorf("%w: handlertest.Run needs a handler", fleet.ErrInvalidArgument)
	case opts.Worker.Type != "" || opts.Worker.ID != "":
		return nil, fmt.Errorf("%w: handlertest.Run names the worker: leave Options.Worker.Type and ID empty", fleet.ErrInvalidArgument)
	case !opts.Submit.NotBefore.IsZero():
		return nil, fmt.Errorf("%w: handlertest.Run runs the task at once: leave Options.Submit.NotBefore zero", fleet.ErrInvalidArgument)
	case len(opts.Submit.After) > 0 || opts.Submit.Track:
		return nil, fmt.Errorf("%w: handlertest.Run runs a task on its own: leave Options.Submit.After and Track unset", fleet.ErrInvalidArgument)
	}
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	name := "handlertest-" + hex.EncodeToString(rnd[:])
	qopts := opts.Queue
	if qopts.Retention == 0 {
		qopts.Retention = time.Hour
	}
	q := fleet.NewQueue[P](f, name, qopts)
	if err := q.Err(); err != nil {
		return nil, err
	}
	wopts := opts.Worker
	wopts.Type, wopts.ID = name, "handlertest"
	w := fleet.NewBatchWorker(f, wopts, q, a)
	if err := w.Err(); err != nil {
		return nil, err
	}
	// Whatever happens, the queue goes: on a ctx of its own, since ctx may
	// have ended (a released run).
	bg, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	out, err := run(ctx, bg, f, q, w, payload, opts.Submit)
	if derr := runone.Drop(bg, f, name, w); derr != nil && err == nil {
		err = fmt.Errorf("handlertest: delete queue %s: %w", name, derr)
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

// run is Run once its arguments are checked; bg is for what follows the
// handler (ctx may have ended).
func run[P any](ctx, bg context.Context, f *fleet.Fleet, q *fleet.Queue[P], w *fleet.Worker, payload P, sub fleet.SubmitOptions) (*Outcome, error) {
	if _, err := q.SubmitWith(ctx, payload, sub); err != nil {
		return nil, err
	}
	rep, err := runone.Run(ctx, w)
	if err != nil {
		return nil, err
	}
	out := &Outcome{TaskID: rep.TaskID, Err: rep.End, Duration: rep.Duration}
	for _, p := range rep.Progress {
		out.Progress = append(out.Progress, json.RawMessage(p))
	}
	out.Logs, _ = rep.Logs.([]fleet.LogLine)
	rec, err := q.Lookup(bg, rep.TaskID)
	if err != nil {
		return nil, err
	}
	out.Attempts = rec.Attempts
	switch rec.Status {
	case fleet.TaskDone:
		out.Kind, out.Result = Acked, rec.Result
	case fleet.TaskDead:
		out.Kind, out.Reason = DeadLettered, rec.LastError
	case fleet.TaskCanceled:
		out.Kind, out.Reason = Canceled, rec.LastError
	case fleet.TaskScheduled, fleet.TaskPending:
		// An attempt counted is a nack; none, a snooze (due later) or a
		// release (back at the head of the queue).
		switch {
		case rec.Attempts > 0:
			out.Kind = Nacked
		case rec.Status == fleet.TaskScheduled || errors.Is(rep.End, fleet.ErrRateLimited):
			out.Kind = Snoozed
		default:
			out.Kind = Released
		}
		out.RetryAt = rec.ReadyAt
	default:
		return nil, fmt.Errorf("handlertest: task %s is %s after its run (%v)", rep.TaskID, rec.Status, rep.End)
	}
	// The outputs: what Slot.Emit pushed to the worker's stream, all of it
	// (the stream is the run's own).
	s := fleet.NewStream[json.RawMessage](f, w.Type(), fleet.StreamOptions{})
	n, err := s.Len(bg)
	if err != nil {
		return nil, err
	}
	if n > 0 {
		es, err := s.Pop(bg, int(n))
		if err != nil {
			return nil, err
		}
		for _, e := range es {
			out.Emitted = append(out.Emitted, e.Data)
		}
	}
	return out, nil
}

// ResultAs decodes o's Result into R. May return fleet.ErrInvalidArgument
// (o is nil, or not Acked) and fleet.ErrDecode (the result does not decode
// into R).
func ResultAs[R any](o *Outcome) (R, error) {
	var r R
	if o == nil || o.Kind != Acked {
		return r, fmt.Errorf("%w: only an acked run has a result", fleet.ErrInvalidArgument)
	}
	if err := json.Unmarshal(o.Result, &r); err != nil {
		return r, fmt.Errorf("%w: result of task %s into %T: %w", fleet.ErrDecode, o.TaskID, r, err)
	}
	return r, nil
}

// isNil says whether a is nil, or a nil func, pointer, map, slice,
// channel or interface in a non-nil interface (a BatchFunc(nil)).
func isNil(a any) bool {
	if a == nil {
		return true
	}
	switch v := reflect.ValueOf(a); v.Kind() {
	case reflect.Func, reflect.Pointer, reflect.Map, reflect.Slice, reflect.Chan, reflect.Interface:
		return v.IsNil()
	}
	return false
}
