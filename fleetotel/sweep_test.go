package fleetotel_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/fleetotel"
)

// TestSweepCounted: reservations whose lease ran out are counted when a
// sweeper of a Fleet with the Observer finds them: as lease_expired and
// failed, then retried while attempts are left and dead-lettered after.
func TestSweepCounted(t *testing.T) {
	each(t, func(t *testing.T, tg target) {
		p := prefix(t)
		k := newKit(t, fleetotel.Options{})
		f := open(t, tg, p, k.tel.Observer())
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		qo := fleet.QueueOptions{MaxAttempts: 2, Lease: 200 * time.Millisecond}
		q := fleet.NewQueue[page](f, "sweep", qo)
		if _, err := q.SubmitMany(ctx, []page{{URL: "a"}, {URL: "b"}}); err != nil {
			t.Fatal(err)
		}
		lapse := func(round int) {
			t.Helper()
			var got []*fleet.Task[page]
			waitFor(t, 10*time.Second, func() bool {
				ts, err := q.Reserve(ctx, 2-len(got), 0)
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, ts...)
				return len(got) == 2
			}, "round %d: reserved %d of 2", round, len(got))
			for _, tk := range got {
				if tk.Attempts != round {
					t.Fatalf("round %d: attempts %d", round, tk.Attempts)
				}
				// The lease runs out on the server: wait past the latest.
				time.Sleep(time.Until(tk.Deadline()) + 50*time.Millisecond)
			}
			waitFor(t, 10*time.Second, func() bool {
				st, err := f.Sweep(ctx, fleet.SweeperOptions{Queue: qo})
				if err != nil {
					t.Fatal(err)
				}
				return st.Requeued+st.DeadLettered == 2
			}, "round %d: the sweeper never found the 2 expired leases", round)
		}
		lapse(0) // both re-queued with 1 attempt
		q1 := "messaging.destination.name=sweep,messaging.system=fleet: "
		want := map[string][]string{
			"messaging.client.sent.messages": {"messaging.destination.name=sweep,messaging.operation.name=submit,messaging.system=fleet: 2"},
			"fleet.tasks.lease_expired":      {q1 + "2"},
			"fleet.tasks.failed":             {q1 + "2"},
			"fleet.tasks.retried":            {q1 + "2"},
		}
		k.checkMetrics(t, want)
		lapse(1) // both dead: no attempts left
		want["fleet.tasks.lease_expired"] = []string{q1 + "4"}
		want["fleet.tasks.failed"] = []string{q1 + "4"}
		want["fleet.tasks.dead_lettered"] = []string{q1 + "2"}
		k.checkMetrics(t, want)
		if st, err := f.Queue("sweep").Stats(ctx); err != nil || st.Dead != 2 || st.Pending != 0 || st.InFlight != 0 {
			t.Fatalf("stats %+v, %v", st, err)
		}
	})
}

// TestScheduleTraced: two processes run a scheduler for the same schedule
// (each with its own SDK). Each tick makes a submit span in each process;
// only the one whose try wrote the task says fleet.submit.written 1, and
// the task's handler span is that span's child. The written spans match
// the tasks run, one for one.
func TestScheduleTraced(t *testing.T) {
	each(t, func(t *testing.T, tg target) {
		p := prefix(t)
		k1, k2 := newKit(t, fleetotel.Options{}), newKit(t, fleetotel.Options{})
		f1, f2 := open(t, tg, p, k1.tel.Observer()), open(t, tg, p, k2.tel.Observer())
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		q := fleet.NewQueue[page](f1, "ticks", fleet.QueueOptions{})
		if err := fleet.AddSchedule(ctx, q, "every-100ms", fleet.Every(100*time.Millisecond), page{URL: "tick"}, fleet.ScheduleOptions{Missed: fleet.MissedSkip}); err != nil {
			t.Fatal(err)
		}
		var ran sync.Map // task id -> struct{}
		var runs atomic.Int64
		worker(t, f1, q, k1.tel.Middleware(), func(_ context.Context, tk *fleet.Task[page]) error {
			if tc := tk.TraceContext(); tc["traceparent"] == "" {
				return errors.New("the task carries no trace context")
			}
			ran.Store(tk.ID, struct{}{})
			runs.Add(1)
			return nil
		})
		sctx, stop := context.WithCancel(ctx)
		var wg sync.WaitGroup
		for _, f := range []*fleet.Fleet{f1, f2} {
			wg.Go(func() {
				if err := f.RunScheduler(sctx, fleet.SchedulerOptions{Poll: 50 * time.Millisecond}); err != nil && !errors.Is(err, context.Canceled) {
					t.Error(err)
				}
			})
		}
		waitFor(t, 20*time.Second, func() bool { return runs.Load() >= 5 }, "ran %d ticks", runs.Load())
		stop()
		wg.Wait()
		waitFor(t, 10*time.Second, func() bool {
			st, err := f1.Queue("ticks").Stats(ctx)
			return err == nil && st.Pending == 0 && st.InFlight == 0
		}, "the ticks' tasks were not all run")
		// The handler's span ends after its task's ack: wait for it.
		waitFor(t, 10*time.Second, func() bool { return countNamed(k1, "process ticks") == int(runs.Load()) }, "process spans %d, runs %d", countNamed(k1, "process ticks"), runs.Load())

		written := map[string]string{} // span id -> task id
		for _, k := range []*kit{k1, k2} {
			for _, s := range k.ended() {
				if s.Name != "submit ticks" {
					continue
				}
				a := attrs(s.Attributes)
				if a["fleet.schedule.name"] != "every-100ms" || a["messaging.operation.name"] != "submit" {
					t.Fatalf("submit span attributes %v", a)
				}
				switch a["fleet.submit.written"] {
				case "1":
					written[s.SpanContext.SpanID().String()] = a["messaging.message.id"]
				case "0":
				default:
					t.Fatalf("submit span without fleet.submit.written: %v", a)
				}
			}
		}
		if len(written) != int(runs.Load()) {
			t.Fatalf("%d written submit spans, %d tasks run", len(written), runs.Load())
		}
		for _, s := range k1.ended() {
			if s.Name != "process ticks" {
				continue
			}
			id := attrs(s.Attributes)["messaging.message.id"]
			if got, ok := written[s.Parent.SpanID().String()]; !ok || got != id {
				t.Fatalf("handler span of %s has parent %s, which wrote %q", id, s.Parent.SpanID(), got)
			}
			if _, ok := ran.Load(id); !ok {
				t.Fatalf("handler span of %s, a task that did not run", id)
			}
		}
	})
}

// countNamed counts the ended spans named name.
func countNamed(k *kit, name string) int {
	n := 0
	for _, s := range k.ended() {
		if s.Name == name {
			n++
		}
	}
	return n
}
