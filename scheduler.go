package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/redis/rueidis"
)

// DefaultSchedulerPoll is SchedulerOptions.Poll's default.
const DefaultSchedulerPoll = time.Second

// SchedulerOptions configures RunScheduler. The zero value of each field
// means its default; negative values are refused with ErrInvalidArgument.
type SchedulerOptions struct {
	// Poll bounds how long a new, changed or resumed schedule may wait to
	// be seen when no invalidation came (with client-side caching a change
	// is seen at once, and a poll that finds nothing changed costs Redis
	// nothing). Defaults to DefaultSchedulerPoll.
	Poll time.Duration
	// Logger receives failures. Defaults to the Fleet's logger.
	Logger *slog.Logger
}

// RunScheduler handles the ticks of every schedule of the fleet (see
// AddSchedule) until ctx ends or the Fleet closes; then it returns nil,
// and none of its work outlives it. Run it in as many processes as you
// like, the way RunSweeper runs: there is no leader. Each tick is handled
// by one script that records it in fleet:queue:<queue>:schedule:<name>:last
// and pushes its task in one atomic step, only when it is later than the
// last tick recorded, so each tick gives exactly one task whichever
// schedulers run, die or restart. A scheduler killed at any point (even
// with the script in flight) loses nothing: the tick is recorded with its
// task, or not at all and another scheduler (or the restarted one) handles
// it, as the schedule's MissedPolicy says.
//
// Each tick costs each scheduler one script call per schedule (only one of
// them submits); between ticks the schedules are read through the
// client-side cache. A task of a schedule carries "schedule" and "tick"
// (unix ms) in its body beside the documented fields. May return
// ErrInvalidArgument for bad options.
func (f *Fleet) RunScheduler(ctx context.Context, opts SchedulerOptions) error {
	if f == nil {
		return opErr("run scheduler", "", fmt.Errorf("%w: no Fleet", ErrInvalidArgument))
	}
	if opts.Poll < 0 {
		return opErr("run scheduler", "", fmt.Errorf("%w: SchedulerOptions.Poll %v is negative", ErrInvalidArgument, opts.Poll))
	}
	if opts.Poll == 0 {
		opts.Poll = DefaultSchedulerPoll
	}
	if opts.Logger == nil {
		opts.Logger = f.log
	}
	s := &scheduler{f: f, opts: opts, handled: map[string]int64{}}
	ch, stop := f.watch.Listen(f.keys.Schedules())
	defer stop()
	t := time.NewTimer(0)
	defer t.Stop()
	bo := backoff{min: 50 * time.Millisecond, max: 5 * time.Second}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-f.done:
			return nil
		case <-ch:
		case <-t.C:
		}
		next, err := s.round(ctx, time.Now())
		wait := time.Until(next)
		if err != nil {
			if ctx.Err() != nil || f.closed.Load() {
				return nil
			}
			opts.Logger.Warn("fleet: scheduler round failed", "err", err)
			wait = min(wait, bo.next())
		} else {
			bo.n = 0
		}
		if !t.Stop() {
			select {
			case <-t.C:
			default:
			}
		}
		t.Reset(max(wait, time.Millisecond))
	}
}

// scheduler is the state of one RunScheduler.
type scheduler struct {
	f       *Fleet
	opts    SchedulerOptions
	handled map[string]int64 // schedule -> the latest tick this scheduler saw handled (unix ms)
}

// round handles the due tick of every schedule, and returns when the next
// round is due.
func (s *scheduler) round(ctx context.Context, now time.Time) (time.Time, error) {
	f, c := s.f, s.f.client
	next := now.Add(s.opts.Poll)
	idx, err := c.DoCache(ctx, c.B().Hgetall().Key(f.keys.Schedules()).Cache(), f.cacheTTL).AsStrMap()
	if err != nil {
		return next, err
	}
	var first error
	for name, queue := range idx {
		k := f.keys.Schedule(queue, name)
		def, err := c.DoCache(ctx, c.B().Hgetall().Key(k.Def).Cache(), f.cacheTTL).AsStrMap()
		if err != nil {
			first = cmpErr(first, err)
			continue
		}
		if len(def) == 0 {
			continue
		}
		info := scheduleInfo(name, def)
		sp := parseSpec(info.Spec)
		if sp.check() != nil {
			continue
		}
		if n := sp.next(now); !n.IsZero() && n.Before(next) {
			next = n
		}
		last, ok := s.handled[name]
		if !ok {
			// First look at this schedule: learn the last tick handled.
			ms, err := c.Do(ctx, c.B().Get().Key(k.Last).Build()).AsInt64()
			if err != nil && !rueidis.IsRedisNil(err) {
				first = cmpErr(first, within("schedule "+strconv.Quote(name), err))
				continue
			}
			last = ms
		}
		ticks := dueTicks(sp, info, time.UnixMilli(last), now)
		if len(ticks) == 0 {
			s.handled[name] = last
			continue
		}
		if err := s.fire(ctx, k.Def, k.Last, queue, name, info.Payload, ticks); err != nil {
			first = cmpErr(first, within("schedule "+strconv.Quote(name), err))
			continue
		}
		s.handled[name] = ticks[len(ticks)-1].ms
	}
	for name := range s.handled {
		if _, ok := idx[name]; !ok {
			delete(s.handled, name)
		}
	}
	return next, first
}

// maxOnTime bounds how many on-time ticks one call handles; older ones
// count as missed.
const maxOnTime = 1000

// tick is one tick to handle: its time, and whether it gets a task.
type tick struct {
	ms     int64
	submit bool
}

// dueTicks lists the ticks after last and at or before now, ascending. A
// tick within the schedule's Grace of now is on time and gets a task. The
// ones before are missed: under MissedRunOnce the latest of them gets one
// task for them all; under MissedSkip it is only recorded.
func dueTicks(sp Spec, info ScheduleInfo, last, now time.Time) []tick {
	var out []tick
	cut := now.Add(-info.Grace)
	from := last
	if cut.After(last) {
		if t := sp.latest(cut); !t.IsZero() && t.After(last) {
			out = append(out, tick{ms: t.UnixMilli(), submit: info.Missed != MissedSkip})
			from = t
		}
		if cut.After(from) {
			from = cut
		}
	}
	var on []tick
	for t := sp.next(from); !t.IsZero() && !t.After(now); t = sp.next(t) {
		on = append(on, tick{ms: t.UnixMilli(), submit: true})
	}
	if len(on) > maxOnTime {
		on = on[len(on)-maxOnTime:]
		if info.Missed != MissedSkip && len(out) == 0 {
			out = append(out, tick{ms: on[0].ms - 1, submit: true}) // stands for those cut off
		}
	}
	return append(out, on...)
}

// fire handles ticks (schedule_fire.lua). When the call ends without a
// reply, the ticks were handled or not at all: the next round tries again,
// and the script makes a second try a no-op for those the first one
// handled.
func (s *scheduler) fire(ctx context.Context, def, last, queue, name string, payload []byte, ticks []tick) error {
	pending := s.f.keys.Queue(queue).Pending
	nameJSON, _ := json.Marshal(name) // a string always encodes
	var ids, bodies []string
	for _, t := range ticks {
		if !t.submit {
			continue
		}
		id, err := newTaskID()
		if err != nil {
			return err
		}
		body := newBody(id, payload, SubmitOptions{})
		ids, bodies = append(ids, id), append(bodies, body[:len(body)-1]+`,"schedule":`+string(nameJSON)+`,"tick":`+strconv.FormatInt(t.ms, 10)+"}")
	}
	var done submitDone
	if len(ids) > 0 && s.f.obs != nil {
		done = s.f.observeSubmitSlow(ctx, SubmitEvent{Queue: queue, IDs: ids, Schedule: name}, bodies)
	}
	args := make([]string, 0, 2*len(ticks))
	for _, t := range ticks {
		body := ""
		if t.submit {
			body, bodies = bodies[0], bodies[1:]
		}
		args = append(args, strconv.FormatInt(t.ms, 10), body)
	}
	n, err := scheduleFireScript.Exec(ctx, s.f.client, []string{def, last, pending}, args).AsInt64()
	done.call(int(max(n, 0)), err)
	if err != nil {
		return err
	}
	if n > 0 && !s.f.cache {
		s.f.watch.WakeOne(pending)
	}
	return nil
}
