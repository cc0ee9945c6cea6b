package fleet

// Durable tasks: steps that are recorded once and not run again, and
// sleeps that hold no slot (docs/DURABLE.md). A task's steps live in
// fleet:queue:<name>:steps:<id>, in its queue's slot, written only by the
// holder of its lease (scripts/queue_step.lua).

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/redis/rueidis"

	"github.com/fleet-go/fleet/internal/engine"
)

// MaxStepBytes bounds a step's result as JSON (Step): a larger one is
// refused with ErrInvalidArgument (and ErrPermanent), and nothing is
// recorded.
const MaxStepBytes = 64 << 10

// MaxSteps bounds the steps and sleeps that one task records.
const MaxSteps = 1000

// maxStepName bounds a step's name, in bytes.
const maxStepName = 200

var queueStepScript = newScript("queue_step.lua")

// Durable is a reserved task that Step and Sleep record for: any *Task[T]
// (a handler's task, or one of your own Reserve).
type Durable interface {
	durable() *reservation
}

func (r *reservation) durable() *reservation { return r }

// StepState is where a recorded step stands.
type StepState string

// The states of a recorded step.
const (
	// StepDone: the step's fn returned; its result is recorded and later
	// runs of the task return it without running fn.
	StepDone StepState = "done"
	// StepFailed: the step's fn returned an error in its last run; the
	// next run of the task runs it again.
	StepFailed StepState = "failed"
	// StepSleep: a Sleep (or SleepUntil) of the task; Wake says until
	// when.
	StepSleep StepState = "sleep"
	// StepWaiting: a WaitSignal waiting for its signal (the step's name);
	// Wake says until when.
	StepWaiting StepState = "wait"
	// StepSignaled: a WaitSignal that got its signal; Result is its value.
	StepSignaled StepState = "signaled"
	// StepTimedOut: a WaitSignal whose timeout passed before the signal.
	StepTimedOut StepState = "timeout"
)

// StepRecord is one recorded step of a durable task, as Lookup
// (TaskRecord.Steps), fleetctl task get and the dashboard show it.
type StepRecord struct {
	// Name is the step's name, as Step or Sleep was given it.
	Name string `json:"name"`
	// Index is the step's place in the handler's run, from 0.
	Index int `json:"index"`
	// State is where it stands.
	State StepState `json:"state"`
	// Attempts counts the runs of the step's fn.
	Attempts int `json:"attempts,omitempty"`
	// Duration is how long its last run took.
	Duration time.Duration `json:"duration,omitempty"`
	// At is when its last run ended (the recording worker's clock).
	At time.Time `json:"at,omitzero"`
	// Error is the error of a failed step's last run.
	Error string `json:"error,omitempty"`
	// Result is a done step's result (JSON; sealed on a queue that seals
	// and that this process cannot open).
	Result json.RawMessage `json:"result,omitempty"`
	// Wake is when a sleep ends, or a wait for a signal times out.
	Wake time.Time `json:"wake,omitzero"`
}

// stepRec is a step's record as stored (the hash's value).
type stepRec struct {
	I  int             `json:"i"`
	S  StepState       `json:"s"`
	A  int             `json:"a,omitempty"`
	MS int64           `json:"ms,omitempty"`
	At int64           `json:"at,omitempty"`
	E  string          `json:"e,omitempty"`
	R  json.RawMessage `json:"r,omitempty"`
	W  int64           `json:"w,omitempty"`
}

// runSteps is a run's view of its task's recorded steps: read at the run's
// first Step or Sleep, then kept as this run records.
type runSteps struct {
	mu     sync.Mutex
	recs   map[string]stepRec
	names  map[int]string // index -> name of the recorded steps
	next   int            // the place of the run's next Step or Sleep
	seen   map[string]bool
	marked bool // this reservation marked the body ("lg")
}

// stepsOf returns r's steps, read from Redis at the first call.
func (r *reservation) stepsOf(ctx context.Context) (*runSteps, error) {
	if s := r.steps.Load(); s != nil {
		return s, nil
	}
	s := &runSteps{recs: map[string]stepRec{}, names: map[int]string{}, seen: map[string]bool{}}
	if !r.r.MayHaveSteps() {
		// A first run that no earlier run marked: none recorded, and no
		// read (the first record checks the lease).
		if r.steps.CompareAndSwap(nil, s) {
			return s, nil
		}
		return r.steps.Load(), nil
	}
	q := r.core
	raw, err := queueStepScript.Exec(ctx, q.fleet.client, q.keys(), []string{r.id(), r.r.Token(), "", "", "", "", "", "", ""}).ToArray()
	if err != nil {
		return nil, err
	}
	if err := stepCode(raw, r.id()); err != nil {
		return nil, err
	}
	for i := 1; i+1 < len(raw); i += 2 {
		name, _ := raw[i].ToString()
		if ownField(name) {
			continue
		}
		v, _ := raw[i+1].ToString()
		var rec stepRec
		if err := json.Unmarshal([]byte(v), &rec); err != nil {
			return nil, fmt.Errorf("%w: step %q of task %s: its record does not decode: %w", ErrPermanent, name, r.id(), err)
		}
		s.recs[name] = rec
		s.names[rec.I] = name
	}
	if r.steps.CompareAndSwap(nil, s) {
		return s, nil
	}
	return r.steps.Load(), nil
}

// stepCode reads queue_step.lua's code: nil for DONE, ErrLeaseLost for
// LOST.
func stepCode(raw []rueidis.RedisMessage, id string) error {
	if len(raw) == 0 {
		return fmt.Errorf("queue_step.lua: empty reply")
	}
	code, err := raw[0].AsInt64()
	if err != nil {
		return err
	}
	if engine.EndCode(code) != engine.EndDone {
		return fmt.Errorf("%w: task %s", ErrLeaseLost, id)
	}
	return nil
}

// place takes the run's next place for step name of state want, and
// returns its record when one is recorded; ErrNondeterministic when the
// recorded run had another step there, or this one elsewhere.
func (s *runSteps) place(id, name string, want StepState) (stepRec, bool, int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seen[name] {
		return stepRec{}, false, 0, fmt.Errorf("%w: step %q of task %s: the name is used twice in one run (%w)", ErrInvalidArgument, name, id, ErrPermanent)
	}
	i := s.next
	rec, ok := s.recs[name]
	switch {
	case ok && rec.I != i:
		return rec, false, i, fmt.Errorf("%w: task %s: step %q is step %d of this run, but step %d of the recorded run", ErrNondeterministic, id, name, i, rec.I)
	case ok && kindOf(rec.S) != kindOf(want):
		return rec, false, i, fmt.Errorf("%w: task %s: %q is a %s in this run, but the recorded run's %s", ErrNondeterministic, id, name, kindOf(want), kindOf(rec.S))
	case !ok && s.names[i] != "":
		return rec, false, i, fmt.Errorf("%w: task %s: step %d is %q in this run, but %q in the recorded run", ErrNondeterministic, id, i, name, s.names[i])
	case !ok && len(s.recs) >= MaxSteps:
		return rec, false, i, fmt.Errorf("%w: task %s: more than MaxSteps (%d) steps (%w)", ErrInvalidArgument, id, MaxSteps, ErrPermanent)
	}
	s.seen[name] = true
	s.next++
	return rec, ok, i, nil
}

func kindOf(s StepState) string {
	switch s {
	case StepSleep:
		return "sleep"
	case StepWaiting, StepSignaled, StepTimedOut:
		return "wait for a signal"
	}
	return "step"
}

// ownField reports whether name, a field of a task's steps hash, is one of
// the hash's own (the signals' and the park's: queue_signal.lua), not a
// step: their names start with the byte 255, which no step's does.
func ownField(name string) bool { return name != "" && name[0] == 0xff }

// recordStep stores rec as step name of r's task (queue_step.lua), living at
// least ttl, and keeps it in s.
func (r *reservation) recordStep(ctx context.Context, s *runSteps, name string, rec stepRec, ttl time.Duration) error {
	q := r.core
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	s.mu.Lock()
	mark := !s.marked
	s.mu.Unlock()
	r.r.MarkLogged() // before the write: the ack must delete or keep the steps
	ttl = max(ttl, q.opts.DeadMaxAge, q.opts.Retention, r.r.Retention())
	raw, err := queueStepScript.Exec(ctx, q.fleet.client, q.keys(), []string{r.id(), r.r.Token(), name, string(b),
		strconv.FormatInt(max(ttl.Milliseconds(), 1), 10), flag(mark), "", "", ""}).ToArray()
	if err != nil {
		return err
	}
	if err := stepCode(raw, r.id()); err != nil {
		return err
	}
	s.mu.Lock()
	s.recs[name], s.names[rec.I] = rec, name
	s.marked = true
	s.mu.Unlock()
	return nil
}

func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// checkStep checks a step's task and name.
func checkStep(t Durable, name string) (*reservation, error) {
	if t == nil {
		return nil, fmt.Errorf("%w: no task", ErrInvalidArgument)
	}
	r := t.durable()
	if r == nil || r.r == nil {
		return nil, fmt.Errorf("%w: not a reserved task", ErrInvalidArgument)
	}
	if err := checkStepName(name); err != nil {
		return nil, err
	}
	return r, nil
}

// checkStepName checks a step's (or a signal's) name.
func checkStepName(name string) error {
	if name == "" || len(name) > maxStepName || !utf8.ValidString(name) || ownField(name) {
		return fmt.Errorf("%w: step name %q: want 1 to %d bytes of UTF-8", ErrInvalidArgument, name, maxStepName)
	}
	return nil
}

// Step runs fn once for task t and records its result (as JSON, at most
// MaxStepBytes) with the task, under name: when the task runs again (a
// retry, a lease that ran out, a resume after a Sleep), Step returns the
// recorded result without running fn. A step whose fn fails is not
// recorded as done: its error is returned (and recorded, for Lookup), and
// the next run of the task runs it again, as the task's retry policy
// says.
//
// Only the holder of the task's lease runs fn and records: fn runs only
// while this process can prove the lease (before Deadline, with ctx
// alive), and a worker whose lease was taken over gets ErrLeaseLost and
// records nothing. So a step's effect
// can repeat only if its process died (or lost its lease) between the
// effect and the record: hand "<task id>/<step name>" downstream as the
// idempotency key of effects that must not repeat.
//
// A handler's steps must be the same, in the same order, in every run:
// a run whose step at some place has another name than the recorded run's
// gets ErrNondeterministic (which is ErrPermanent: a worker dead-letters
// the task), and nothing stored changes. Call Step from the handler's
// goroutine, one step after another. Names are 1 to 200 bytes of UTF-8,
// each used once per run. A result that does not encode, or is larger
// than MaxStepBytes, is ErrInvalidArgument (and ErrPermanent) and is not
// recorded. On a queue that seals (QueueOptions.Sealer) results are
// sealed. The steps live as the task's log does (Logger): the task's ack
// deletes them, or keeps them as long as its record. Each record is one
// script call; the first Step or Sleep of a run after the first (a retry,
// a resume) reads the recorded steps in one more.
func Step[R any](ctx context.Context, t Durable, name string, fn func(context.Context) (R, error)) (R, error) {
	var zero R
	r, err := checkStep(t, name)
	if err != nil {
		return zero, err
	}
	if fn == nil {
		return zero, fmt.Errorf("%w: step %q: nil fn", ErrInvalidArgument, name)
	}
	q := r.core
	s, err := r.stepsOf(ctx)
	if err != nil {
		return zero, opErr("step", q.name, err)
	}
	rec, ok, i, err := s.place(r.id(), name, StepDone)
	if err != nil {
		return zero, opErr("step", q.name, err)
	}
	ev := StepEvent{Queue: q.name, ID: r.id(), Name: name, Index: i, Attempt: rec.A + 1}
	if ok && rec.S == StepDone {
		ev.Attempt, ev.Memoized = rec.A, true
		if _, done := q.fleet.observeStep(ctx, ev); done != nil {
			done(nil)
		}
		var v R
		b, err := open(q.opts.Sealer, q.name, sealStep, rec.R)
		if err == nil {
			err = json.Unmarshal(b, &v)
		}
		if err != nil {
			return zero, opErr("step", q.name, fmt.Errorf("%w: task %s: step %q: its recorded result does not decode into %T: %w (%w)", ErrInvalidArgument, r.id(), name, v, err, ErrPermanent))
		}
		return v, nil
	}
	// Run fn only while this reservation is proven to hold the task (its
	// lease, as this process counts it): past it, another holder may have
	// run and recorded the step already, and a first run, which reads
	// nothing, would not know.
	if err := ctx.Err(); err != nil {
		return zero, opErr("step", q.name, context.Cause(ctx))
	}
	if !time.Now().Before(r.Deadline()) {
		return zero, opErr("step", q.name, fmt.Errorf("%w: task %s: its lease ran out before step %q", ErrLeaseLost, r.id(), name))
	}
	fctx, done := q.fleet.observeStep(ctx, ev)
	if done == nil {
		done = func(error) {}
	}
	started := time.Now()
	v, ferr := fn(fctx)
	next := stepRec{I: i, S: StepDone, A: rec.A + 1, MS: time.Since(started).Milliseconds(), At: time.Now().UnixMilli()}
	if ferr == nil {
		b, err := json.Marshal(v)
		switch {
		case err != nil:
			ferr = fmt.Errorf("%w: step %q: its result does not encode as JSON: %w (%w)", ErrInvalidArgument, name, err, ErrPermanent)
		case len(b) > MaxStepBytes:
			ferr = fmt.Errorf("%w: step %q: its result is %d bytes of JSON, more than MaxStepBytes %d (%w)", ErrInvalidArgument, name, len(b), MaxStepBytes, ErrPermanent)
		default:
			if next.R, err = seal(q.opts.Sealer, q.name, sealStep, b); err != nil {
				done(err)
				return zero, opErr("step", q.name, err)
			}
		}
	}
	if ferr != nil {
		next.S, next.E = StepFailed, ferr.Error()
		if len(next.E) > 1024 {
			next.E = next.E[:1024]
		}
		done(ferr)
		if err := r.recordStep(ctx, s, name, next, 0); err != nil {
			return zero, opErr("step", q.name, fmt.Errorf("%w (recording the step's failure: %w)", ferr, err))
		}
		return zero, ferr
	}
	if err := r.recordStep(ctx, s, name, next, 0); err != nil {
		err = opErr("step", q.name, err)
		done(err)
		return zero, err
	}
	done(nil)
	return v, nil
}

// observeStep tells the Observer of a step (Observer.Step): the ctx its fn
// runs under, and the func to call with its outcome (nil for none).
func (f *Fleet) observeStep(ctx context.Context, e StepEvent) (context.Context, func(error)) {
	o := f.obs
	if o == nil || o.Step == nil {
		return ctx, nil
	}
	sctx, done := o.Step(ctx, e)
	if sctx == nil {
		sctx = ctx
	}
	return sctx, done
}

// RecordedSteps returns the steps of t recorded so far, as this run sees them
// (read at its first Step or Sleep, or now), in order.
func RecordedSteps(ctx context.Context, t Durable) ([]StepRecord, error) {
	r, err := checkStep(t, "-")
	if err != nil {
		return nil, err
	}
	s, err := r.stepsOf(ctx)
	if err != nil {
		return nil, opErr("steps", r.core.name, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	raw := make(map[string]string, len(s.recs))
	for name, rec := range s.recs {
		b, _ := json.Marshal(rec)
		raw[name] = string(b)
	}
	return r.core.fleet.stepRecords(r.core.name, raw), nil
}

// stepRecords reads the stored steps raw (name -> record) of a task of
// queue q, in order, with their results opened where this process can.
func (f *Fleet) stepRecords(q string, raw map[string]string) []StepRecord {
	out := make([]StepRecord, 0, len(raw))
	for name, v := range raw {
		if ownField(name) {
			continue
		}
		var rec stepRec
		if json.Unmarshal([]byte(v), &rec) != nil {
			out = append(out, StepRecord{Name: name, Index: -1, Error: "record does not decode"})
			continue
		}
		sr := StepRecord{Name: name, Index: rec.I, State: rec.S, Attempts: rec.A, Duration: time.Duration(rec.MS) * time.Millisecond, Error: rec.E, Result: rec.R}
		if rec.At > 0 {
			sr.At = time.UnixMilli(rec.At)
		}
		if rec.W > 0 {
			sr.Wake = time.UnixMilli(rec.W)
		}
		if len(rec.R) > 0 {
			sr.Result = f.shown(q, sealStep, rec.R)
		}
		out = append(out, sr)
	}
	slices.SortFunc(out, func(a, b StepRecord) int { return cmp.Compare(a.Index, b.Index) })
	return out
}
