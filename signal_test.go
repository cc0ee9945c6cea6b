package fleet_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/internal/redistest"
)

// stepFields reads task id's steps hash as stored (field -> value).
func (e *env) stepFields(t *testing.T, name, id string) map[string]string {
	t.Helper()
	raw, err := e.compat().HGetAll(context.Background(), e.stepsKey(name, id)).Result()
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// stepOf decodes field name of fields, a step's record.
func stepOf(t *testing.T, fields map[string]string, name string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(fields[name]), &m); err != nil {
		t.Fatalf("step %s: %q: %v", name, fields[name], err)
	}
	return m
}

// TestSignalWakesParked: a wait parks the task (its body in :scheduled
// and in the steps' "\xffpark", the signal named in "\xffwait"); a signal
// makes it ready at once; the next run's wait returns the value, recorded
// as the step's result; the name cannot be sent again; the ack deletes
// the steps; a signal to the ended task is refused.
func TestSignalWakesParked(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		q := fleet.NewQueue[job](e.F, "sig", fleet.QueueOptions{})
		k := e.qk("sig")
		id, err := q.Submit(c, jobN(1))
		if err != nil {
			t.Fatal(err)
		}
		a := reserveAll(t, q, 1)[0]
		_, err = fleet.WaitSignal[string](c, a, "approved", time.Hour)
		var se *fleet.SleepError
		if !errors.As(err, &se) || se.Signal != "approved" || !errors.Is(err, fleet.ErrSuspended) || time.Until(se.Until) < 59*time.Minute {
			t.Fatalf("wait: %v", err)
		}
		if err := a.Suspend(c, err); err != nil {
			t.Fatal(err)
		}
		parked, err := e.compat().ZRange(c, k.Scheduled, 0, -1).Result()
		if err != nil || len(parked) != 1 {
			t.Fatalf("scheduled %q, %v", parked, err)
		}
		f := e.stepFields(t, "sig", id)
		if f["\xffpark"] != parked[0] || f["\xffwait"] != `["approved"]` || len(f) != 3 || stepOf(t, f, "approved")["s"] != "wait" {
			t.Fatalf("parked steps: %q", f)
		}
		rec, err := q.Lookup(c, id)
		if err != nil || rec.Status != fleet.TaskScheduled || len(rec.Steps) != 1 || rec.Steps[0].State != fleet.StepWaiting || rec.Steps[0].Name != "approved" {
			t.Fatalf("lookup while parked: %+v, %v", rec, err)
		}

		if err := q.Signal(c, id, "approved", "yes"); err != nil {
			t.Fatal(err)
		}
		if n, _ := e.compat().ZCard(c, k.Scheduled).Result(); n != 0 {
			t.Fatalf("%d still scheduled after the signal", n)
		}
		if got, _ := e.compat().LRange(c, k.Pending, 0, -1).Result(); len(got) != 1 || got[0] != parked[0] {
			t.Fatalf("pending %q, want the parked body", got)
		}
		f = e.stepFields(t, "sig", id)
		if f["\xffsig:approved"] != `"yes"` || f["\xffpark"] != "" || len(f) != 3 {
			t.Fatalf("after the signal: %q", f)
		}

		b := reserveAll(t, q, 1)[0]
		if b.Attempts != 0 {
			t.Fatalf("attempts %d after a wait, want 0", b.Attempts)
		}
		v, err := fleet.WaitSignal[string](c, b, "approved", time.Hour)
		if err != nil || v != "yes" {
			t.Fatalf("resumed wait: %q, %v", v, err)
		}
		f = e.stepFields(t, "sig", id)
		if st := stepOf(t, f, "approved"); st["s"] != "signaled" || st["r"] != "yes" || f["\xffsig:approved"] != "\xffd" || len(f) != 2 {
			t.Fatalf("after the wait: %q", f)
		}
		if err := q.Signal(c, id, "approved", "again"); !errors.Is(err, fleet.ErrSignalSent) {
			t.Fatalf("second signal: %v, want ErrSignalSent", err)
		}
		if got := e.stepFields(t, "sig", id); got["\xffsig:approved"] != "\xffd" || len(got) != 2 {
			t.Fatalf("a refused signal changed the steps: %q", got)
		}
		if err := b.Ack(c); err != nil {
			t.Fatal(err)
		}
		if n, _ := e.compat().Exists(c, e.stepsKey("sig", id)).Result(); n != 0 {
			t.Fatal("the ack left the steps")
		}
		if err := q.Signal(c, id, "other", 1); !errors.Is(err, fleet.ErrTaskNotFound) {
			t.Fatalf("signal to an acked task: %v, want ErrTaskNotFound", err)
		}
		if n, _ := e.compat().Exists(c, e.stepsKey("sig", id)).Result(); n != 0 {
			t.Fatal("a refused signal wrote the steps")
		}
	})
}

// TestSignalBeforeWait: a signal sent to a pending task is kept and
// returned by the wait at once; one sent while the task runs, between
// its wait's record and its snooze (the lost wake-up), makes the snooze
// ready it at once instead of parking it.
func TestSignalBeforeWait(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		q := fleet.NewQueue[job](e.F, "early", fleet.QueueOptions{})
		k := e.qk("early")
		id, err := q.Submit(c, jobN(1))
		if err != nil {
			t.Fatal(err)
		}
		if err := q.Signal(c, id, "go", map[string]int{"n": 7}); err != nil {
			t.Fatal(err)
		}
		if f := e.stepFields(t, "early", id); f["\xffsig:go"] != `{"n":7}` || len(f) != 1 {
			t.Fatalf("kept: %q", f)
		}
		if ttl, _ := e.compat().PTTL(c, e.stepsKey("early", id)).Result(); ttl < 6*24*time.Hour {
			t.Fatalf("a kept signal lives %v, want about 7 days", ttl)
		}
		a := reserveAll(t, q, 1)[0]
		type goSig struct{ N int }
		v, err := fleet.WaitSignal[goSig](c, a, "go", time.Hour)
		if err != nil || v.N != 7 {
			t.Fatalf("wait: %+v, %v", v, err)
		}
		// The race: the second wait is recorded, the signal comes, then
		// the run ends with the snooze.
		_, werr := fleet.WaitSignal[int](c, a, "second", time.Hour)
		if !errors.Is(werr, fleet.ErrSuspended) {
			t.Fatalf("second wait: %v", werr)
		}
		if err := q.Signal(c, id, "second", 2); err != nil {
			t.Fatal(err)
		}
		if f := e.stepFields(t, "early", id); f["\xffsig:second"] != "2" || f["\xffwait"] != `["second"]` {
			t.Fatalf("signal to the running task: %q", f)
		}
		if err := a.Suspend(c, werr); err != nil {
			t.Fatal(err)
		}
		if n, _ := e.compat().ZCard(c, k.Scheduled).Result(); n != 0 {
			t.Fatalf("parked with its signal there: %d scheduled", n)
		}
		if n, _ := e.compat().LLen(c, k.Pending).Result(); n != 1 {
			t.Fatalf("pending %d, want the task ready", n)
		}
		b := reserveAll(t, q, 1)[0]
		if v, err := fleet.WaitSignal[goSig](c, b, "go", time.Hour); err != nil || v.N != 7 {
			t.Fatalf("memoized first wait: %+v, %v", v, err)
		}
		if v, err := fleet.WaitSignal[int](c, b, "second", time.Hour); err != nil || v != 2 {
			t.Fatalf("second wait: %v, %v", v, err)
		}
		if err := b.Ack(c); err != nil {
			t.Fatal(err)
		}
	})
}

// TestSignalTimeout: a wait whose timeout passes runs again and gets
// ErrWaitTimeout (ErrPermanent), recorded: a later signal of the name
// is refused, and a later run gets the same error.
func TestSignalTimeout(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		q := fleet.NewQueue[job](e.F, "late", fleet.QueueOptions{})
		id, err := q.Submit(c, jobN(1))
		if err != nil {
			t.Fatal(err)
		}
		a := reserveAll(t, q, 1)[0]
		_, err = fleet.WaitSignal[int](c, a, "ok", 300*time.Millisecond)
		if err := a.Suspend(c, err); err != nil {
			t.Fatal(err)
		}
		b := reserveAll(t, q, 1)[0] // due after 300 ms
		if _, err := fleet.WaitSignal[int](c, b, "ok", 300*time.Millisecond); !errors.Is(err, fleet.ErrWaitTimeout) || !errors.Is(err, fleet.ErrPermanent) {
			t.Fatalf("resumed wait: %v, want ErrWaitTimeout", err)
		}
		f := e.stepFields(t, "late", id)
		if stepOf(t, f, "ok")["s"] != "timeout" || f["\xffsig:ok"] != "\xfft" || f["\xffwait"] != "" {
			t.Fatalf("timed out: %q", f)
		}
		if err := q.Signal(c, id, "ok", 1); !errors.Is(err, fleet.ErrSignalSent) {
			t.Fatalf("signal after the timeout: %v", err)
		}
		if err := b.Nack(c, errors.New("again")); err != nil {
			t.Fatal(err)
		}
		d := reserveAll(t, q, 1)[0]
		if _, err := fleet.WaitSignal[int](c, d, "ok", time.Hour); !errors.Is(err, fleet.ErrWaitTimeout) {
			t.Fatalf("a later run: %v, want the recorded timeout", err)
		}
	})
}

// TestSignalBadInput: bad ids, names and values are refused, an unknown
// task is ErrTaskNotFound, an ended one (a kept record, a dead letter)
// ErrTaskFinished, a value read into another type ErrInvalidArgument;
// nothing stored changes.
func TestSignalBadInput(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		q := fleet.NewQueue[job](e.F, "badsig", fleet.QueueOptions{})
		id, err := q.Submit(c, jobN(1))
		if err != nil {
			t.Fatal(err)
		}
		if err := q.Signal(c, id, "n", "text"); err != nil {
			t.Fatal(err)
		}
		before := e.dump(t)
		for _, tc := range []struct {
			id, name string
			v        any
			want     error
		}{
			{"", "n", 1, fleet.ErrInvalidArgument},
			{id, "", 1, fleet.ErrInvalidArgument},
			{id, "bad\xff", 1, fleet.ErrInvalidArgument},
			{id, string(make([]byte, 201)), 1, fleet.ErrInvalidArgument},
			{id, "c", make(chan int), fleet.ErrInvalidArgument},
			{id, "big", string(make([]byte, fleet.MaxStepBytes)), fleet.ErrInvalidArgument},
			{"no-such-task", "n", 1, fleet.ErrTaskNotFound},
			{id, "n", "again", fleet.ErrSignalSent},
		} {
			if err := q.Signal(c, tc.id, tc.name, tc.v); !errors.Is(err, tc.want) {
				t.Errorf("Signal(%q, %.20q): %v, want %v", tc.id, tc.name, err, tc.want)
			}
		}
		if after := e.dump(t); !maps.Equal(before, after) {
			t.Fatalf("bad signals changed what is stored:\n%v\n%v", before, after)
		}
		a := reserveAll(t, q, 1)[0]
		if _, err := fleet.WaitSignal[int](c, a, "n", 0); !errors.Is(err, fleet.ErrInvalidArgument) {
			t.Fatalf("timeout 0: %v", err)
		}
		if _, err := fleet.WaitSignal[int](c, a, "n", time.Hour); !errors.Is(err, fleet.ErrInvalidArgument) || !errors.Is(err, fleet.ErrPermanent) {
			t.Fatalf("a string read as an int: %v", err)
		}
		if st := stepOf(t, e.stepFields(t, "badsig", id), "n"); st["s"] != "signaled" || st["r"] != "text" {
			t.Fatalf("the value is not kept: %v", st)
		}
		if err := a.DeadLetter(c, errors.New("bad")); err != nil {
			t.Fatal(err)
		}
		if err := q.Signal(c, id, "later", 1); !errors.Is(err, fleet.ErrTaskFinished) {
			t.Fatalf("signal to a dead letter: %v, want ErrTaskFinished", err)
		}
		tid, err := q.SubmitWith(c, jobN(2), fleet.SubmitOptions{Track: true})
		if err != nil {
			t.Fatal(err)
		}
		if err := reserveAll(t, q, 1)[0].Ack(c); err != nil {
			t.Fatal(err)
		}
		if err := q.Signal(c, tid, "later", 1); !errors.Is(err, fleet.ErrTaskFinished) {
			t.Fatalf("signal to a done tracked task: %v, want ErrTaskFinished", err)
		}
		if err := a.Suspend(c, errors.New("not a suspension")); !errors.Is(err, fleet.ErrInvalidArgument) {
			t.Fatalf("Suspend of a plain error: %v", err)
		}
	})
}

// TestSignalWorker: a worker's handler does a step, waits for a signal
// that another Fleet sends, and finishes with its value; while it waits
// it holds no lease, and the step runs once. On a sharded queue the
// signal finds the task's shard.
func TestSignalWorker(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		all := []int{1}
		if tg.Tagged {
			all = append(all, 3) // shards need the tagged layout
		}
		for _, shards := range all {
			name := "waiters" + string(rune('0'+shards))
			q := fleet.NewQueue[job](e.F, name, fleet.QueueOptions{Shards: shards})
			var runs, steps atomic.Int32
			waiting := make(chan struct{}, 1)
			got := make(chan string, 1)
			w := fleet.NewBatchWorker(e.F, fleet.WorkerOptions{Type: "waiter", ID: "w-" + name, Slots: 1}, q,
				fleet.BatchFunc[wcfg, out, job](func(ctx context.Context, s *fleet.Slot[wcfg, out], t *fleet.Task[job]) error {
					runs.Add(1)
					if _, err := fleet.Step(ctx, t, "prepare", func(context.Context) (int, error) { return int(steps.Add(1)), nil }); err != nil {
						return err
					}
					v, err := fleet.WaitSignal[string](ctx, t, "approved", time.Hour)
					if err != nil {
						select {
						case waiting <- struct{}{}:
						default:
						}
						return err
					}
					got <- v
					return nil
				}))
			startWorker(t, w)
			id, err := q.Submit(c, jobN(1))
			if err != nil {
				t.Fatal(err)
			}
			<-waiting
			waitFor(t, 5*time.Second, func() bool {
				rec, err := q.Lookup(c, id)
				return err == nil && rec.Status == fleet.TaskScheduled && len(rec.Steps) == 2 && rec.Steps[1].State == fleet.StepWaiting
			}, "task %s parked", id)
			for i := range shards {
				proc := e.qk(name).Processing
				if shards > 1 {
					proc = e.shard(name, i).Processing
				}
				if n, _ := e.compat().ZCard(c, proc).Result(); n != 0 {
					t.Fatalf("a waiting task holds a lease: %d in processing", n)
				}
			}
			other := openOn(t, tg, e.Prefix)
			oq := fleet.NewQueue[job](other, name, fleet.QueueOptions{Shards: shards})
			if err := oq.Signal(c, id, "approved", "by ops"); err != nil {
				t.Fatal(err)
			}
			select {
			case v := <-got:
				if v != "by ops" {
					t.Fatalf("value %q", v)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the signal did not resume the task")
			}
			if runs.Load() != 2 || steps.Load() != 1 {
				t.Fatalf("runs %d, step runs %d; want 2, 1", runs.Load(), steps.Load())
			}
		}
	})
}

// TestSignalSealed: on a queue that seals, a signal's value is stored
// sealed (its plain text nowhere in Redis) and the wait opens it.
func TestSignalSealed(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		q := fleet.NewQueue[job](e.F, "sigsealed", fleet.QueueOptions{Sealer: keyring(t, newKey(t, "k1"))})
		id, err := q.Submit(c, jobN(1))
		if err != nil {
			t.Fatal(err)
		}
		const secret = "card 4111-1111"
		if err := q.Signal(c, id, "pin", secret); err != nil {
			t.Fatal(err)
		}
		for k, v := range e.dump(t) {
			if strings.Contains(v, secret) {
				t.Fatalf("%s holds the signal's value in plain text: %q", k, v)
			}
		}
		a := reserveAll(t, q, 1)[0]
		if v, err := fleet.WaitSignal[string](c, a, "pin", time.Hour); err != nil || v != secret {
			t.Fatalf("wait: %q, %v", v, err)
		}
		if st := stepOf(t, e.stepFields(t, "sigsealed", id), "pin"); st["s"] != "signaled" || strings.Contains(fmt.Sprint(st["r"]), secret) {
			t.Fatalf("recorded: %v", st)
		}
	})
}
