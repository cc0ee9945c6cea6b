package chaos

// Reading the evidence back and counting from it.

import (
	"bufio"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// runRec is one handler run, from its S line and (unless the process died
// first) its E line.
type runRec struct {
	id      string // "w1.0.17": place w1, incarnation 0, 17th run
	proc    string // "w1.0"
	task    string
	seq     int
	attempt int
	slot    int
	start   int64  // µs, wall clock
	leaseDL int64  // µs: the lease deadline the task knew at the start (server clock)
	ctxDL   int64  // µs: the handler ctx's deadline, 0 for none
	alive   bool   // the handler's ctx was alive when it began
	group   string // the task's group (SubmitOptions.Group); "" for none

	ended   bool
	last    int64  // µs: the last moment the handler saw its ctx alive
	end     int64  // µs: when it returned
	outcome string // "ok", "fail", "ctx:<cause>"
	late    int64  // µs: the most a live step came after the lease deadline known then
}

type ackRec struct {
	proc string
	at   int64
}

type failRec struct {
	proc  string
	at    int64
	class string
}

type procRec struct {
	began, exited int64
}

// evidence is what every process wrote.
type evidence struct {
	runs   map[string]*runRec
	byTask map[string][]*runRec
	acks   map[string][]ackRec
	fails  map[string][]failRec
	rels   map[string][]ackRec // task -> the releases from its dependencies (R lines)
	// effects and recorded are a task's durable step: when its fn ran (P
	// lines), and when a run had its record back (Q lines; proc is the
	// result when it is not the task's seq).
	effects, recorded map[string][]ackRec
	// The durable waits (signals_test.go): the runs that parked their
	// task (W lines: proc is the run, class sleep or wait), the values
	// their waits returned (G lines), and the waits that failed (H lines).
	parks    map[string][]failRec
	got      map[string][]gotRec
	waitErrs map[string][]failRec
	// The children (children_test.go): the ids each run of a parent
	// started (C lines), and its waits' verdicts (J lines: proc is the run).
	kids  map[string][][]string
	kidOf map[string]string // child -> parent
	joins map[string][]failRec
	procs map[string]*procRec
	bad   []string // lines that did not parse
}

func newEvidence() *evidence {
	return &evidence{runs: map[string]*runRec{}, byTask: map[string][]*runRec{}, acks: map[string][]ackRec{},
		fails: map[string][]failRec{}, procs: map[string]*procRec{}, rels: map[string][]ackRec{},
		effects: map[string][]ackRec{}, recorded: map[string][]ackRec{},
		parks: map[string][]failRec{}, got: map[string][]gotRec{}, waitErrs: map[string][]failRec{},
		kids: map[string][][]string{}, kidOf: map[string]string{}, joins: map[string][]failRec{}}
}

// readEvidence reads every *.log of dir (one per process incarnation, named
// after it).
func readEvidence(dir string) (*evidence, error) {
	ev := newEvidence()
	files, err := filepath.Glob(filepath.Join(dir, "*.log"))
	if err != nil {
		return nil, err
	}
	for _, path := range files {
		proc := strings.TrimSuffix(filepath.Base(path), ".log")
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			ev.add(proc, sc.Text())
		}
		err = sc.Err()
		f.Close()
		if err != nil {
			return nil, err
		}
	}
	return ev, nil
}

// add takes one evidence line of process proc.
func (ev *evidence) add(proc, line string) {
	f := strings.Fields(line)
	n := func(i int) int64 {
		if i >= len(f) {
			panic("short")
		}
		v, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			panic(err)
		}
		return v
	}
	defer func() {
		if recover() != nil {
			ev.bad = append(ev.bad, proc+": "+line)
		}
	}()
	if len(f) == 0 {
		panic("empty")
	}
	pr := ev.procs[proc]
	if pr == nil {
		pr = &procRec{}
		ev.procs[proc] = pr
	}
	switch f[0] {
	case "B":
		pr.began = n(1)
	case "X":
		pr.exited = n(1)
	case "T":
	case "S":
		r := &runRec{id: f[1], proc: proc, task: f[2], seq: int(n(3)), attempt: int(n(4)), slot: int(n(5)),
			start: n(6), leaseDL: n(8), ctxDL: n(9), alive: len(f) < 11 || f[10] == "1"}
		if len(f) > 11 && f[11] != "-" {
			r.group = f[11]
		}
		if old := ev.runs[r.id]; old != nil {
			panic("run id twice")
		}
		ev.runs[r.id] = r
		ev.byTask[r.task] = append(ev.byTask[r.task], r)
	case "E":
		r := ev.runs[f[1]]
		if r == nil || r.ended || r.task != f[2] {
			panic("E without its S")
		}
		r.ended, r.last, r.end, r.outcome, r.late = true, n(3), n(4), f[5], n(7)
	case "A":
		ev.acks[f[1]] = append(ev.acks[f[1]], ackRec{proc: proc, at: n(2)})
	case "F":
		ev.fails[f[1]] = append(ev.fails[f[1]], failRec{proc: proc, at: n(2), class: f[3]})
	case "R":
		ev.rels[f[1]] = append(ev.rels[f[1]], ackRec{proc: proc, at: n(2)})
	case "P":
		ev.effects[f[2]] = append(ev.effects[f[2]], ackRec{proc: f[1], at: n(3)})
	case "Q":
		r := ev.runs[f[1]]
		if r == nil || r.task != f[2] {
			panic("Q without its S")
		}
		got := ackRec{proc: f[1], at: n(3)}
		if int(n(4)) != r.seq {
			got.proc = "result " + f[4]
		}
		ev.recorded[f[2]] = append(ev.recorded[f[2]], got)
	case "C", "J":
		r := ev.runs[f[1]]
		if r == nil || r.task != f[2] || len(f) < 4 {
			panic(f[0] + " without its S")
		}
		if f[0] == "J" {
			ev.joins[f[2]] = append(ev.joins[f[2]], failRec{proc: f[1], at: n(3), class: f[4]})
			break
		}
		ev.kids[f[2]] = append(ev.kids[f[2]], f[3:])
		for _, k := range f[3:] {
			ev.kidOf[k] = f[2]
		}
	case "W", "G", "H":
		r := ev.runs[f[1]]
		if r == nil || r.task != f[2] {
			panic(f[0] + " without its S")
		}
		switch f[0] {
		case "W":
			ev.parks[f[2]] = append(ev.parks[f[2]], failRec{proc: f[1], at: n(3), class: f[4]})
		case "G":
			ev.got[f[2]] = append(ev.got[f[2]], gotRec{run: f[1], at: n(3), v: int(n(4))})
		case "H":
			ev.waitErrs[f[2]] = append(ev.waitErrs[f[2]], failRec{proc: f[1], at: n(3), class: f[4]})
		}
	default:
		panic("unknown record")
	}
}

// phaseSpan is a phase and when it began.
type phaseSpan struct {
	name string
	from int64 // µs
}

// world is what the counts need besides the evidence: what was submitted,
// how each process incarnation ended, and what Redis holds at the end.
type world struct {
	submitted map[string]int   // task id -> seq, acknowledged to the submitter
	deaths    map[string]int64 // process incarnation -> µs it stopped running (SIGKILL, or the SIGSTOP before it)
	dead      map[string]bool  // ids in the dead letters at the end
	left      map[string]bool  // ids still pending, scheduled or in flight at the end
	permits   int              // group permits still held at the end
	phases    []phaseSpan
	faults    []faultEvent
	stops     map[string][][2]int64 // process incarnation -> when it was stopped (SIGSTOP to SIGCONT or death)
	// The signals (signals_test.go): the waiting tasks (id -> seq), the
	// signals the sender had confirmed (id -> the value sent: a nil reply,
	// or ErrSignalSent to a retry), those refused for good (id -> why),
	// and the samples of Redis that found a task parked (its body in
	// :scheduled) while it held a lease (in :processing).
	waiters      map[string]int
	signaled     map[string]int
	sigRefused   map[string]string
	parkSamples  int
	parkedLeased []string
	margin       time.Duration // overlap beyond this counts
	lease        time.Duration
	t0           int64 // µs: times in the violations are shown from here
}

// figures are the counts of one phase (or of the whole run).
type figures struct {
	Runs, Acks, AckedTwice, Overlaps, BegunLate, Lost, Stuck int
	BegunLateCtx, LivePastLease, LeaseLost                   int
	Faults                                                   map[string]int
}

// report is what the counts found.
type report struct {
	Submitted, Acked, AckedInferred, ExtraAcked, Dead int
	UnknownAckReply                                   int
	Lost, Stuck, AckedTwice, AckedButLeft, Overlaps   int
	StepReruns, StepWrong                             int // a durable step's fn run after its record came back; a record with another result
	StepRuns, StepRecords, StepMemoized               int // a durable step's fn runs; its records come back; those of runs that did not run its fn
	waitFigures
	childFigures
	BegunLate, BegunLateCtx, LivePastLease, Unended int
	CalledDead                                      int
	GroupMost, GroupOver, PermitsLeft               int // the most runs of one group at once; instants over groupLimit; permits held after the drain
	MaxOverlap                                      time.Duration
	Phases                                          []string
	Per                                             map[string]*figures
	Violations                                      []string
	Notes                                           []string // runs live past their lease: not asserted
}

func (w *world) phaseAt(at int64) string {
	name := "setup"
	for _, p := range w.phases {
		if p.from <= at {
			name = p.name
		}
	}
	return name
}

func (w *world) sec(at int64) string { return fmt.Sprintf("%.3fs", float64(at-w.t0)/1e6) }

// runEnd is the last moment run r may have done work: its last live step,
// or when its process stopped running if it died mid-run.
func (w *world) runEnd(r *runRec) (int64, bool) {
	if r.ended {
		return r.last, true
	}
	if d, ok := w.deaths[r.proc]; ok {
		return max(d, r.start), true
	}
	return 0, false
}

// analyze counts.
func analyze(ev *evidence, w *world) *report {
	rep := &report{Submitted: len(w.submitted), Per: map[string]*figures{}}
	per := func(at int64) *figures {
		name := w.phaseAt(at)
		f := rep.Per[name]
		if f == nil {
			f = &figures{Faults: map[string]int{}}
			rep.Per[name] = f
		}
		return f
	}
	rep.Phases = append(rep.Phases, "setup")
	for _, p := range w.phases {
		if !slices.Contains(rep.Phases, p.name) {
			rep.Phases = append(rep.Phases, p.name)
		}
	}
	for _, e := range w.faults {
		switch e.kind {
		case "kill", "stop", "term", "cut", "freeze", "hold-replies", "redis-kill", "redis-term":
			per(e.at).Faults[e.kind+"-"+placeKind(e.target)]++
		}
	}
	violate := func(format string, args ...any) {
		if len(rep.Violations) < 1000 {
			rep.Violations = append(rep.Violations, fmt.Sprintf(format, args...))
		}
	}

	// Runs: late starts, live steps past the lease, overlaps.
	tasks := make([]string, 0, len(ev.byTask))
	for id := range ev.byTask {
		tasks = append(tasks, id)
	}
	sort.Strings(tasks)
	for _, id := range tasks {
		runs := ev.byTask[id]
		sort.Slice(runs, func(i, j int) bool { return runs[i].start < runs[j].start })
		for _, r := range runs {
			f := per(r.start)
			f.Runs++
			if !r.ended {
				if _, ok := w.deaths[r.proc]; !ok {
					rep.Unended++
					violate("task %s: run %s began at %s and never ended, though its process %s did not die", id, r.id, w.sec(r.start), r.proc)
				}
			}
			if r.start > r.leaseDL && !r.alive {
				rep.CalledDead++ // the handler was called with its ctx already ended: it did nothing
			}
			if r.start > r.leaseDL && r.alive {
				rep.BegunLate++
				f.BegunLate++
				violate("task %s: run %s began at %s, %v after its lease deadline %s%s", id, r.id, w.sec(r.start),
					time.Duration(r.start-r.leaseDL)*time.Microsecond, w.sec(r.leaseDL), w.faultsNear(r.proc, r.leaseDL-w.lease.Microseconds()*3, r.start))
			}
			if r.ctxDL > 0 && r.start > r.ctxDL {
				rep.BegunLateCtx++
				f.BegunLateCtx++
			}
			if r.ended && r.late > w.margin.Microseconds() {
				rep.LivePastLease++
				f.LivePastLease++
				if len(rep.Notes) < 1000 {
					rep.Notes = append(rep.Notes, fmt.Sprintf("task %s: run %s [%s .. %s, %s] saw its ctx alive %v after its lease deadline%s", id, r.id,
						w.sec(r.start), w.sec(r.last), r.outcome, time.Duration(r.late)*time.Microsecond,
						w.faultsNear(r.proc, r.start-w.lease.Microseconds(), r.end)))
				}
			}
		}
		for i, a := range runs {
			aEnd, ok := w.runEnd(a)
			if !ok {
				continue
			}
			for _, b := range runs[i+1:] {
				bEnd, ok := w.runEnd(b)
				if !ok {
					continue
				}
				ov := overlap(w.active(a, aEnd), w.active(b, bEnd))
				if ov <= w.margin.Microseconds() {
					continue
				}
				rep.Overlaps++
				if len(ev.parks[id])+len(ev.got[id]) > 0 {
					rep.WaitOverlaps++ // a task that parked or took a signal resumed twice at once
				}
				per(b.start).Overlaps++
				rep.MaxOverlap = max(rep.MaxOverlap, time.Duration(ov)*time.Microsecond)
				violate("task %s: runs overlapped by %v: %s on slot %d [%s .. %s, %s] and %s on slot %d [%s .. %s, %s]%s%s", id,
					time.Duration(ov)*time.Microsecond, a.id, a.slot, w.sec(a.start), w.sec(aEnd), w.outcome(a),
					b.id, b.slot, w.sec(b.start), w.sec(bEnd), w.outcome(b),
					w.faultsNear(a.proc, a.start-w.lease.Microseconds(), aEnd), w.faultsNear(b.proc, b.start-w.lease.Microseconds(), bEnd))
			}
		}
	}

	w.groupRuns(ev, rep, violate)

	// Acks.
	for id, acks := range ev.acks {
		rep.Acked++ // ids acked
		for _, a := range acks {
			per(a.at).Acks++ // successful acks
		}
		if _, ok := w.submitted[id]; !ok && ev.kidOf[id] == "" {
			rep.ExtraAcked++
		}
		if len(acks) > 1 {
			rep.AckedTwice++
			per(acks[1].at).AckedTwice++
			violate("task %s: acked %d times: %v", id, len(acks), acks)
		}
		if w.left[id] {
			rep.AckedButLeft++
			violate("task %s: acked, yet still in the queue at the end", id)
		}
	}
	for _, fs := range ev.fails {
		for _, f := range fs {
			if f.class == "leaselost" {
				per(f.at).LeaseLost++
			}
		}
	}

	// Lost: submitted, never acked, not in the dead letters.
	ids := make([]string, 0, len(w.submitted))
	for id := range w.submitted {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		switch {
		case len(ev.acks[id]) > 0:
		case w.dead[id]:
			rep.Dead++
		case w.left[id]:
			rep.Lost++
			rep.Stuck++
			f := per(w.lastSeen(ev, id))
			f.Lost++
			f.Stuck++
			violate("task %s (seq %d): still in Redis after the drain; runs: %s", id, w.submitted[id], w.runsOf(ev, id))
		case w.ackUnknown(ev, id, rep):
			rep.AckedInferred++
		default:
			rep.Lost++
			per(w.lastSeen(ev, id)).Lost++
			violate("task %s (seq %d): lost (never acked, not dead, not in Redis); runs: %s", id, w.submitted[id], w.runsOf(ev, id))
		}
	}
	rep.Acked += rep.AckedInferred
	// A durable step's fn never runs once a run had its record back, and
	// every run that had it back got the task's own result.
	for _, ps := range ev.effects {
		rep.StepRuns += len(ps)
	}
	for id, recs := range ev.recorded {
		rep.StepRecords += len(recs)
		for _, q := range recs {
			if !slices.ContainsFunc(ev.effects[id], func(p ackRec) bool { return p.proc == q.proc }) {
				rep.StepMemoized++
			}
		}
		first := recs[0].at
		for _, q := range recs {
			first = min(first, q.at)
			if strings.HasPrefix(q.proc, "result ") {
				rep.StepWrong++
				violate("task %s: run's step record came back with %s, not its seq %d", id, q.proc, w.submitted[id])
			}
		}
		for _, p := range ev.effects[id] {
			if p.at > first {
				rep.StepReruns++
				violate("task %s: step fn ran in run %s at %s, after a run had its record back at %s; runs: %s", id, p.proc, w.sec(p.at), w.sec(first), w.runsOf(ev, id))
			}
		}
	}
	w.waitCounts(ev, rep, violate)
	w.childCounts(ev, rep, violate)
	return rep
}

// groupRuns counts how many runs of one group were active at once (their
// active times, each cut short by the margin at its end, as the overlaps
// of one task's runs are): never more than groupLimit. And every permit is
// back after the drain.
func (w *world) groupRuns(ev *evidence, rep *report, violate func(string, ...any)) {
	type edge struct {
		at    int64
		delta int
		run   string
	}
	byGroup := map[string][]edge{}
	for _, r := range ev.runs {
		end, ok := w.runEnd(r)
		if r.group == "" || !ok {
			continue
		}
		for _, sg := range w.active(r, end-w.margin.Microseconds()) {
			if sg[1] > sg[0] {
				byGroup[r.group] = append(byGroup[r.group], edge{sg[0], 1, r.id}, edge{sg[1], -1, r.id})
			}
		}
	}
	for _, g := range slices.Sorted(maps.Keys(byGroup)) {
		es := byGroup[g]
		sort.Slice(es, func(i, j int) bool {
			if es[i].at != es[j].at {
				return es[i].at < es[j].at
			}
			return es[i].delta < es[j].delta // an end before a start at the same instant
		})
		n := 0
		for _, e := range es {
			n += e.delta
			rep.GroupMost = max(rep.GroupMost, n)
			if n > groupLimit && e.delta > 0 {
				rep.GroupOver++
				violate("group %s: %d runs at once at %s (run %s began), limit %d", g, n, w.sec(e.at), e.run, groupLimit)
			}
		}
	}
	if w.permits > 0 {
		rep.PermitsLeft = w.permits
		violate("%d group permits still held after the drain", w.permits)
	}
}

// ackUnknown reports whether a run of task id ended well and then its ack's
// outcome stayed unknown: its process was killed before it recorded it, or
// the ack failed with an error other than ErrLeaseLost (a connection cut
// while the script ran: the server may have acked). Either may have acked
// the task (it is gone from Redis). The second kind is counted in
// UnknownAckReply too.
func (w *world) ackUnknown(ev *evidence, id string, rep *report) bool {
	for _, r := range ev.byTask[id] {
		if !r.ended || r.outcome != "ok" {
			continue
		}
		var answer *failRec
		for i, f := range ev.fails[id] {
			if f.proc == r.proc && f.at >= r.end && (answer == nil || f.at < answer.at) {
				answer = &ev.fails[id][i]
			}
		}
		if answer == nil {
			if _, killed := w.deaths[r.proc]; killed {
				return true
			}
			continue
		}
		if answer.class != "leaselost" {
			rep.UnknownAckReply++
			return true
		}
	}
	return false
}

// lastSeen is when task id last began a run (0 if never).
func (w *world) lastSeen(ev *evidence, id string) int64 {
	var at int64
	for _, r := range ev.byTask[id] {
		at = max(at, r.start)
	}
	return at
}

func (w *world) outcome(r *runRec) string {
	if r.ended {
		return r.outcome
	}
	return "died"
}

func (w *world) runsOf(ev *evidence, id string) string {
	var b strings.Builder
	for _, r := range ev.byTask[id] {
		end, _ := w.runEnd(r)
		fmt.Fprintf(&b, "[%s %s..%s %s] ", r.id, w.sec(r.start), w.sec(end), w.outcome(r))
	}
	for _, f := range ev.fails[id] {
		fmt.Fprintf(&b, "{%s %s %s} ", f.proc, w.sec(f.at), f.class)
	}
	if b.Len() == 0 {
		return "none"
	}
	return b.String()
}

// faultsNear lists the faults on the place of proc (and on redis) between
// from and to.
func (w *world) faultsNear(proc string, from, to int64) string {
	place, _, _ := strings.Cut(proc, ".")
	var out []string
	for _, e := range w.faults {
		if e.at < from || e.at > to || (e.target != place && e.target != "redis") || e.kind == "start" {
			continue
		}
		out = append(out, e.kind+"("+e.target+")@"+w.sec(e.at))
	}
	if len(out) == 0 {
		return ""
	}
	return "; faults: " + strings.Join(out, " ")
}

// table spells the report as the figures per phase.
func (rep *report) table() string {
	var b strings.Builder
	fmt.Fprintf(&b, "submitted %d, acked %d (%d inferred: the ack's outcome was unknown to its worker, %d of them by an error reply, the rest by a kill), extra acked %d (submits whose reply was lost), dead %d\n",
		rep.Submitted, rep.Acked, rep.AckedInferred, rep.UnknownAckReply, rep.ExtraAcked, rep.Dead)
	fmt.Fprintf(&b, "LOST %d (stuck %d), ACKED TWICE %d, acked but left %d, OVERLAPS %d (max %v), BEGUN LATE %d; called late with its ctx already ended %d, live past lease %d, unended %d\n",
		rep.Lost, rep.Stuck, rep.AckedTwice, rep.AckedButLeft, rep.Overlaps, rep.MaxOverlap, rep.BegunLate, rep.CalledDead, rep.LivePastLease, rep.Unended)
	fmt.Fprintf(&b, "GROUPS OVER THEIR LIMIT %d (the most runs of one group at once %d, limit %d), PERMITS LEFT %d\n",
		rep.GroupOver, rep.GroupMost, groupLimit, rep.PermitsLeft)
	fmt.Fprintf(&b, "%-13s %6s %6s %5s %6s %7s %5s %8s %9s  %s\n", "phase", "runs", "acks", "lost", "acked2", "overlap", "late", "pastLease", "leaseLost", "faults")
	for _, name := range rep.Phases {
		f := rep.Per[name]
		if f == nil {
			continue
		}
		var fs []string
		for k, v := range f.Faults {
			fs = append(fs, fmt.Sprintf("%s=%d", k, v))
		}
		sort.Strings(fs)
		fmt.Fprintf(&b, "%-13s %6d %6d %5d %6d %7d %5d %8d %9d  %s\n", name, f.Runs, f.Acks, f.Lost, f.AckedTwice, f.Overlaps, f.BegunLate,
			f.LivePastLease, f.LeaseLost, strings.Join(fs, " "))
	}
	return b.String()
}

// placeKind names what a place is: w1 a worker, s1 a sweeper, sub the
// submitter.
func placeKind(place string) string {
	switch {
	case place == "sub":
		return "submitter"
	case place == "redis":
		return "server"
	case strings.HasPrefix(place, "wr"):
		return "reserver"
	case strings.HasPrefix(place, "w"):
		return "worker"
	case strings.HasPrefix(place, "s"):
		return "sweeper"
	}
	return place
}

// stopsOf reads from the fault log when each process incarnation was
// stopped: from each SIGSTOP to the SIGCONT (or the death) after it.
func stopsOf(faults []faultEvent, deaths map[string]int64) map[string][][2]int64 {
	out := map[string][][2]int64{}
	open := map[string]int64{}
	for _, e := range faults {
		switch {
		case e.kind == "stop":
			open[e.detail] = e.at
		case strings.HasSuffix(e.kind, "cont"):
			if from, ok := open[e.detail]; ok {
				out[e.detail] = append(out[e.detail], [2]int64{from, e.at})
				delete(open, e.detail)
			}
		}
	}
	for proc, from := range open {
		to := int64(1 << 62)
		if d, ok := deaths[proc]; ok {
			to = max(d, from)
		}
		out[proc] = append(out[proc], [2]int64{from, to})
	}
	return out
}

// active is when run r could act: from its start to end, less the times its
// process was stopped (a stopped process does nothing).
func (w *world) active(r *runRec, end int64) [][2]int64 {
	segs := [][2]int64{{r.start, end}}
	for _, st := range w.stops[r.proc] {
		var next [][2]int64
		for _, sg := range segs {
			if st[1] <= sg[0] || st[0] >= sg[1] {
				next = append(next, sg)
				continue
			}
			if st[0] > sg[0] {
				next = append(next, [2]int64{sg[0], st[0]})
			}
			if st[1] < sg[1] {
				next = append(next, [2]int64{st[1], sg[1]})
			}
		}
		segs = next
	}
	return segs
}

// overlap is how long two sets of segments intersect.
func overlap(a, b [][2]int64) int64 {
	var n int64
	for _, x := range a {
		for _, y := range b {
			if d := min(x[1], y[1]) - max(x[0], y[0]); d > 0 {
				n += d
			}
		}
	}
	return n
}
