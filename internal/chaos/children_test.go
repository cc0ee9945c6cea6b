package chaos

// Durable children under the faults: some tasks start two children on
// kidQueue (fleet.StartChild) and wait for them (fleet.AwaitChildren),
// parked. Every worker process also runs kidQueue (the children run the
// plain handler, and set their seq as their result). childCounts counts
// the children lost (started by a parent, never acked), the parents that
// started other children in another run (a child submitted twice), the
// waits that returned wrong results, and the parents stranded (every
// child acked, the parent never ended): all want 0.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/fleet-go/fleet"
)

// kidQueue is the children's queue.
const kidQueue = "chaosk"

// kidSeq is the seq of child i of the task of seq parent.
func kidSeq(parent, i int) int { return 1_000_000 + parent*10 + i }

// childFigures are the counts of the children.
type childFigures struct {
	Parents, Children             int // tasks that started children; children started
	ChildLost, ChildTwice         int // started, never acked (nor dead); a parent whose runs started other children
	ChildWrong, ParentStranded    int // a wait that returned the wrong results; a parent not ended though its children were
	ChildrenAcked, ParentsResumed int // children acked (or inferred); parents whose wait returned their children's results
}

// children starts t's children and waits for them: "C run task kid..."
// once both are started, "J run task at ok|bad:<why>" when the wait
// returns, a W line (children) when it parks the task.
func (h *handler) children(ctx context.Context, run string, t *fleet.Task[job]) error {
	kids := make([]fleet.Child, t.Payload.Kids)
	ids := make([]string, len(kids))
	for i := range kids {
		k, err := fleet.StartChild(ctx, t, fmt.Sprintf("kid%d", i), h.kids, job{Seq: kidSeq(t.Payload.Seq, i), WorkMS: 5 + 10*i}, fleet.SubmitOptions{})
		if err != nil {
			h.rec.line("H %s %s %d %s", run, t.ID, time.Now().UnixMicro(), waitClass(err))
			return err
		}
		kids[i], ids[i] = k, k.ID
	}
	h.rec.line("C %s %s %s", run, t.ID, strings.Join(ids, " "))
	res, err := fleet.AwaitChildren(ctx, t, "kids", waitTimeout, kids...)
	switch {
	case errors.Is(err, fleet.ErrSuspended):
		h.rec.line("W %s %s %d children", run, t.ID, time.Now().UnixMicro())
		return err
	case err != nil:
		h.rec.line("H %s %s %d %s", run, t.ID, time.Now().UnixMicro(), waitClass(err))
		return err
	}
	verdict := "ok"
	for i, r := range res {
		var got int
		if r.ID != ids[i] || r.Status != fleet.TaskDone || json.Unmarshal(r.Result, &got) != nil || got != kidSeq(t.Payload.Seq, i) {
			verdict = word(fmt.Sprintf("bad:child_%d_%s_%s_%s", i, r.ID, r.Status, r.Result))
			break
		}
	}
	h.rec.line("J %s %s %d %s", run, t.ID, time.Now().UnixMicro(), verdict)
	return nil
}

// startKidWorker starts a worker over kidQueue with the plain handler,
// which sets the child's seq as its result; nil when Start failed for want
// of Redis (a fault may be on): the run goes on without it until the
// process is started again.
func startKidWorker(ctx context.Context, c childConfig, f *fleet.Fleet, h *handler, log *slog.Logger) (*fleet.Worker, error) {
	q := fleet.NewQueue[job](f, kidQueue, c.queueOptions())
	if err := q.Err(); err != nil {
		return nil, err
	}
	for {
		w := fleet.NewBatchWorker(f, fleet.WorkerOptions{
			Type: "chaoskid", ID: fmt.Sprintf("%s.%d", c.Name, c.Inc), Slots: 2,
			Heartbeat: c.Heartbeat, StopGrace: 5 * time.Second, Logger: log, OnTaskEnd: h.taskEnd,
		}, q, fleet.BatchFunc[struct{}, struct{}, job](func(ctx context.Context, s *fleet.Slot[struct{}, struct{}], t *fleet.Task[job]) error {
			if err := h.handle(ctx, s, t); err != nil {
				return err
			}
			return t.SetResult(t.Payload.Seq)
		}))
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := w.Start(context.WithoutCancel(sctx))
		cancel()
		if err == nil {
			return w, nil
		}
		log.Warn("chaos: child worker start failed; retrying", "err", err)
		select {
		case <-ctx.Done():
			return nil, nil
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// childCounts counts the children's violations into rep.
func (w *world) childCounts(ev *evidence, rep *report, violate func(string, ...any)) {
	ended := func(id string) bool {
		return len(ev.acks[id]) > 0 || w.dead[id] || (!w.left[id] && w.ackUnknown(ev, id, &report{}))
	}
	for _, parent := range slices.Sorted(mapKeys(ev.kids)) {
		sets := ev.kids[parent]
		rep.Parents++
		// Every child any run started (the same in each, or one was
		// started twice).
		kids := slices.Clone(sets[0])
		for _, other := range sets[1:] {
			if !slices.Equal(other, sets[0]) {
				rep.ChildTwice++
				violate("task %s: its runs started other children: %v and %v", parent, sets[0], other)
				for _, k := range other {
					if !slices.Contains(kids, k) {
						kids = append(kids, k)
					}
				}
			}
		}
		rep.Children += len(kids)
		all := true
		for _, k := range kids {
			if ended(k) {
				rep.ChildrenAcked++
				continue
			}
			all = false
			rep.ChildLost++
			violate("task %s: its child %s never ended (left in Redis: %v); runs: %s", parent, k, w.left[k], w.runsOf(ev, k))
		}
		for _, j := range ev.joins[parent] {
			if j.class != "ok" {
				rep.ChildWrong++
				violate("task %s: run %s's wait for its children returned %s", parent, j.proc, j.class)
			}
		}
		if len(ev.joins[parent]) > 0 {
			rep.ParentsResumed++
		}
		if all && !ended(parent) {
			rep.ParentStranded++
			violate("task %s: stranded: its children ended, it did not (left in Redis: %v); runs: %s", parent, w.left[parent], w.runsOf(ev, parent))
		}
	}
}
