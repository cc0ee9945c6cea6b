package fleet_test

import (
	"context"
	"errors"
	"maps"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/internal/redistest"
)

// TestQueueCancelWaiting: a pending or a scheduled task is removed, its
// dedup key freed; the others stay as they were.
func TestQueueCancelWaiting(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		qk := e.qk("cx")
		q := fleet.NewQueue[job](e.F, "cx", fleet.QueueOptions{})
		keep, _ := q.Submit(c, job{URL: "https://example.com/keep"})
		gone, err := q.SubmitWith(c, job{URL: "https://example.com/gone"}, fleet.SubmitOptions{DedupKey: "k1"})
		if err != nil {
			t.Fatal(err)
		}
		later, _ := q.SubmitWith(c, job{URL: "https://example.com/later"}, fleet.SubmitOptions{NotBefore: time.Now().Add(time.Hour), DedupKey: "k2"})
		stays, _ := q.SubmitWith(c, job{URL: "https://example.com/stays"}, fleet.SubmitOptions{NotBefore: time.Now().Add(time.Hour)})
		if err := q.Cancel(c, gone); err != nil {
			t.Fatal(err)
		}
		if err := q.Cancel(c, later); err != nil {
			t.Fatal(err)
		}
		if p := e.lrange(t, qk.Pending); len(p) != 1 || !strings.Contains(p[0], keep) {
			t.Fatalf("pending %q", p)
		}
		if s := e.zscores(t, qk.Scheduled); len(s) != 1 || !strings.Contains(s[0].Member, stays) {
			t.Fatalf("scheduled %v", s)
		}
		if d, ok := e.get(t, qk.Dedup); ok || d != "" {
			t.Fatalf("dedup %q", d)
		}
		if got := e.hgetall(t, qk.Dedup); len(got) != 0 {
			t.Fatalf("dedup keys left: %v", got)
		}
		// The key is free: a new submit with it makes a new task.
		if id, err := q.SubmitWith(c, job{URL: "https://example.com/again"}, fleet.SubmitOptions{DedupKey: "k1"}); err != nil || id == gone {
			t.Fatalf("resubmit %s %v", id, err)
		}
	})
}

// TestQueueCancelRunning: a running task's handler gets its ctx cancelled
// with cause ErrCanceled; the task ends in the dead letters, not retried.
func TestQueueCancelRunning(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		qk := e.qk("cr")
		q := fleet.NewQueue[job](e.F, "cr", fleet.QueueOptions{MaxAttempts: 5, BackoffBase: time.Millisecond, BackoffMax: time.Millisecond})
		started, causes, ends := untilCanceled(t, e.F, q, fleet.WorkerOptions{Type: "cr", ID: "w1", Slots: 2})
		// Another Fleet cancels: the cancel reaches the worker through Redis.
		other := fleet.NewQueue[job](openOn(t, tg, e.Prefix), "cr", fleet.QueueOptions{})
		id, _ := q.Submit(c, job{URL: "https://example.com/long"})
		if got := <-started; got != id {
			t.Fatalf("started %s", got)
		}
		if err := other.Cancel(c, id); err != nil {
			t.Fatal(err)
		}
		if cause := <-causes; !errors.Is(cause, fleet.ErrCanceled) {
			t.Fatalf("cause %v", cause)
		}
		if end := <-ends; !errors.Is(end, fleet.ErrCanceled) {
			t.Fatalf("end %v", end)
		}
		dead := e.lrange(t, qk.Dead)
		if len(dead) != 1 || !strings.Contains(dead[0], id) || !strings.Contains(dead[0], `"error":"fleet: task canceled: context canceled"`) || !strings.Contains(dead[0], `"attempts":1`) {
			t.Fatalf("dead %q", dead)
		}
		for _, k := range []string{qk.Pending, qk.Scheduled, qk.Processing, qk.Body} {
			if n := e.do(t, e.Raw.B().Exists().Key(k).Build()); mustInt(t, n) != 0 {
				t.Fatalf("%s left", k)
			}
		}
		// The dead task cannot be cancelled again.
		if err := q.Cancel(c, id); !errors.Is(err, fleet.ErrTaskFinished) {
			t.Fatalf("second cancel: %v", err)
		}
	})
}

func mustInt(t *testing.T, r interface{ AsInt64() (int64, error) }) int64 {
	t.Helper()
	n, err := r.AsInt64()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestQueueCancelBadInput: an unknown id, a finished task, an empty id:
// each a clear error, nothing changed.
func TestQueueCancelBadInput(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		q := fleet.NewQueue[job](e.F, "cb", fleet.QueueOptions{})
		done, _ := q.Submit(c, job{URL: "https://example.com/done"})
		dead, _ := q.Submit(c, job{URL: "https://example.com/dead"})
		ts, err := q.Reserve(c, 2, 0)
		if err != nil || len(ts) != 2 || ts[0].ID != done || ts[1].ID != dead {
			t.Fatalf("reserve %v %v", ts, err)
		}
		if err := ts[0].Ack(c); err != nil {
			t.Fatal(err)
		}
		if err := ts[1].DeadLetter(c, errors.New("broken")); err != nil {
			t.Fatal(err)
		}
		if _, err := q.Submit(c, job{URL: "https://example.com/waits"}); err != nil {
			t.Fatal(err)
		}
		before := e.dump(t)
		for _, tc := range []struct {
			id   string
			want error
		}{{"no-such-id", fleet.ErrTaskNotFound}, {"", fleet.ErrInvalidArgument}, {done, fleet.ErrTaskNotFound}, {dead, fleet.ErrTaskFinished}} {
			if err := q.Cancel(c, tc.id); !errors.Is(err, tc.want) || (tc.id != "" && !strings.Contains(err.Error(), tc.id)) {
				t.Errorf("cancel %q: %v, want %v naming the id", tc.id, err, tc.want)
			}
		}
		if after := e.dump(t); !maps.Equal(before, after) {
			t.Fatalf("changed:\n%v\n%v", before, after)
		}
	})
}

// TestQueueCancelFlagsLease: Cancel of a task reserved through the Queue
// API flags its lease entry (" c"); Extend then says ErrCanceled but
// extends the lease all the same, keeping the flag; Lookup says a cancel
// was asked; the holder may still ack it (it finished), and nothing of it
// is left. Cancel of a task that a documented-schema client reserved (no
// lease entry) adds none.
func TestQueueCancelFlagsLease(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		qk := e.qk("cf")
		q := fleet.NewQueue[job](e.F, "cf", fleet.QueueOptions{Lease: time.Minute})
		id, err := q.Submit(c, job{URL: "https://example.com/a"})
		if err != nil {
			t.Fatal(err)
		}
		ts, err := q.Reserve(c, 1, 0)
		if err != nil || len(ts) != 1 {
			t.Fatal(len(ts), err)
		}
		tk := ts[0]
		before, _ := e.hget(t, qk.Lease, id)
		if err := q.Cancel(c, id); err != nil {
			t.Fatal(err)
		}
		if got, _ := e.hget(t, qk.Lease, id); got != before+" c" {
			t.Fatalf("lease entry after Cancel %q; want %q", got, before+" c")
		}
		rec, err := q.Lookup(c, id)
		if err != nil || rec.Status != fleet.TaskActive || !rec.CancelRequested {
			t.Fatalf("Lookup %+v, %v; want active with CancelRequested", rec, err)
		}
		d0 := tk.Deadline()
		if err := tk.Extend(c, 2*time.Minute); !errors.Is(err, fleet.ErrCanceled) {
			t.Fatalf("Extend after Cancel: %v; want ErrCanceled", err)
		}
		if !tk.Deadline().After(d0) {
			t.Fatalf("deadline %v not moved past %v", tk.Deadline(), d0)
		}
		after, _ := e.hget(t, qk.Lease, id)
		if !strings.HasSuffix(after, " c") || after == before+" c" {
			t.Fatalf("lease entry after Extend %q; want a new deadline, still flagged", after)
		}
		// A second Cancel does not flag it twice.
		if err := q.Cancel(c, id); err != nil {
			t.Fatal(err)
		}
		if got, _ := e.hget(t, qk.Lease, id); got != after {
			t.Fatalf("lease entry after a second Cancel %q; want %q", got, after)
		}
		if err := tk.Ack(c); err != nil {
			t.Fatalf("Ack of a flagged task: %v", err)
		}
		if left := e.hgetall(t, qk.Lease); len(left) != 0 {
			t.Fatalf("lease hash left: %v", left)
		}
		if z := e.zscores(t, qk.Processing); len(z) != 0 {
			t.Fatalf(":processing left: %v", z)
		}

		// A reservation made by a documented-schema client: no entry, none added.
		id2, _ := q.Submit(c, job{URL: "https://example.com/b"})
		body := e.lrange(t, qk.Pending)[0]
		raw := e.Raw
		if err := raw.Do(c, raw.B().Lpop().Key(qk.Pending).Build()).Error(); err != nil {
			t.Fatal(err)
		}
		if err := raw.Do(c, raw.B().Zadd().Key(qk.Processing).ScoreMember().ScoreMember(float64(time.Now().Add(time.Minute).Unix()), id2).Build()).Error(); err != nil {
			t.Fatal(err)
		}
		if err := raw.Do(c, raw.B().Hset().Key(qk.Body).FieldValue().FieldValue(id2, body).Build()).Error(); err != nil {
			t.Fatal(err)
		}
		if err := q.Cancel(c, id2); err != nil {
			t.Fatal(err)
		}
		if left := e.hgetall(t, qk.Lease); len(left) != 0 {
			t.Fatalf("Cancel wrote a lease entry for another client's reservation: %v", left)
		}
	})
}

// TestQueueCancelSweptWhileFlagged: a cancelled task whose holder never
// ended it (it died, or never heard) is dead-lettered by the sweeper once
// its lease runs out, as cancelled, and never re-queued; Lookup says
// canceled. An unflagged task beside it is re-queued as usual.
func TestQueueCancelSweptWhileFlagged(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		qk := e.qk("cs")
		q := fleet.NewQueue[job](e.F, "cs", fleet.QueueOptions{Lease: 200 * time.Millisecond, MaxAttempts: 5})
		gone, _ := q.Submit(c, job{URL: "https://example.com/gone"})
		kept, _ := q.Submit(c, job{URL: "https://example.com/kept"})
		reserveAll(t, q, 2)
		if err := q.Cancel(c, gone); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 10*time.Second, func() bool {
			st, err := e.F.Sweep(c, fleet.SweeperOptions{})
			if err != nil {
				t.Fatal(err)
			}
			return st.Requeued+st.DeadLettered > 0 && len(e.zscores(t, qk.Processing)) == 0
		}, "the leases never ran out: %v", e.dump(t))
		dead := e.lrange(t, qk.Dead)
		if len(dead) != 1 || !strings.Contains(dead[0], gone) || !strings.Contains(dead[0], `"error":"fleet: task canceled`) {
			t.Fatalf("dead letters %q; want the cancelled task, as cancelled", dead)
		}
		if p := e.lrange(t, qk.Pending); len(p) != 1 || !strings.Contains(p[0], kept) {
			t.Fatalf("pending %q; want the other task re-queued", p)
		}
		if rec, err := q.Lookup(c, gone); err != nil || rec.Status != fleet.TaskCanceled {
			t.Fatalf("Lookup %+v, %v; want canceled", rec, err)
		}
		if left := e.hgetall(t, qk.Lease); len(left) != 0 {
			t.Fatalf("lease hash left: %v", left)
		}
	})
}

// TestWorkerCancelMissedMessage: a worker is cut off from Redis at the
// moment Queue.Cancel publishes, so the message never reaches it (pub/sub
// keeps nothing). Once it is back, its next lease extension reports the
// cancel: the handler's ctx ends with cause ErrCanceled, and the task goes
// to the dead letters as cancelled, never retried.
func TestWorkerCancelMissedMessage(t *testing.T) {
	t.Parallel()
	px := startProxied(t, fleet.Options{})
	p, direct, wf, e := px.P, px.Direct, px.Through, px.E
	qk := e.qk("cm")
	opts := fleet.QueueOptions{Lease: 5 * time.Second, MaxAttempts: 5}
	started, causes, ends := untilCanceled(t, wf, fleet.NewQueue[job](wf, "cm", opts),
		fleet.WorkerOptions{Type: "cm", ID: "w1", Slots: 1, LeaseExtend: 200 * time.Millisecond})
	q := fleet.NewQueue[job](direct, "cm", opts)
	id, err := q.Submit(ctx(t), job{URL: "https://example.com/long"})
	if err != nil {
		t.Fatal(err)
	}
	awaitStarted(t, started, id)
	// Cut the worker off, cancel, and let it back in.
	p.Refuse(true)
	p.Cut()
	if err := q.Cancel(ctx(t), id); err != nil {
		t.Fatal(err)
	}
	p.Refuse(false)
	awaitCanceled(t, causes)
	select {
	case err := <-ends:
		if !errors.Is(err, fleet.ErrCanceled) {
			t.Fatalf("OnTaskEnd %v; want ErrCanceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the task never ended")
	}
	waitFor(t, 10*time.Second, func() bool { return len(e.lrange(t, qk.Dead)) == 1 }, "no dead letter: %v", later(func() any { return e.dump(t) }))
	if dead := e.lrange(t, qk.Dead); !strings.Contains(dead[0], id) || !strings.Contains(dead[0], `"error":"fleet: task canceled`) {
		t.Fatalf("dead letter %q; want the task, as cancelled", dead[0])
	}
	if p := e.lrange(t, qk.Pending); len(p) != 0 {
		t.Fatalf("the cancelled task was re-queued: %q", p)
	}
}

// TestQueueCancelCutOffInFlight: a Cancel whose ctx ends while its script
// waits on the server (writes paused: CLIENT PAUSE WRITE) returns its
// ctx's error without publishing anything, but the script runs once the
// pause ends: the running task's lease entry is flagged, so its worker
// cancels the handler at its next extension, and the task is
// dead-lettered as cancelled. Calling Cancel again then says the task is
// finished.
func TestQueueCancelCutOffInFlight(t *testing.T) {
	t.Parallel()
	s, f := ownServer(t, fleet.Options{})
	raw := redistest.Client(t, redistest.Target{URL: s.URL()})
	e := &env{F: f, Raw: raw, Tg: redistest.Target{URL: s.URL()}}
	qk := e.qk("cc")
	opts := fleet.QueueOptions{Lease: 10 * time.Second, MaxAttempts: 5}
	started, causes, _ := untilCanceled(t, f, fleet.NewQueue[job](f, "cc", opts),
		fleet.WorkerOptions{Type: "cc", ID: "w1", Slots: 1, LeaseExtend: 200 * time.Millisecond})
	q := fleet.NewQueue[job](f, "cc", opts)
	id, err := q.Submit(ctx(t), job{URL: "https://example.com/long"})
	if err != nil {
		t.Fatal(err)
	}
	awaitStarted(t, started, id)
	// The server learns the cancel script first (a Cancel of no task): a
	// server that lacked it would answer the paused EVALSHA with NOSCRIPT
	// once the pause ends, and the script's text goes only under a live
	// ctx, so the cancel would never apply.
	if err := q.Cancel(ctx(t), "no-such-task"); !errors.Is(err, fleet.ErrTaskNotFound) {
		t.Fatalf("Cancel of no task: %v; want ErrTaskNotFound", err)
	}
	if _, err := s.Cli(ctx(t), "client", "pause", "4000", "write"); err != nil {
		t.Fatal(err)
	}
	// The Cancel's ctx ends once its script waits on the server (a client
	// blocked by the pause on an EVALSHA: CLIENT LIST's flags "b"), not
	// after a fixed time, which a loaded machine could spend before the
	// command was even sent.
	short, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- q.Cancel(short, id) }()
	var list string
	waitFor(t, 3500*time.Millisecond, func() bool {
		list, _ = s.Cli(ctx(t), "client", "list")
		for _, l := range strings.Split(list, "\n") {
			if strings.Contains(l, " cmd=evalsha") && regexp.MustCompile(` flags=[A-Za-z]*b`).MatchString(l) {
				return true
			}
		}
		return false
	}, "the Cancel's script never waited on the pause: %s", list)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Cancel behind a write pause: %v; want its ctx's error", err)
	}
	awaitCanceled(t, causes)
	waitFor(t, 10*time.Second, func() bool { return len(e.lrange(t, qk.Dead)) == 1 }, "no dead letter: %v", later(func() any { return e.dump(t) }))
	if dead := e.lrange(t, qk.Dead); !strings.Contains(dead[0], `"error":"fleet: task canceled`) {
		t.Fatalf("dead letter %q; want it as cancelled", dead[0])
	}
	if err := q.Cancel(ctx(t), id); !errors.Is(err, fleet.ErrTaskFinished) {
		t.Fatalf("Cancel again: %v; want ErrTaskFinished", err)
	}
}

// TestQueueCancelledNeverRunsAgain: a task that Cancel flagged while it
// ran goes to the dead letters, as cancelled, whichever way its holder
// ends it but an ack: Release and Snooze say ErrCanceled instead of
// handing it back, and Nack buries it at once instead of retrying it (the
// dead letter keeps the nack's cause after ErrCanceled's text). Dedup keys
// are freed; nothing of the three is left pending or scheduled.
func TestQueueCancelledNeverRunsAgain(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		qk := e.qk("cn")
		q := fleet.NewQueue[job](e.F, "cn", fleet.QueueOptions{Lease: time.Minute, MaxAttempts: 5})
		var ids []string
		for i, key := range []string{"r", "n", "s"} {
			id, err := q.SubmitWith(c, jobN(i), fleet.SubmitOptions{DedupKey: key})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		ts, err := q.Reserve(c, 3, 0)
		if err != nil || len(ts) != 3 {
			t.Fatal(len(ts), err)
		}
		byID := map[string]*fleet.Task[job]{}
		for _, tk := range ts {
			byID[tk.ID] = tk
		}
		for _, id := range ids {
			if err := q.Cancel(c, id); err != nil {
				t.Fatal(err)
			}
		}
		if err := byID[ids[0]].Release(c); !errors.Is(err, fleet.ErrCanceled) {
			t.Fatalf("Release of a cancelled task: %v; want ErrCanceled", err)
		}
		if err := byID[ids[1]].Nack(c, errors.New("boom")); err != nil {
			t.Fatalf("Nack of a cancelled task: %v", err)
		}
		if err := byID[ids[2]].Snooze(c, time.Second); !errors.Is(err, fleet.ErrCanceled) {
			t.Fatalf("Snooze of a cancelled task: %v; want ErrCanceled", err)
		}
		dead := e.lrange(t, qk.Dead)
		if len(dead) != 3 {
			t.Fatalf("dead letters %q; want the three", dead)
		}
		for i, why := range []string{"released before it ended", "boom", "snoozed before it ended"} {
			if !strings.Contains(dead[i], ids[i]) || !strings.Contains(dead[i], `"error":"fleet: task canceled: `+why+`"`) {
				t.Fatalf("dead letter %d %q; want task %s, cancelled: %s", i, dead[i], ids[i], why)
			}
			if rec, err := q.Lookup(c, ids[i]); err != nil || rec.Status != fleet.TaskCanceled {
				t.Fatalf("Lookup %s: %+v, %v; want canceled", ids[i], rec, err)
			}
		}
		if p := e.lrange(t, qk.Pending); len(p) != 0 {
			t.Fatalf("pending %q", p)
		}
		if s := e.zscores(t, qk.Scheduled); len(s) != 0 {
			t.Fatalf("scheduled %v", s)
		}
		if d := e.hgetall(t, qk.Dedup); len(d) != 0 {
			t.Fatalf("dedup keys left: %v", d)
		}
		if l := e.hgetall(t, qk.Lease); len(l) != 0 {
			t.Fatalf("lease entries left: %v", l)
		}
	})
}

// untilCanceled starts a batch worker with opts on q whose handler reports
// each task it starts on started, waits for its ctx to end, reports the
// ctx's cause on causes and returns the ctx's error; OnTaskEnd reports on
// ends (the first 16; later ones are dropped). The worker stops when the
// test ends.
func untilCanceled(t *testing.T, f *fleet.Fleet, q *fleet.Queue[job], opts fleet.WorkerOptions) (started <-chan string, causes, ends <-chan error) {
	t.Helper()
	st, ca, en := make(chan string, 1), make(chan error, 1), make(chan error, 16)
	opts.OnTaskEnd = func(_ string, err error) {
		select {
		case en <- err:
		default:
		}
	}
	w := fleet.NewBatchWorker(f, opts, q,
		fleet.BatchFunc[wcfg, out, job](func(ctx context.Context, _ *fleet.Slot[wcfg, out], tk *fleet.Task[job]) error {
			st <- tk.ID
			<-ctx.Done()
			ca <- context.Cause(ctx)
			return ctx.Err()
		}))
	startWorker(t, w)
	return st, ca, en
}

// awaitStarted waits until the handler of untilCanceled started task id.
func awaitStarted(t *testing.T, started <-chan string, id string) {
	t.Helper()
	select {
	case got := <-started:
		if got != id {
			t.Fatalf("started %s; want %s", got, id)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the task never started")
	}
}

// awaitCanceled waits until the handler of untilCanceled saw its ctx end,
// and fails unless the cause was ErrCanceled.
func awaitCanceled(t *testing.T, causes <-chan error) {
	t.Helper()
	select {
	case cause := <-causes:
		if !errors.Is(cause, fleet.ErrCanceled) {
			t.Fatalf("handler ctx cause %v; want ErrCanceled", cause)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the handler never heard of the cancel")
	}
}
