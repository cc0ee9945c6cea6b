package fleet_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/internal/redistest"
)

// stepsKey is the key of task id's durable steps in queue name.
func (e *env) stepsKey(name, id string) string { return e.qk(name).Pending + ":steps:" + id }

// stepRecs reads task id's stored steps (name -> record JSON).
func (e *env) stepRecs(t *testing.T, name, id string) map[string]map[string]any {
	t.Helper()
	raw, err := e.compat().HGetAll(context.Background(), e.stepsKey(name, id)).Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]any{}
	for k, v := range raw {
		var m map[string]any
		if err := json.Unmarshal([]byte(v), &m); err != nil {
			t.Fatalf("step %s: %q: %v", k, v, err)
		}
		out[k] = m
	}
	return out
}

// TestStepMemoized: a step done in a run that failed later is not run
// again by the retry, which gets its recorded result; the failed step is
// recorded as failed, then run again and recorded done; the ack of a task
// that keeps no record deletes its steps.
func TestStepMemoized(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		q := fleet.NewQueue[job](e.F, "steps", fleet.QueueOptions{MaxAttempts: 3, BackoffBase: time.Millisecond, BackoffMax: time.Millisecond})
		id, err := q.Submit(c, jobN(1))
		if err != nil {
			t.Fatal(err)
		}
		var loginRuns, fetchRuns atomic.Int32
		login := func(context.Context) (string, error) { loginRuns.Add(1); return "cookie-1", nil }
		fetch := func(context.Context) (int, error) {
			if fetchRuns.Add(1) == 1 {
				return 0, errors.New("503")
			}
			return 50, nil
		}

		a := reserveAll(t, q, 1)[0]
		if v, err := fleet.Step(c, a, "login", login); err != nil || v != "cookie-1" {
			t.Fatalf("login: %q, %v", v, err)
		}
		if _, err := fleet.Step(c, a, "fetch", fetch); err == nil || err.Error() != "503" {
			t.Fatalf("fetch: %v, want 503", err)
		}
		recs := e.stepRecs(t, "steps", id)
		if len(recs) != 2 || recs["login"]["s"] != "done" || recs["login"]["r"] != "cookie-1" || recs["login"]["i"] != 0.0 || recs["login"]["a"] != 1.0 ||
			recs["fetch"]["s"] != "failed" || recs["fetch"]["e"] != "503" || recs["fetch"]["i"] != 1.0 {
			t.Fatalf("after run 1: %v", recs)
		}
		if ttl, _ := e.compat().PTTL(c, e.stepsKey("steps", id)).Result(); ttl <= 0 {
			t.Fatalf("steps PTTL %v, want a lifetime", ttl)
		}
		if err := a.Nack(c, errors.New("503")); err != nil {
			t.Fatal(err)
		}

		b := reserveAll(t, q, 1)[0]
		if b.ID != id || b.Attempts != 1 {
			t.Fatalf("run 2: %s attempts %d", b.ID, b.Attempts)
		}
		if v, err := fleet.Step(c, b, "login", login); err != nil || v != "cookie-1" {
			t.Fatalf("login again: %q, %v", v, err)
		}
		if v, err := fleet.Step(c, b, "fetch", fetch); err != nil || v != 50 {
			t.Fatalf("fetch again: %d, %v", v, err)
		}
		if loginRuns.Load() != 1 || fetchRuns.Load() != 2 {
			t.Fatalf("login ran %d times, fetch %d; want 1 and 2", loginRuns.Load(), fetchRuns.Load())
		}
		got, err := fleet.RecordedSteps(c, b)
		if err != nil || len(got) != 2 || got[0].Name != "login" || got[1].Name != "fetch" || got[1].State != fleet.StepDone || got[1].Attempts != 2 || string(got[1].Result) != "50" {
			t.Fatalf("RecordedSteps: %+v, %v", got, err)
		}
		rec, err := q.Lookup(c, id)
		if err != nil || len(rec.Steps) != 2 || rec.Steps[0].Name != "login" || rec.Steps[1].Attempts != 2 {
			t.Fatalf("Lookup steps: %+v, %v", rec.Steps, err)
		}
		if err := b.Ack(c); err != nil {
			t.Fatal(err)
		}
		if n, err := e.compat().Exists(c, e.stepsKey("steps", id)).Result(); err != nil || n != 0 {
			t.Fatalf("steps after the ack: exists %d, %v", n, err)
		}
	})
}

// TestStepKeptWithRecord: a task that keeps its record keeps its steps as
// long, and Lookup shows them after its ack.
func TestStepKeptWithRecord(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		q := fleet.NewQueue[job](e.F, "stepsrec", fleet.QueueOptions{Retention: time.Hour})
		id, err := q.Submit(c, jobN(1))
		if err != nil {
			t.Fatal(err)
		}
		a := reserveAll(t, q, 1)[0]
		if _, err := fleet.Step(c, a, "one", func(context.Context) (map[string]int, error) { return map[string]int{"n": 1}, nil }); err != nil {
			t.Fatal(err)
		}
		if err := a.Ack(c); err != nil {
			t.Fatal(err)
		}
		ttl, err := e.compat().PTTL(c, e.stepsKey("stepsrec", id)).Result()
		if err != nil || ttl <= 59*time.Minute || ttl > time.Hour {
			t.Fatalf("steps PTTL %v, %v; want the retention", ttl, err)
		}
		rec, err := q.Lookup(c, id)
		if err != nil || rec.Status != fleet.TaskDone || len(rec.Steps) != 1 || string(rec.Steps[0].Result) != `{"n":1}` {
			t.Fatalf("Lookup: %s %+v, %v", rec.Status, rec.Steps, err)
		}
	})
}

// TestStepLeaseLost: a holder whose reservation is not the one that
// exists reads and records nothing: ErrLeaseLost, and the steps stay as
// they were.
func TestStepLeaseLost(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		q := fleet.NewQueue[job](e.F, "stepslost", fleet.QueueOptions{})
		id, err := q.Submit(c, jobN(1))
		if err != nil {
			t.Fatal(err)
		}
		a := reserveAll(t, q, 1)[0]
		if _, err := fleet.Step(c, a, "one", func(context.Context) (int, error) { return 1, nil }); err != nil {
			t.Fatal(err)
		}
		// A stale holder of a first run reads nothing (none can be
		// recorded yet): its fn runs, and its record is refused.
		stale := fleet.StaleTask(a, a.Token()+"x")
		_, err = fleet.Step(c, stale, "two", func(context.Context) (int, error) { return 2, nil })
		if !errors.Is(err, fleet.ErrLeaseLost) {
			t.Fatalf("stale step: %v, want ErrLeaseLost", err)
		}
		if recs := e.stepRecs(t, "stepslost", id); len(recs) != 1 || recs["one"] == nil {
			t.Fatalf("steps: %v", recs)
		}
		// A holder that read its steps and then lost the lease runs fn (its
		// effect may repeat, as documented) but cannot record it.
		if err := a.Release(c); err != nil {
			t.Fatal(err)
		}
		_, err = fleet.Step(c, a, "two", func(context.Context) (int, error) { return 2, nil })
		if !errors.Is(err, fleet.ErrLeaseLost) {
			t.Fatalf("step after release: %v, want ErrLeaseLost", err)
		}
		if recs := e.stepRecs(t, "stepslost", id); len(recs) != 1 {
			t.Fatalf("steps after a lost record: %v", recs)
		}
	})
}

// TestStepBadInput: a run whose steps differ from the recorded run's, a
// name used twice, an empty or over-long name, a result too large or one
// that does not encode, a recorded result read into another type: each a
// clear error, and the stored steps unchanged.
func TestStepBadInput(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		q := fleet.NewQueue[job](e.F, "stepsbad", fleet.QueueOptions{MaxAttempts: 5, BackoffBase: time.Millisecond, BackoffMax: time.Millisecond})
		id, err := q.Submit(c, jobN(1))
		if err != nil {
			t.Fatal(err)
		}
		one := func(context.Context) (int, error) { return 1, nil }
		a := reserveAll(t, q, 1)[0]
		if _, err := fleet.Step(c, a, "a", one); err != nil {
			t.Fatal(err)
		}
		if _, err := fleet.Step(c, a, "a", one); !errors.Is(err, fleet.ErrInvalidArgument) || !errors.Is(err, fleet.ErrPermanent) {
			t.Fatalf("name twice: %v", err)
		}
		for _, name := range []string{"", strings.Repeat("n", 201), "\xff"} {
			if _, err := fleet.Step(c, a, name, one); !errors.Is(err, fleet.ErrInvalidArgument) {
				t.Fatalf("name %q: %v", name, err)
			}
		}
		big := func(context.Context) (string, error) { return strings.Repeat("x", fleet.MaxStepBytes), nil }
		if _, err := fleet.Step(c, a, "big", big); !errors.Is(err, fleet.ErrInvalidArgument) || !errors.Is(err, fleet.ErrPermanent) || !strings.Contains(err.Error(), "MaxStepBytes") {
			t.Fatalf("big result: %v", err)
		}
		bad := func(context.Context) (func(), error) { return func() {}, nil }
		if _, err := fleet.Step(c, a, "bad", bad); !errors.Is(err, fleet.ErrInvalidArgument) {
			t.Fatalf("result that does not encode: %v", err)
		}
		if _, err := fleet.Step[int](c, a, "nilfn", nil); !errors.Is(err, fleet.ErrInvalidArgument) {
			t.Fatalf("nil fn: %v", err)
		}
		if _, err := fleet.Step(c, nil, "x", one); !errors.Is(err, fleet.ErrInvalidArgument) {
			t.Fatalf("nil task: %v", err)
		}
		before := e.stepRecs(t, "stepsbad", id)
		if len(before) != 3 || before["a"]["s"] != "done" || before["big"]["s"] != "failed" || before["bad"]["s"] != "failed" {
			t.Fatalf("steps after run 1: %v", before)
		}
		if err := a.Nack(c, errors.New("again")); err != nil {
			t.Fatal(err)
		}

		// Run 2 puts another step first: nondeterministic.
		b := reserveAll(t, q, 1)[0]
		ran := false
		_, err = fleet.Step(c, b, "z", func(context.Context) (int, error) { ran = true; return 0, nil })
		if !errors.Is(err, fleet.ErrNondeterministic) || !errors.Is(err, fleet.ErrPermanent) || ran || !strings.Contains(err.Error(), `"a"`) {
			t.Fatalf("other step first: %v (ran %v)", err, ran)
		}
		if err := b.Nack(c, errors.New("again")); err != nil {
			t.Fatal(err)
		}
		// Run 3 reads "a" into another type, and makes a sleep of a step.
		d := reserveAll(t, q, 1)[0]
		if _, err := fleet.Step(c, d, "a", func(context.Context) (string, error) { return "", nil }); !errors.Is(err, fleet.ErrInvalidArgument) {
			t.Fatalf("recorded result into another type: %v", err)
		}
		if err := fleet.Sleep(c, d, "big", time.Hour); !errors.Is(err, fleet.ErrNondeterministic) {
			t.Fatalf("a step become a sleep: %v", err)
		}
		if after := e.stepRecs(t, "stepsbad", id); len(after) != 3 || after["a"]["r"] != before["a"]["r"] || after["big"]["a"] != before["big"]["a"] {
			t.Fatalf("steps changed: %v, were %v", after, before)
		}
	})
}

// TestSleepWorker: a worker's handler that sleeps leaves its slot at once,
// uncounted: the task waits in :scheduled with no lease, shown as
// sleeping by Lookup, then resumes from the top with its steps memoized,
// and its ack deletes its steps.
func TestSleepWorker(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		q := fleet.NewQueue[job](e.F, "sleepers", fleet.QueueOptions{})
		var runs, before, after atomic.Int32
		slept := make(chan struct{}, 1)
		done := make(chan struct{})
		w := fleet.NewBatchWorker(e.F, fleet.WorkerOptions{Type: "sleeper", ID: "w1", Slots: 1}, q,
			fleet.BatchFunc[wcfg, out, job](func(ctx context.Context, s *fleet.Slot[wcfg, out], t *fleet.Task[job]) error {
				runs.Add(1)
				if _, err := fleet.Step(ctx, t, "before", func(context.Context) (int, error) { return int(before.Add(1)), nil }); err != nil {
					return err
				}
				if err := fleet.Sleep(ctx, t, "cool-down", 700*time.Millisecond); err != nil {
					select {
					case slept <- struct{}{}:
					default:
					}
					return err
				}
				if _, err := fleet.Step(ctx, t, "after", func(context.Context) (int, error) { return int(after.Add(1)), nil }); err != nil {
					return err
				}
				close(done)
				return nil
			}))
		startWorker(t, w)
		id, err := q.Submit(c, jobN(1))
		if err != nil {
			t.Fatal(err)
		}
		<-slept
		// The snooze follows the handler's return: wait for the task to be
		// scheduled, then check that it holds nothing.
		var rec fleet.TaskRecord
		waitFor(t, 5*time.Second, func() bool {
			rec, err = q.Lookup(c, id)
			return err == nil && rec.Status == fleet.TaskScheduled
		}, "task %s scheduled", id)
		if rec.Attempts != 0 || rec.Worker != "" || len(rec.Steps) != 2 || rec.Steps[1].State != fleet.StepSleep || rec.Steps[1].Wake.IsZero() {
			t.Fatalf("sleeping: %+v", rec)
		}
		if n, _ := e.compat().ZCard(c, e.qk("sleepers").Processing).Result(); n != 0 {
			t.Fatalf("a sleeping task holds a lease: %d in processing", n)
		}
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("the task did not resume")
		}
		if runs.Load() != 2 || before.Load() != 1 || after.Load() != 1 {
			t.Fatalf("runs %d, before %d, after %d; want 2, 1, 1", runs.Load(), before.Load(), after.Load())
		}
		waitFor(t, 5*time.Second, func() bool {
			n, err := e.compat().Exists(c, e.stepsKey("sleepers", id)).Result()
			return err == nil && n == 0
		}, "steps of %s deleted", id)
	})
}

// TestStepAfterDeadLetter: a task dead-lettered after a recorded step and
// requeued by an operator runs again with that step memoized (its dead
// letter's body says it has steps, though its attempts start over).
func TestStepAfterDeadLetter(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		q := fleet.NewQueue[job](e.F, "stepsdead", fleet.QueueOptions{})
		id, err := q.Submit(c, jobN(1))
		if err != nil {
			t.Fatal(err)
		}
		var ran atomic.Int32
		one := func(context.Context) (int, error) { return int(ran.Add(1)), nil }
		a := reserveAll(t, q, 1)[0]
		if _, err := fleet.Step(c, a, "a", one); err != nil {
			t.Fatal(err)
		}
		if err := a.DeadLetter(c, errors.New("operator will retry")); err != nil {
			t.Fatal(err)
		}
		if err := q.RequeueDead(c, id); err != nil {
			t.Fatal(err)
		}
		b := reserveAll(t, q, 1)[0]
		if v, err := fleet.Step(c, b, "a", one); err != nil || v != 1 || ran.Load() != 1 {
			t.Fatalf("step after the requeue: %d, %v, fn ran %d times; want the recorded 1 and one run", v, err, ran.Load())
		}
		if err := b.Ack(c); err != nil {
			t.Fatal(err)
		}
		if n, _ := e.compat().Exists(c, e.stepsKey("stepsdead", id)).Result(); n != 0 {
			t.Fatalf("steps left after the ack")
		}
	})
}
