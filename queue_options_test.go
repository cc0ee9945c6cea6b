package fleet_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/internal/redistest"
)

// TestSubmitOptionsSchema: each per-task option is stored in the body as
// docs/SCHEMA.md spells it, a prioritized task waits in :prio (scored by
// when it became ready, less priority x PriorityStep), and a task with
// none of them is the documented body on the documented list.
func TestSubmitOptionsSchema(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		k := e.qk("opts")
		q := fleet.NewQueue[job](e.F, "opts", fleet.QueueOptions{})
		expires := time.UnixMilli(time.Now().Add(time.Hour).UnixMilli())
		before := e.serverNow(t)
		prio, err := q.SubmitWith(ctx(t), jobN(1), fleet.SubmitOptions{Priority: 3, MaxAttempts: 2,
			Timeout: 1500 * time.Millisecond, ExpiresAt: expires, Metadata: map[string]string{"tenant": "acme", "a\"b": "é"}})
		if err != nil {
			t.Fatal(err)
		}
		after := e.serverNow(t)
		plain, err := q.SubmitWith(ctx(t), jobN(2), fleet.SubmitOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got := e.dump(t)
		wantPlain := `list:{"id":"` + plain + `","payload":{"url":"https://example.com/2","n":2},"attempts":0}`
		if got[k.Pending] != wantPlain {
			t.Fatalf("pending %q, want %q", got[k.Pending], wantPlain)
		}
		body, score, ok := strings.Cut(strings.TrimPrefix(got[k.Prio], "zset:"), "@")
		wantBody := fmt.Sprintf(`{"id":"%s","payload":{"url":"https://example.com/1","n":1},"attempts":0,"priority":3,"max_attempts":2,"timeout_ms":1500,"expires_at":%s,"meta":{"a\"b":"é","tenant":"acme"}}`,
			prio, fmt.Sprintf("%.3f", float64(expires.UnixMilli())/1000)) // unix s, always 3 decimals
		if !ok || body != wantBody {
			t.Fatalf("prio %q, want body %q", got[k.Prio], wantBody)
		}
		// The score is the server's ms at the submit, less 3 minutes.
		var ms float64
		fmt.Sscan(score, &ms)
		at := time.UnixMilli(int64(ms)).Add(3 * fleet.PriorityStep)
		if at.Before(before.Add(-time.Millisecond)) || at.After(after.Add(time.Millisecond)) {
			t.Fatalf("prio score %v + 3 steps = %v, not within the submit [%v, %v]", score, at, before, after)
		}
		if _, ok := got[k.Signal]; !ok {
			t.Fatalf("no signal key after a prioritized submit: %v", got)
		}
		if st, err := q.Stats(ctx(t)); err != nil || counted(t, st) != (fleet.QueueStats{Pending: 2, Prioritized: 1}) {
			t.Fatalf("Stats %+v, %v", st, err)
		}
		rec, err := q.Lookup(ctx(t), prio)
		if err != nil {
			t.Fatal(err)
		}
		if rec.Status != fleet.TaskPending || rec.Priority != 3 || !maps.Equal(rec.Metadata, map[string]string{"tenant": "acme", "a\"b": "é"}) || !rec.ExpiresAt.Equal(expires) {
			t.Fatalf("Lookup %+v", rec)
		}
		// The prioritized task goes first, with its options on the Task.
		ts := reserveAll(t, q, 2)
		if ts[0].ID != prio || ts[1].ID != plain {
			t.Fatalf("reserved %s, %s; want %s first", ts[0].ID, ts[1].ID, prio)
		}
		if m := ts[0].Metadata(); m["tenant"] != "acme" || len(m) != 2 {
			t.Fatalf("Task.Metadata %v", m)
		}
		if ts[1].Metadata() != nil {
			t.Fatalf("a plain task's Metadata %v", ts[1].Metadata())
		}
	})
}

// oldBody is a task body with a UUIDv7 id of the time at, as a client of
// the documented schema (or an old fleet) would have pushed it then.
func oldBody(t *testing.T, at time.Time, n int) (id, body string) {
	t.Helper()
	u, err := uuid.NewV7()
	if err != nil {
		t.Fatal(err)
	}
	ms := at.UnixMilli()
	for i := range 6 {
		u[i] = byte(ms >> (40 - 8*i))
	}
	id = u.String()
	return id, fmt.Sprintf(`{"id":"%s","payload":{"url":"https://example.com/%d","n":%d},"attempts":0}`, id, n, n)
}

// TestQueuePriorityAgedOrder: priorities go first among tasks that became
// ready at about the same time, higher first, but a normal task that
// waited longer than p x PriorityStep goes before priority p, so low
// priority still runs under a stream of urgent tasks.
func TestQueuePriorityAgedOrder(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		k := e.qk("aged")
		q := fleet.NewQueue[job](e.F, "aged", fleet.QueueOptions{})
		now := e.serverNow(t)
		old, oldB := oldBody(t, now.Add(-5*fleet.PriorityStep), 1) // waited 5 steps
		if err := e.do(t, e.Raw.B().Rpush().Key(k.Pending).Element(oldB).Build()).Error(); err != nil {
			t.Fatal(err)
		}
		fresh, err := q.Submit(ctx(t), jobN(2))
		if err != nil {
			t.Fatal(err)
		}
		sub := func(p int) string {
			id, err := q.SubmitWith(ctx(t), jobN(10+p), fleet.SubmitOptions{Priority: p})
			if err != nil {
				t.Fatal(err)
			}
			return id
		}
		p3, p9, p1 := sub(3), sub(9), sub(1)
		// p9 counts as ready 9 steps ago (before old), p3 and p1 as 3 and 1
		// step ago (after old, before fresh).
		want := []string{p9, old, p3, p1, fresh}
		var got []string
		for range want {
			ts := reserveAll(t, q, 1)
			got = append(got, ts[0].ID)
			if err := ts[0].Ack(ctx(t)); err != nil {
				t.Fatal(err)
			}
		}
		if !slices.Equal(got, want) {
			t.Fatalf("order %v\nwant  %v", got, want)
		}
		if left := e.dump(t); left[k.Prio] != "" || left[k.Pending] != "" {
			t.Fatalf("left: %v", left)
		}
	})
}

// TestTaskMaxAttempts: a task's own MaxAttempts goes before the queue's,
// in a nack and in the sweeper's re-queue of a lease that ran out.
func TestTaskMaxAttempts(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		q := fleet.NewQueue[job](e.F, "maxatt", fleet.QueueOptions{Lease: 300 * time.Millisecond, MaxAttempts: 10,
			BackoffBase: time.Millisecond, BackoffMax: time.Millisecond})
		nacked, err := q.SubmitWith(ctx(t), jobN(1), fleet.SubmitOptions{MaxAttempts: 2})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 2 {
			var tk *fleet.Task[job]
			waitFor(t, 10*time.Second, func() bool {
				ts, err := q.Reserve(ctx(t), 1, 0)
				if err != nil {
					t.Fatal(err)
				}
				if len(ts) == 1 {
					tk = ts[0]
				}
				return tk != nil
			}, "retry %d never came back", i)
			if tk.ID != nacked || tk.Attempts != i {
				t.Fatalf("run %d: task %s attempts %d", i, tk.ID, tk.Attempts)
			}
			if err := tk.Nack(ctx(t), errors.New("boom")); err != nil {
				t.Fatal(err)
			}
		}
		dead, err := q.DeadLetters(ctx(t), 0, 10)
		if err != nil || len(dead) != 1 || dead[0].ID != nacked || dead[0].Attempts != 2 || dead[0].Error != "boom" {
			t.Fatalf("after 2 nacks of a task of MaxAttempts 2: %+v, %v", dead, err)
		}

		// The sweeper counts a lease that ran out as an attempt, against
		// the task's own bound.
		swept, err := q.SubmitWith(ctx(t), jobN(2), fleet.SubmitOptions{MaxAttempts: 1})
		if err != nil {
			t.Fatal(err)
		}
		reserveAll(t, q, 1) // and vanish
		waitFor(t, 10*time.Second, func() bool {
			if _, err := e.F.Sweep(ctx(t), fleet.SweeperOptions{}); err != nil {
				t.Fatal(err)
			}
			d, _ := q.DeadLetters(ctx(t), 0, 10)
			return len(d) == 2
		}, "the vanished task of MaxAttempts 1 was not dead-lettered")
		dead, _ = q.DeadLetters(ctx(t), 0, 10)
		if dead[1].ID != swept || dead[1].Attempts != 1 {
			t.Fatalf("swept dead letter %+v", dead[1])
		}
	})
}

// TestTaskOptionsInWorker: a batch worker runs the handler under the
// task's Timeout (not the worker's), and the handler and the middleware
// read its Metadata; a task without options runs under the worker's.
func TestTaskOptionsInWorker(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		q := fleet.NewQueue[job](e.F, "wopts", fleet.QueueOptions{Lease: 20 * time.Second, MaxAttempts: 1})
		short, err := q.SubmitWith(ctx(t), jobN(1), fleet.SubmitOptions{Timeout: 50 * time.Millisecond, Metadata: map[string]string{"k": "v"}})
		if err != nil {
			t.Fatal(err)
		}
		plain, err := q.Submit(ctx(t), jobN(2))
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		left := map[string]time.Duration{} // handler ctx's time left at its start
		meta := map[string]map[string]string{}
		seen := map[string]map[string]string{} // by the middleware
		mw := func(next fleet.Handler) fleet.Handler {
			return func(ctx context.Context, ti fleet.TaskInfo) error {
				mu.Lock()
				seen[ti.ID] = ti.Metadata
				mu.Unlock()
				return next(ctx, ti)
			}
		}
		w := fleet.NewBatchWorker(e.F, fleet.WorkerOptions{Type: "wopts", ID: "w", Slots: 2, TaskTimeout: 10 * time.Second, Middleware: []fleet.Middleware{mw}}, q,
			fleet.BatchFunc[wcfg, out, job](func(ctx context.Context, s *fleet.Slot[wcfg, out], tk *fleet.Task[job]) error {
				d, _ := ctx.Deadline()
				mu.Lock()
				left[tk.ID], meta[tk.ID] = time.Until(d), tk.Metadata()
				mu.Unlock()
				if tk.ID == short {
					<-ctx.Done() // runs past its own timeout
					return ctx.Err()
				}
				return nil
			}))
		startWorker(t, w)
		waitFor(t, 20*time.Second, func() bool {
			d, _ := q.DeadLetters(ctx(t), 0, 10)
			st, _ := q.Stats(ctx(t))
			return len(d) == 1 && st.Pending == 0 && st.InFlight == 0
		}, "the tasks did not end")
		mu.Lock()
		defer mu.Unlock()
		if l := left[short]; l <= 0 || l > 50*time.Millisecond {
			t.Errorf("the task of Timeout 50ms ran with %v left", l)
		}
		if l := left[plain]; l < 5*time.Second || l > 10*time.Second {
			t.Errorf("a plain task ran with %v left, want the worker's 10s", l)
		}
		if !maps.Equal(meta[short], map[string]string{"k": "v"}) || !maps.Equal(seen[short], meta[short]) || meta[plain] != nil || seen[plain] != nil {
			t.Errorf("metadata: handler %v, middleware %v", meta, seen)
		}
		d, _ := q.DeadLetters(ctx(t), 0, 10)
		if d[0].ID != short || !strings.Contains(d[0].Error, "timed out after 50ms (the task's own Timeout)") {
			t.Errorf("dead letter %+v", d[0])
		}
	})
}

// TestTaskExpires: a task not started by its ExpiresAt is dead-lettered
// as "expired" by the reserve that finds it, uncounted, and never runs;
// one still in time runs.
func TestTaskExpires(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		k := e.qk("exp")
		q := fleet.NewQueue[job](e.F, "exp", fleet.QueueOptions{Lease: 20 * time.Second})
		at := e.serverNow(t).Add(300 * time.Millisecond)
		if time.Until(at) < 50*time.Millisecond {
			at = time.Now().Add(300 * time.Millisecond) // clocks apart: stay in the future here
		}
		gone, err := q.SubmitWith(ctx(t), jobN(1), fleet.SubmitOptions{ExpiresAt: at, Metadata: map[string]string{"m": "1"}})
		if err != nil {
			t.Fatal(err)
		}
		kept, err := q.SubmitWith(ctx(t), jobN(2), fleet.SubmitOptions{ExpiresAt: time.Now().Add(time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, 5*time.Second, func() bool { return e.serverNow(t).After(at) }, "the server's clock never passed %v", at)
		ts := reserveAll(t, q, 1)
		if ts[0].ID != kept {
			t.Fatalf("reserved %s, want the task still in time %s", ts[0].ID, kept)
		}
		if err := ts[0].Ack(ctx(t)); err != nil {
			t.Fatal(err)
		}
		dead, err := q.DeadLetters(ctx(t), 0, 10)
		if err != nil || len(dead) != 1 || dead[0].ID != gone || dead[0].Error != "expired" || dead[0].Attempts != 0 {
			t.Fatalf("dead letters %+v, %v", dead, err)
		}
		if got := decodeMap(t, dead[0].Raw); got["meta"] == nil || got["expires_at"] == nil {
			t.Fatalf("the dead letter lost the task's options: %s", dead[0].Raw)
		}
		left := e.dump(t)
		for _, key := range []string{k.Pending, k.Processing, k.Body, k.Lease} {
			if _, ok := left[key]; ok {
				t.Fatalf("%s left: %v", key, left)
			}
		}
	})
}

// TestSubmitOptionsBadInput: each bad option or group limit is refused
// with ErrInvalidArgument naming it (a limit on a queue nobody made, with
// ErrQueueNotFound), and nothing stored changes.
func TestSubmitOptionsBadInput(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		q := fleet.NewQueue[job](e.F, "bad", fleet.QueueOptions{})
		if _, err := q.SubmitWith(ctx(t), jobN(0), fleet.SubmitOptions{Group: "g", Metadata: map[string]string{"a": "b"}}); err != nil {
			t.Fatal(err)
		}
		if err := q.SetGroupLimit(ctx(t), "g", fleet.GroupLimits{Concurrency: 2}); err != nil {
			t.Fatal(err)
		}
		stored := e.dump(t)
		big := map[string]string{"k": strings.Repeat("x", fleet.MaxMetadataBytes)}
		for _, c := range []struct {
			name string
			opts fleet.SubmitOptions
			says string
		}{
			{"negative priority", fleet.SubmitOptions{Priority: -1}, "Priority"},
			{"priority over the top", fleet.SubmitOptions{Priority: fleet.MaxPriority + 1}, "Priority"},
			{"negative max attempts", fleet.SubmitOptions{MaxAttempts: -1}, "MaxAttempts"},
			{"negative timeout", fleet.SubmitOptions{Timeout: -time.Second}, "Timeout"},
			{"expired already", fleet.SubmitOptions{ExpiresAt: time.Now().Add(-time.Second)}, "ExpiresAt"},
			{"over-size metadata", fleet.SubmitOptions{Metadata: big}, "Metadata"},
			{"empty metadata key", fleet.SubmitOptions{Metadata: map[string]string{"": "v"}}, "Metadata"},
			{"metadata value not UTF-8", fleet.SubmitOptions{Metadata: map[string]string{"k": "\xff"}}, "Metadata"},
			{"group with a brace", fleet.SubmitOptions{Group: "a{b}"}, "Group"},
			{"group with a colon", fleet.SubmitOptions{Group: "a:b"}, "Group"},
			{"group with a space", fleet.SubmitOptions{Group: "a b"}, "Group"},
			{"group and a priority past MaxPriority", fleet.SubmitOptions{Group: "g", Priority: fleet.MaxPriority + 1}, "Priority"},
		} {
			_, err := q.SubmitWith(ctx(t), jobN(1), c.opts)
			if !errors.Is(err, fleet.ErrInvalidArgument) || !strings.Contains(err.Error(), c.says) {
				t.Errorf("%s: SubmitWith = %v, want ErrInvalidArgument naming %s", c.name, err, c.says)
			}
			// The same in a batch: the good one beside it is not written.
			_, err = q.SubmitManyWith(ctx(t), []fleet.Submission[job]{{Payload: jobN(2)}, {Payload: jobN(3), Options: c.opts}})
			if !errors.Is(err, fleet.ErrInvalidArgument) || !strings.Contains(err.Error(), "submission 1") {
				t.Errorf("%s: SubmitManyWith = %v, want ErrInvalidArgument naming submission 1", c.name, err)
			}
		}
		for _, c := range []struct {
			name, group string
			l           fleet.GroupLimits
			says        string
		}{
			{"negative concurrency", "g", fleet.GroupLimits{Concurrency: -1}, "Concurrency"},
			{"negative rate", "g", fleet.GroupLimits{Rate: fleet.LimitOptions{Rate: -5}}, "Rate"},
			{"burst without a rate", "g", fleet.GroupLimits{Rate: fleet.LimitOptions{Burst: 3}}, "Rate"},
			{"empty group name", "", fleet.GroupLimits{Concurrency: 1}, "group"},
			{"group name with a brace", "x}", fleet.GroupLimits{Concurrency: 1}, "group"},
		} {
			if err := q.SetGroupLimit(ctx(t), c.group, c.l); !errors.Is(err, fleet.ErrInvalidArgument) || !strings.Contains(err.Error(), c.says) {
				t.Errorf("%s: SetGroupLimit = %v, want ErrInvalidArgument naming %s", c.name, err, c.says)
			}
		}
		for _, g := range []string{"", "a b"} {
			if err := q.PauseGroup(ctx(t), g); !errors.Is(err, fleet.ErrInvalidArgument) {
				t.Errorf("PauseGroup(%q) = %v", g, err)
			}
		}
		if _, err := fleet.NewQueue[job](e.F, "badq", fleet.QueueOptions{Groups: fleet.GroupLimits{Concurrency: -1}}).Submit(ctx(t), jobN(1)); !errors.Is(err, fleet.ErrInvalidArgument) || !strings.Contains(err.Error(), "Groups.Concurrency") {
			t.Errorf("QueueOptions.Groups.Concurrency -1: %v", err)
		}
		if _, err := fleet.NewQueue[job](e.F, "badq", fleet.QueueOptions{GlobalConcurrency: -1}).Submit(ctx(t), jobN(1)); !errors.Is(err, fleet.ErrInvalidArgument) || !strings.Contains(err.Error(), "GlobalConcurrency") {
			t.Errorf("QueueOptions.GlobalConcurrency -1: %v", err)
		}
		if err := e.F.Queue("nobody-made-me").SetGroupLimit(ctx(t), "g", fleet.GroupLimits{Concurrency: 1}); !errors.Is(err, fleet.ErrQueueNotFound) {
			t.Errorf("SetGroupLimit on an unknown queue = %v, want ErrQueueNotFound", err)
		}
		if got := e.dump(t); !maps.Equal(got, stored) {
			t.Fatalf("bad input changed what is stored:\n got %v\nwant %v", got, stored)
		}
	})
}

// TestQueueCheckOptions: CheckOptions says what SubmitWith would of the
// options alone, and writes nothing.
func TestQueueCheckOptions(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		q := fleet.NewQueue[job](e.F, "check", fleet.QueueOptions{})
		if err := q.CheckOptions(fleet.SubmitOptions{Priority: 2, Metadata: map[string]string{"a": "b"}}); err != nil {
			t.Fatalf("good options: %v", err)
		}
		if err := q.CheckOptions(fleet.SubmitOptions{Group: "g", Priority: 1}); err != nil {
			t.Fatalf("group and priority: %v", err)
		}
		if err := fleet.NewQueue[job](e.F, "bad{name}", fleet.QueueOptions{}).CheckOptions(fleet.SubmitOptions{}); !errors.Is(err, fleet.ErrInvalidName) {
			t.Fatalf("a bad queue name: %v", err)
		}
		if got := e.dump(t); len(got) != 0 {
			t.Fatalf("CheckOptions wrote %v", got)
		}
	})
}
