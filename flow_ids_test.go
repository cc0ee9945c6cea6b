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

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/internal/redistest"
)

// Caller-chosen ids (issue #33): FlowOptions.ID, BatchOptions.ID and
// SubmitOptions.ID make a repeated submit (a retried request) give the
// same run.

// storedKeys lists the keys the test left, without its prefix, sorted,
// but a worker's own keys (wkr:..., wkrs:...), which change by themselves.
func storedKeys(t *testing.T, e *env) []string {
	t.Helper()
	var out []string
	for _, k := range e.keys(t) {
		k = strings.TrimPrefix(k, e.Prefix)
		if strings.HasPrefix(k, "wkr") {
			continue
		}
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// stored is e.dump without a worker's own keys.
func stored(t *testing.T, e *env) map[string]string {
	t.Helper()
	d := e.dump(t)
	maps.DeleteFunc(d, func(k, _ string) bool { return strings.HasPrefix(strings.TrimPrefix(k, e.Prefix), "wkr") })
	return d
}

// same fails the test when Redis changed from before.
func same(t *testing.T, e *env, before map[string]string, what string) {
	t.Helper()
	after := stored(t, e)
	if !maps.Equal(before, after) {
		var diff []string
		for k, v := range after {
			if before[k] != v {
				diff = append(diff, k)
			}
		}
		for k := range before {
			if _, ok := after[k]; !ok {
				diff = append(diff, k+" (gone)")
			}
		}
		slices.Sort(diff)
		t.Fatalf("%s changed Redis: %v", what, diff)
	}
}

// lay spells a key without the prefix in the target's layout: tagged
// puts the braces of {name}.
func lay(e *env, compat, tagged string) string {
	if e.Tg.Tagged {
		return tagged
	}
	return compat
}

// hash reads a hash.
func (e *env) hash(t *testing.T, key string) map[string]string {
	t.Helper()
	m, err := e.Raw.Do(context.Background(), e.Raw.B().Hgetall().Key(e.Prefix+key).Build()).AsStrMap()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestFlowCallerID: a flow with FlowOptions.ID is written once: its steps'
// ids derive from it, a second Submit of a Flow with the same id (while
// under way, and once done) returns nil and changes nothing in Redis; the
// keys the first left are exactly the flow's. Bad ids are refused with
// ErrInvalidArgument and nothing stored changes; a batch's id is not a
// flow's.
func TestFlowCallerID(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		fetch := fleet.NewQueue[node](e.F, "fid-a", fleet.QueueOptions{})
		join := fleet.NewQueue[node](e.F, "fid-j", fleet.QueueOptions{})
		build := func(id string) (*fleet.Flow, *fleet.FlowStep) {
			fl := fleet.NewFlow(e.F, fleet.FlowOptions{ID: id})
			var deps []*fleet.FlowStep
			var kids []string
			for n := 1; n <= 3; n++ {
				s := fleet.AddStep(fl, fetch, node{N: n}, fleet.SubmitOptions{})
				deps, kids = append(deps, s), append(kids, s.ID())
			}
			return fl, fleet.AddStep(fl, join, node{Kids: kids}, fleet.SubmitOptions{After: fleet.Steps(deps...)})
		}
		fl, j := build("order-42")
		if fl.ID() != "order-42" || j.ID() != "order-42/3" {
			t.Fatalf("ids %s, %s", fl.ID(), j.ID())
		}
		if err := fl.Submit(c); err != nil {
			t.Fatal(err)
		}
		a := func(s string) string { return lay(e, "fleet:queue:fid-a"+s, "fleet:queue:{fid-a}"+s) }
		jk := func(s string) string { return lay(e, "fleet:queue:fid-j"+s, "fleet:queue:{fid-j}"+s) }
		rec := lay(e, "fleet:flow:order-42", "fleet:flow:{order-42}")
		want := []string{rec, rec + ":m", "fleet:queues", a(""), a(":policy"), jk(":policy"), a(":flow:order-42/0"), a(":flow:order-42/1"), a(":flow:order-42/2"),
			a(":fout:order-42/0"), a(":fout:order-42/1"), a(":fout:order-42/2"), jk(":flow:order-42/3"), jk(":waiting")}
		slices.Sort(want)
		if got := storedKeys(t, e); !slices.Equal(got, want) {
			t.Fatalf("keys after the submit:\n got %q\nwant %q", got, want)
		}
		r := e.hash(t, rec)
		if r["state"] != "closed" || r["kind"] != "flow" || r["total"] != "4" || r["ok"] != "0" || r["keep"] != "3600000" {
			t.Fatalf("flow record %v", r)
		}
		m := e.hash(t, rec+":m")
		wantM := map[string]string{"fid-a order-42/0": "p", "fid-a order-42/1": "p", "fid-a order-42/2": "p", "fid-j order-42/3": "p"}
		if !maps.Equal(m, wantM) {
			t.Fatalf("members %v", m)
		}
		if l := e.lrange(t, e.Prefix+a("")); len(l) != 3 || !strings.Contains(l[0], `"id":"order-42/0"`) {
			t.Fatalf("queue %v", l)
		}
		if s := e.hash(t, jk(":flow:order-42/3")); s["s"] != "w" || s["n"] != "3" || s["k"] != "1" {
			t.Fatalf("join's record %v", s)
		}

		// The same flow again, under way: nil, nothing changes.
		before := stored(t, e)
		fl2, j2 := build("order-42")
		if err := fl2.Submit(c); err != nil {
			t.Fatalf("second Submit: %v", err)
		}
		if j2.ID() != j.ID() {
			t.Fatalf("the second flow's join is %s", j2.ID())
		}
		same(t, e, before, "a second Submit of the flow")

		// Bad ids, and a batch's id: refused, nothing changes.
		for _, bad := range []string{"a b", "a\tb", "{x}", "x}", strings.Repeat("x", fleet.MaxFlowIDLen+1), "a\x00b", "\xff"} {
			fl, _ := build(bad)
			if err := fl.Submit(c); !errors.Is(err, fleet.ErrInvalidArgument) {
				t.Fatalf("flow id %q: %v", bad, err)
			}
			if _, err := e.F.NewBatch(c, fleet.BatchOptions{ID: bad}); !errors.Is(err, fleet.ErrInvalidArgument) {
				t.Fatalf("batch id %q: %v", bad, err)
			}
		}
		if _, err := e.F.NewBatch(c, fleet.BatchOptions{ID: "order-42"}); !errors.Is(err, fleet.ErrInvalidArgument) {
			t.Fatalf("a batch with a flow's id: %v", err)
		}
		same(t, e, before, "refused ids")

		// A step's own id (SubmitOptions.ID) taken by a live task: the
		// flow is refused (ErrDuplicate), and the task that holds it is
		// left as it was.
		other := fleet.NewFlow(e.F, fleet.FlowOptions{})
		fleet.AddStep(other, fetch, node{N: 5}, fleet.SubmitOptions{})
		fleet.AddStep(other, join, node{N: 6}, fleet.SubmitOptions{ID: "order-42/3"})
		if err := other.Submit(c); !errors.Is(err, fleet.ErrDuplicate) {
			t.Fatalf("a step whose id is taken: %v", err)
		}
		same(t, e, before, "a flow refused for a taken step id") // what it wrote, it dropped before returning

		// Run it; once done (within its retention) a third Submit is nil
		// and changes nothing.
		log := newRunLog()
		flowWorker(t, e.F, fetch, log, func(ctx context.Context, tk *fleet.Task[node]) (int, error) { return tk.Payload.N, nil })
		flowWorker(t, e.F, join, log, sumKids(fetch))
		if sum, err := fleet.ResultOf[int](c, join, j.ID(), fleet.Await()); err != nil || sum != 6 {
			t.Fatalf("join: %d %v", sum, err)
		}
		if st, err := e.F.FlowStatus(c, "order-42"); err != nil || st.State != fleet.FlowDone || st.Succeeded != 4 {
			t.Fatalf("status %+v %v", st, err)
		}
		before = stored(t, e)
		fl3, _ := build("order-42")
		if err := fl3.Submit(c); err != nil {
			t.Fatalf("Submit once done: %v", err)
		}
		same(t, e, before, "a Submit of the done flow")
		for _, id := range []string{"order-42/0", "order-42/1", "order-42/2"} {
			if n := log.runs(id); n != 1 {
				t.Fatalf("%s ran %d times", id, n)
			}
		}
		if n := log.runs(j.ID()); n != 1 {
			t.Fatalf("the join ran %d times", n)
		}
	})
}

// TestBatchCallerID: NewBatch with BatchOptions.ID makes the batch and its
// callback once; a second NewBatch with the id returns the same batch and
// changes nothing, open or done; a flow's id is not a batch's; BatchAdd
// and NewCallback refuse SubmitOptions.ID.
func TestBatchCallerID(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		q := fleet.NewQueue[node](e.F, "bid-a", fleet.QueueOptions{})
		cbq := fleet.NewQueue[node](e.F, "bid-cb", fleet.QueueOptions{})
		b, err := e.F.NewBatch(c, fleet.BatchOptions{ID: "import-7", OnComplete: fleet.NewCallback(cbq, node{N: 9}, fleet.SubmitOptions{})})
		if err != nil || b.ID() != "import-7" {
			t.Fatalf("NewBatch: %v %v", b, err)
		}
		rec := lay(e, "fleet:flow:import-7", "fleet:flow:{import-7}")
		cb := func(s string) string { return lay(e, "fleet:queue:bid-cb"+s, "fleet:queue:{bid-cb}"+s) }
		keys := storedKeys(t, e)
		var cbRec string
		for _, k := range keys {
			if strings.HasPrefix(k, cb(":flow:")) {
				cbRec = k
			}
		}
		want := []string{rec, rec + ":m", "fleet:queues", cbRec, cb(":waiting"), cb(":policy")}
		slices.Sort(want)
		if cbRec == "" || !slices.Equal(keys, want) {
			t.Fatalf("keys after NewBatch:\n got %q\nwant %q", keys, want)
		}
		if r := e.hash(t, rec); r["state"] != "open" || r["kind"] != "batch" || r["total"] != "0" {
			t.Fatalf("batch record %v", r)
		}
		before := stored(t, e)
		b2, err := e.F.NewBatch(c, fleet.BatchOptions{ID: "import-7", OnComplete: fleet.NewCallback(cbq, node{N: 9}, fleet.SubmitOptions{})})
		if err != nil || b2.ID() != "import-7" {
			t.Fatalf("second NewBatch: %v %v", b2, err)
		}
		same(t, e, before, "a second NewBatch")
		if _, err := fleet.BatchAdd(c, b, q, []node{{N: 1}}, fleet.SubmitOptions{ID: "t1"}); !errors.Is(err, fleet.ErrInvalidArgument) {
			t.Fatalf("BatchAdd with an ID: %v", err)
		}
		if _, err := e.F.NewBatch(c, fleet.BatchOptions{OnComplete: fleet.NewCallback(cbq, node{}, fleet.SubmitOptions{ID: "t1"})}); !errors.Is(err, fleet.ErrInvalidArgument) {
			t.Fatalf("a callback with an ID: %v", err)
		}
		fl := fleet.NewFlow(e.F, fleet.FlowOptions{ID: "import-7"})
		fleet.AddStep(fl, q, node{N: 1}, fleet.SubmitOptions{})
		if err := fl.Submit(c); !errors.Is(err, fleet.ErrInvalidArgument) {
			t.Fatalf("a flow with a batch's id: %v", err)
		}
		same(t, e, before, "refused calls")

		ids, err := fleet.BatchAdd(c, b2, q, []node{{N: 1}, {N: 2}}, fleet.SubmitOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := b2.Close(c); err != nil {
			t.Fatal(err)
		}
		log := newRunLog()
		flowWorker(t, e.F, q, log, func(ctx context.Context, tk *fleet.Task[node]) (int, error) { return tk.Payload.N, nil })
		flowWorker(t, e.F, cbq, log, func(ctx context.Context, tk *fleet.Task[node]) (int, error) { return 0, nil })
		for _, id := range ids {
			if _, err := fleet.ResultOf[int](c, q, id, fleet.Await()); err != nil {
				t.Fatal(err)
			}
		}
		cbID := strings.TrimPrefix(cbRec, cb(":flow:"))
		if _, err := fleet.ResultOf[int](c, cbq, cbID, fleet.Await()); err != nil {
			t.Fatalf("callback: %v", err)
		}
		before = stored(t, e)
		if _, err := e.F.NewBatch(c, fleet.BatchOptions{ID: "import-7", OnComplete: fleet.NewCallback(cbq, node{N: 9}, fleet.SubmitOptions{})}); err != nil {
			t.Fatalf("NewBatch once done: %v", err)
		}
		same(t, e, before, "a NewBatch of the done batch")
		if st, err := b.Status(c); err != nil || st != (fleet.FlowStatus{ID: "import-7", State: fleet.FlowDone, Total: 2, Succeeded: 2}) {
			t.Fatalf("status %+v %v", st, err)
		}
		if n := log.runs(cbID); n != 1 {
			t.Fatalf("the callback ran %d times", n)
		}
	})
}

// TestSubmitCallerID: a tracked task with SubmitOptions.ID (Track, and
// After) is written once: a second submit returns the same id, nil, and
// changes nothing, while it waits, and once it ended (its end kept). The
// keys are exactly the task's. A plain task, a bad id, a ShardKey that is
// not the id on a sharded queue, and an id named twice in one call are
// refused, and nothing changes.
func TestSubmitCallerID(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		q := fleet.NewQueue[node](e.F, "sid-a", fleet.QueueOptions{})
		k := func(s string) string { return lay(e, "fleet:queue:sid-a"+s, "fleet:queue:{sid-a}"+s) }
		id, err := q.SubmitWith(c, node{N: 1}, fleet.SubmitOptions{Track: true, ID: "pay-1"})
		if err != nil || id != "pay-1" {
			t.Fatalf("submit: %s %v", id, err)
		}
		dep, err := q.SubmitWith(c, node{N: 2}, fleet.SubmitOptions{After: fleet.DependOn(q, "pay-1"), ID: "ship-1"})
		if err != nil || dep != "ship-1" {
			t.Fatalf("submit after: %s %v", dep, err)
		}
		want := []string{"fleet:queues", k(""), k(":policy"), k(":flow:pay-1"), k(":fout:pay-1"), k(":flow:ship-1"), k(":waiting")}
		slices.Sort(want)
		if got := storedKeys(t, e); !slices.Equal(got, want) {
			t.Fatalf("keys:\n got %q\nwant %q", got, want)
		}
		if l := e.lrange(t, e.Prefix+k("")); len(l) != 1 || !strings.Contains(l[0], `"id":"pay-1"`) {
			t.Fatalf("queue %v", l)
		}
		if r := e.hash(t, k(":flow:ship-1")); r["s"] != "w" || r["k"] != "1" || r["n"] != "1" {
			t.Fatalf("record %v", r)
		}
		before := stored(t, e)
		for range 3 {
			if id, err := q.SubmitWith(c, node{N: 1}, fleet.SubmitOptions{Track: true, ID: "pay-1"}); err != nil || id != "pay-1" {
				t.Fatalf("again: %s %v", id, err)
			}
			if id, err := q.SubmitWith(c, node{N: 2}, fleet.SubmitOptions{After: fleet.DependOn(q, "pay-1"), ID: "ship-1"}); err != nil || id != "ship-1" {
				t.Fatalf("again after: %s %v", id, err)
			}
			ids, err := q.SubmitManyWith(c, []fleet.Submission[node]{{Payload: node{N: 1}, Options: fleet.SubmitOptions{Track: true, ID: "pay-1"}}})
			if err != nil || !slices.Equal(ids, []string{"pay-1"}) {
				t.Fatalf("again, many: %v %v", ids, err)
			}
		}
		same(t, e, before, "repeated submits")

		for _, bad := range []fleet.SubmitOptions{
			{ID: "plain-1"}, // not tracked
			{Track: true, ID: "a b"},
			{Track: true, ID: "{a}"},
			{Track: true, ID: "a\nb"},
			{Track: true, ID: "\xff"},
			{Track: true, ID: strings.Repeat("x", fleet.MaxTaskIDLen+1)},
			{Track: true, ID: "x", DedupKey: "x"},
		} {
			if _, err := q.SubmitWith(c, node{}, bad); !errors.Is(err, fleet.ErrInvalidArgument) {
				t.Fatalf("%+v: %v", bad, err)
			}
		}
		if _, err := q.SubmitManyWith(c, []fleet.Submission[node]{
			{Options: fleet.SubmitOptions{Track: true, ID: "twice"}}, {Options: fleet.SubmitOptions{Track: true, ID: "twice"}},
		}); !errors.Is(err, fleet.ErrInvalidArgument) {
			t.Fatalf("an id twice in a call: %v", err)
		}
		same(t, e, before, "refused submits")

		// Run both; once they ended, their ends kept, a repeat is the same.
		log := newRunLog()
		flowWorker(t, e.F, q, log, func(ctx context.Context, tk *fleet.Task[node]) (int, error) { return tk.Payload.N, nil })
		if n, err := fleet.ResultOf[int](c, q, "ship-1", fleet.Await()); err != nil || n != 2 {
			t.Fatalf("ship-1: %d %v", n, err)
		}
		noLeftovers(t, e)
		before = stored(t, e)
		if id, err := q.SubmitWith(c, node{N: 1}, fleet.SubmitOptions{Track: true, ID: "pay-1"}); err != nil || id != "pay-1" {
			t.Fatalf("once ended: %s %v", id, err)
		}
		if id, err := q.SubmitWith(c, node{N: 2}, fleet.SubmitOptions{After: fleet.DependOn(q, "pay-1"), ID: "ship-1"}); err != nil || id != "ship-1" {
			t.Fatalf("once ended, after: %s %v", id, err)
		}
		same(t, e, before, "submits once ended")
		if log.runs("pay-1") != 1 || log.runs("ship-1") != 1 {
			t.Fatalf("runs: %d %d", log.runs("pay-1"), log.runs("ship-1"))
		}
	})
}

// TestSubmitCallerIDSharded: on a sharded queue the id picks the shard, so
// that every repeat meets the first: of 20 ids each submitted three times,
// each is on exactly one shard, once. A ShardKey that is not the id is
// refused.
func TestSubmitCallerIDSharded(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		if !tg.Tagged {
			return // the compat layout has no shards
		}
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		q := fleet.NewQueue[node](e.F, "sid-s", fleet.QueueOptions{Shards: 4})
		for i := range 20 {
			for range 3 {
				id := fmt.Sprintf("job-%d", i)
				if got, err := q.SubmitWith(c, node{N: i}, fleet.SubmitOptions{Track: true, ID: id}); err != nil || got != id {
					t.Fatalf("%s: %s %v", id, got, err)
				}
			}
		}
		seen := map[string]int{}
		var lists []string // each shard's pending list: fleet:queue:{sid-s}, fleet:queue:{sid-s:<i>:<salt>}
		for _, k := range storedKeys(t, e) {
			if strings.HasPrefix(k, "fleet:queue:{sid-s") && strings.HasSuffix(k, "}") {
				lists = append(lists, k)
			}
		}
		if len(lists) < 2 {
			t.Fatalf("the tasks are on %d shards: %v", len(lists), lists)
		}
		for _, key := range lists {
			for _, b := range e.lrange(t, e.Prefix+key) {
				for i := range 20 {
					if strings.Contains(b, fmt.Sprintf(`"id":"job-%d"`, i)) {
						seen[fmt.Sprint(i)]++
					}
				}
			}
		}
		if len(seen) != 20 {
			t.Fatalf("tasks found: %v", seen)
		}
		for i, n := range seen {
			if n != 1 {
				t.Fatalf("job-%s is on the shards %d times", i, n)
			}
		}
		before := stored(t, e)
		if _, err := q.SubmitWith(c, node{}, fleet.SubmitOptions{Track: true, ID: "job-1", ShardKey: "other"}); !errors.Is(err, fleet.ErrInvalidArgument) {
			t.Fatalf("a ShardKey that is not the id: %v", err)
		}
		same(t, e, before, "a refused submit")
	})
}

// TestCallerIDConcurrent: four Fleets (as four processes would) submit the
// same flow id, batch id, and task ids (Track, and After) at once, in
// twenty rounds: every call succeeds with the same id, and each task runs
// exactly once.
func TestCallerIDConcurrent(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		const procs = 4
		fleets := []*fleet.Fleet{e.F}
		for range procs - 1 {
			fleets = append(fleets, openOn(t, tg, e.Prefix))
		}
		q := fleet.NewQueue[node](e.F, "cid-a", fleet.QueueOptions{})
		log := newRunLog()
		flowWorker(t, e.F, q, log, func(ctx context.Context, tk *fleet.Task[node]) (int, error) { return tk.Payload.N, nil })
		for round := range 20 {
			flowID, batchID := fmt.Sprintf("f-%d", round), fmt.Sprintf("b-%d", round)
			trackID, afterID := fmt.Sprintf("t-%d", round), fmt.Sprintf("w-%d", round)
			var wg sync.WaitGroup
			errs := make(chan error, 4*procs)
			for _, f := range fleets {
				wg.Add(1)
				go func() {
					defer wg.Done()
					fq := fleet.NewQueue[node](f, "cid-a", fleet.QueueOptions{})
					fl := fleet.NewFlow(f, fleet.FlowOptions{ID: flowID})
					a := fleet.AddStep(fl, fq, node{N: 1}, fleet.SubmitOptions{})
					fleet.AddStep(fl, fq, node{N: 2}, fleet.SubmitOptions{After: fleet.Steps(a)})
					if err := fl.Submit(c); err != nil {
						errs <- fmt.Errorf("flow: %w", err)
					}
					if b, err := f.NewBatch(c, fleet.BatchOptions{ID: batchID}); err != nil || b.ID() != batchID {
						errs <- fmt.Errorf("batch: %v", err)
					}
					if id, err := fq.SubmitWith(c, node{N: 3}, fleet.SubmitOptions{Track: true, ID: trackID}); err != nil || id != trackID {
						errs <- fmt.Errorf("track: %s %v", id, err)
					}
					if id, err := fq.SubmitWith(c, node{N: 4}, fleet.SubmitOptions{After: fleet.DependOn(fq, trackID), ID: afterID}); err != nil || id != afterID {
						errs <- fmt.Errorf("after: %s %v", id, err)
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatalf("round %d: %v", round, err)
			}
			for _, id := range []string{flowID + "/1", afterID} {
				if _, err := fleet.ResultOf[int](c, q, id, fleet.Await()); err != nil {
					t.Fatalf("round %d: %s: %v", round, id, err)
				}
			}
			for _, id := range []string{flowID + "/0", flowID + "/1", trackID, afterID} {
				if n := log.runs(id); n != 1 {
					t.Fatalf("round %d: %s ran %d times", round, id, n)
				}
			}
			if st, err := e.F.FlowStatus(c, batchID); err != nil || st.State != fleet.FlowOpen {
				t.Fatalf("round %d: batch %+v %v", round, st, err)
			}
			if st, err := e.F.FlowStatus(c, flowID); err != nil || st.State != fleet.FlowDone || st.Total != 2 {
				t.Fatalf("round %d: flow %+v %v", round, st, err)
			}
		}
		if n := len(log.starts); n != 20*4 {
			t.Fatalf("%d tasks ran, want 80", n)
		}
	})
}

// TestFlowCallerIDAfterCrash: a submit of a flow id whose first submit
// died after its commit (before marking its tasks) returns nil and
// changes nothing (the sweeper marks them); one whose first submit died
// before its commit waits for it, then, once that one is older than the
// grace, gives ErrUnavailable and changes nothing.
func TestFlowCallerIDAfterCrash(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		q := fleet.NewQueue[node](e.F, "fic-a", fleet.QueueOptions{})
		build := func(id string) *fleet.Flow {
			fl := fleet.NewFlow(e.F, fleet.FlowOptions{ID: id})
			a := fleet.AddStep(fl, q, node{N: 1}, fleet.SubmitOptions{})
			fleet.AddStep(fl, q, node{N: 2}, fleet.SubmitOptions{After: fleet.Steps(a)})
			return fl
		}
		if err := fleet.SubmitFlowUntil(c, build("committed"), 4); err != nil {
			t.Fatal(err)
		}
		if err := fleet.SubmitFlowUntil(c, build("put"), 2); err != nil {
			t.Fatal(err)
		}
		before := stored(t, e)
		if err := build("committed").Submit(c); err != nil {
			t.Fatalf("a submit of a committed flow: %v", err)
		}
		same(t, e, before, "a submit of a committed flow")
		other := openOn(t, tg, e.Prefix)
		fleet.SetFlowTimings(other, 0, 300*time.Millisecond)
		oq := fleet.NewQueue[node](other, "fic-a", fleet.QueueOptions{})
		fl := fleet.NewFlow(other, fleet.FlowOptions{ID: "put"})
		a := fleet.AddStep(fl, oq, node{N: 1}, fleet.SubmitOptions{})
		fleet.AddStep(fl, oq, node{N: 2}, fleet.SubmitOptions{After: fleet.Steps(a)})
		if err := fl.Submit(c); !errors.Is(err, fleet.ErrUnavailable) {
			t.Fatalf("a submit of a flow whose first submit died before its commit: %v", err)
		}
		same(t, e, before, "a refused submit")
	})
}
