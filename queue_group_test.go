package fleet_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/internal/redistest"
)

// grouped submits jobN(from..from+n-1) to group g of q in one call.
func grouped(t *testing.T, q *fleet.Queue[job], g string, from, n int) []string {
	t.Helper()
	subs := make([]fleet.Submission[job], n)
	for i := range subs {
		subs[i] = fleet.Submission[job]{Payload: jobN(from + i), Options: fleet.SubmitOptions{Group: g}}
	}
	ids, err := q.SubmitManyWith(ctx(t), subs)
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// TestQueueGroupSchema follows grouped tasks through submit, reserve and
// ack, and asserts every key and value left in Redis.
func TestQueueGroupSchema(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		k := e.qk("sites")
		q := fleet.NewQueue[job](e.F, "sites", fleet.QueueOptions{Lease: 20 * time.Second})
		a := grouped(t, q, "a", 0, 2)
		b := grouped(t, q, "b", 2, 1)
		plain, err := q.Submit(ctx(t), jobN(3))
		if err != nil {
			t.Fatal(err)
		}
		body := func(id string, n int, g string) string {
			s := `{"id":"` + id + `","payload":{"url":"https://example.com/` + fmt.Sprint(n) + `","n":` + fmt.Sprint(n) + `},"attempts":0`
			if g != "" {
				s += `,"group":"` + g + `"`
			}
			return s + "}"
		}
		policy := `string:{"max_attempts":10,"backoff_base_ms":1000,"backoff_max_ms":600000,"dead_max":10000,"dead_max_age_ms":604800000}`
		want := map[string]string{
			k.Pending:      "list:" + body(plain, 3, ""),
			k.Group + "a":  "list:" + body(a[0], 0, "a") + "\n" + body(a[1], 1, "a"),
			k.Group + "b":  "list:" + body(b[0], 2, "b"),
			k.Groups:       "list:a\n\nb",
			k.GroupState:   "hash:=r\na=r\nb=r",
			k.GroupPending: "string:3",
			k.Signal:       "string:3",
			k.Policy:       policy,
			k.Registry:     "set:sites",
		}
		if got := e.dump(t); !maps.Equal(got, want) {
			t.Fatalf("after submit:\n got %v\nwant %v", got, want)
		}
		if st, err := q.Stats(ctx(t)); err != nil || counted(t, st) != (fleet.QueueStats{Pending: 4, Grouped: 3}) || st.Latency <= 0 {
			t.Fatalf("Stats %+v, %v", st, err)
		}

		// One reserve of 4 takes a fair share of each member of the round
		// in turn: 2 of a (4 to take, 3 members), the documented list's 1,
		// then b's.
		tasks := reserveAll(t, q, 4)
		var ids []string
		for _, tk := range tasks {
			ids = append(ids, tk.ID)
		}
		if w := []string{a[0], a[1], plain, b[0]}; !slices.Equal(ids, w) {
			t.Fatalf("reserved %v, want %v", ids, w)
		}
		if tasks[0].Group() != "a" || tasks[2].Group() != "" || tasks[3].Group() != "b" {
			t.Fatalf("groups %q %q %q", tasks[0].Group(), tasks[2].Group(), tasks[3].Group())
		}
		got := e.dump(t)
		for _, g := range []string{"a", "b"} {
			run := got[k.GroupRun+g]
			if n := strings.Count(run, "@"); (g == "a" && n != 2) || (g == "b" && n != 1) {
				t.Fatalf("permits of %s: %q", g, run)
			}
		}
		for _, gone := range []string{k.Pending, k.Group + "a", k.Group + "b", k.GroupPending} {
			if _, ok := got[gone]; ok {
				t.Fatalf("%s left after the reserve: %v", gone, got)
			}
		}
		for _, tk := range tasks {
			if err := tk.Ack(ctx(t)); err != nil {
				t.Fatal(err)
			}
		}
		// The permits are back; an empty reserve takes the emptied groups
		// out of the round, and the next the documented list's turn.
		for range 2 {
			if ts, err := q.Reserve(ctx(t), 1, 0); err != nil || len(ts) != 0 {
				t.Fatalf("Reserve of an empty queue = %v, %v", ts, err)
			}
		}
		want = map[string]string{k.Signal: "string:3", k.Policy: policy, k.Registry: "set:sites"}
		if got := e.dump(t); !maps.Equal(got, want) {
			t.Fatalf("after the acks:\n got %v\nwant %v", got, want)
		}
	})
}

// TestQueueGroupFairness: three groups submit 90%, 9% and 1% of 30,000
// tasks; while all three have backlog, each gets a third of the runs.
func TestQueueGroupFairness(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		q := fleet.NewQueue[job](e.F, "fair", fleet.QueueOptions{Lease: time.Minute})
		counts := map[string]int{"big": 27_000, "mid": 2_700, "small": 300}
		// Submitted interleaved, in batches, as tenants would.
		for i := 0; i < 30_000; i += 1000 {
			var subs []fleet.Submission[job]
			for g, n := range counts {
				for range n / 30 {
					subs = append(subs, fleet.Submission[job]{Payload: jobN(i), Options: fleet.SubmitOptions{Group: g}})
				}
			}
			if _, err := q.SubmitManyWith(ctx(t), subs); err != nil {
				t.Fatal(err)
			}
		}
		if st, err := q.Stats(ctx(t)); err != nil || st.Pending != 30_000 || st.Grouped != 30_000 {
			t.Fatalf("Stats %+v, %v", st, err)
		}
		ran := map[string]int{}
		for ran["small"] < 300 {
			ts, err := q.Reserve(ctx(t), 32, 0)
			if err != nil || len(ts) == 0 {
				t.Fatalf("Reserve = %d tasks, %v", len(ts), err)
			}
			for _, tk := range ts {
				if ran["small"] < 300 {
					ran[tk.Group()]++
				}
				if err := tk.Ack(ctx(t)); err != nil {
					t.Fatal(err)
				}
			}
		}
		total := ran["big"] + ran["mid"] + ran["small"]
		for g, n := range ran {
			if share := float64(n) / float64(total); share < 0.9/3 || share > 1.1/3 {
				t.Errorf("%s got %d of %d runs (%.3f), want a third ±10%%", g, n, total, share)
			}
		}
		t.Logf("%s: %v while all three had backlog", tg.Name, ran)
	})
}

// span is one run of a handler: its group, from and to.
type span struct {
	g        string
	from, to time.Time
}

// mostAtOnce is the most spans of one group (every group: g == "") that
// overlap at any instant.
func mostAtOnce(spans []span, g string) int {
	var hs []holding
	for _, s := range spans {
		if g == "" || s.g == g {
			hs = append(hs, holding{s.from, s.to})
		}
	}
	return maxOverlap(hs)
}

// runVanishing runs 4 Fleets of 8 slots on queue name (opened by mk on
// each), plus a consumer that reserves tasks and vanishes with them (as a
// SIGKILLed worker would), until every one of ids ran once to its end;
// a sweeper hands the vanished tasks back. It returns the handlers' runs.
func runVanishing(t *testing.T, e *env, mk func(*fleet.Fleet) *fleet.Queue[job], ids []string) []span {
	t.Helper()
	var mu sync.Mutex
	var spans []span
	done := map[string]bool{}
	// A consumer reserves tasks and vanishes with them (never ends them),
	// before the workers start and while they run: their permits come back
	// with them, when the sweeper re-queues them once their leases ran out.
	vq := mk(e.F)
	vanished := len(reserveAll(t, vq, 2))
	for i := range 4 {
		f := e.F
		if i > 0 {
			f = openOn(t, e.Tg, e.Prefix)
		}
		q := mk(f)
		w := fleet.NewBatchWorker(f, fleet.WorkerOptions{Type: "grp", ID: fmt.Sprint("w", i), Slots: 8}, q,
			fleet.BatchFunc[wcfg, out, job](func(ctx context.Context, s *fleet.Slot[wcfg, out], tk *fleet.Task[job]) error {
				from := time.Now()
				time.Sleep(time.Duration(1+rand.N(4)) * time.Millisecond)
				mu.Lock()
				spans = append(spans, span{tk.Group(), from, time.Now()})
				done[tk.ID] = true
				mu.Unlock()
				return nil
			}))
		startWorker(t, w)
	}
	runSweeper(t, e.F, 50*time.Millisecond)
	waitFor(t, 60*time.Second, func() bool {
		if vanished < 20 {
			if ts, _ := vq.Reserve(ctx(t), 1, 0); len(ts) == 1 {
				vanished++ // never ended: its permits come back with it
			}
		}
		mu.Lock()
		defer mu.Unlock()
		return len(done) == len(ids)
	}, "fewer than %d tasks done", len(ids))
	mu.Lock()
	defer mu.Unlock()
	return slices.Clone(spans)
}

// TestQueueGroupConcurrency: 4 Fleets of 8 slots, group concurrency 2,
// consumers that vanish with tasks: no group ever runs more than 2 at once,
// and every permit comes back.
func TestQueueGroupConcurrency(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		e := open(t, tg)
		k := e.qk("conc")
		mk := func(f *fleet.Fleet) *fleet.Queue[job] {
			return fleet.NewQueue[job](f, "conc", fleet.QueueOptions{Lease: 300 * time.Millisecond, Groups: fleet.GroupLimits{Concurrency: 2}})
		}
		q := mk(e.F)
		var ids []string
		for i, g := range []string{"a", "b", "c", "d"} {
			ids = append(ids, grouped(t, q, g, 100*i, 100)...)
		}
		spans := runVanishing(t, e, mk, ids)
		for _, g := range []string{"a", "b", "c", "d"} {
			if most := mostAtOnce(spans, g); most > 2 || most == 0 {
				t.Errorf("group %s ran %d at once, limit 2", g, most)
			}
		}
		if most := mostAtOnce(spans, ""); most <= 2 {
			t.Errorf("the groups ran %d at once in all: they held each other back", most)
		}
		waitFor(t, 10*time.Second, func() bool {
			gs, err := q.Groups(ctx(t))
			return err == nil && len(gs) == 0
		}, "groups left")
		// The last acks give the permits back after Groups saw the lists
		// empty: wait for them.
		for _, g := range []string{"a", "b", "c", "d"} {
			waitFor(t, 10*time.Second, func() bool { return !rawExists(t, e.Raw, k.GroupRun+g) },
				"permits of %s left: %v", g, later(func() any { return e.dump(t)[k.GroupRun+g] }))
		}
	})
}

// TestQueueGlobalConcurrency: the same with a fleet-wide bound of 3 on the
// queue's running tasks.
func TestQueueGlobalConcurrency(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		e := open(t, tg)
		k := e.qk("global")
		mk := func(f *fleet.Fleet) *fleet.Queue[job] {
			return fleet.NewQueue[job](f, "global", fleet.QueueOptions{Lease: 300 * time.Millisecond, GlobalConcurrency: 3})
		}
		q := mk(e.F)
		ids := submitJobs(t, q, 300)
		spans := runVanishing(t, e, mk, ids)
		if most := mostAtOnce(spans, ""); most > 3 || most < 2 {
			t.Errorf("%d ran at once, limit 3", most)
		}
		waitFor(t, 10*time.Second, func() bool { return !rawExists(t, e.Raw, k.Running) }, "permits left: %v", later(func() any { return e.dump(t)[k.Running] }))
		if p, _ := e.get(t, k.Policy); !strings.Contains(p, `"global_concurrency":3`) {
			t.Fatalf("policy %s", p)
		}
	})
}

// TestQueueGroupRate: one group at 20/s beside two unlimited groups: it
// runs at 20/s ±5%, and the others are not slowed.
func TestQueueGroupRate(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		e := open(t, tg)
		k := e.qk("rate")
		q := fleet.NewQueue[job](e.F, "rate", fleet.QueueOptions{Lease: 10 * time.Second})
		if err := q.SetGroupLimit(ctx(t), "slow", fleet.GroupLimits{Rate: fleet.LimitOptions{Rate: 20}}); err != nil {
			t.Fatal(err)
		}
		if got, _ := rawHget(t, e, k.GroupLimits, "slow"); got != `{"c":0,"r":20,"per_ms":1000,"iv":50000,"b":1}` {
			t.Fatalf("limit stored %q", got)
		}
		grouped(t, q, "slow", 0, 61)
		grouped(t, q, "x", 100, 300)
		grouped(t, q, "y", 400, 300)
		var mu sync.Mutex
		starts := map[string][]time.Time{}
		w := fleet.NewBatchWorker(e.F, fleet.WorkerOptions{Type: "rate", ID: "w", Slots: 8}, q,
			fleet.BatchFunc[wcfg, out, job](func(ctx context.Context, s *fleet.Slot[wcfg, out], tk *fleet.Task[job]) error {
				mu.Lock()
				starts[tk.Group()] = append(starts[tk.Group()], time.Now())
				mu.Unlock()
				return nil
			}))
		startWorker(t, w)
		waitFor(t, 30*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(starts["slow"]) == 61 }, "the slow group ran %d of 61", later(func() any { mu.Lock(); defer mu.Unlock(); return len(starts["slow"]) }))
		mu.Lock()
		defer mu.Unlock()
		s := starts["slow"]
		// Never faster than the limit (+5% for the clocks); slower only as
		// much as a starved machine makes it (a run beside CPU hogs saw 17).
		rate := 60 / s[60].Sub(s[0]).Seconds()
		if rate < 15 || rate > 21 {
			t.Errorf("the limited group ran at %.2f/s, want 20 (at most +5%%, and not under 15)", rate)
		}
		for _, g := range []string{"x", "y"} {
			if n := len(starts[g]); n != 300 {
				t.Fatalf("group %s ran %d of 300", g, n)
			}
			if last := starts[g][299]; !last.Before(s[20]) {
				t.Errorf("group %s ended %v after the limited one began: slowed (the limited one's 21st start came %v in)", g, last.Sub(s[0]), s[20].Sub(s[0]))
			}
		}
		t.Logf("%s: limited group at %.2f/s", tg.Name, rate)
	})
}

// TestQueueGroupSequential: groups of concurrency 1 run their tasks one at
// a time in submit order across 4 Fleets, while consumers vanish with
// tasks (a kill), tasks fail and are retried, and one Fleet closes.
func TestQueueGroupSequential(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		e := open(t, tg)
		mk := func(f *fleet.Fleet) *fleet.Queue[job] {
			return fleet.NewQueue[job](f, "seq", fleet.QueueOptions{Lease: 300 * time.Millisecond,
				BackoffBase: 20 * time.Millisecond, BackoffMax: 40 * time.Millisecond, MaxAttempts: 50,
				Groups: fleet.GroupLimits{Concurrency: 1}})
		}
		q := mk(e.F)
		groups := []string{"k1", "k2", "k3", "k4"}
		order := map[string][]string{}
		for i, g := range groups {
			order[g] = grouped(t, q, g, 100*i, 40)
		}
		var mu sync.Mutex
		var spans []span
		firstDone := map[string][]string{} // group -> ids in the order their runs succeeded
		failed := map[string]bool{}
		fleets := make([]*fleet.Fleet, 4)
		for i := range fleets {
			fleets[i] = e.F
			if i > 0 {
				fleets[i] = openOn(t, tg, e.Prefix)
			}
			w := fleet.NewBatchWorker(fleets[i], fleet.WorkerOptions{Type: "seq", ID: fmt.Sprint("w", i), Slots: 8}, mk(fleets[i]),
				fleet.BatchFunc[wcfg, out, job](func(ctx context.Context, s *fleet.Slot[wcfg, out], tk *fleet.Task[job]) error {
					from := time.Now()
					time.Sleep(time.Millisecond)
					mu.Lock()
					defer mu.Unlock()
					spans = append(spans, span{tk.Group(), from, time.Now()})
					if !failed[tk.ID] && rand.N(8) == 0 {
						failed[tk.ID] = true
						return errors.New("flaky")
					}
					firstDone[tk.Group()] = append(firstDone[tk.Group()], tk.ID)
					return nil
				}))
			startWorker(t, w)
		}
		runSweeper(t, e.F, 50*time.Millisecond)
		vanished, closed := 0, false
		waitFor(t, 90*time.Second, func() bool {
			if vanished < 8 {
				if ts, _ := q.Reserve(ctx(t), 1, 0); len(ts) == 1 {
					vanished++
				}
			}
			mu.Lock()
			defer mu.Unlock()
			n := 0
			for _, ids := range firstDone {
				n += len(ids)
			}
			if !closed && n > 60 {
				closed = true
				go func() { _ = fleets[3].Close() }() // the kill of a whole process
			}
			return n == 160
		}, "tasks done: %v", firstDone)
		mu.Lock()
		defer mu.Unlock()
		for _, g := range groups {
			if most := mostAtOnce(spans, g); most != 1 {
				t.Errorf("group %s ran %d at once", g, most)
			}
			if !slices.Equal(firstDone[g], order[g]) {
				t.Errorf("group %s ran out of order:\n got %v\nwant %v", g, firstDone[g], order[g])
			}
		}
		if vanished == 0 || len(failed) == 0 {
			t.Fatalf("%d vanished, %d failed: the test says nothing", vanished, len(failed))
		}
	})
}

// TestQueueGroupPauseAndLimits: a paused group is skipped while the others
// run; a new limit applies at once; Groups says what holds each group.
func TestQueueGroupPauseAndLimits(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		k := e.qk("pg")
		q := fleet.NewQueue[job](e.F, "pg", fleet.QueueOptions{Lease: 20 * time.Second, Groups: fleet.GroupLimits{Concurrency: 1}})
		grouped(t, q, "a", 0, 3)
		grouped(t, q, "b", 10, 3)
		if err := q.PauseGroup(ctx(t), "a"); err != nil {
			t.Fatal(err)
		}
		if m := e.dump(t)[k.GroupPaused]; m != "set:a" {
			t.Fatalf("paused set %q", m)
		}
		ts := reserveAll(t, q, 1)
		if ts[0].Group() != "b" {
			t.Fatalf("reserved from %q, want b (a is paused)", ts[0].Group())
		}
		// b is at its concurrency of 1, a paused: nothing to take.
		if more, err := q.Reserve(ctx(t), 5, 0); err != nil || len(more) != 0 {
			t.Fatalf("Reserve = %d tasks, %v", len(more), err)
		}
		gs, err := q.Groups(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		want := []fleet.GroupInfo{
			{Name: "a", Pending: 3, Limits: fleet.GroupLimits{Concurrency: 1}, Paused: true, State: "paused"},
			{Name: "b", Pending: 2, Running: 1, Limits: fleet.GroupLimits{Concurrency: 1}, State: "concurrency"},
		}
		for i := range gs {
			if gs[i].Latency <= 0 || gs[i].Latency > time.Minute {
				t.Errorf("group %s latency %v", gs[i].Name, gs[i].Latency)
			}
			gs[i].Latency = 0
		}
		if !slices.Equal(gs, want) {
			t.Fatalf("Groups:\n got %+v\nwant %+v", gs, want)
		}
		// b's own limit of 3 lets two more go at once.
		if err := q.SetGroupLimit(ctx(t), "b", fleet.GroupLimits{Concurrency: 3}); err != nil {
			t.Fatal(err)
		}
		more := reserveAll(t, q, 2)
		if more[0].Group() != "b" || more[1].Group() != "b" {
			t.Fatalf("reserved from %q, %q", more[0].Group(), more[1].Group())
		}
		if err := q.ResumeGroup(ctx(t), "a"); err != nil {
			t.Fatal(err)
		}
		if a := reserveAll(t, q, 1); a[0].Group() != "a" {
			t.Fatalf("after the resume, reserved from %q", a[0].Group())
		}
		if err := q.RemoveGroupLimit(ctx(t), "b"); err != nil {
			t.Fatal(err)
		}
		if _, ok := e.dump(t)[k.GroupLimits]; ok {
			t.Fatal("limits left after RemoveGroupLimit")
		}
	})
}

// rawHget reads one field of a hash.
func rawHget(t *testing.T, e *env, key, field string) (string, bool) {
	t.Helper()
	v, ok := e.hgetall(t, key)[field]
	return v, ok
}

// TestQueueGroupEmptiedInRound: groups whose lists a Cancel emptied, and a
// group paused while it had a task, stay in the round (only a reserve's
// visit takes them out); one Reserve must go past them, and past the
// documented list's empty turn, to the group that has work, and take all
// of it, leaving no round behind: only the paused group's state and task.
func TestQueueGroupEmptiedInRound(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		k := e.qk("emptied")
		q := fleet.NewQueue[job](e.F, "emptied", fleet.QueueOptions{Lease: 20 * time.Second})
		a := grouped(t, q, "a", 0, 1)
		c := grouped(t, q, "c", 1, 1)
		p := grouped(t, q, "p", 4, 1)
		b := grouped(t, q, "b", 2, 2)
		for _, id := range []string{a[0], c[0]} {
			if err := q.Cancel(ctx(t), id); err != nil {
				t.Fatal(err)
			}
		}
		if err := q.PauseGroup(ctx(t), "p"); err != nil {
			t.Fatal(err)
		}
		got := e.dump(t)
		if got[k.Groups] != "list:a\n\nc\np\nb" || got[k.GroupState] != "hash:=r\na=r\nb=r\nc=r\np=r" {
			t.Fatalf("round after the cancels: %q %q", got[k.Groups], got[k.GroupState])
		}
		ts, err := q.Reserve(ctx(t), 3, 0)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, tk := range ts {
			ids = append(ids, tk.ID)
		}
		if !slices.Equal(ids, b) {
			t.Fatalf("Reserve(3) took %v, want b's %v", ids, b)
		}
		got = e.dump(t)
		for _, gone := range []string{k.Groups, k.Group + "a", k.Group + "b", k.Group + "c", k.Pending} {
			if v, ok := got[gone]; ok {
				t.Fatalf("%s left after the reserve: %q", gone, v)
			}
		}
		pbody := `{"id":"` + p[0] + `","payload":{"url":"https://example.com/4","n":4},"attempts":0,"group":"p"}`
		if got[k.GroupState] != "hash:p=p" || got[k.Group+"p"] != "list:"+pbody || got[k.GroupPending] != "string:1" || got[k.GroupPaused] != "set:p" {
			t.Fatalf("the paused group after the reserve: state %q, list %q, pending %q, paused %q",
				got[k.GroupState], got[k.Group+"p"], got[k.GroupPending], got[k.GroupPaused])
		}
		if n := strings.Count(got[k.GroupRun+"b"], "@"); n != 2 {
			t.Fatalf("permits of b: %q", got[k.GroupRun+"b"])
		}
		for _, tk := range ts {
			if err := tk.Ack(ctx(t)); err != nil {
				t.Fatal(err)
			}
		}
		policy := `string:{"max_attempts":10,"backoff_base_ms":1000,"backoff_max_ms":600000,"dead_max":10000,"dead_max_age_ms":604800000}`
		want := map[string]string{k.Signal: "string:5", k.Policy: policy, k.Registry: "set:emptied",
			k.GroupState: "hash:p=p", k.Group + "p": "list:" + pbody, k.GroupPending: "string:1", k.GroupPaused: "set:p"}
		if got := e.dump(t); !maps.Equal(got, want) {
			t.Fatalf("after the acks:\n got %v\nwant %v", got, want)
		}
	})
}
