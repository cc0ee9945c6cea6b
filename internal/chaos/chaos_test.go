package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/fleettest"
	"github.com/fleet-go/fleet/internal/keys"
	"github.com/fleet-go/fleet/internal/redistest"
)

var (
	flagTasks    = flag.Int("chaos.tasks", 300, "tasks submitted on each target")
	flagTime     = flag.Duration("chaos.time", 0, "fault time on each target, shared by its phases (0: chaos.phase per phase)")
	flagPhase    = flag.Duration("chaos.phase", 3*time.Second, "how long each fault phase injects faults")
	flagPhases   = flag.String("chaos.phases", "", "comma-separated phases to run (default: every phase the target supports)")
	flagTargets  = flag.String("chaos.targets", "single,cluster", "comma-separated targets: single (a redis-server of the suite's own, behind proxies), cluster")
	flagWorkers  = flag.Int("chaos.workers", 3, "worker processes")
	flagSlots    = flag.Int("chaos.slots", 4, "slots per worker process")
	flagSweepers = flag.Int("chaos.sweepers", 2, "sweeper processes")
	flagReserver = flag.Int("chaos.reservers", 1, "reserver processes: Reserve with short ctxs (in flight when they end), run, ack; faulted as workers")
	flagLease    = flag.Duration("chaos.lease", time.Second, "the queue's lease")
	flagLong     = flag.Float64("chaos.long", 0.4, "share of tasks that work 0.2-1.5 leases (the rest work 5-60 ms)")
	flagMargin   = flag.Duration("chaos.margin", 100*time.Millisecond, "runs of one task that overlap by more than this count as overlapping")
	flagSeed     = flag.Int64("chaos.seed", 0, "seed of the faults and the tasks (0: from the clock; logged)")
	flagDrain    = flag.Duration("chaos.drain", 0, "bound on the final drain (0: scaled to the tasks)")
	flagDir      = flag.String("chaos.dir", "", "keep the evidence here (default: a temporary directory, kept when the test fails)")
)

const (
	queueName   = "chaos"
	maxAttempts = 100 // leases that run out count attempts: under kills a task may lose many
	groupLimit  = 2   // each group runs at most this many at once (QueueOptions.Groups)
)

func TestMain(m *testing.M) {
	if role := os.Getenv(envRole); role != "" {
		os.Exit(runRole(role))
	}
	redistest.Main(m)
}

// settings are the flags, checked.
type settings struct {
	tasks, workers, slots, sweepers  int
	flows                            int
	reservers                        int
	lease, sweepEvery, phase, margin time.Duration
	drain                            time.Duration
	long                             float64
	seed                             int64
	// groups is how many groups the submitter puts half the tasks in
	// (SubmitOptions.Group: g0, g1, ...): about 75 tasks each, at least 4,
	// so that the groups' limit bounds each group's pace, not the drain.
	groups int
}

// target is where a run goes.
type target struct {
	name    string
	url     string // direct
	cluster bool
	layout  fleet.Layout
}

// TestChaos runs the fault suite on the single node (a redis-server of its
// own, with AOF and appendfsync always, each process behind a proxy) and on
// the cluster (process faults only), and fails unless nothing submitted was
// lost, nothing acked twice, no two runs of a task overlapped, and no run
// began after its lease deadline.
func TestChaos(t *testing.T) {
	s := settings{tasks: *flagTasks, flows: *flagFlows, workers: *flagWorkers, slots: *flagSlots, sweepers: *flagSweepers, reservers: *flagReserver,
		lease: *flagLease, phase: *flagPhase, margin: *flagMargin, drain: *flagDrain, long: *flagLong, seed: *flagSeed}
	if testing.Short() {
		// -short: a smaller default, unless the flags were set.
		set := map[string]bool{}
		flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if !set["chaos.tasks"] {
			s.tasks = 150
		}
		if !set["chaos.phase"] {
			s.phase = 2 * time.Second
		}
		if !set["chaos.flows"] {
			s.flows = 6
		}
	}
	if s.seed == 0 {
		s.seed = time.Now().UnixNano() % 1_000_000_007
	}
	if s.tasks < 1 || s.flows < 0 || s.workers < 1 || s.slots < 1 || s.sweepers < 0 || s.reservers < 0 || s.lease < 100*time.Millisecond || s.long < 0 || s.long > 1 {
		t.Fatalf("bad chaos flags: %+v", s)
	}
	s.sweepEvery = max(s.lease/4, 20*time.Millisecond)
	s.groups = max(4, s.tasks/150)
	t.Logf("chaos seed %d (rerun with -chaos.seed=%d)", s.seed, s.seed)
	for _, name := range strings.Split(*flagTargets, ",") {
		name = strings.TrimSpace(name)
		t.Run(name, func(t *testing.T) {
			switch name {
			case "single":
				runSingle(t, s)
			case "cluster":
				tg := target{name: "cluster", url: redistest.ClusterURL(t), cluster: true, layout: fleet.LayoutTagged}
				prefix := redistest.Prefix(t, redistest.Target{Name: "cluster-tagged", URL: tg.url, Cluster: true, Tagged: true})
				newRun(t, s, tg, nil, prefix).do()
			default:
				t.Fatalf("unknown target %q", name)
			}
		})
	}
}

func runSingle(t *testing.T, s settings) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, err := fleettest.StartServer(ctx, fleettest.Config{AppendOnly: true})
	if err != nil {
		t.Fatalf("the single node needs a redis-server of the suite's own (it restarts it): %v", err)
	}
	t.Cleanup(srv.Stop)
	tg := target{name: "single", url: srv.URL(), layout: fleet.LayoutCompat}
	newRun(t, s, tg, srv, "chaos:").do()
}

// run is one target's run.
type run struct {
	t      *testing.T
	s      settings
	tg     target
	server *fleettest.Server // nil on the cluster
	prefix string
	dir    string
	rng    *rng
	flog   *faultLog

	workers, sweepers []*proc
	sub               *proc   // the submitter's place (its proxy)
	proxied, all      []*proc // places with a proxy; every place
	bg                sync.WaitGroup

	mu       sync.Mutex
	deaths   map[string]int64
	oddExits []string
	phases   []phaseSpan

	// The submitter's pace: phase i of n began at phaseStart.
	phaseIdx, nPhases int
	phaseStart        time.Time
	phaseDur          time.Duration

	submitted  map[string]int
	unknown    int // submits whose outcome is unknown (retried under new ids)
	submitErrs map[string]int

	sig          *signaller // the waiting tasks' signals (signals_test.go)
	parkSamples  int        // samples of Redis for parked tasks holding a lease or a permit
	parkedLeased []string   // what they found

	flows        []flowRec // every flow the submitter tried (flows_test.go)
	unknownFlows int       // flow submits whose outcome is unknown
}

func newRun(t *testing.T, s settings, tg target, srv *fleettest.Server, prefix string) *run {
	r := &run{t: t, s: s, tg: tg, server: srv, prefix: prefix, rng: newRNG(s.seed),
		deaths: map[string]int64{}, submitted: map[string]int{}, submitErrs: map[string]int{}, sig: newSignaller(s.seed + 5)}
	if *flagDir != "" {
		r.dir = filepath.Join(*flagDir, fmt.Sprintf("%s-%d", tg.name, s.seed))
		if err := os.MkdirAll(r.dir, 0o755); err != nil {
			t.Fatal(err)
		}
	} else {
		dir, err := os.MkdirTemp("", "fleet-chaos-"+tg.name+"-")
		if err != nil {
			t.Fatal(err)
		}
		r.dir = dir
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("evidence kept in %s", dir)
			} else {
				os.RemoveAll(dir)
			}
		})
	}
	for _, sub := range []string{"ev", "log"} {
		if err := os.MkdirAll(filepath.Join(r.dir, sub), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	flf, err := os.Create(filepath.Join(r.dir, "faults.log"))
	if err != nil {
		t.Fatal(err)
	}
	r.flog = &faultLog{f: flf, phase: "setup"}
	t.Cleanup(func() { flf.Close() })
	return r
}

// ended is told by a process's wait goroutine how it ended.
func (r *run) ended(id, evidence string, at, stopped int64, expected bool, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ee *exec.ExitError
	killed := false
	if errors.As(err, &ee) {
		ws, ok := ee.Sys().(syscall.WaitStatus)
		killed = ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
		if ok && ws.Signaled() && ws.Signal() == syscall.SIGTERM && !begun(evidence) {
			// SIGTERM came before the child could catch it: as good as
			// a kill, and it did nothing yet.
			killed = true
		}
	}
	if killed {
		if stopped != 0 {
			at = stopped // a stopped process did nothing since
		}
		r.deaths[id] = at
	}
	switch {
	case !expected:
		r.oddExits = append(r.oddExits, fmt.Sprintf("%s exited by itself: %v", id, err))
	case err != nil && !killed:
		r.oddExits = append(r.oddExits, fmt.Sprintf("%s did not exit cleanly on SIGTERM: %v", id, err))
	}
	r.flog.add("exit", strings.SplitN(id, ".", 2)[0], fmt.Sprintf("%s:%v", id, err))
}

func (r *run) do() {
	t, s := r.t, r.s
	phases := phasesFor(r.server != nil)
	if *flagPhases != "" {
		var want []string
		for _, p := range strings.Split(*flagPhases, ",") {
			p = strings.TrimSpace(p)
			if !containsStr(phasesFor(r.server != nil), p) {
				t.Logf("phase %s does not run on %s", p, r.tg.name)
				continue
			}
			want = append(want, p)
		}
		phases = want
	}
	phase := s.phase
	if *flagTime > 0 && len(phases) > 0 {
		phase = *flagTime / time.Duration(len(phases))
	}
	gap := s.lease
	r.nPhases, r.phaseDur, r.phaseStart = len(phases), phase, time.Now()
	t.Logf("%s: %d tasks (half in %d groups of concurrency %d) and %d flows, %d workers x %d slots, %d sweepers, %d reservers, lease %v, phases %v of %v each, evidence in %s",
		r.tg.name, s.tasks, s.groups, groupLimit, s.flows, s.workers, s.slots, s.sweepers, s.reservers, s.lease, phases, phase, r.dir)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	defer r.bg.Wait()
	defer r.stopAll() // on any way out

	// The places, each with its proxy on the single node.
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
		r.workers = append(r.workers, mk(fmt.Sprintf("w%d", i+1), "worker"))
	}
	for i := range s.sweepers {
		r.sweepers = append(r.sweepers, mk(fmt.Sprintf("s%d", i+1), "sweeper"))
	}
	for i := range s.reservers {
		// faulted with the workers: "w" places
		r.workers = append(r.workers, mk(fmt.Sprintf("wr%d", i+1), "reserver"))
	}
	r.sub = mk("sub", "")
	for _, p := range r.all {
		if err := p.start(); err != nil {
			t.Fatal(err)
		}
	}

	// The submitter (in this process, through its proxy), and a direct
	// Fleet to watch and count.
	subObs, closeSubObs := r.submitterObserver()
	defer closeSubObs()
	subF := r.open(ctx, r.sub.url(), subObs)
	defer subF.Close()
	direct := r.open(ctx, r.tg.url, nil)
	defer direct.Close()
	q := fleet.NewQueue[job](direct, queueName, queueOptions(s.lease, maxAttempts, 0, 0))
	kq := fleet.NewQueue[job](direct, kidQueue, queueOptions(s.lease, maxAttempts, 0, 0))

	// The waiting tasks' sender (through the submitter's proxy) and the
	// sampler of parked tasks holding a lease or a permit, until the drain ends.
	subDone := make(chan struct{}) // closed once the submitter is done
	var waitsBG sync.WaitGroup
	defer func() { cancel(); waitsBG.Wait() }() // on any way out, before the Fleets close
	waitsBG.Go(func() {
		r.sig.run(ctx, r, fleet.NewQueue[job](subF, queueName, queueOptions(s.lease, maxAttempts, 0, 0)), direct, subDone, func(id string) bool {
			r.mu.Lock()
			defer r.mu.Unlock()
			_, ok := r.submitted[id]
			return ok
		})
	})
	waitsBG.Go(func() { r.sampleParked(ctx, direct) })

	start := time.Now()
	t0 := start.UnixMicro()
	go func() {
		defer close(subDone)
		flowsDone := make(chan struct{})
		go func() {
			defer close(flowsDone)
			r.submitFlows(ctx, subF)
		}()
		r.submit(ctx, subF)
		<-flowsDone
	}()

	for i, ph := range phases {
		r.mu.Lock()
		r.phases = append(r.phases, phaseSpan{name: ph, from: time.Now().UnixMicro()})
		r.phaseIdx, r.phaseStart = i, time.Now()
		r.mu.Unlock()
		r.runPhase(ctx, ph, phase)
		r.flog.setPhase(ph + "+gap")
		sleep(ctx, gap)
		if t.Failed() && ctx.Err() != nil {
			return
		}
	}
	r.mu.Lock()
	r.phases = append(r.phases, phaseSpan{name: "drain", from: time.Now().UnixMicro()})
	r.phaseIdx = len(phases)
	r.mu.Unlock()
	r.flog.setPhase("drain")
	r.heal(ctx)

	// The final drain: everything submitted, nothing pending, scheduled or
	// in flight, twice in a row.
	bound := s.drain
	if bound == 0 {
		bound = 30*time.Second + 10*s.lease + time.Duration(s.tasks+(2+flowFanOut)*s.flows)*5*time.Millisecond + 3*submitGrace
	}
	drainCtx, drainCancel := context.WithTimeout(ctx, bound)
	defer drainCancel()
	select {
	case <-subDone:
	case <-drainCtx.Done():
		t.Errorf("the submitter did not finish within the drain bound %v", bound)
	}
	drained := false
	for empty := 0; empty < 2 && drainCtx.Err() == nil; {
		st, err := q.Stats(drainCtx)
		kst, kerr := kq.Stats(drainCtx)
		if err == nil && kerr == nil && st.Pending+st.InFlight+st.Scheduled+kst.Pending+kst.InFlight+kst.Scheduled == 0 &&
			(s.flows == 0 || r.flowsDrained(drainCtx, direct)) {
			empty++
		} else {
			empty = 0
		}
		if empty == 2 {
			drained = true
			break
		}
		sleep(drainCtx, 300*time.Millisecond)
	}
	if !drained {
		t.Errorf("the queue did not drain within %v after the faults (what is left counts as lost); its keys:\n%s", bound, r.describe(direct))
	}
	elapsed := time.Since(start)
	cancel()
	<-subDone
	waitsBG.Wait()
	r.stopAll()
	r.bg.Wait()

	// Count.
	wctx, wcancel := context.WithTimeout(context.Background(), time.Minute)
	defer wcancel()
	w := &world{deaths: r.deaths, margin: s.margin, lease: s.lease, t0: t0, faults: r.flog.snapshot(), phases: r.phases,
		submitted: r.submitted}
	w.stops = stopsOf(w.faults, w.deaths)
	w.dead, w.left, w.permits = r.redisState(wctx, direct)
	r.sig.mu.Lock()
	w.waiters, w.signaled, w.sigRefused = r.sig.waiters, r.sig.signaled, r.sig.refused
	sigRetries, sigOnRetry, sigUnsent, orphans, sleepers := r.sig.retries, r.sig.onRetry, len(r.sig.queue), len(r.sig.orphans), r.sig.sleepers
	r.sig.mu.Unlock()
	w.parkSamples, w.parkedLeased = r.parkSamples, r.parkedLeased
	ev, err := readEvidence(filepath.Join(r.dir, "ev"))
	if err != nil {
		t.Fatal(err)
	}
	rep := analyze(ev, w)
	rep.SignalRetries, rep.SignalSentOnRetry, rep.Sleepers = sigRetries, sigOnRetry, sleepers
	r.checkHistory(wctx, t, direct, rep)
	frep, fbad := r.analyzeFlows(wctx, direct, ev)
	t.Logf("%s after %v (seed %d); submit errors %v (outcome unknown: %d, resubmitted)\n%s%s",
		r.tg.name, elapsed.Round(time.Millisecond), s.seed, r.submitErrs, r.unknown, rep.table(), frep)
	if b, err := json.MarshalIndent(rep, "", "  "); err == nil {
		_ = os.WriteFile(filepath.Join(r.dir, "report.json"), b, 0o644)
	}

	for i, n := range rep.Notes {
		if i == 10 {
			t.Logf("... and %d more runs live past their lease (report.json)", len(rep.Notes)-i)
			break
		}
		t.Logf("note: %s", n)
	}
	// The goal.
	for i, v := range rep.Violations {
		if i == 40 {
			t.Errorf("... and %d more violations (report.json)", len(rep.Violations)-i)
			break
		}
		t.Errorf("%s", v)
	}
	if len(ev.bad) > 0 {
		t.Errorf("%d evidence lines did not parse, e.g. %q", len(ev.bad), ev.bad[0])
	}
	t.Logf("%s: durable steps: fn runs %d, records back %d (%d memoized), run again after a record came back %d",
		r.tg.name, rep.StepRuns, rep.StepRecords, rep.StepMemoized, rep.StepReruns)
	if rep.StepReruns+rep.StepWrong > 0 {
		t.Errorf("%s: durable steps run again after their record came back %d, records with another result %d: want 0", r.tg.name, rep.StepReruns, rep.StepWrong)
	}
	t.Logf("%s: durable waits: %d tasks waited for a signal, %d slept; runs parked %d; signals sent %d (%d sends of unknown outcome sent again, %d of them found applied (ErrSignalSent, or the task ended); %d unsent; %d to tasks of lost submit replies), delivered %d; LOST %d, WRONG %d, REFUSED %d, TIMED OUT %d; resumed twice at once %d; parked and holding a lease or a group permit at once %d in %d samples",
		r.tg.name, rep.Waiters, rep.Sleepers, rep.Parked, rep.SignalsSent, rep.SignalRetries, rep.SignalSentOnRetry, sigUnsent, orphans, rep.SignalsDelivered,
		rep.SignalLost, rep.SignalWrong, rep.SignalRefused, rep.WaitTimedOut, rep.WaitOverlaps, rep.ParkedLeased, rep.ParkSamples)
	if rep.SignalLost+rep.SignalWrong+rep.SignalRefused+rep.WaitTimedOut+rep.WaitOverlaps+rep.ParkedLeased > 0 {
		t.Errorf("%s: durable waits: signals lost %d, wrong values %d, refused %d, waits timed out %d, parked tasks resumed twice at once %d, parked tasks holding a lease or a group permit %d: want all 0",
			r.tg.name, rep.SignalLost, rep.SignalWrong, rep.SignalRefused, rep.WaitTimedOut, rep.WaitOverlaps, rep.ParkedLeased)
	}
	if rep.Parked == 0 || rep.SignalsDelivered == 0 || rep.ParkSamples == 0 {
		t.Errorf("%s: durable waits: %d runs parked, %d signals delivered, %d samples: the wait checks say nothing", r.tg.name, rep.Parked, rep.SignalsDelivered, rep.ParkSamples)
	}
	t.Logf("%s: children: %d parents started %d children, %d of them acked; %d parents resumed with their results; LOST %d, STARTED TWICE %d, WRONG RESULTS %d, PARENTS STRANDED %d",
		r.tg.name, rep.Parents, rep.Children, rep.ChildrenAcked, rep.ParentsResumed, rep.ChildLost, rep.ChildTwice, rep.ChildWrong, rep.ParentStranded)
	if rep.ChildLost+rep.ChildTwice+rep.ChildWrong+rep.ParentStranded > 0 {
		t.Errorf("%s: children: lost %d, a parent's children started twice %d, wrong results %d, parents stranded %d: want all 0",
			r.tg.name, rep.ChildLost, rep.ChildTwice, rep.ChildWrong, rep.ParentStranded)
	}
	if rep.Parents == 0 || rep.ParentsResumed == 0 {
		t.Errorf("%s: children: %d parents, %d resumed: the children's checks say nothing", r.tg.name, rep.Parents, rep.ParentsResumed)
	}
	if rep.Lost+rep.AckedTwice+rep.Overlaps+rep.BegunLate+rep.AckedButLeft+rep.GroupOver+rep.PermitsLeft > 0 {
		t.Errorf("%s: lost %d, acked twice %d, overlapping runs %d (beyond %v), runs begun after their lease deadline %d, acked but left %d, groups over their limit %d, permits left %d: want all 0",
			r.tg.name, rep.Lost, rep.AckedTwice, rep.Overlaps, s.margin, rep.BegunLate, rep.AckedButLeft, rep.GroupOver, rep.PermitsLeft)
	}
	if rep.GroupMost == 0 {
		t.Errorf("%s: no grouped task ran: the group check says nothing", r.tg.name)
	}
	if want := s.tasks + (2+flowFanOut)*frep.Confirmed; rep.Submitted != want || frep.Confirmed != s.flows {
		t.Errorf("submitted %d tasks and %d flows, want %d and %d", rep.Submitted, frep.Confirmed, want, s.flows)
	}
	for i, v := range fbad {
		if i == 40 {
			t.Errorf("... and %d more flow violations", len(fbad)-i)
			break
		}
		t.Errorf("%s", v)
	}
	if frep.EarlyStarts+frep.ReleasedTwice+frep.Stranded+frep.KeysLeft > 0 {
		t.Errorf("%s: flows: early starts %d, released twice %d, stranded %d, keys left %d: want all 0",
			r.tg.name, frep.EarlyStarts, frep.ReleasedTwice, frep.Stranded, frep.KeysLeft)
	}
	for _, e := range r.oddExits {
		t.Errorf("%s", e)
	}
	r.checkTaskLogs(wctx, direct, w.dead)
	r.checkLogs()
}

func containsStr(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// open opens a Fleet on url, retrying a while.
func (r *run) open(ctx context.Context, url string, obs *fleet.Observer) *fleet.Fleet {
	deadline := time.Now().Add(30 * time.Second)
	for {
		octx, cancel := context.WithTimeout(ctx, 5*time.Second)
		f, err := fleet.Open(octx, fleet.Options{URL: url, Prefix: r.prefix, Layout: r.tg.layout, Observer: obs})
		cancel()
		if err == nil {
			return f
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("open %s: %v", url, err)
		}
		sleep(ctx, 200*time.Millisecond)
	}
}

// stopAll stops every process gracefully (SIGTERM), in parallel.
func (r *run) stopAll() {
	var wg sync.WaitGroup
	for _, p := range r.all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.term("final-term", 30*time.Second)
			p.closeStdin()
		}()
	}
	wg.Wait()
}

// due is how many of n tasks should be submitted by now: an equal share in
// each phase, spread over its fault time.
func (r *run) due(n int) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.phaseIdx >= r.nPhases {
		return n
	}
	frac := min(1, float64(time.Since(r.phaseStart))/float64(r.phaseDur))
	return min(n, int(float64(n)*(float64(r.phaseIdx)+frac)/float64(r.nPhases))+1)
}

// submit submits s.tasks tasks through f, at the pace of due; a submit
// whose outcome is unknown is retried under new ids. 10% go through
// SubmitWith with a NotBefore up to 0.5 s ahead (the scheduled path). Half
// the tasks go in one of the groups, and a fifth of the others have a
// priority (opts).
func (r *run) submit(ctx context.Context, f *fleet.Fleet) {
	s := r.s
	q := fleet.NewQueue[job](f, queueName, queueOptions(s.lease, maxAttempts, 0, 0))
	g := newRNG(s.seed + 1)
	jobs := make([]job, s.tasks)
	for i := range jobs {
		jobs[i].Seq = i
		if g.float() < s.long {
			jobs[i].WorkMS = int(g.between(s.lease/5, s.lease*3/2) / time.Millisecond)
		} else {
			jobs[i].WorkMS = 5 + g.intn(55)
		}
		jobs[i].Fail = g.float() < 0.05
		jobs[i].Die = g.float() < 0.02 // dead letters: their logs are kept (checkTaskLogs)
	}
	// Durable waits (signals_test.go), drawn apart so that the tasks'
	// other draws stay those of the seed: 20% wait for a signal, 6%
	// sleep 0.1-0.6 s first.
	gw := newRNG(s.seed + 3)
	for i := range jobs {
		jobs[i].Wait = gw.float() < 0.2
		if gw.float() < 0.06 {
			jobs[i].NapMS = 100 + gw.intn(500)
		}
		if gw.float() < 0.06 { // and 6% start two children (children_test.go)
			jobs[i].Kids = 2
		}
	}
	opts := make([]fleet.SubmitOptions, s.tasks)
	for i := range opts {
		switch x := g.float(); {
		case x < 0.5:
			opts[i].Group = fmt.Sprintf("g%d", g.intn(s.groups))
		case x < 0.6:
			opts[i].Priority = 1 + g.intn(fleet.MaxPriority)
		}
	}
	subf, err := os.Create(filepath.Join(r.dir, "submitted.log"))
	if err != nil {
		r.t.Errorf("%v", err)
		return
	}
	defer subf.Close()
	w := bufio.NewWriter(subf)
	defer w.Flush()
	record := func(ids []string, js []job) {
		r.mu.Lock()
		defer r.mu.Unlock()
		for i, id := range ids {
			r.submitted[id] = js[i].Seq
			fmt.Fprintf(w, "%s %d\n", id, js[i].Seq)
			if js[i].Wait {
				r.sig.add(id, js[i].Seq)
			}
			if js[i].NapMS > 0 {
				r.sig.slept()
			}
		}
	}
	failed := func(err error, n int) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.unknown += n
		r.submitErrs[errClass(err)]++
	}
	next := 0
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for next < len(jobs) {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		due := r.due(len(jobs))
		for next < due && ctx.Err() == nil {
			if g.float() < 0.1 {
				sctx, cancel := context.WithTimeout(ctx, 3*time.Second)
				o := opts[next]
				o.NotBefore = time.Now().Add(g.between(0, 500*time.Millisecond))
				id, err := q.SubmitWith(sctx, jobs[next], o)
				cancel()
				if err != nil {
					failed(err, 1)
					sleep(ctx, 50*time.Millisecond)
					continue
				}
				record([]string{id}, jobs[next:next+1])
				next++
				continue
			}
			n := min(due-next, 50)
			sctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			subs := make([]fleet.Submission[job], n)
			for i := range subs {
				subs[i] = fleet.Submission[job]{Payload: jobs[next+i], Options: opts[next+i]}
			}
			ids, err := q.SubmitManyWith(sctx, subs)
			cancel()
			if err != nil {
				failed(err, n)
				sleep(ctx, 50*time.Millisecond)
				continue
			}
			record(ids, jobs[next:next+n])
			next += n
		}
	}
}

func errClass(err error) string {
	for _, e := range []error{fleet.ErrUnavailable, fleet.ErrClosed, context.DeadlineExceeded, context.Canceled} {
		if errors.Is(err, e) {
			return e.Error()
		}
	}
	return word(err.Error())
}

// redisState reads the dead letters' ids, the ids still pending,
// scheduled or in flight, and the groups' permits still held.
func (r *run) redisState(ctx context.Context, f *fleet.Fleet) (dead, left map[string]bool, permits int) {
	dead, left = map[string]bool{}, map[string]bool{}
	for _, name := range append([]string{queueName, kidQueue}, flowQueues[:]...) {
		permits += r.queueState(ctx, f, name, dead, left)
	}
	return dead, left, permits
}

// queueState adds queue name's dead letters' ids to dead, and the ids
// still pending, scheduled or in flight to left; it returns the permits of
// the groups still held.
func (r *run) queueState(ctx context.Context, f *fleet.Fleet, name string, dead, left map[string]bool) (permits int) {
	q := f.Queue(name)
	for off := 0; ; off += 1000 {
		ds, err := q.DeadLetters(ctx, off, 1000)
		if err != nil && !errors.Is(err, fleet.ErrQueueNotFound) {
			r.t.Fatalf("dead letters: %v", err)
		}
		for _, d := range ds {
			dead[d.ID] = true
			// The chaos queue is sealed (queueOptions): a payload that did
			// not open under the faults is a defect, not a dead letter.
			if strings.Contains(d.Error, "payload does not open") {
				r.t.Errorf("task %s of %s went to the dead letters unopened: %s", d.ID, name, d.Error)
			}
		}
		if len(ds) < 1000 {
			break
		}
	}
	k := keys.New(r.prefix, r.tg.layout == fleet.LayoutTagged).Queue(name)
	c := f.Client()
	bodyID := func(body string) string {
		var b struct {
			ID string `json:"id"`
		}
		if json.Unmarshal([]byte(body), &b) != nil {
			return "?" + body
		}
		return b.ID
	}
	lists := []rueidis.Completed{
		c.B().Lrange().Key(k.Pending).Start(0).Stop(-1).Build(),
		c.B().Zrange().Key(k.Scheduled).Min("0").Max("-1").Build(),
		c.B().Zrange().Key(k.Prio).Min("0").Max("-1").Build(),
	}
	if name == queueName {
		for i := range r.s.groups {
			g := fmt.Sprintf("g%d", i)
			lists = append(lists, c.B().Lrange().Key(k.Group+g).Start(0).Stop(-1).Build())
			n, err := c.Do(ctx, c.B().Zcard().Key(k.GroupRun+g).Build()).AsInt64()
			if err != nil {
				r.t.Fatalf("read the group's permits: %v", err)
			}
			permits += int(n)
		}
	}
	for _, cmd := range lists {
		bodies, err := c.Do(ctx, cmd).AsStrSlice()
		if err != nil {
			r.t.Fatalf("read the queue: %v", err)
		}
		for _, b := range bodies {
			left[bodyID(b)] = true
		}
	}
	ids, err := c.Do(ctx, c.B().Zrange().Key(k.Processing).Min("0").Max("-1").Build()).AsStrSlice()
	if err != nil {
		r.t.Fatalf("read the queue: %v", err)
	}
	for _, id := range ids {
		left[id] = true
	}
	return permits
}

// checkLogs fails on a data race or a panic in any child's output.
func (r *run) checkLogs() {
	files, _ := filepath.Glob(filepath.Join(r.dir, "log", "*.err"))
	for _, path := range files {
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		s := string(b)
		for _, bad := range []string{"WARNING: DATA RACE", "panic:", "fatal error:"} {
			if i := strings.Index(s, bad); i >= 0 {
				r.t.Errorf("%s: %s", filepath.Base(path), s[i:min(len(s), i+3000)])
			}
		}
	}
}

// begun reports whether a child wrote its B line: it catches SIGTERM.
func begun(evidence string) bool {
	b, err := os.ReadFile(evidence)
	return err == nil && strings.HasPrefix(string(b), "B ")
}

// describe spells what the queue's keys hold, for a run that did not
// drain: each key's type and size, and the small ones whole.
func (r *run) describe(f *fleet.Fleet) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	k := keys.New(r.prefix, r.tg.layout == fleet.LayoutTagged).Queue(queueName)
	c := f.Client()
	list := []string{k.Pending, k.Scheduled, k.Processing, k.Prio, k.Groups, k.GroupState, k.GroupBlocked, k.GroupPending, k.Signal, k.Running}
	for i := range r.s.groups {
		g := fmt.Sprintf("g%d", i)
		list = append(list, k.Group+g, k.GroupRun+g)
	}
	var b strings.Builder
	for _, key := range list {
		typ, _ := c.Do(ctx, c.B().Type().Key(key).Build()).ToString()
		var v any
		var err error
		switch typ {
		case "none":
			continue
		case "string":
			v, err = c.Do(ctx, c.B().Get().Key(key).Build()).ToString()
		case "list":
			v, err = c.Do(ctx, c.B().Lrange().Key(key).Start(0).Stop(20).Build()).AsStrSlice()
		case "hash":
			v, err = c.Do(ctx, c.B().Hgetall().Key(key).Build()).AsStrMap()
		case "zset":
			v, err = c.Do(ctx, c.B().Zrange().Key(key).Min("0").Max("20").Withscores().Build()).AsZScores()
		}
		fmt.Fprintf(&b, "  %s (%s): %v %v\n", key, typ, v, err)
	}
	return b.String()
}

// checkHistory reads the queue's history (history.go), which the worker
// processes added to every few seconds through all the faults: a batch
// sent again after its reply was lost must be added once, so the tasks
// counted done can never exceed the tasks that were acked (each task is
// acked once); a process killed loses what it had not added yet, so fewer
// is allowed, and logged.
func (r *run) checkHistory(ctx context.Context, t *testing.T, f *fleet.Fleet, rep *report) {
	ps, err := f.Queue(queueName).History(ctx, 2*time.Hour)
	if err != nil {
		t.Errorf("history: %v", err)
		return
	}
	var done, failed int64
	for _, p := range ps {
		done, failed = done+p.Done, failed+p.Failed
	}
	acked := rep.Acked + rep.AckedInferred + rep.ExtraAcked
	t.Logf("history: %d tasks counted done (%d acked), %d runs counted failed", done, acked, failed)
	if done > int64(acked) {
		rep.Violations = append(rep.Violations, fmt.Sprintf("history: %d tasks counted done, more than the %d acked (a batch added twice)", done, acked))
	}
}
