package fleet_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/internal/redistest"
)

// runScheduler runs RunScheduler on f until the returned stop is called
// (or the test ends); stop waits for it to return.
func runScheduler(t *testing.T, f *fleet.Fleet) (stop func()) {
	t.Helper()
	c, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.RunScheduler(c, fleet.SchedulerOptions{Poll: 200 * time.Millisecond}) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("RunScheduler: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// scheduledTicks reads the ticks of the schedule's tasks in the pending
// list, in order, checking each body.
func scheduledTicks(t *testing.T, e *env, queue, schedule string, payload job) []int64 {
	t.Helper()
	var ticks []int64
	ids := map[string]bool{}
	for _, b := range e.lrange(t, e.qk(queue).Pending) {
		var w struct {
			ID       string `json:"id"`
			Payload  job    `json:"payload"`
			Attempts int    `json:"attempts"`
			Schedule string `json:"schedule"`
			Tick     int64  `json:"tick"`
		}
		if err := json.Unmarshal([]byte(b), &w); err != nil || w.ID == "" || ids[w.ID] || w.Payload != payload || w.Schedule != schedule || w.Tick == 0 {
			t.Fatalf("body %s: %v", b, err)
		}
		ids[w.ID] = true
		ticks = append(ticks, w.Tick)
	}
	return ticks
}

// consecutive fails the test unless ticks are first, first+step, ...
func consecutive(t *testing.T, ticks []int64, first, step int64) {
	t.Helper()
	for i, tk := range ticks {
		if tk != first+int64(i)*step {
			t.Fatalf("tick %d is %d, want %d (ticks %v)", i, tk, first+int64(i)*step, ticks)
		}
	}
}

// TestScheduleReplicas: 5 schedulers, each in its own Fleet, over 30 ticks
// of 100 ms: one task per tick, every tick from the first after the
// schedule was added, none twice.
func TestScheduleReplicas(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		q := fleet.NewQueue[job](e.F, "ticks", fleet.QueueOptions{})
		p := job{URL: "https://example.com/tick", N: 7}
		if err := fleet.AddSchedule(c, q, "every100", fleet.Every(100*time.Millisecond), p, fleet.ScheduleOptions{}); err != nil {
			t.Fatal(err)
		}
		list, err := e.F.Schedules(c)
		if err != nil || len(list) != 1 {
			t.Fatalf("schedules %v %v", list, err)
		}
		created := list[0].Last.UnixMilli()
		for range 5 {
			runScheduler(t, openOn(t, tg, e.Prefix))
		}
		waitFor(t, 20*time.Second, func() bool { return len(e.lrange(t, e.qk("ticks").Pending)) >= 30 }, "30 ticks not submitted")
		if err := e.F.RemoveSchedule(c, "every100"); err != nil {
			t.Fatal(err)
		}
		ticks := scheduledTicks(t, e, "ticks", "every100", p)
		if len(ticks) < 30 {
			t.Fatalf("%d ticks", len(ticks))
		}
		consecutive(t, ticks, created+100, 100)
		// The first 30 ticks gave exactly 30 tasks.
		if first30 := len(slices.DeleteFunc(slices.Clone(ticks), func(tk int64) bool { return tk > created+3000 })); first30 != 30 {
			t.Fatalf("%d tasks for the first 30 ticks", first30)
		}
		// Removed: no key of the schedule is left, and no tick comes after.
		time.Sleep(300 * time.Millisecond)
		if got := scheduledTicks(t, e, "ticks", "every100", p); len(got) != len(ticks) {
			t.Fatalf("ticks after removal: %d, then %d", len(ticks), len(got))
		}
		for _, k := range e.keys(t) {
			if strings.Contains(k, "schedule") {
				t.Fatalf("key %s left", k)
			}
		}
	})
}

// TestScheduleKilledReplicas: schedulers are killed at random moments (their
// Fleet closed, cutting calls in flight) and replaced by fresh ones that
// know nothing: under MissedRunOnce not one tick is lost or doubled.
func TestScheduleKilledReplicas(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		q := fleet.NewQueue[job](e.F, "churn", fleet.QueueOptions{})
		p := job{URL: "https://example.com/churn"}
		if err := fleet.AddSchedule(c, q, "churn", fleet.Every(100*time.Millisecond), p, fleet.ScheduleOptions{Missed: fleet.MissedRunOnce}); err != nil {
			t.Fatal(err)
		}
		list, _ := e.F.Schedules(c)
		created := list[0].Last.UnixMilli()
		type replica struct {
			f    *fleet.Fleet
			stop func()
		}
		start := func() replica {
			f := openOn(t, tg, e.Prefix)
			return replica{f, runScheduler(t, f)}
		}
		reps := []replica{start(), start(), start()}
		kills := 0
		for len(e.lrange(t, e.qk("churn").Pending)) < 30 {
			time.Sleep(time.Duration(40+rand.IntN(80)) * time.Millisecond)
			i := rand.IntN(len(reps))
			_ = reps[i].f.Close() // the kill: calls in flight end unanswered
			reps[i].stop()
			reps[i] = start()
			kills++
		}
		if err := e.F.RemoveSchedule(c, "churn"); err != nil {
			t.Fatal(err)
		}
		ticks := scheduledTicks(t, e, "churn", "churn", p)
		consecutive(t, ticks, created+100, 100)
		t.Logf("%d ticks, %d kills", len(ticks), kills)
	})
}

// TestScheduleMissed: ticks missed while no scheduler ran give one task
// under MissedRunOnce (for the latest of them) and none under MissedSkip;
// both record the tick as handled.
func TestScheduleMissed(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		day := 24 * time.Hour
		p := job{URL: "https://example.com/daily"}
		for _, m := range []fleet.MissedPolicy{fleet.MissedRunOnce, fleet.MissedSkip} {
			name := "daily-" + string(m)
			q := fleet.NewQueue[job](e.F, name, fleet.QueueOptions{})
			if err := fleet.AddSchedule(c, q, name, fleet.Every(day), p, fleet.ScheduleOptions{Missed: m, Grace: time.Millisecond}); err != nil {
				t.Fatal(err)
			}
			// Nothing ran for three days: the last tick handled is older.
			now := time.Now().UnixMilli()
			latest := now - now%day.Milliseconds()
			last := e.key("fleet:queue:"+name+":schedule:"+name+":last", "fleet:queue:{"+name+"}:schedule:"+name+":last")
			if got, _ := e.get(t, last); got != strconv.FormatInt(latest, 10) {
				t.Fatalf("%s: last at creation %q, want %d", m, got, latest)
			}
			e.do(t, e.Raw.B().Set().Key(last).Value(strconv.FormatInt(latest-3*day.Milliseconds(), 10)).Build())
		}
		stop := runScheduler(t, e.F)
		now := time.Now().UnixMilli()
		latest := strconv.FormatInt(now-now%day.Milliseconds(), 10)
		for _, m := range []fleet.MissedPolicy{fleet.MissedRunOnce, fleet.MissedSkip} {
			name := "daily-" + string(m)
			last := e.key("fleet:queue:"+name+":schedule:"+name+":last", "fleet:queue:{"+name+"}:schedule:"+name+":last")
			waitFor(t, 5*time.Second, func() bool { v, _ := e.get(t, last); return v == latest }, "%s: last not moved to %s", m, latest)
		}
		stop()
		once := scheduledTicks(t, e, "daily-once", "daily-once", p)
		if l, _ := strconv.ParseInt(latest, 10, 64); len(once) != 1 || once[0] != l {
			t.Fatalf("run once: ticks %v, want [%s]", once, latest)
		}
		if skip := e.lrange(t, e.qk("daily-skip").Pending); len(skip) != 0 {
			t.Fatalf("skip: %q", skip)
		}
	})
}

// TestSchedulePause: a paused schedule's ticks pass without tasks, and
// resuming does not fire them; the state survives in Redis (a new Fleet
// lists it).
func TestSchedulePause(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		q := fleet.NewQueue[job](e.F, "pz", fleet.QueueOptions{})
		p := job{URL: "https://example.com/pz"}
		if err := fleet.AddSchedule(c, q, "pz", fleet.Every(50*time.Millisecond), p, fleet.ScheduleOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := e.F.PauseSchedule(c, "pz"); err != nil {
			t.Fatal(err)
		}
		runScheduler(t, e.F)
		list, err := openOn(t, tg, e.Prefix).Schedules(c)
		if err != nil || len(list) != 1 || !list[0].Paused || list[0].Queue != "pz" || list[0].Spec != "every 50" ||
			list[0].Missed != fleet.MissedRunOnce || list[0].Grace != fleet.DefaultScheduleGrace || string(list[0].Payload) != `{"url":"https://example.com/pz","n":0}` {
			t.Fatalf("schedules %+v %v", list, err)
		}
		pausedAt := list[0].Last
		waitFor(t, 5*time.Second, func() bool {
			l, _ := e.F.Schedules(c)
			return l[0].Last.Sub(pausedAt) >= 200*time.Millisecond
		}, "ticks do not pass while paused")
		if got := e.lrange(t, e.qk("pz").Pending); len(got) != 0 {
			t.Fatalf("paused schedule submitted %q", got)
		}
		l, _ := e.F.Schedules(c)
		resumedFrom := l[0].Last.UnixMilli()
		if err := e.F.ResumeSchedule(c, "pz"); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 5*time.Second, func() bool { return len(e.lrange(t, e.qk("pz").Pending)) >= 2 }, "no ticks after resume")
		ticks := scheduledTicks(t, e, "pz", "pz", p)
		if ticks[0] <= resumedFrom {
			t.Fatalf("a paused tick fired: %v, paused until %d", ticks, resumedFrom)
		}
	})
}

// TestScheduleBadInput: each refused call names what is wrong and changes
// nothing stored.
func TestScheduleBadInput(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		q := fleet.NewQueue[job](e.F, "bad", fleet.QueueOptions{})
		other := fleet.NewQueue[job](e.F, "other", fleet.QueueOptions{})
		p := job{URL: "https://example.com/ok"}
		if err := fleet.AddSchedule(c, q, "held", fleet.Every(time.Hour), p, fleet.ScheduleOptions{}); err != nil {
			t.Fatal(err)
		}
		before := e.dump(t)
		cases := []struct {
			name string
			err  error
			want error
			text string
		}{
			{"bad cron", fleet.AddSchedule(c, q, "s", fleet.Cron("61 * * * *"), p, fleet.ScheduleOptions{}), fleet.ErrInvalidArgument, `"61 * * * *"`},
			{"@every", fleet.AddSchedule(c, q, "s", fleet.Cron("@every 1m"), p, fleet.ScheduleOptions{}), fleet.ErrInvalidArgument, "fleet.Every"},
			{"@every in a zone", fleet.AddSchedule(c, q, "s", fleet.Cron("CRON_TZ=Europe/Paris @every 1m"), p, fleet.ScheduleOptions{}), fleet.ErrInvalidArgument, "fleet.Every"},
			{"zero every", fleet.AddSchedule(c, q, "s", fleet.Every(0), p, fleet.ScheduleOptions{}), fleet.ErrInvalidArgument, "Every(0s)"},
			{"no spec", fleet.AddSchedule(c, q, "s", fleet.Spec{}, p, fleet.ScheduleOptions{}), fleet.ErrInvalidArgument, "Spec"},
			{"bad policy", fleet.AddSchedule(c, q, "s", fleet.Every(time.Hour), p, fleet.ScheduleOptions{Missed: "twice"}), fleet.ErrInvalidArgument, "Missed"},
			{"bad grace", fleet.AddSchedule(c, q, "s", fleet.Every(time.Hour), p, fleet.ScheduleOptions{Grace: -1}), fleet.ErrInvalidArgument, "Grace"},
			{"bad name", fleet.AddSchedule(c, q, "a b", fleet.Every(time.Hour), p, fleet.ScheduleOptions{}), fleet.ErrInvalidName, `"a b"`},
			{"bad payload", fleet.AddSchedule(c, q, "s", fleet.Every(time.Hour), job{URL: "nope"}, fleet.ScheduleOptions{}), fleet.ErrInvalidPayload, "url"},
			{"other queue's name", fleet.AddSchedule(c, other, "held", fleet.Every(time.Hour), p, fleet.ScheduleOptions{}), fleet.ErrInvalidArgument, `queue "bad"`},
			{"unknown queue", e.F.AddScheduleJSON(c, "nosuch", "s", fleet.Every(time.Hour), []byte(`{"url":"https://example.com/"}`), fleet.ScheduleOptions{}), fleet.ErrQueueNotFound, `"nosuch"`},
			{"bad json", e.F.AddScheduleJSON(c, "bad", "s", fleet.Every(time.Hour), []byte(`{"url":1}`), fleet.ScheduleOptions{}), fleet.ErrInvalidJSON, "url"},
			{"pause unknown", e.F.PauseSchedule(c, "nosuch"), fleet.ErrScheduleNotFound, `"nosuch"`},
			{"resume unknown", e.F.ResumeSchedule(c, "nosuch"), fleet.ErrScheduleNotFound, `"nosuch"`},
			{"remove unknown", e.F.RemoveSchedule(c, "nosuch"), fleet.ErrScheduleNotFound, `"nosuch"`},
		}
		for _, tc := range cases {
			if !errors.Is(tc.err, tc.want) || !strings.Contains(fmt.Sprint(tc.err), tc.text) {
				t.Errorf("%s: %v, want %v naming %s", tc.name, tc.err, tc.want, tc.text)
			}
		}
		if after := e.dump(t); !maps.Equal(before, after) {
			t.Fatalf("refused calls changed Redis:\nbefore %v\nafter  %v", before, after)
		}
		// The JSON form stores what the typed one does.
		if err := e.F.AddScheduleJSON(c, "bad", "json", fleet.Cron("@hourly"), []byte(`{"url":"https://example.com/j","n":2}`), fleet.ScheduleOptions{}); err != nil {
			t.Fatal(err)
		}
		if got := e.hgetall(t, e.key("fleet:queue:bad:schedule:json", "fleet:queue:{bad}:schedule:json")); got["spec"] != "cron @hourly" || got["payload"] != `{"url":"https://example.com/j","n":2}` || got["queue"] != "bad" || got["paused"] != "0" || got["missed"] != "once" {
			t.Fatalf("stored %v", got)
		}
		if got := e.hgetall(t, e.Prefix+"fleet:schedules"); len(got) != 2 || got["json"] != "bad" || got["held"] != "bad" {
			t.Fatalf("index %v", got)
		}
	})
}

func ExampleAddSchedule() {
	f, done := exampleFleet("schedule")
	defer done()
	ctx := context.Background()

	type Report struct {
		Kind string `json:"kind" validate:"required"`
	}
	q := fleet.NewQueue[Report](f, "reports", fleet.QueueOptions{})
	// Every replica of the host runs the scheduler; each tick gives one task.
	if err := fleet.AddSchedule(ctx, q, "nightly", fleet.Cron("0 3 * * *"), Report{Kind: "daily"}, fleet.ScheduleOptions{Missed: fleet.MissedRunOnce}); err != nil {
		log.Fatal(err)
	}
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() { _ = f.RunScheduler(sctx, fleet.SchedulerOptions{}) }()

	list, _ := f.Schedules(ctx)
	for _, s := range list {
		fmt.Println(s.Name, s.Queue, s.Spec, s.Missed, s.Paused)
	}
	// Output: nightly reports cron 0 3 * * * once false
}
