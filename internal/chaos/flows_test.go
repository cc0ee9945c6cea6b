package chaos

// Flows under the faults (docs/FLOWS.md): the submitter submits flows of
// fan-out 10 / fan-in 1 (a root in one queue, ten tasks after it in a
// second, a join after the ten in a third) while the plain tasks run, and
// the workers run the three queues too. From the evidence: no task began
// before every task it waits for ended well (its ok E line came before the
// run's S line), no task was released twice (R lines, written by every
// process's Observer), no flow is stranded after the drain (every flow
// whose submit was confirmed is done with its twelve tasks succeeded), and
// no key of a flow is left but those kept for a documented retention.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/internal/redistest"
)

var flagFlows = flag.Int("chaos.flows", 12, "flows of fan-out 10 / fan-in 1 (12 tasks over 3 queues) submitted on each target; 0 for none")

const (
	flowFanOut = 10
	flowSeq    = 1_000_000 // flow tasks' seqs start here
	// submitGrace is the sweepers' SubmitGrace: a submit cut off by a
	// fault is dropped (or rolled forward) this long after.
	submitGrace = 2 * time.Second
)

// flowQueues are the queues of a flow's root, middle and join.
var flowQueues = [3]string{"chaosf-a", "chaosf-b", "chaosf-c"}

// flowRec is one flow the submitter tried.
type flowRec struct {
	id        string
	root      string
	mids      []string
	join      string
	confirmed bool // Submit returned nil
}

// submitFlows submits s.flows flows through f at the pace of due; a
// submit whose outcome is unknown is tried again as a new flow (the first
// is kept: whatever of it exists must end, or go, cleanly).
func (r *run) submitFlows(ctx context.Context, f *fleet.Fleet) {
	s := r.s
	var qs [3]*fleet.Queue[job]
	for i, name := range flowQueues {
		qs[i] = fleet.NewQueue[job](f, name, queueOptions(s.lease, maxAttempts, 0, 0))
	}
	g := newRNG(s.seed + 2)
	work := func() int {
		if g.float() < s.long/4 {
			return int(g.between(s.lease/5, s.lease) / time.Millisecond)
		}
		return 5 + g.intn(40)
	}
	seq := flowSeq
	mk := func() job {
		seq++
		return job{Seq: seq, WorkMS: work(), Fail: g.float() < 0.05}
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for next := 0; next < s.flows; {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for due := r.due(s.flows); next < due && ctx.Err() == nil; {
			fl := fleet.NewFlow(f, fleet.FlowOptions{})
			rec := flowRec{id: fl.ID()}
			jobs := map[string]int{}
			root := fleet.AddStep(fl, qs[0], mk(), fleet.SubmitOptions{})
			rec.root, jobs[root.ID()] = root.ID(), seq
			var mids []*fleet.FlowStep
			for range flowFanOut {
				m := fleet.AddStep(fl, qs[1], mk(), fleet.SubmitOptions{After: fleet.Steps(root)})
				mids, rec.mids, jobs[m.ID()] = append(mids, m), append(rec.mids, m.ID()), seq
			}
			join := fleet.AddStep(fl, qs[2], mk(), fleet.SubmitOptions{After: fleet.Steps(mids...)})
			rec.join, jobs[join.ID()] = join.ID(), seq
			sctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			err := fl.Submit(sctx)
			cancel()
			rec.confirmed = err == nil
			r.mu.Lock()
			r.flows = append(r.flows, rec)
			if err == nil {
				for id, sq := range jobs {
					r.submitted[id] = sq
				}
			} else {
				r.unknownFlows++
				r.submitErrs["flow:"+errClass(err)]++
			}
			r.mu.Unlock()
			if err != nil {
				sleep(ctx, 50*time.Millisecond)
				continue
			}
			next++
		}
	}
}

// flowsDrained reports whether the flows' queues hold nothing and no key
// of a flow's passage is left (records, outboxes, waiting indexes, the
// registry of operations).
func (r *run) flowsDrained(ctx context.Context, f *fleet.Fleet) bool {
	for _, name := range flowQueues {
		st, err := f.Queue(name).Stats(ctx)
		if err != nil || st.Pending+st.InFlight+st.Scheduled+st.Waiting > 0 {
			return false
		}
	}
	left, err := r.flowKeys(ctx, f)
	return err == nil && len(left.transient) == 0
}

// flowKeys is what a flow may leave in Redis, by kind.
type flowKeys struct {
	transient []string // keys of a flow's passage: none may be left
	untimed   []string // retained keys without a TTL: none may be left
	retained  int      // end records and flow records with their TTL
}

// flowKeys lists the keys of flows under the run's prefix.
func (r *run) flowKeys(ctx context.Context, f *fleet.Fleet) (flowKeys, error) {
	var out flowKeys
	c := f.Client()
	all := redistest.Keys(r.t, c, r.prefix)
	for _, k := range all {
		rest := strings.TrimPrefix(k, r.prefix)
		switch {
		case rest == "fleet:flows" || strings.Contains(rest, ":outbox") || strings.Contains(rest, ":waiting") ||
			strings.Contains(rest, ":progress") || (strings.HasPrefix(rest, "fleet:queue:") && (strings.Contains(rest, ":flow:") || strings.Contains(rest, ":fout:"))):
			out.transient = append(out.transient, rest)
		case strings.Contains(rest, ":result:") || strings.HasPrefix(rest, "fleet:flow:"):
			ttl, err := c.Do(ctx, c.B().Pttl().Key(k).Build()).AsInt64()
			if err != nil {
				return out, err
			}
			if ttl == -1 {
				out.untimed = append(out.untimed, rest)
			} else {
				out.retained++
			}
		}
	}
	sort.Strings(out.transient)
	return out, nil
}

// flowReport is what the flows' counts found.
type flowReport struct {
	Tried, Confirmed, Unknown, Done, DoneFailed, Aborted int
	EarlyStarts, ReleasedTwice, Stranded, KeysLeft       int
	Retained, Releases                                   int
}

// analyzeFlows counts the flows' violations from the evidence and what
// Redis holds after the drain.
func (r *run) analyzeFlows(ctx context.Context, f *fleet.Fleet, ev *evidence) (flowReport, []string) {
	var rep flowReport
	var bad []string
	violate := func(format string, args ...any) {
		if len(bad) < 200 {
			bad = append(bad, fmt.Sprintf(format, args...))
		}
	}
	// The earliest end of a run of task id that ended well, µs (0: none).
	okEnd := func(id string) int64 {
		var at int64
		for _, run := range ev.byTask[id] {
			if run.ended && run.outcome == "ok" && (at == 0 || run.end < at) {
				at = run.end
			}
		}
		return at
	}
	early := func(dep, task, what string) {
		end := okEnd(dep)
		for _, run := range ev.byTask[task] {
			if end == 0 || run.start < end {
				rep.EarlyStarts++
				violate("flow task %s (%s) began at %d, before its dependency %s ended well (at %d)", task, what, run.start, dep, end)
			}
		}
	}
	rep.Tried = len(r.flows)
	for _, fl := range r.flows {
		if fl.confirmed {
			rep.Confirmed++
		} else {
			rep.Unknown++
		}
		for _, m := range fl.mids {
			early(fl.root, m, "a middle task")
			early(m, fl.join, "the join")
		}
		st, err := f.FlowStatus(ctx, fl.id)
		switch {
		case errors.Is(err, fleet.ErrFlowNotFound) && !fl.confirmed:
			rep.Aborted++ // its submit never committed: dropped
			for _, id := range append([]string{fl.root, fl.join}, fl.mids...) {
				if len(ev.byTask[id]) > 0 {
					rep.EarlyStarts++
					violate("task %s of a flow whose submit never committed ran", id)
				}
			}
		case err != nil:
			rep.Stranded++
			violate("flow %s (confirmed %v): status: %v", fl.id, fl.confirmed, err)
		case st.State == fleet.FlowDone && st.Succeeded == 2+flowFanOut:
			rep.Done++
		case st.State == fleet.FlowDone && st.Pending == 0:
			rep.DoneFailed++ // a task dead-lettered (its attempts ran out): its dependents failed with it
		default:
			rep.Stranded++
			violate("flow %s (confirmed %v) stranded after the drain: %+v", fl.id, fl.confirmed, st)
		}
	}
	for id, rels := range ev.rels {
		rep.Releases += len(rels)
		if len(rels) > 1 {
			rep.ReleasedTwice++
			violate("task %s released %d times: %v", id, len(rels), rels)
		}
	}
	keys, err := r.flowKeys(ctx, f)
	if err != nil {
		violate("flow keys: %v", err)
	}
	rep.KeysLeft, rep.Retained = len(keys.transient)+len(keys.untimed), keys.retained
	for i, k := range append(keys.transient, keys.untimed...) {
		if i == 20 {
			violate("... and %d more keys left", rep.KeysLeft-i)
			break
		}
		violate("key left after the flows ended: %s", k)
	}
	return rep, bad
}

func (rep flowReport) String() string {
	return fmt.Sprintf("flows: tried %d (confirmed %d, outcome unknown %d: %d of them aborted), done %d, done with failed tasks %d; "+
		"releases seen %d; EARLY STARTS %d, RELEASED TWICE %d, STRANDED %d, KEYS LEFT %d (retained keys with their TTL: %d)",
		rep.Tried, rep.Confirmed, rep.Unknown, rep.Aborted, rep.Done, rep.DoneFailed,
		rep.Releases, rep.EarlyStarts, rep.ReleasedTwice, rep.Stranded, rep.KeysLeft, rep.Retained)
}

// submitterObserver records the releases the submitter's Fleet makes (a
// flow's roots, at the mark) in the evidence, as a child's do.
func (r *run) submitterObserver() (*fleet.Observer, func()) {
	rec, err := openRecorder(filepath.Join(r.dir, "ev", "sub.0.log"))
	if err != nil {
		r.t.Fatal(err)
	}
	return releases(rec), func() { _ = rec.f.Close() }
}
