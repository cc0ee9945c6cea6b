package fleet_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/internal/redistest"
)

// node is the payload of the flow tests: a number, and the ids of the
// tasks whose results the handler sums (its dependencies).
type node struct {
	N    int      `json:"n"`
	Kids []string `json:"kids,omitempty"`
	Fail bool     `json:"fail,omitempty"`
}

// runLog records, per task id, when its handler began and when it ended
// well, on this process's clock, and every run.
type runLog struct {
	mu     sync.Mutex
	starts map[string][]time.Time
	ends   map[string]time.Time
	seen   map[string][]fleet.DependencyState
}

func newRunLog() *runLog {
	return &runLog{starts: map[string][]time.Time{}, ends: map[string]time.Time{}, seen: map[string][]fleet.DependencyState{}}
}

func (l *runLog) start(id string) {
	l.mu.Lock()
	l.starts[id] = append(l.starts[id], time.Now())
	l.mu.Unlock()
}

func (l *runLog) end(id string) {
	l.mu.Lock()
	l.ends[id] = time.Now()
	l.mu.Unlock()
}

func (l *runLog) runs(id string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.starts[id])
}

// flowWorker runs the tasks of q with h, on one slot per task in flight.
func flowWorker(t *testing.T, f *fleet.Fleet, q *fleet.Queue[node], log *runLog, h func(ctx context.Context, tk *fleet.Task[node]) (int, error)) {
	t.Helper()
	w := fleet.NewBatchWorker(f, fleet.WorkerOptions{Type: "flow-" + q.Name(), ID: "w1", Slots: 4},
		q, fleet.BatchResultFunc[wcfg, out, node, int](func(ctx context.Context, s *fleet.Slot[wcfg, out], tk *fleet.Task[node]) (int, error) {
			log.start(tk.ID)
			n, err := h(ctx, tk)
			if err == nil {
				log.end(tk.ID)
			}
			return n, err
		}))
	startWorker(t, w)
}

// sumKids reads the results of the task's dependencies (tasks of kids)
// through ResultOf, as a handler does, and adds its own N.
func sumKids(kids *fleet.Queue[node]) func(ctx context.Context, tk *fleet.Task[node]) (int, error) {
	return func(ctx context.Context, tk *fleet.Task[node]) (int, error) {
		sum := tk.Payload.N
		for _, id := range tk.Payload.Kids {
			r, err := fleet.ResultOf[int](ctx, kids, id)
			if err != nil {
				return 0, fmt.Errorf("result of %s: %w", id, err)
			}
			sum += r
		}
		return sum, nil
	}
}

// flowLeftovers lists the keys of flows the test left in Redis (the
// tasks' flow records, dependents' sets, outboxes, waiting indexes,
// progress values, the registry; not the flows' own records, which stay
// for their retention): none may stay once a flow ended.
func flowLeftovers(t *testing.T, e *env) []string {
	t.Helper()
	var left []string
	for _, k := range e.keys(t) {
		if !strings.Contains(k, "fleet:queue:") && !strings.HasSuffix(k, "fleet:flows") {
			continue
		}
		for _, part := range []string{":flow:", ":fout:", ":outbox", ":waiting", ":progress", "fleet:flows"} {
			if strings.Contains(k, part) {
				left = append(left, k)
			}
		}
	}
	return left
}

// noLeftovers waits until no flow key is left (flowLeftovers).
func noLeftovers(t *testing.T, e *env) {
	t.Helper()
	var left []string
	waitFor(t, 5*time.Second, func() bool { left = flowLeftovers(t, e); return len(left) == 0 }, "flow keys left")
	if len(left) > 0 {
		t.Fatalf("flow keys left: %v", left)
	}
}

// ttlOf reads a key's PTTL (-1 none, -2 missing).
func ttlOf(t *testing.T, e *env, key string) time.Duration {
	t.Helper()
	ms, err := e.Raw.Do(context.Background(), e.Raw.B().Pttl().Key(key).Build()).AsInt64()
	if err != nil {
		t.Fatal(err)
	}
	if ms < 0 {
		return time.Duration(ms)
	}
	return time.Duration(ms) * time.Millisecond
}

// TestFlowTree: a 3-level tree over 3 queues (4 leaves, 2 parents of 2
// leaves each, one root over the parents): every parent runs after its
// children ended well, once, and reads their results through ResultOf
// (the queues have no Retention); the root's result is the sum of the
// tree. After it, nothing of the flow is left but the tasks' end records
// and the flow's status, each with its retention.
func TestFlowTree(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		leafQ := fleet.NewQueue[node](e.F, "fl-leaf", fleet.QueueOptions{})
		midQ := fleet.NewQueue[node](e.F, "fl-mid", fleet.QueueOptions{})
		rootQ := fleet.NewQueue[node](e.F, "fl-root", fleet.QueueOptions{})
		log := newRunLog()
		flowWorker(t, e.F, leafQ, log, func(ctx context.Context, tk *fleet.Task[node]) (int, error) { return tk.Payload.N * 10, nil })
		flowWorker(t, e.F, midQ, log, sumKids(leafQ))
		flowWorker(t, e.F, rootQ, log, sumKids(midQ))

		fl := fleet.NewFlow(e.F, fleet.FlowOptions{Retention: time.Minute})
		var leaves, mids []*fleet.FlowStep
		for i := range 4 {
			leaves = append(leaves, fleet.AddStep(fl, leafQ, node{N: i + 1}, fleet.SubmitOptions{}))
		}
		for i := range 2 {
			kids := leaves[2*i : 2*i+2]
			mids = append(mids, fleet.AddStep(fl, midQ, node{N: 100, Kids: []string{kids[0].ID(), kids[1].ID()}},
				fleet.SubmitOptions{After: fleet.Steps(kids...)}))
		}
		root := fleet.AddStep(fl, rootQ, node{N: 1000, Kids: []string{mids[0].ID(), mids[1].ID()}}, fleet.SubmitOptions{After: fleet.Steps(mids...)})
		if err := fl.Submit(c); err != nil {
			t.Fatalf("Submit: %v", err)
		}
		// The root waits (Lookup says so, with its dependencies).
		if rec, err := rootQ.Lookup(c, root.ID()); err == nil && rec.Status != fleet.TaskDone {
			if rec.Status != fleet.TaskWaiting && rec.Status != fleet.TaskPending && rec.Status != fleet.TaskActive {
				t.Fatalf("root %+v", rec)
			}
			if rec.Status == fleet.TaskWaiting && (len(rec.Dependencies) != 2 || rec.Flow != fl.ID()) {
				t.Fatalf("waiting root %+v", rec)
			}
		}
		got, err := fleet.ResultOf[int](c, rootQ, root.ID(), fleet.Await())
		if err != nil {
			t.Fatalf("root's result: %v", err)
		}
		// 10+20+30+40 + 2*100 + 1000
		if got != 1300 {
			t.Fatalf("root's result %d, want 1300", got)
		}
		log.mu.Lock()
		for i, m := range mids {
			for _, k := range leaves[2*i : 2*i+2] {
				if !log.starts[m.ID()][0].After(log.ends[k.ID()]) {
					t.Errorf("mid %d began before its child %s ended", i, k.ID())
				}
			}
			if !log.starts[root.ID()][0].After(log.ends[m.ID()]) {
				t.Errorf("root began before mid %d ended", i)
			}
		}
		for _, s := range append(append(leaves, mids...), root) {
			if n := len(log.starts[s.ID()]); n != 1 {
				t.Errorf("task %s ran %d times", s.ID(), n)
			}
		}
		log.mu.Unlock()
		want := fleet.FlowStatus{ID: fl.ID(), State: fleet.FlowDone, Total: 7, Succeeded: 7}
		var st fleet.FlowStatus
		waitFor(t, 5*time.Second, func() bool { st, err = e.F.FlowStatus(c, fl.ID()); return st == want }, "status")
		if st != want {
			t.Fatalf("status %+v %v", st, err)
		}
		noLeftovers(t, e)
		for _, s := range append(append(leaves, mids...), root) {
			k := e.key("fleet:queue:"+s.Queue()+":result:"+s.ID(), "fleet:queue:{"+s.Queue()+"}:result:"+s.ID())
			if d := ttlOf(t, e, k); d <= 0 || d > time.Minute {
				t.Errorf("end record %s: ttl %v, want (0, 1m]", k, d)
			}
		}
		fk := e.key("fleet:flow:"+fl.ID(), "fleet:flow:{"+fl.ID()+"}")
		if d := ttlOf(t, e, fk); d <= 0 || d > time.Minute {
			t.Errorf("flow record: ttl %v, want (0, 1m]", d)
		}
		if d := ttlOf(t, e, fk+":m"); d <= 0 || d > time.Minute {
			t.Errorf("flow members: ttl %v, want (0, 1m]", d)
		}
	})
}

// TestFlowDiamond: a diamond (a; b and c after a; d after b and c, over
// three queues) runs its join once, after both branches.
func TestFlowDiamond(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		qa := fleet.NewQueue[node](e.F, "dm-a", fleet.QueueOptions{})
		qb := fleet.NewQueue[node](e.F, "dm-b", fleet.QueueOptions{})
		qd := fleet.NewQueue[node](e.F, "dm-d", fleet.QueueOptions{})
		log := newRunLog()
		flowWorker(t, e.F, qa, log, func(ctx context.Context, tk *fleet.Task[node]) (int, error) { return 1, nil })
		flowWorker(t, e.F, qb, log, sumKids(qa))
		flowWorker(t, e.F, qd, log, sumKids(qb))
		fl := fleet.NewFlow(e.F, fleet.FlowOptions{})
		a := fleet.AddStep(fl, qa, node{}, fleet.SubmitOptions{})
		b := fleet.AddStep(fl, qb, node{N: 10, Kids: []string{a.ID()}}, fleet.SubmitOptions{After: fleet.Steps(a)})
		cc := fleet.AddStep(fl, qb, node{N: 20, Kids: []string{a.ID()}}, fleet.SubmitOptions{})
		cc.After(a.Dependency()) // an edge added after the step
		d := fleet.AddStep(fl, qd, node{Kids: []string{b.ID(), cc.ID()}}, fleet.SubmitOptions{After: fleet.Steps(b, cc)})
		if err := fl.Submit(c); err != nil {
			t.Fatalf("Submit: %v", err)
		}
		rec, err := qd.Wait(c, d.ID())
		if err != nil || string(rec.Result) != "32" {
			t.Fatalf("join %+v %v", rec, err)
		}
		if n := log.runs(d.ID()); n != 1 {
			t.Fatalf("the join ran %d times", n)
		}
		log.mu.Lock()
		if !log.starts[d.ID()][0].After(log.ends[b.ID()]) || !log.starts[d.ID()][0].After(log.ends[cc.ID()]) {
			t.Error("the join began before a branch ended")
		}
		log.mu.Unlock()
		noLeftovers(t, e)
	})
}

// failingWorker runs q's tasks: a task whose payload says Fail is
// dead-lettered at once; the others succeed with N.
func failingWorker(t *testing.T, f *fleet.Fleet, q *fleet.Queue[node], log *runLog) {
	flowWorker(t, f, q, log, func(ctx context.Context, tk *fleet.Task[node]) (int, error) {
		if tk.Payload.Fail {
			return 0, fmt.Errorf("leaf broke: %w", fleet.ErrPermanent)
		}
		return tk.Payload.N, nil
	})
}

// TestFlowFailedLeaf: a leaf that is dead-lettered, under each policy.
// "fail" (the default): its parent is dead-lettered with
// ErrDependencyFailed's error, never runs, and the grandparent after it
// too; the flow counts them as failed. "ignore": the parent runs, and is
// told which dependency failed (Task.Dependencies, and ResultOf answers
// ErrDependencyFailed for it).
func TestFlowFailedLeaf(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		leafQ := fleet.NewQueue[node](e.F, "ff-leaf", fleet.QueueOptions{})
		upQ := fleet.NewQueue[node](e.F, "ff-up", fleet.QueueOptions{})
		log := newRunLog()
		failingWorker(t, e.F, leafQ, log)
		var mu sync.Mutex
		told := map[string][]fleet.DependencyState{}
		flowWorker(t, e.F, upQ, log, func(ctx context.Context, tk *fleet.Task[node]) (int, error) {
			deps, err := tk.Dependencies(ctx)
			if err != nil {
				return 0, err
			}
			mu.Lock()
			told[tk.ID] = deps
			mu.Unlock()
			sum := 0
			for _, id := range tk.Payload.Kids {
				n, err := fleet.ResultOf[int](ctx, leafQ, id)
				switch {
				case errors.Is(err, fleet.ErrDependencyFailed):
				case err != nil:
					return 0, err
				default:
					sum += n
				}
			}
			return sum, nil
		})

		// "fail": leaf ok + leaf broken -> parent -> grandparent.
		fl := fleet.NewFlow(e.F, fleet.FlowOptions{})
		ok := fleet.AddStep(fl, leafQ, node{N: 1}, fleet.SubmitOptions{})
		bad := fleet.AddStep(fl, leafQ, node{Fail: true}, fleet.SubmitOptions{})
		parent := fleet.AddStep(fl, upQ, node{}, fleet.SubmitOptions{After: fleet.Steps(ok, bad)})
		grand := fleet.AddStep(fl, upQ, node{}, fleet.SubmitOptions{After: fleet.Steps(parent)})
		if err := fl.Submit(c); err != nil {
			t.Fatalf("Submit: %v", err)
		}
		rec, err := upQ.Wait(c, grand.ID())
		if !errors.Is(err, fleet.ErrTaskFailed) || rec.Status != fleet.TaskDead || !strings.Contains(rec.LastError, fleet.ErrDependencyFailed.Error()) {
			t.Fatalf("grandparent %+v %v", rec, err)
		}
		rec, err = upQ.Wait(c, parent.ID())
		if !errors.Is(err, fleet.ErrTaskFailed) || !strings.Contains(rec.LastError, fleet.ErrDependencyFailed.Error()+": ff-leaf "+bad.ID()) {
			t.Fatalf("parent %+v %v", rec, err)
		}
		if log.runs(parent.ID())+log.runs(grand.ID()) != 0 {
			t.Fatal("a dependent of a failed task ran")
		}
		// The dependents' dead letters hold their bodies.
		dead, err := upQ.DeadLetters(c, 0, 10)
		if err != nil || len(dead) != 2 {
			t.Fatalf("dead letters %+v %v", dead, err)
		}
		waitFor(t, 5*time.Second, func() bool {
			st, err := e.F.FlowStatus(c, fl.ID())
			return err == nil && st == fleet.FlowStatus{ID: fl.ID(), State: fleet.FlowDone, Total: 4, Succeeded: 1, Failed: 3}
		}, "status")

		// "ignore": the parent runs, told of the failure.
		fl2 := fleet.NewFlow(e.F, fleet.FlowOptions{})
		ok2 := fleet.AddStep(fl2, leafQ, node{N: 5}, fleet.SubmitOptions{})
		bad2 := fleet.AddStep(fl2, leafQ, node{Fail: true}, fleet.SubmitOptions{})
		p2 := fleet.AddStep(fl2, upQ, node{Kids: []string{ok2.ID(), bad2.ID()}},
			fleet.SubmitOptions{After: fleet.Ignoring(fleet.Steps(ok2, bad2)...)})
		if err := fl2.Submit(c); err != nil {
			t.Fatalf("Submit: %v", err)
		}
		rec, err = upQ.Wait(c, p2.ID())
		if err != nil || string(rec.Result) != "5" {
			t.Fatalf("ignoring parent %+v %v", rec, err)
		}
		mu.Lock()
		deps := told[p2.ID()]
		mu.Unlock()
		want := map[string]fleet.TaskStatus{ok2.ID(): fleet.TaskDone, bad2.ID(): fleet.TaskDead}
		if len(deps) != 2 {
			t.Fatalf("told %+v", deps)
		}
		for _, d := range deps {
			if d.Queue != "ff-leaf" || d.Status != want[d.ID] || d.Policy != fleet.IgnoreFailure {
				t.Errorf("dependency %+v", d)
			}
			if d.ID == bad2.ID() && !strings.Contains(d.Error, "leaf broke") {
				t.Errorf("failed dependency's error %q", d.Error)
			}
			if d.ID == ok2.ID() && string(d.Result) != "5" {
				t.Errorf("dependency's result %s", d.Result)
			}
		}
		noLeftovers(t, e)
	})
}

// TestFlowBadInput: each bad submit gets its error, and writes nothing.
func TestFlowBadInput(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		q := fleet.NewQueue[node](e.F, "fb", fleet.QueueOptions{})
		plain, err := q.Submit(c, node{N: 1}) // a task that is not tracked
		if err != nil {
			t.Fatal(err)
		}
		before := e.dump(t)
		check := func(what string, err error, want error) {
			t.Helper()
			if !errors.Is(err, want) {
				t.Errorf("%s: %v, want %v", what, err, want)
			}
			if after := e.dump(t); !maps.Equal(before, after) {
				t.Errorf("%s changed Redis:\nbefore %v\nafter  %v", what, before, after)
			}
		}
		// A cycle: a -> b -> c -> a.
		fl := fleet.NewFlow(e.F, fleet.FlowOptions{})
		a := fleet.AddStep(fl, q, node{}, fleet.SubmitOptions{})
		b := fleet.AddStep(fl, q, node{}, fleet.SubmitOptions{After: fleet.Steps(a)})
		cc := fleet.AddStep(fl, q, node{}, fleet.SubmitOptions{After: fleet.Steps(b)})
		a.After(cc.Dependency())
		err = fl.Submit(c)
		check("cycle", err, fleet.ErrInvalidArgument)
		if err == nil || !strings.Contains(err.Error(), "cycle") {
			t.Errorf("cycle: %v", err)
		}
		// A step after itself.
		fl = fleet.NewFlow(e.F, fleet.FlowOptions{})
		s := fleet.AddStep(fl, q, node{}, fleet.SubmitOptions{})
		s.After(s.Dependency())
		check("self", fl.Submit(c), fleet.ErrInvalidArgument)
		// An unknown dependency (a flow, and a lone submit).
		fl = fleet.NewFlow(e.F, fleet.FlowOptions{})
		fleet.AddStep(fl, q, node{}, fleet.SubmitOptions{After: fleet.DependOn(q, "0190aaaa-0000-7000-8000-000000000000")})
		check("unknown", fl.Submit(c), fleet.ErrTaskNotFound)
		_, err = q.SubmitWith(c, node{}, fleet.SubmitOptions{After: fleet.DependOn(q, "nope")})
		check("unknown (lone)", err, fleet.ErrTaskNotFound)
		// A dependency that is not tracked.
		_, err = q.SubmitWith(c, node{}, fleet.SubmitOptions{After: fleet.DependOn(q, plain)})
		check("not tracked", err, fleet.ErrInvalidArgument)
		// A dependency named twice, a bad id, options a tracked task cannot have.
		_, err = q.SubmitWith(c, node{}, fleet.SubmitOptions{After: append(fleet.DependOn(q, plain), fleet.DependOn(q, plain)...)})
		check("twice", err, fleet.ErrInvalidArgument)
		_, err = q.SubmitWith(c, node{}, fleet.SubmitOptions{After: fleet.DependOn(q, "a b")})
		check("bad id", err, fleet.ErrInvalidArgument)
		_, err = q.SubmitWith(c, node{}, fleet.SubmitOptions{Track: true, DedupKey: "k"})
		check("dedup", err, fleet.ErrInvalidArgument)
		// An empty flow; a step of bad options; a flow submitted twice.
		check("empty", fleet.NewFlow(e.F, fleet.FlowOptions{}).Submit(c), fleet.ErrInvalidArgument)
		fl = fleet.NewFlow(e.F, fleet.FlowOptions{})
		fleet.AddStep(fl, q, node{}, fleet.SubmitOptions{DedupKey: "k"})
		check("a step's options", fl.Submit(c), fleet.ErrInvalidArgument)
		fl = fleet.NewFlow(e.F, fleet.FlowOptions{})
		fleet.AddStep(fl, q, node{}, fleet.SubmitOptions{})
		if err := fl.Submit(c); err != nil {
			t.Fatal(err)
		}
		before = e.dump(t)
		check("twice", fl.Submit(c), fleet.ErrInvalidArgument)
	})
}

// TestFlowSharded: a flow over sharded queues (tagged layout): leaves
// spread over a queue's shards, a join on the shard of another, and a task
// after the join by SubmitOptions.After: each dependency's ref names its
// shard, and the join runs once, after every leaf.
func TestFlowSharded(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		if !tg.Tagged {
			return // the compat layout has no shards
		}
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		leafQ := fleet.NewQueue[node](e.F, "fs-leaf", fleet.QueueOptions{Shards: 4})
		joinQ := fleet.NewQueue[node](e.F, "fs-join", fleet.QueueOptions{Shards: 3})
		log := newRunLog()
		flowWorker(t, e.F, leafQ, log, func(ctx context.Context, tk *fleet.Task[node]) (int, error) { return tk.Payload.N, nil })
		flowWorker(t, e.F, joinQ, log, sumKids(leafQ))
		fl := fleet.NewFlow(e.F, fleet.FlowOptions{})
		var leaves []*fleet.FlowStep
		var kids []string
		for i := range 8 {
			s := fleet.AddStep(fl, leafQ, node{N: i + 1}, fleet.SubmitOptions{})
			leaves, kids = append(leaves, s), append(kids, s.ID())
		}
		join := fleet.AddStep(fl, joinQ, node{Kids: kids}, fleet.SubmitOptions{After: fleet.Steps(leaves...), ShardKey: "j"})
		if err := fl.Submit(c); err != nil {
			t.Fatal(err)
		}
		after, err := joinQ.SubmitWith(c, node{N: 100}, fleet.SubmitOptions{After: fleet.DependOn(joinQ, join.ID())})
		if err != nil {
			t.Fatal(err)
		}
		rec, err := joinQ.Wait(c, after)
		if err != nil || string(rec.Result) != "100" {
			t.Fatalf("after the join: %+v %v", rec, err)
		}
		if rec, err = joinQ.Wait(c, join.ID()); err != nil || string(rec.Result) != "36" {
			t.Fatalf("the join: %+v %v", rec, err)
		}
		log.mu.Lock()
		if !log.starts[after][0].After(log.ends[join.ID()]) {
			t.Error("the task after the join began before it ended")
		}
		log.mu.Unlock()
		if n := log.runs(join.ID()); n != 1 {
			t.Fatalf("the join ran %d times", n)
		}
		noLeftovers(t, e)
	})
}

// A caller who awaited a flow's last task sees the flow done: a flow of
// three fetches and a join that sums their results, run by workers; once
// ResultOf(join, Await()) returns 6, FlowStatus says done with 4
// succeeded, at once, every time (Wait returns only once the task's end
// was passed on to its flow); twenty rounds on each target. Before that
// fix it said closed, 3 succeeded, 1 pending, in every round.
func TestAwaitThenFlowStatus(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		fetch := fleet.NewQueue[node](e.F, "af-fetch", fleet.QueueOptions{})
		join := fleet.NewQueue[node](e.F, "af-join", fleet.QueueOptions{})
		log := newRunLog()
		flowWorker(t, e.F, fetch, log, func(ctx context.Context, tk *fleet.Task[node]) (int, error) { return tk.Payload.N, nil })
		flowWorker(t, e.F, join, log, sumKids(fetch))
		for round := range 20 {
			fl := fleet.NewFlow(e.F, fleet.FlowOptions{})
			var kids []string
			var deps []*fleet.FlowStep
			for n := 1; n <= 3; n++ {
				s := fleet.AddStep(fl, fetch, node{N: n}, fleet.SubmitOptions{})
				kids, deps = append(kids, s.ID()), append(deps, s)
			}
			j := fleet.AddStep(fl, join, node{Kids: kids}, fleet.SubmitOptions{After: fleet.Steps(deps...)})
			if err := fl.Submit(ctx(t)); err != nil {
				t.Fatal(err)
			}
			sum, err := fleet.ResultOf[int](ctx(t), join, j.ID(), fleet.Await())
			if err != nil || sum != 6 {
				t.Fatalf("round %d: ResultOf = %d, %v", round, sum, err)
			}
			st, err := e.F.FlowStatus(ctx(t), fl.ID())
			if err != nil || st.State != fleet.FlowDone || st.Succeeded != 4 || st.Pending != 0 {
				t.Fatalf("round %d: right after the awaited last task, FlowStatus = %+v, %v; want done, 4 succeeded", round, st, err)
			}
		}
	})
}

// The same for a batch: three fetches added to a batch, which is closed;
// once ResultOf(..., Await()) returned for each of them, Batch.Status says
// done with 3 succeeded, at once, in every one of twenty rounds.
func TestAwaitThenBatchStatus(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		fetch := fleet.NewQueue[node](e.F, "ab-fetch", fleet.QueueOptions{})
		log := newRunLog()
		flowWorker(t, e.F, fetch, log, func(ctx context.Context, tk *fleet.Task[node]) (int, error) { return tk.Payload.N, nil })
		for round := range 20 {
			b, err := e.F.NewBatch(ctx(t), fleet.BatchOptions{})
			if err != nil {
				t.Fatal(err)
			}
			ids, err := fleet.BatchAdd(ctx(t), b, fetch, []node{{N: 1}, {N: 2}, {N: 3}}, fleet.SubmitOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if err := b.Close(ctx(t)); err != nil {
				t.Fatal(err)
			}
			for i, id := range ids {
				if n, err := fleet.ResultOf[int](ctx(t), fetch, id, fleet.Await()); err != nil || n != i+1 {
					t.Fatalf("round %d: ResultOf = %d, %v", round, n, err)
				}
			}
			st, err := b.Status(ctx(t))
			if want := (fleet.FlowStatus{ID: b.ID(), State: fleet.FlowDone, Total: 3, Succeeded: 3}); err != nil || st != want {
				t.Fatalf("round %d: right after the awaited tasks, Status = %+v, %v; want %+v", round, st, err, want)
			}
		}
	})
}
