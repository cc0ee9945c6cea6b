package fleet_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/internal/redistest"
)

// logKey is the key of task id's log in queue name.
func (e *env) logKey(name, id string) string { return e.qk(name).Pending + ":log:" + id }

// attrString reads a string attribute of a log line.
func attrString(t *testing.T, l fleet.LogLine, key string) string {
	t.Helper()
	var s string
	if err := json.Unmarshal(l.Attrs[key], &s); err != nil {
		t.Fatalf("attr %s of %+v: %v", key, l, err)
	}
	return s
}

// TestTaskLogRuns: three runs of a task (a nack, a snooze, an ack that
// keeps the record) leave three entries that tell the attempts apart,
// each with its lines in order, any level, markup and newlines kept as
// given; the log lives as long as the record (PTTL of the retention).
func TestTaskLogRuns(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		q := fleet.NewQueue[job](e.F, "logs", fleet.QueueOptions{Retention: time.Hour, MaxAttempts: 3, BackoffBase: time.Millisecond, BackoffMax: time.Millisecond})
		id, err := q.Submit(c, jobN(1))
		if err != nil {
			t.Fatal(err)
		}
		markup := `<script>alert("x")</script>` + "\nline two & more"
		a := reserveAll(t, q, 1)[0]
		a.Logger().Info("fetch", "html", markup, "n", 1)
		a.Logger().Debug("details", slog.Group("req", "status", 503))
		if err := a.Nack(c, errors.New("503")); err != nil {
			t.Fatal(err)
		}
		key := e.logKey("logs", id)
		if n, err := e.compat().LLen(c, key).Result(); err != nil || n != 1 {
			t.Fatalf("log after the nack: %d entries, %v", n, err)
		}
		b := reserveAll(t, q, 1)[0]
		if b.ID != id || b.Attempts != 1 {
			t.Fatalf("second run %s attempts %d", b.ID, b.Attempts)
		}
		b.Logger().Warn("cool down")
		if err := b.Snooze(c, 0); err != nil {
			t.Fatal(err)
		}
		d := reserveAll(t, q, 1)[0]
		d.Logger().Info("done")
		if err := d.SetResult(map[string]int{"pages": 3}); err != nil {
			t.Fatal(err)
		}
		if err := d.Ack(c); err != nil {
			t.Fatal(err)
		}

		rec, err := q.Lookup(c, id)
		if err != nil {
			t.Fatal(err)
		}
		if rec.Status != fleet.TaskDone || len(rec.Logs) != 3 {
			t.Fatalf("record %s with %d logs: %+v", rec.Status, len(rec.Logs), rec.Logs)
		}
		if got := []int{rec.Logs[0].Attempt, rec.Logs[1].Attempt, rec.Logs[2].Attempt}; !slices.Equal(got, []int{1, 2, 2}) {
			t.Fatalf("attempts %v, want [1 2 2]", got)
		}
		first := rec.Logs[0]
		if len(first.Lines) != 2 || first.Dropped != 0 || first.Worker != "" || first.Sealed != "" || time.Since(first.At) > time.Minute {
			t.Fatalf("first run's log %+v", first)
		}
		if l := first.Lines[0]; l.Level != "INFO" || l.Message != "fetch" || attrString(t, l, "html") != markup || string(l.Attrs["n"]) != "1" || time.Since(l.Time) > time.Minute {
			t.Fatalf("first line %+v", l)
		}
		if l := first.Lines[1]; l.Level != "DEBUG" || l.Message != "details" || string(l.Attrs["req"]) != `{"status":503}` {
			t.Fatalf("second line %+v", l)
		}
		if l := rec.Logs[1].Lines; len(l) != 1 || l[0].Level != "WARN" || l[0].Message != "cool down" {
			t.Fatalf("snoozed run's lines %+v", l)
		}
		if l := rec.Logs[2].Lines; len(l) != 1 || l[0].Message != "done" {
			t.Fatalf("acked run's lines %+v", l)
		}
		// As stored: a list of three JSON objects, living as the record.
		raw, err := e.compat().LRange(c, key, 0, -1).Result()
		if err != nil || len(raw) != 3 {
			t.Fatalf("stored log %q %v", raw, err)
		}
		for i, s := range raw {
			var m map[string]json.RawMessage
			if err := json.Unmarshal([]byte(s), &m); err != nil || m["lines"] == nil || m["attempt"] == nil {
				t.Fatalf("entry %d %s: %v", i, s, err)
			}
		}
		if ttl, err := e.compat().PTTL(c, key).Result(); err != nil || ttl < 59*time.Minute || ttl > time.Hour {
			t.Fatalf("log PTTL %v %v, want the retention's hour", ttl, err)
		}
	})
}

// TestTaskLogEndsWithTask: an ack that keeps no record deletes the task's
// log, whether it was written by an earlier run that failed, or by one
// that was snoozed (the body's "lg" tells the next reservation), and the
// queue's keys are left as a queue with no log has them. An ack with no
// earlier log writes none.
func TestTaskLogEndsWithTask(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		k := e.qk("logend")
		q := fleet.NewQueue[job](e.F, "logend", fleet.QueueOptions{MaxAttempts: 3, BackoffBase: time.Millisecond, BackoffMax: time.Millisecond})
		// A snoozed run's log, then an ack by a run that wrote nothing.
		id, err := q.Submit(c, jobN(1))
		if err != nil {
			t.Fatal(err)
		}
		a := reserveAll(t, q, 1)[0]
		a.Logger().Info("waiting for the site")
		if err := a.Snooze(c, 0); err != nil {
			t.Fatal(err)
		}
		if bodies, err := e.compat().ZRange(c, k.Scheduled, 0, -1).Result(); err != nil || len(bodies) != 1 ||
			!strings.HasSuffix(bodies[0], `,"lg":1}`) || !strings.Contains(bodies[0], `"id":"`+id+`"`) {
			t.Fatalf("snoozed bodies %q %v: want the task's marked as logged", bodies, err)
		}
		b := reserveAll(t, q, 1)[0]
		if b.ID != id || b.Attempts != 0 {
			t.Fatalf("after the snooze: %s attempts %d", b.ID, b.Attempts)
		}
		if n, _ := e.compat().Exists(c, e.logKey("logend", id)).Result(); n != 1 {
			t.Fatal("the snoozed run's log is not there")
		}
		if err := b.Ack(c); err != nil {
			t.Fatal(err)
		}
		if got := e.keys(t); !slices.Equal(got, []string{k.Policy, k.Registry}) {
			t.Fatalf("keys after the ack %v: want the log gone", got)
		}

		// A failed run's log, then an ack that writes lines of its own:
		// none are written, and the failed run's go too.
		id, err = q.Submit(c, jobN(2))
		if err != nil {
			t.Fatal(err)
		}
		a = reserveAll(t, q, 1)[0]
		a.Logger().Error("boom")
		if err := a.Nack(c, errors.New("boom")); err != nil {
			t.Fatal(err)
		}
		if n, _ := e.compat().LLen(c, e.logKey("logend", id)).Result(); n != 1 {
			t.Fatalf("the failed run's log has %d entries", n)
		}
		b = reserveAll(t, q, 1)[0]
		b.Logger().Info("fine now")
		if err := b.Ack(c); err != nil {
			t.Fatal(err)
		}
		if got := e.keys(t); !slices.Equal(got, []string{k.Policy, k.Registry}) {
			t.Fatalf("keys after the second ack %v: want the log gone", got)
		}
	})
}

// TestTaskLogBounds: the lines past LogOptions.Lines or Bytes are counted,
// not kept; a task keeps its newest Runs entries; a dead letter's log
// lives max(DeadMaxAge, Retention). A queue with Lines < 0 keeps none,
// and Logger outside a task discards. Bad LogOptions are refused.
func TestTaskLogBounds(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		q := fleet.NewQueue[job](e.F, "logb", fleet.QueueOptions{MaxAttempts: 3, BackoffBase: time.Millisecond, BackoffMax: time.Millisecond,
			DeadMaxAge: 2 * time.Hour, Logs: fleet.LogOptions{Lines: 3, Bytes: 300, Runs: 2}})
		id, err := q.Submit(c, jobN(1))
		if err != nil {
			t.Fatal(err)
		}
		r1 := reserveAll(t, q, 1)[0]
		for i := range 5 {
			r1.Logger().Info("line", "i", i)
		}
		if err := r1.Nack(c, errors.New("one")); err != nil {
			t.Fatal(err)
		}
		r2 := reserveAll(t, q, 1)[0]
		r2.Logger().Info(strings.Repeat("x", 400)) // past Bytes alone
		r2.Logger().Info("short")
		if err := r2.Nack(c, errors.New("two")); err != nil {
			t.Fatal(err)
		}
		r3 := reserveAll(t, q, 1)[0]
		r3.Logger().Info("last")
		if err := r3.Nack(c, errors.New("three")); err != nil {
			t.Fatal(err)
		}
		rec, err := q.Lookup(c, id)
		if err != nil || rec.Status != fleet.TaskDead {
			t.Fatalf("record %+v %v", rec, err)
		}
		if len(rec.Logs) != 2 || rec.Logs[0].Attempt != 2 || rec.Logs[1].Attempt != 3 {
			t.Fatalf("logs %+v: want runs 2 and 3", rec.Logs)
		}
		if l := rec.Logs[0]; l.Dropped != 1 || len(l.Lines) != 1 || l.Lines[0].Message != "short" {
			t.Fatalf("run 2 %+v: want the long line dropped", l)
		}
		if ttl, err := e.compat().PTTL(c, e.logKey("logb", id)).Result(); err != nil || ttl < 119*time.Minute || ttl > 2*time.Hour {
			t.Fatalf("dead task's log PTTL %v %v, want DeadMaxAge", ttl, err)
		}

		// The line bound, on a fresh task whose first run logs 5.
		id, err = q.Submit(c, jobN(2))
		if err != nil {
			t.Fatal(err)
		}
		r := reserveAll(t, q, 1)[0]
		for i := range 5 {
			r.Logger().Info("line", "i", i)
		}
		if err := r.Release(c); err != nil {
			t.Fatal(err)
		}
		rec, err = q.Lookup(c, id)
		if err != nil || len(rec.Logs) != 1 {
			t.Fatalf("record %+v %v", rec, err)
		}
		if l := rec.Logs[0]; l.Dropped != 2 || len(l.Lines) != 3 || string(l.Lines[2].Attrs["i"]) != "2" || l.Attempt != 1 {
			t.Fatalf("released run %+v: want 3 lines kept, 2 dropped", l)
		}

		// Lines < 0: nothing kept, nothing written.
		off := fleet.NewQueue[job](e.F, "logoff", fleet.QueueOptions{Retention: time.Hour, Logs: fleet.LogOptions{Lines: -1}})
		id, err = off.Submit(c, jobN(3))
		if err != nil {
			t.Fatal(err)
		}
		o := reserveAll(t, off, 1)[0]
		o.Logger().Info("nobody keeps this")
		if err := o.Ack(c); err != nil {
			t.Fatal(err)
		}
		if n, _ := e.compat().Exists(c, e.logKey("logoff", id)).Result(); n != 0 {
			t.Fatal("a queue with Logs.Lines < 0 wrote a log")
		}
		if rec, err := off.Lookup(c, id); err != nil || rec.Logs != nil {
			t.Fatalf("record %+v %v", rec, err)
		}
		fleet.Logger(context.Background()).Info("outside a task: discarded") // no panic, no key

		for _, bad := range []fleet.LogOptions{{Bytes: -1}, {Bytes: fleet.MaxLogBytes + 1}, {Runs: -1}} {
			bq := fleet.NewQueue[job](e.F, "logbad", fleet.QueueOptions{Logs: bad})
			if err := bq.Err(); !errors.Is(err, fleet.ErrInvalidOptions) || !strings.Contains(err.Error(), "QueueOptions.Logs") {
				t.Errorf("LogOptions %+v: %v", bad, err)
			}
		}
	})
}

// TestTaskLogLeaseLost: a run whose lease was taken over writes no log,
// and its end is refused; the run that holds the task writes its own.
func TestTaskLogLeaseLost(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		q := fleet.NewQueue[job](e.F, "loglost", fleet.QueueOptions{Lease: 150 * time.Millisecond, Retention: time.Hour})
		id, err := q.Submit(c, jobN(1))
		if err != nil {
			t.Fatal(err)
		}
		late := reserveAll(t, q, 1)[0]
		late.Logger().Info("from the run that lost its lease")
		waitFor(t, 10*time.Second, func() bool {
			st, err := e.F.Sweep(c, fleet.SweeperOptions{})
			return err == nil && st.Requeued > 0
		}, "no sweep re-queued the task")
		now := reserveAll(t, q, 1)[0]
		if err := late.Nack(c, errors.New("late")); !errors.Is(err, fleet.ErrLeaseLost) {
			t.Fatalf("late nack: %v", err)
		}
		if n, _ := e.compat().Exists(c, e.logKey("loglost", id)).Result(); n != 0 {
			t.Fatal("the run that lost its lease wrote a log")
		}
		now.Logger().Info("from the run that holds it")
		if err := now.Ack(c); err != nil {
			t.Fatal(err)
		}
		rec, err := q.Lookup(c, id)
		if err != nil || len(rec.Logs) != 1 || rec.Logs[0].Attempt != 2 || len(rec.Logs[0].Lines) != 1 || rec.Logs[0].Lines[0].Message != "from the run that holds it" {
			t.Fatalf("record %+v %v", rec, err)
		}
	})
}

// TestTaskLogWorker: a worker's handler writes with fleet.Logger(ctx);
// each run's entry names the worker and its attempt; a run that panics
// keeps what it wrote before.
func TestTaskLogWorker(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		q := fleet.NewQueue[job](e.F, "logw", fleet.QueueOptions{Retention: time.Hour, MaxAttempts: 3, BackoffBase: time.Millisecond, BackoffMax: time.Millisecond})
		var runs atomic.Int32
		w := fleet.NewBatchWorker(e.F, fleet.WorkerOptions{Type: "logw", ID: "w1", Slots: 1}, q,
			fleet.TaskFunc(func(ctx context.Context, p job) error {
				n := runs.Add(1)
				fleet.Logger(ctx).Info("run", "n", n, "url", p.URL)
				if n == 1 {
					panic("first run panics")
				}
				return nil
			}))
		startWorker(t, w)
		id, err := q.Submit(c, jobN(1))
		if err != nil {
			t.Fatal(err)
		}
		var rec fleet.TaskRecord
		waitFor(t, 10*time.Second, func() bool {
			rec, err = q.Lookup(c, id)
			return err == nil && rec.Status == fleet.TaskDone
		}, "task not done: %v", later(func() any { return rec }))
		if len(rec.Logs) != 2 {
			t.Fatalf("logs %+v", rec.Logs)
		}
		for i, l := range rec.Logs {
			if l.Attempt != i+1 || l.Worker != "logw|w1" || len(l.Lines) != 1 || string(l.Lines[0].Attrs["n"]) != strconv.Itoa(i+1) {
				t.Fatalf("run %d's log %+v", i+1, l)
			}
		}
	})
}

// TestTaskLogSealed: on a queue that seals, each entry is stored sealed;
// Lookup opens it with the queue's Sealer, and a process without the key
// sees the entry as sealed, with its key id.
func TestTaskLogSealed(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		q := fleet.NewQueue[secret](e.F, "logsealed", fleet.QueueOptions{Sealer: keyring(t, newKey(t, "k1")), Retention: time.Hour})
		oq := fleet.NewQueue[secret](openOn(t, tg, e.Prefix), "logsealed", fleet.QueueOptions{Retention: time.Hour})
		id, err := q.Submit(c, secret{Card: "4111-1111", N: 1})
		if err != nil {
			t.Fatal(err)
		}
		r := reserveAll(t, q, 1)[0]
		r.Logger().Info("charged", "card", "4111-1111")
		if err := r.Ack(c); err != nil {
			t.Fatal(err)
		}
		raw, err := e.compat().LRange(c, e.logKey("logsealed", id), 0, -1).Result()
		if err != nil || len(raw) != 1 || strings.Contains(raw[0], "4111") || strings.Contains(raw[0], "charged") {
			t.Fatalf("stored log %q %v: want it sealed", raw, err)
		}
		if kid, ok := fleet.SealedKeyID(json.RawMessage(raw[0])); !ok || kid != "k1" {
			t.Fatalf("stored entry %s: want it sealed with k1", raw[0])
		}
		rec, err := q.Lookup(c, id)
		if err != nil || len(rec.Logs) != 1 || len(rec.Logs[0].Lines) != 1 || attrString(t, rec.Logs[0].Lines[0], "card") != "4111-1111" {
			t.Fatalf("Lookup with the Sealer: %+v %v", rec.Logs, err)
		}
		rec, err = oq.Lookup(c, id)
		if err != nil || len(rec.Logs) != 1 || rec.Logs[0].Sealed != "k1" || rec.Logs[0].Lines != nil {
			t.Fatalf("Lookup without the key: %+v %v", rec.Logs, err)
		}
	})
}
