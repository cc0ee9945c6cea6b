package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"
	"github.com/robfig/cron/v3"

	"github.com/fleet-go/fleet/internal/keys"
)

var (
	schedulePutScript   = newScript("schedule_put.lua")
	scheduleFireScript  = newScript("schedule_fire.lua")
	schedulePauseScript = newScript("schedule_pause.lua")
)

// DefaultScheduleGrace is ScheduleOptions.Grace's default.
const DefaultScheduleGrace = time.Minute

// Spec says when a schedule ticks: Every or Cron. Its zero value is
// refused with ErrInvalidArgument.
type Spec struct {
	text  string        // as stored: "every <ms>" or "cron <spec>"
	every time.Duration // Every
	cron  cron.Schedule // Cron
	err   error
}

// Every ticks every d, at the multiples of d since the Unix epoch (so
// Every(time.Hour) ticks on the hour, UTC): every process computes the
// same ticks. d is rounded down to the millisecond and must be at least
// one; else every call that gets the Spec returns ErrInvalidArgument.
func Every(d time.Duration) Spec {
	d = d.Truncate(time.Millisecond)
	s := Spec{text: "every " + strconv.FormatInt(d.Milliseconds(), 10), every: d}
	if d < time.Millisecond {
		s.err = fmt.Errorf("%w: Every(%v): the period must be at least 1ms", ErrInvalidArgument, d)
	}
	return s
}

// cronParser reads standard five-field specs ("*/5 * * * *") and the
// descriptors (@hourly, @daily, ...), with an optional CRON_TZ= prefix.
var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Cron ticks by a cron spec, parsed by robfig/cron/v3: five fields
// (minute hour day-of-month month day-of-week) or a descriptor such as
// @hourly, in UTC unless the spec starts with CRON_TZ=<zone>. "@every" is
// refused (its ticks depend on when a process looks): use Every. A spec
// that does not parse makes every call that gets the Spec return
// ErrInvalidArgument naming the spec.
func Cron(spec string) Spec {
	s := Spec{text: "cron " + spec}
	sched, err := parseCron(spec)
	if err != nil {
		s.err = fmt.Errorf("%w: cron spec %q: %v", ErrInvalidArgument, spec, err)
		return s
	}
	ss, ok := sched.(*cron.SpecSchedule)
	if !ok { // @every, with or without a CRON_TZ= prefix
		s.err = fmt.Errorf("%w: cron spec %q: @every ticks relative to each process's clock; use fleet.Every", ErrInvalidArgument, spec)
		return s
	}
	if !strings.HasPrefix(spec, "CRON_TZ=") && !strings.HasPrefix(spec, "TZ=") {
		ss.Location = time.UTC
	}
	s.cron = ss
	return s
}

// parseCron parses spec with the cron parser, whose panics (it panics on
// "TZ=" with nothing after it) become errors.
func parseCron(spec string) (sched cron.Schedule, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("not a cron spec (%v)", r)
		}
	}()
	return cronParser.Parse(spec)
}

// String returns the spec as stored ("every 100" in ms, or "cron <spec>").
func (s Spec) String() string { return s.text }

func (s Spec) check() error {
	if s.err != nil {
		return s.err
	}
	if s.every == 0 && s.cron == nil {
		return fmt.Errorf("%w: no schedule Spec (use fleet.Every or fleet.Cron)", ErrInvalidArgument)
	}
	return nil
}

// parseSpec reads a stored spec.
func parseSpec(text string) Spec {
	if rest, ok := strings.CutPrefix(text, "every "); ok {
		ms, err := strconv.ParseInt(rest, 10, 64)
		if err != nil || ms < 1 {
			return Spec{text: text, err: fmt.Errorf("%w: stored spec %q", ErrInvalidArgument, text)}
		}
		return Every(time.Duration(ms) * time.Millisecond)
	}
	if rest, ok := strings.CutPrefix(text, "cron "); ok {
		return Cron(rest)
	}
	return Spec{text: text, err: fmt.Errorf("%w: stored spec %q", ErrInvalidArgument, text)}
}

// latest returns the latest tick at or before now (zero when none within a
// year, for a cron spec).
func (s Spec) latest(now time.Time) time.Time {
	if s.every > 0 {
		ms, d := now.UnixMilli(), s.every.Milliseconds()
		return time.UnixMilli(ms - ms%d)
	}
	// cron has only Next: look back over growing windows for a tick, then
	// walk forward to the last one at or before now.
	for _, w := range []time.Duration{time.Minute, time.Hour, 24 * time.Hour, 32 * 24 * time.Hour, 366 * 24 * time.Hour} {
		t := s.cron.Next(now.Add(-w))
		if t.IsZero() || t.After(now) {
			continue
		}
		for {
			n := s.cron.Next(t)
			if n.IsZero() || n.After(now) {
				return t
			}
			t = n
		}
	}
	return time.Time{}
}

// next returns the first tick after now.
func (s Spec) next(now time.Time) time.Time {
	if s.every > 0 {
		return s.latest(now).Add(s.every)
	}
	return s.cron.Next(now)
}

// MissedPolicy says what a schedule does with ticks that passed while no
// scheduler ran.
type MissedPolicy string

// The missed-tick policies.
const (
	// MissedRunOnce submits one task for the ticks that were missed, however
	// many: the latest of them fires when a scheduler next runs, and the
	// earlier ones are recorded as handled. No tick is ever dropped without
	// a task standing for it. It is the default.
	MissedRunOnce MissedPolicy = "once"
	// MissedSkip drops missed ticks: a tick fires only when a scheduler
	// handles it within ScheduleOptions.Grace after it was due.
	MissedSkip MissedPolicy = "skip"
)

// ScheduleOptions configures a schedule. The zero value means the
// defaults.
type ScheduleOptions struct {
	// Missed is the policy for ticks missed while no scheduler ran.
	// Defaults to MissedRunOnce.
	Missed MissedPolicy
	// Grace is how late a tick may be handled and still count as on time
	// under MissedSkip (a tick handled later is skipped). Defaults to
	// DefaultScheduleGrace.
	Grace time.Duration
}

func (o ScheduleOptions) withDefaults() (ScheduleOptions, error) {
	switch o.Missed {
	case "":
		o.Missed = MissedRunOnce
	case MissedRunOnce, MissedSkip:
	default:
		return o, fmt.Errorf("%w: ScheduleOptions.Missed %q is not %q or %q", ErrInvalidArgument, o.Missed, MissedRunOnce, MissedSkip)
	}
	if o.Grace < 0 {
		return o, fmt.Errorf("%w: ScheduleOptions.Grace %v is negative", ErrInvalidArgument, o.Grace)
	}
	if o.Grace == 0 {
		o.Grace = DefaultScheduleGrace
	}
	return o, nil
}

// AddSchedule stores schedule name (fleet:queue:<queue>:schedule:<name>,
// indexed in fleet:schedules; docs/SCHEMA.md): at each tick of spec, the
// schedulers (RunScheduler) submit payload to q, one task per tick however
// many schedulers run. The payload is validated now, as Submit would. The
// schedule is stored in Redis, so it survives restarts of every process;
// its first tick is the first one after now. Adding a name again replaces
// its spec, payload and options; it keeps its paused flag and never fires
// a tick it handled already. Schedule names are unique in the fleet.
//
// May return ErrInvalidName (name), ErrInvalidArgument (a bad Spec, such
// as a cron spec that does not parse, or options; a name that another
// queue's schedule holds), ErrInvalidPayload, ErrUnavailable. Nothing is
// stored when it refuses.
func AddSchedule[T any](ctx context.Context, q *Queue[T], name string, spec Spec, payload T, opts ScheduleOptions) error {
	const op = "add schedule"
	if q == nil {
		return opErr(op, name, fmt.Errorf("%w: AddSchedule needs a Queue", ErrInvalidArgument))
	}
	if err := q.ready(ctx); err != nil {
		return opErr(op, name, err)
	}
	b, err := q.encodePayload(payload)
	if err != nil {
		return opErr(op, name, err)
	}
	return q.fleet.addSchedule(ctx, q.name, name, spec, b, opts, q.register)
}

// AddScheduleJSON is AddSchedule for a queue made by NewQueue in this
// process, by name, with its payload as JSON (decoded strictly into the
// queue's payload type and validated), for admin front ends. May return
// ErrQueueNotFound, ErrInvalidJSON, ErrInvalidPayload, and what AddSchedule
// returns.
func (f *Fleet) AddScheduleJSON(ctx context.Context, queue, name string, spec Spec, raw json.RawMessage, opts ScheduleOptions) error {
	const op = "add schedule"
	e, ok := f.queues.Load(queue)
	if !ok {
		return opErr(op, name, fmt.Errorf("%w: %q", ErrQueueNotFound, queue))
	}
	sp, ok := e.(schedulePayloader)
	if !ok {
		return opErr(op, name, fmt.Errorf("%w: %q", ErrQueueNotFound, queue))
	}
	if err := f.alive(ctx); err != nil {
		return opErr(op, name, err)
	}
	b, register, err := sp.schedulePayload(raw)
	if err != nil {
		return opErr(op, name, err)
	}
	return f.addSchedule(ctx, queue, name, spec, b, opts, register)
}

// schedulePayloader is the untyped side of a Queue that AddScheduleJSON
// needs.
type schedulePayloader interface {
	schedulePayload(raw []byte) ([]byte, func(context.Context) error, error)
}

func (q *Queue[T]) schedulePayload(raw []byte) ([]byte, func(context.Context) error, error) {
	p, err := q.decodeJSON(raw)
	if err != nil {
		return nil, nil, err
	}
	b, err := q.encodePayload(p)
	return b, q.register, err
}

// decodeJSON decodes raw strictly into T, as SubmitJSON does.
func (q *Queue[T]) decodeJSON(raw []byte) (T, error) {
	var p T
	if len(raw) > q.opts.MaxPayloadBytes {
		return p, fmt.Errorf("%w: %d bytes, more than MaxPayloadBytes %d", ErrInvalidPayload, len(raw), q.opts.MaxPayloadBytes)
	}
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return p, fmt.Errorf("%w: %w", ErrInvalidJSON, err)
	}
	if dec.More() {
		return p, fmt.Errorf("%w: trailing data after the JSON value", ErrInvalidJSON)
	}
	return p, nil
}

func (f *Fleet) addSchedule(ctx context.Context, queue, name string, spec Spec, payload []byte, opts ScheduleOptions, register func(context.Context) error) error {
	const op = "add schedule"
	if err := keys.Check(keys.KindSchedule, name); err != nil {
		return opErr(op, name, err)
	}
	if err := spec.check(); err != nil {
		return opErr(op, name, err)
	}
	opts, err := opts.withDefaults()
	if err != nil {
		return opErr(op, name, err)
	}
	c := f.client
	owner, err := c.Do(ctx, c.B().Hget().Key(f.keys.Schedules()).Field(name).Build()).ToString()
	switch {
	case rueidis.IsRedisNil(err):
	case err != nil:
		return opErr(op, name, err)
	case owner != queue:
		return opErr(op, name, fmt.Errorf("%w: schedule %q belongs to queue %q", ErrInvalidArgument, name, owner))
	}
	if err := register(ctx); err != nil {
		return opErr(op, name, err)
	}
	k := f.keys.Schedule(queue, name)
	var last int64
	if t := spec.latest(time.Now()); !t.IsZero() {
		last = t.UnixMilli()
	}
	if err := schedulePutScript.Exec(ctx, c, []string{k.Def, k.Last},
		[]string{queue, spec.text, string(payload), string(opts.Missed), strconv.FormatInt(opts.Grace.Milliseconds(), 10),
			strconv.FormatInt(last, 10)}).Error(); err != nil {
		return opErr(op, name, err)
	}
	// The index lives in another slot on a cluster: a command of its own,
	// after the schedule exists, so a scheduler never finds an index entry
	// without its schedule but for a removal.
	return opErr(op, name, c.Do(ctx, c.B().Hset().Key(f.keys.Schedules()).FieldValue().FieldValue(name, queue).Build()).Error())
}

// ScheduleInfo is a stored schedule.
type ScheduleInfo struct {
	// Name is the schedule's name.
	Name string `json:"name"`
	// Queue is the queue it submits to.
	Queue string `json:"queue"`
	// Spec is the spec as stored ("every <ms>" or "cron <spec>").
	Spec string `json:"spec"`
	// Payload is the payload of each task, as JSON.
	Payload json.RawMessage `json:"payload"`
	// Missed is the missed-tick policy.
	Missed MissedPolicy `json:"missed"`
	// Grace is ScheduleOptions.Grace.
	Grace time.Duration `json:"grace"`
	// Paused says whether the schedule is paused: its ticks pass, handled
	// and not submitted.
	Paused bool `json:"paused"`
	// Last is the latest tick handled (submitted, skipped or passed while
	// paused); zero when none.
	Last time.Time `json:"last"`
	// Next is the next tick after now (zero when the spec has none).
	Next time.Time `json:"next"`
}

// Schedules lists every schedule of the fleet, by name. May return
// ErrUnavailable.
func (f *Fleet) Schedules(ctx context.Context) ([]ScheduleInfo, error) {
	const op = "schedules"
	if err := f.alive(ctx); err != nil {
		return nil, opErr(op, "", err)
	}
	c := f.client
	idx, err := c.Do(ctx, c.B().Hgetall().Key(f.keys.Schedules()).Build()).AsStrMap()
	if err != nil {
		return nil, opErr(op, "", err)
	}
	names := make([]string, 0, len(idx))
	for n := range idx {
		names = append(names, n)
	}
	slices.Sort(names)
	cmds := make(rueidis.Commands, 0, 2*len(names))
	for _, n := range names {
		k := f.keys.Schedule(idx[n], n)
		cmds = append(cmds, c.B().Hgetall().Key(k.Def).Build(), c.B().Get().Key(k.Last).Build())
	}
	out := make([]ScheduleInfo, 0, len(names))
	if len(cmds) == 0 {
		return out, nil
	}
	now := time.Now()
	res := c.DoMulti(ctx, cmds...)
	for i, n := range names {
		def, err := res[2*i].AsStrMap()
		if err != nil {
			return nil, opErr(op, n, err)
		}
		if len(def) == 0 {
			continue // removed meanwhile
		}
		info := scheduleInfo(n, def)
		if ms, err := res[2*i+1].AsInt64(); err == nil && ms > 0 {
			info.Last = time.UnixMilli(ms)
		}
		if sp := parseSpec(info.Spec); sp.check() == nil {
			info.Next = sp.next(now)
		}
		out = append(out, info)
	}
	return out, nil
}

func scheduleInfo(name string, def map[string]string) ScheduleInfo {
	grace, _ := strconv.ParseInt(def["grace_ms"], 10, 64)
	return ScheduleInfo{Name: name, Queue: def["queue"], Spec: def["spec"], Payload: json.RawMessage(def["payload"]),
		Missed: MissedPolicy(def["missed"]), Grace: time.Duration(grace) * time.Millisecond, Paused: def["paused"] == "1"}
}

// PauseSchedule pauses schedule name: its ticks pass without a task (they
// count as handled, so ResumeSchedule does not fire them) until it is
// resumed. May return ErrScheduleNotFound, ErrUnavailable.
func (f *Fleet) PauseSchedule(ctx context.Context, name string) error {
	return f.pauseSchedule(ctx, "pause schedule", name, "1")
}

// ResumeSchedule resumes a paused schedule from its next tick. May return
// ErrScheduleNotFound, ErrUnavailable.
func (f *Fleet) ResumeSchedule(ctx context.Context, name string) error {
	return f.pauseSchedule(ctx, "resume schedule", name, "0")
}

func (f *Fleet) pauseSchedule(ctx context.Context, op, name, flag string) error {
	k, err := f.scheduleKeys(ctx, op, name)
	if err != nil {
		return err
	}
	n, err := schedulePauseScript.Exec(ctx, f.client, []string{k.Def}, []string{flag}).AsInt64()
	if err == nil && n == 0 {
		err = fmt.Errorf("%w: %q", ErrScheduleNotFound, name)
	}
	return opErr(op, name, err)
}

// RemoveSchedule removes schedule name: no scheduler submits for it after
// this returns (a tick being handled at that moment is either submitted
// before or not at all). Tasks already submitted stay. May return
// ErrScheduleNotFound, ErrUnavailable.
func (f *Fleet) RemoveSchedule(ctx context.Context, name string) error {
	const op = "remove schedule"
	k, err := f.scheduleKeys(ctx, op, name)
	if err != nil {
		return err
	}
	c := f.client
	if err := c.Do(ctx, c.B().Del().Key(k.Def, k.Last).Build()).Error(); err != nil {
		return opErr(op, name, err)
	}
	return opErr(op, name, c.Do(ctx, c.B().Hdel().Key(f.keys.Schedules()).Field(name).Build()).Error())
}

// scheduleKeys finds the keys of schedule name through the index.
func (f *Fleet) scheduleKeys(ctx context.Context, op, name string) (keys.Schedule, error) {
	if err := keys.Check(keys.KindSchedule, name); err != nil {
		return keys.Schedule{}, opErr(op, name, err)
	}
	if err := f.alive(ctx); err != nil {
		return keys.Schedule{}, opErr(op, name, err)
	}
	c := f.client
	queue, err := c.Do(ctx, c.B().Hget().Key(f.keys.Schedules()).Field(name).Build()).ToString()
	if rueidis.IsRedisNil(err) {
		return keys.Schedule{}, opErr(op, name, fmt.Errorf("%w: %q", ErrScheduleNotFound, name))
	}
	if err != nil {
		return keys.Schedule{}, opErr(op, name, err)
	}
	if keys.Check(keys.KindQueue, queue) != nil {
		return keys.Schedule{}, opErr(op, name, fmt.Errorf("%w: %q indexed under a bad queue name %q", ErrScheduleNotFound, name, queue))
	}
	return f.keys.Schedule(queue, name), nil
}
