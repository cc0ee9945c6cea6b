package chaos

// The flow controls under faults (issue #34): chunk workers
// (NewChunkWorker) in processes that are SIGKILLed, with debounced tasks
// (SubmitOptions.Debounce) among the plain ones, and on the single node
// redis-server restarts and cut connections; and a debounce whose window
// spans a redis-server SIGKILL (AOF). Counted from the evidence like
// TestChaos: lost, acked twice and overlapping runs must all be 0.

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/fleettest"
	"github.com/fleet-go/fleet/internal/redistest"
)

var flagFCTasks = flag.Int("fc.tasks", 10000, "plain tasks through the chunk workers on each target of TestFlowControlFaults")

const (
	fcProcs    = 3         // chunk worker processes
	fcKeys     = 20        // debounce keys
	fcBurst    = 10        // submits per debounce burst
	fcDebSeq   = 1_000_000 // a debounced task's seq: fcDebSeq + key*1000 + n
	fcFaultFor = 6 * time.Second
)

var fcDebounce = &fleet.Debounce{Window: 150 * time.Millisecond, MaxWait: time.Second}

// TestFlowControlFaults: -fc.tasks plain tasks and fcKeys debounce keys
// (each a burst of fcBurst submits, twice) go through chunk workers in
// fcProcs processes while the processes are SIGKILLed and started again,
// and on the single node redis-server is SIGKILLed and restarted (AOF,
// fsync always) and the processes' connections are cut. After the drain:
// every task submitted was acked or is a dead letter (lost 0), none was
// acked twice, no two runs of a task overlapped, and every run of a
// debounced task carried the last payload its submitter had acknowledged
// (or one whose submit's outcome is unknown, sent after it).
func TestFlowControlFaults(t *testing.T) {
	n := *flagFCTasks
	if testing.Short() {
		n = 3000
	}
	s := settings{tasks: n, workers: fcProcs, slots: 2, lease: time.Second, margin: 100 * time.Millisecond, seed: *flagSeed}
	if s.seed == 0 {
		s.seed = time.Now().UnixNano() % 1_000_000_007
	}
	t.Logf("seed %d", s.seed)
	for _, name := range strings.Split(*flagTargets, ",") {
		t.Run(name, func(t *testing.T) {
			switch name {
			case "single":
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				srv, err := fleettest.StartServer(ctx, fleettest.Config{AppendOnly: true})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(srv.Stop)
				newRun(t, s, target{name: "single", url: srv.URL(), layout: fleet.LayoutCompat}, srv, "fc:").flowControl()
			case "cluster":
				tg := target{name: "cluster", url: redistest.ClusterURL(t), cluster: true, layout: fleet.LayoutTagged}
				prefix := redistest.Prefix(t, redistest.Target{Name: "cluster-tagged", URL: tg.url, Cluster: true, Tagged: true})
				newRun(t, s, tg, nil, prefix).flowControl()
			default:
				t.Fatalf("unknown target %q", name)
			}
		})
	}
}

// fcSubmits is what the submitter was told.
type fcSubmits struct {
	mu    sync.Mutex
	plain map[string]int // id -> seq
	// per debounced id: the seq of its last acknowledged submit, and the
	// seqs of the submits of its key sent after it whose outcome is unknown
	last  map[string]int
	maybe map[string][]int
}

func (r *run) flowControl() {
	t, s := r.t, r.s
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	defer r.bg.Wait()
	defer r.stopAll()
	mk := func(name, role string) *proc {
		p := &proc{r: r, name: name, role: role, busy: make(chan struct{}, 1)}
		if r.server != nil {
			px, err := fleettest.StartProxy(r.server.Addr)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(px.Close)
			p.proxy = px
			r.proxied = append(r.proxied, p)
		}
		r.all = append(r.all, p)
		return p
	}
	for i := range s.workers {
		r.workers = append(r.workers, mk(fmt.Sprintf("c%d", i+1), chunkerRole))
	}
	r.sub = mk("sub", "")
	for _, p := range r.all {
		if err := p.start(); err != nil {
			t.Fatal(err)
		}
	}
	subF := r.open(ctx, r.sub.url(), nil)
	defer subF.Close()
	direct := r.open(ctx, r.tg.url, nil)
	defer direct.Close()
	opts := fcQueueOptions(s.lease)
	q := fleet.NewQueue[job](direct, fcQueue, opts)
	sweepCtx, stopSweep := context.WithCancel(ctx)
	sweepDone := make(chan struct{})
	go func() {
		defer close(sweepDone)
		for sweepCtx.Err() == nil { // it ends at a redis-server restart: again
			_ = direct.RunSweeper(sweepCtx, fleet.SweeperOptions{Interval: 100 * time.Millisecond, Queue: opts})
			sleep(sweepCtx, 100*time.Millisecond)
		}
	}()
	defer func() { stopSweep(); <-sweepDone }()

	sub := &fcSubmits{plain: map[string]int{}, last: map[string]int{}, maybe: map[string][]int{}}
	start := time.Now()
	subDone := make(chan struct{})
	go func() {
		defer close(subDone)
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); r.fcSubmitPlain(ctx, subF, sub) }()
		go func() { defer wg.Done(); r.fcSubmitDebounced(ctx, subF, sub) }()
		wg.Wait()
	}()

	// The faults: kills on every target; on the single node also cuts and
	// redis-server restarts.
	r.flog.setPhase("faults")
	var fwg sync.WaitGroup
	kinds := []string{phKillWorker}
	if r.server != nil {
		kinds = []string{phKillWorker, phCut, phRedisKill, phKillWorker, phCut, phKillWorker}
	}
	for i, end := 0, time.Now().Add(fcFaultFor); time.Now().Before(end); i++ {
		kind := kinds[i%len(kinds)]
		sleep(ctx, min(r.inject(ctx, kind, &fwg), time.Until(end)))
	}
	fwg.Wait()
	r.flog.setPhase("drain")
	r.heal(ctx)
	drainCtx, drainCancel := context.WithTimeout(ctx, 60*time.Second+time.Duration(s.tasks)*time.Millisecond)
	defer drainCancel()
	select {
	case <-subDone:
	case <-drainCtx.Done():
		t.Fatalf("the submitter did not finish")
	}
	drained := false
	for empty := 0; drainCtx.Err() == nil; sleep(drainCtx, 200*time.Millisecond) {
		st, err := q.Stats(drainCtx)
		if err != nil || st.Pending+st.InFlight+st.Scheduled > 0 {
			empty = 0
			continue
		}
		if empty++; empty == 2 {
			drained = true
			break
		}
	}
	if !drained {
		t.Errorf("the fc queue did not drain (what is left counts as lost)")
	}
	elapsed := time.Since(start)
	cancel()
	r.stopAll()
	r.bg.Wait()

	dead, left := map[string]bool{}, map[string]bool{}
	wctx, wcancel := context.WithTimeout(context.Background(), time.Minute)
	defer wcancel()
	r.queueState(wctx, direct, fcQueue, dead, left)
	rep := r.fcCount(sub, dead, left)
	faults := map[string]int{}
	for _, e := range r.flog.snapshot() {
		faults[e.kind]++
	}
	t.Logf("%s after %v: %d plain tasks, %d debounced tasks (%d keys x 2 bursts of %d), faults %v; runs %d, chunks %d, acked %d (and %d whose ack's outcome is unknown), dead %d, lost %d, acked twice %d, overlapping runs %d, stale payloads %d",
		r.tg.name, elapsed.Round(time.Millisecond), len(sub.plain), len(sub.last), fcKeys, fcBurst, faults,
		rep.runs, rep.chunks, rep.acked, rep.unknown, len(dead), rep.lost, rep.ackedTwice, rep.overlaps, rep.stale)
	for i, v := range rep.violations {
		if i == 20 {
			t.Errorf("... and %d more", len(rep.violations)-i)
			break
		}
		t.Errorf("%s", v)
	}
	if rep.lost+rep.ackedTwice+rep.overlaps+rep.stale > 0 {
		t.Errorf("%s: lost %d, acked twice %d, overlapping runs %d, debounced runs with a stale payload %d: want all 0",
			r.tg.name, rep.lost, rep.ackedTwice, rep.overlaps, rep.stale)
	}
	if len(r.deaths) == 0 {
		t.Errorf("no process was killed: the faults say nothing")
	}
	for _, e := range r.oddExits {
		t.Errorf("%s", e)
	}
}

// fcSubmitPlain submits the plain tasks in parts of 500, each with a dedup
// key of its seq, so that a part whose outcome is unknown is submitted
// again under the ids it got (or new ones, for tasks acked meanwhile).
func (r *run) fcSubmitPlain(ctx context.Context, f *fleet.Fleet, sub *fcSubmits) {
	q := fleet.NewQueue[job](f, fcQueue, fcQueueOptions(r.s.lease))
	for from := 0; from < r.s.tasks && ctx.Err() == nil; from += 500 {
		var part []fleet.Submission[job]
		for i := from; i < min(from+500, r.s.tasks); i++ {
			part = append(part, fleet.Submission[job]{Payload: job{Seq: i}, Options: fleet.SubmitOptions{DedupKey: "p" + strconv.Itoa(i)}})
		}
		for ctx.Err() == nil {
			sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			ids, err := q.SubmitManyWith(sctx, part)
			cancel()
			if err == nil {
				sub.mu.Lock()
				for i, id := range ids {
					sub.plain[id] = part[i].Payload.Seq
				}
				sub.mu.Unlock()
				break
			}
			sleep(ctx, 50*time.Millisecond)
		}
		sleep(ctx, fcFaultFor*4/5*500/time.Duration(r.s.tasks)) // spread over the faults
	}
}

// fcSubmitDebounced submits, for each key, two bursts of fcBurst submits
// 5 ms apart, the bursts 1.5 windows apart (the second usually finds the
// first's task run and makes a new one).
func (r *run) fcSubmitDebounced(ctx context.Context, f *fleet.Fleet, sub *fcSubmits) {
	q := fleet.NewQueue[job](f, fcQueue, fcQueueOptions(r.s.lease))
	var wg sync.WaitGroup
	for k := range fcKeys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sleep(ctx, time.Duration(r.rng.intn(int(fcFaultFor/time.Millisecond)/2))*time.Millisecond)
			key := "d" + strconv.Itoa(k)
			var lastID string // the id of the last acknowledged submit of key
			for b := range 2 {
				for i := range fcBurst {
					seq := fcDebSeq + k*1000 + b*fcBurst + i
					sctx, cancel := context.WithTimeout(ctx, 3*time.Second)
					id, err := q.SubmitWith(sctx, job{Seq: seq}, fleet.SubmitOptions{DedupKey: key, Debounce: fcDebounce})
					cancel()
					sub.mu.Lock()
					switch {
					case err == nil:
						sub.last[id] = seq
						sub.maybe[id] = nil
						lastID = id
					case errors.Is(err, fleet.ErrTaskRunning):
						// refused: nothing changed
					case lastID != "":
						sub.maybe[lastID] = append(sub.maybe[lastID], seq)
					}
					sub.mu.Unlock()
					sleep(ctx, 5*time.Millisecond)
				}
				sleep(ctx, fcDebounce.Window*3/2)
			}
		}()
	}
	wg.Wait()
}

type fcReport struct {
	runs, chunks, acked, unknown      int
	lost, ackedTwice, overlaps, stale int
	violations                        []string
}

type fcRun struct {
	proc       string
	run        string
	seq        int
	start, end int64 // µs; end 0: none recorded
}

// fcCount reads the evidence and counts.
func (r *run) fcCount(sub *fcSubmits, dead, left map[string]bool) fcReport {
	var rep fcReport
	runs := map[string][]*fcRun{} // task -> runs
	called := map[string]bool{}   // tasks handed to a handler (alive or not)
	acks := map[string]int{}
	unknown := map[string]bool{} // an ack whose outcome is unknown
	chunks := map[string]bool{}
	files, err := filepath.Glob(filepath.Join(r.dir, "ev", "*.log"))
	if err != nil {
		r.t.Fatal(err)
	}
	for _, path := range files {
		proc := strings.TrimSuffix(filepath.Base(path), ".log")
		f, err := os.Open(path)
		if err != nil {
			r.t.Fatal(err)
		}
		open := map[string]*fcRun{}  // run+task -> run
		endSaid := map[string]bool{} // tasks whose end (A or F) this process wrote
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fs := strings.Fields(sc.Text())
			num := func(i int) int64 {
				v, err := strconv.ParseInt(fs[i], 10, 64)
				if err != nil {
					r.t.Fatalf("%s: %q: %v", path, sc.Text(), err)
				}
				return v
			}
			switch {
			case fs[0] == "S" && len(fs) == 7:
				ru := &fcRun{proc: proc, run: fs[1], seq: int(num(3)), start: num(4)}
				if fs[6] == "1" { // a task whose ctx ended before the handler began never runs
					runs[fs[2]] = append(runs[fs[2]], ru)
				}
				called[fs[2]] = true // though its ack may still apply, if no one took it over
				open[fs[1]+" "+fs[2]] = ru
				chunks[fs[1]] = true
			case fs[0] == "E" && len(fs) == 4:
				if ru := open[fs[1]+" "+fs[2]]; ru != nil {
					ru.end = num(3)
				}
			case fs[0] == "A" && len(fs) == 3:
				acks[fs[1]]++
				endSaid[fs[1]] = true
			case fs[0] == "F" && len(fs) == 4:
				endSaid[fs[1]] = true
				if strings.Contains(fs[3], "unavailable") || strings.Contains(fs[3], "closed") || strings.Contains(fs[3], "deadline") {
					unknown[fs[1]] = true
				}
			}
		}
		f.Close()
		// A run a kill cut short ended at the kill; one that ended in the
		// handler but whose end the kill cut off may have acked.
		_, killed := r.deaths[proc]
		for k, ru := range open {
			task := strings.Fields(k)[1]
			switch {
			case ru.end == 0:
				ru.end = r.deaths[proc]
			case killed && !endSaid[task]:
				unknown[task] = true
			}
		}
	}
	rep.chunks, rep.unknown = len(chunks), len(unknown)
	bad := func(format string, args ...any) {
		rep.violations = append(rep.violations, fmt.Sprintf(format, args...))
	}
	for task, rs := range runs {
		rep.runs += len(rs)
		if acks[task] > 1 {
			rep.ackedTwice++
			bad("task %s acked %d times", task, acks[task])
		}
		sort.Slice(rs, func(i, j int) bool { return rs[i].start < rs[j].start })
		for i := 1; i < len(rs); i++ {
			prev := rs[i-1]
			if prev.end == 0 || rs[i].start < prev.end-r.s.margin.Microseconds() {
				rep.overlaps++
				bad("task %s: run %s began at %d while run %s (ended %d) ran", task, rs[i].run, rs[i].start, prev.run, prev.end)
			}
		}
	}
	for task, n := range acks {
		rep.acked += min(n, 1)
		if !called[task] {
			bad("task %s acked without a run", task)
		}
	}
	done := func(id string) bool { return acks[id] > 0 || dead[id] || unknown[id] }
	// Plain: every seq has a task done, and every id the submitter was
	// given is done.
	seqDone, seqSent := map[int]bool{}, map[int]bool{}
	for id, seq := range sub.plain {
		seqSent[seq] = true
		if done(id) {
			seqDone[seq] = true
		} else {
			rep.lost++
			bad("plain task %s (seq %d) lost (left in the queue: %v)", id, seq, left[id])
		}
	}
	for seq := range r.s.tasks {
		if !seqSent[seq] {
			rep.lost++
			bad("plain seq %d never submitted", seq)
		}
	}
	// Debounced: each id acknowledged is done, and each of its runs
	// carried its last acknowledged payload (or a later one whose outcome
	// is unknown).
	for id, last := range sub.last {
		if !done(id) {
			rep.lost++
			bad("debounced task %s (last seq %d) lost", id, last)
		}
		for _, ru := range runs[id] {
			if ru.seq != last && !containsInt(sub.maybe[id], ru.seq) {
				rep.stale++
				bad("debounced task %s ran with seq %d; its last acknowledged submit was %d (unknown after it: %v)", id, ru.seq, last, sub.maybe[id])
			}
		}
	}
	if len(rep.violations) == 0 && rep.runs == 0 {
		bad("no run recorded")
	}
	return rep
}

func containsInt(xs []int, x int) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

// TestFlowControlDebounceRestart: three Fleets submit to one debounce key
// at once, then one submits last; redis-server is SIGKILLed right after
// that submit was acknowledged, inside its window, and restarted (AOF,
// fsync always). Every acknowledged submit got the one task's id, and the
// task runs exactly once, with the last acknowledged payload, no sooner
// than Window after that submit and by MaxWait after the first.
func TestFlowControlDebounceRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, err := fleettest.StartServer(ctx, fleettest.Config{AppendOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	var fs []*fleet.Fleet
	for range 3 {
		f, err := fleet.Open(ctx, fleet.Options{URL: srv.URL(), Prefix: "fcd:", Layout: fleet.LayoutCompat})
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		fs = append(fs, f)
	}
	d := &fleet.Debounce{Window: time.Second, MaxWait: 10 * time.Second}
	o := fleet.SubmitOptions{DedupKey: "k", Debounce: d}
	var mu sync.Mutex
	ids := map[string]int{}
	var wg sync.WaitGroup
	for i, f := range fs {
		q := fleet.NewQueue[job](f, "deb", fleet.QueueOptions{})
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range 30 {
				id, err := q.SubmitWith(ctx, job{Seq: i*1000 + n}, o)
				if err != nil {
					t.Errorf("fleet %d submit %d: %v", i, n, err)
					return
				}
				mu.Lock()
				ids[id]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	q := fleet.NewQueue[job](fs[1], "deb", fleet.QueueOptions{})
	const lastSeq = 99_999
	last := time.Now()
	id, err := q.SubmitWith(ctx, job{Seq: lastSeq}, o)
	if err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	killed := time.Now()
	if err := srv.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	ids[id]++
	if len(ids) != 1 || ids[id] != 91 {
		t.Fatalf("the acknowledged submits got the ids %v; want one id, 91 times", ids)
	}
	if killed.Sub(last) >= d.Window {
		t.Fatalf("the kill came %v after the last submit, past its window %v", killed.Sub(last), d.Window)
	}
	var ts []*fleet.Task[job]
	var ranAt time.Time
	for len(ts) == 0 {
		if ctx.Err() != nil {
			t.Fatal("the debounced task never ran after the restart")
		}
		ts, err = fleet.NewQueue[job](fs[2], "deb", fleet.QueueOptions{}).Reserve(ctx, 10, 100*time.Millisecond)
		ranAt = time.Now()
		if err != nil {
			ts = nil
			sleep(ctx, 50*time.Millisecond)
		}
	}
	if len(ts) != 1 || ts[0].ID != id || ts[0].Payload.Seq != lastSeq {
		t.Fatalf("reserved %+v; want task %s with seq %d", ts, id, lastSeq)
	}
	// The window runs from the last submit (the server's clock, this
	// host's); the first submit is the id's time.
	first := time.UnixMilli(uuidMS(t, id))
	if ranAt.Before(last.Add(d.Window-50*time.Millisecond)) || ranAt.After(first.Add(d.MaxWait)) {
		t.Fatalf("ran at %v: the last submit was %v (window %v), the first %v (max wait %v)", ranAt, last, d.Window, first, d.MaxWait)
	}
	if err := ts[0].Ack(ctx); err != nil {
		t.Fatal(err)
	}
	if more, err := q.Reserve(ctx, 10, d.Window+d.Window/5); err != nil || len(more) != 0 {
		t.Fatalf("a second run: %+v, %v", more, err)
	}
	if st, err := q.Stats(ctx); err != nil || st.Pending+st.InFlight+st.Scheduled+st.Dead != 0 {
		t.Fatalf("stats after the run %+v, %v; want all 0", st, err)
	}
	t.Logf("91 submits on 3 Fleets, redis-server killed %v after the last, ran %v after it", killed.Sub(last).Round(time.Millisecond), ranAt.Sub(last).Round(time.Millisecond))
}

// uuidMS is the unix ms of a UUIDv7 task id.
func uuidMS(t *testing.T, id string) int64 {
	t.Helper()
	ms, err := strconv.ParseInt(strings.ReplaceAll(id, "-", "")[:12], 16, 64)
	if err != nil {
		t.Fatalf("id %q: %v", id, err)
	}
	return ms
}
