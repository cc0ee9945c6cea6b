package chaos

// The child side: the test binary, re-executed with CHAOS_ROLE set, runs as
// a batch worker process or a sweeper process until SIGTERM (a graceful
// stop), SIGKILL, or the end of its parent (its stdin closes).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/fleet-go/fleet"
)

const (
	envRole   = "CHAOS_ROLE"   // "worker" or "sweeper"
	envConfig = "CHAOS_CONFIG" // a childConfig as JSON
)

// childConfig is what a child process is told.
type childConfig struct {
	Name     string // "w1", "s2": the process's place in the run
	Inc      int    // incarnation: how many times that place was started before
	URL      string // where to reach Redis (a proxy on the single node)
	Prefix   string
	Layout   fleet.Layout
	Queue    string
	Evidence string // the evidence file (append only)

	Slots         int
	Lease         time.Duration
	Heartbeat     time.Duration
	SweepInterval time.Duration
	MaxAttempts   int
	BackoffBase   time.Duration
	BackoffMax    time.Duration
	// FlowQueues are the queues of the flows (flows_test.go): workers run
	// them too, sweepers sweep them; none when the run has no flows.
	FlowQueues  []string
	SubmitGrace time.Duration
}

// job is a task's payload.
type job struct {
	Seq    int  `json:"seq"`     // the submitter's number for it
	WorkMS int  `json:"work_ms"` // how long the handler works
	Fail   bool `json:"fail"`    // the first attempt fails (a nack)
	Die    bool `json:"die"`     // every run that reaches its end fails for good (a dead letter)
	// Wait makes the handler wait, after its step, for the signal
	// signalName (fleet.WaitSignal), whose value the sender (the parent,
	// through the submitter's proxy: signals_test.go) makes the task's
	// seq; NapMS makes it sleep (fleet.Sleep) that long first. Both park
	// the task (W lines) until it is woken; a wait's value is a G line.
	Wait  bool `json:"wait,omitempty"`
	NapMS int  `json:"nap_ms,omitempty"`
	// Kids makes the handler start that many children on kidQueue
	// (fleet.StartChild) and wait for them (fleet.AwaitChildren), parked,
	// last: children_test.go.
	Kids int `json:"kids,omitempty"`
}

func (c childConfig) queueOptions() fleet.QueueOptions {
	return queueOptions(c.Lease, c.MaxAttempts, c.BackoffBase, c.BackoffMax)
}

// queueOptions are the chaos queue's options in every process: its groups
// (groups, submitted by the submitter) run at most groupLimit tasks each
// at once, fleet-wide.
func queueOptions(lease time.Duration, maxAttempts int, base, most time.Duration) fleet.QueueOptions {
	return fleet.QueueOptions{Lease: lease, MaxAttempts: maxAttempts, BackoffBase: base, BackoffMax: most,
		Groups: fleet.GroupLimits{Concurrency: groupLimit}, Sealer: chaosKeys}
}

// chaosKeys seals the chaos queue's payloads and results in every process
// of a run (the same two keys in each: tasks are sealed with the newer).
var chaosKeys = func() *fleet.Keyring {
	kr, err := fleet.NewKeyring(fleet.Key{ID: "chaos-2", Secret: []byte("chaos-key-2-0123456789abcdef0123")},
		fleet.Key{ID: "chaos-1", Secret: []byte("chaos-key-1-0123456789abcdef0123")})
	if err != nil {
		panic(err) // constant keys: a bug of this file
	}
	return kr
}()

// recorder appends evidence lines to a file opened with O_APPEND: each line
// is one write(2), so a SIGKILL loses no line that was written, and a
// Redis restart touches none.
type recorder struct {
	mu    sync.Mutex
	f     *os.File
	buf   []byte
	start time.Time // for the monotonic times
}

func openRecorder(path string) (*recorder, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	return &recorder{f: f, start: time.Now()}, nil
}

func (r *recorder) line(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.buf = fmt.Appendf(r.buf[:0], format, args...)
	r.buf = append(r.buf, '\n')
	if _, err := r.f.Write(r.buf); err != nil {
		fmt.Fprintf(os.Stderr, "chaos: evidence not written: %v\n", err)
		os.Exit(4) // evidence we cannot keep would make the counts lie
	}
}

// mono is t on this process's monotonic clock, in µs since it started.
func (r *recorder) mono(t time.Time) int64 { return t.Sub(r.start).Microseconds() }

func word(s string) string {
	s = strings.Join(strings.Fields(s), "_")
	if len(s) > 80 {
		s = s[:80]
	}
	if s == "" {
		s = "-"
	}
	return s
}

// runRole runs the child role and returns the exit code.
func runRole(role string) int {
	// SIGTERM stops gracefully from here on; B below says so to the parent.
	sig, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	var c childConfig
	if err := json.Unmarshal([]byte(os.Getenv(envConfig)), &c); err != nil {
		fmt.Fprintf(os.Stderr, "chaos: bad %s: %v\n", envConfig, err)
		return 2
	}
	// The parent holds our stdin open; when it dies, stdin ends: so do we.
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(3)
	}()
	rec, err := openRecorder(c.Evidence)
	if err != nil {
		fmt.Fprintf(os.Stderr, "chaos: %v\n", err)
		return 2
	}
	rec.line("B %d %d", time.Now().UnixMicro(), os.Getpid())
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	f := openFleet(sig, c, log, releases(rec))
	if f == nil {
		rec.line("X %d", time.Now().UnixMicro())
		return 0
	}
	switch role {
	case "worker":
		err = runWorker(sig, c, f, rec, log)
	case "sweeper":
		err = runSweeper(sig, c, f, log)
	case "reserver":
		err = runReserver(sig, c, f, rec)
	case linClientRole:
		err = runLinClient(sig, c, f, rec)
	case chunkerRole:
		err = runChunker(sig, c, f, rec, log)
	default:
		err = fmt.Errorf("unknown role %q", role)
	}
	rec.line("T %d", time.Now().UnixMicro())
	_ = f.Close()
	rec.line("X %d", time.Now().UnixMicro())
	if err != nil {
		fmt.Fprintf(os.Stderr, "chaos: %s %s.%d: %v\n", role, c.Name, c.Inc, err)
		return 1
	}
	return 0
}

// openFleet opens the Fleet, retrying while Redis is unreachable (a fault
// may be on), until ctx ends (then nil).
func openFleet(ctx context.Context, c childConfig, log *slog.Logger, obs *fleet.Observer) *fleet.Fleet {
	for {
		octx, cancel := context.WithTimeout(ctx, 3*time.Second)
		f, err := fleet.Open(octx, fleet.Options{URL: c.URL, Prefix: c.Prefix, Layout: c.Layout, Logger: log, DialTimeout: time.Second,
			Observer: obs})
		cancel()
		if err == nil {
			return f
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// runWorker runs a batch worker until ctx ends, then stops it gracefully.
func runWorker(ctx context.Context, c childConfig, f *fleet.Fleet, rec *recorder, log *slog.Logger) error {
	q := fleet.NewQueue[job](f, c.Queue, c.queueOptions())
	if err := q.Err(); err != nil {
		return err
	}
	h := &handler{rec: rec, run: fmt.Sprintf("%s.%d", c.Name, c.Inc), kids: fleet.NewQueue[job](f, kidQueue, c.queueOptions())}
	kw, err := startKidWorker(ctx, c, f, h, log)
	if err != nil {
		return err
	}
	if kw != nil {
		defer func() {
			stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = kw.Stop(stopCtx)
		}()
	}
	if len(c.FlowQueues) > 0 {
		fw, err := startFlowWorker(ctx, c, f, h, log)
		if err != nil {
			return err
		}
		if fw != nil {
			defer func() {
				stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				_ = fw.Stop(stopCtx)
			}()
		}
	}
	for {
		w := fleet.NewBatchWorker(f, fleet.WorkerOptions{
			Type: "chaos", ID: fmt.Sprintf("%s.%d", c.Name, c.Inc), Slots: c.Slots,
			Heartbeat: c.Heartbeat, StopGrace: 5 * time.Second, Logger: log,
			OnTaskEnd: h.taskEnd,
		}, q, fleet.BatchFunc[struct{}, struct{}, job](h.handle))
		// Start's ctx is not the signal's: SIGTERM stops the worker
		// gracefully through Stop.
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := w.Start(context.WithoutCancel(sctx))
		cancel()
		if err == nil {
			<-ctx.Done()
			stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := w.Stop(stopCtx); err != nil {
				return fmt.Errorf("stop: %w", err)
			}
			return nil
		}
		if errors.Is(err, fleet.ErrInvalidArgument) || errors.Is(err, fleet.ErrInvalidName) {
			return err
		}
		log.Warn("chaos: worker start failed; retrying", "err", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// runSweeper runs RunSweeper until ctx ends.
func runSweeper(ctx context.Context, c childConfig, f *fleet.Fleet, log *slog.Logger) error {
	q := fleet.NewQueue[job](f, c.Queue, c.queueOptions()) // the sweeper applies the queue's options
	if err := q.Err(); err != nil {
		return err
	}
	for _, name := range c.FlowQueues {
		fleet.NewQueue[job](f, name, c.queueOptions())
	}
	return f.RunSweeper(ctx, fleet.SweeperOptions{Interval: c.SweepInterval, Queue: c.queueOptions(), Logger: log,
		SubmitGrace: c.SubmitGrace})
}

// handler is the automation: it "works" in steps of at most step, checking
// its ctx before each, and records when it began, the last moment it knew
// its ctx alive, and how it ended.
type handler struct {
	rec  *recorder
	run  string
	runs atomic.Int64
	kids *fleet.Queue[job] // the children's queue (children_test.go)
}

const step = 20 * time.Millisecond

func (h *handler) handle(ctx context.Context, s *fleet.Slot[struct{}, struct{}], t *fleet.Task[job]) error {
	return h.work(ctx, s.Index(), t)
}

// work is the handler's body; slot is the worker's slot, or -1 for a
// reserver.
func (h *handler) work(ctx context.Context, slot int, t *fleet.Task[job]) error {
	rec := h.rec
	run := fmt.Sprintf("%s.%d", h.run, h.runs.Add(1))
	start := time.Now()
	var ctxDL int64
	if d, ok := ctx.Deadline(); ok {
		ctxDL = d.UnixMicro()
	}
	alive := 1 // the ctx was alive when the handler began
	if ctx.Err() != nil {
		alive = 0
	}
	group := t.Group()
	if group == "" {
		group = "-"
	}
	// S run task seq attempt slot start_us start_mono_us lease_deadline_us ctx_deadline_us alive group
	rec.line("S %s %s %d %d %d %d %d %d %d %d %s", run, t.ID, t.Payload.Seq, t.Attempts, slot,
		start.UnixMicro(), rec.mono(start), t.Deadline().UnixMicro(), ctxDL, alive, group)
	// Each run leaves a line in the task's log (sealed, as the queue is):
	// checkTaskLogs finds them kept for the dead letters only.
	t.Logger().Info("run", "run", run, "seq", t.Payload.Seq, "attempt", t.Attempts)
	// A durable step (fleet.Step) first: its effect leaves a P line, its
	// record, once Step returned it, a Q line with the result;
	// checkSteps counts the effects that came after a record (want 0).
	seq, serr := fleet.Step(ctx, t, "first", func(context.Context) (int, error) {
		// P run task at_us
		rec.line("P %s %s %d", run, t.ID, time.Now().UnixMicro())
		return t.Payload.Seq, nil
	})
	if serr == nil {
		// Q run task at_us result
		rec.line("Q %s %s %d %d", run, t.ID, time.Now().UnixMicro(), seq)
	}
	// Then a durable sleep and a wait for a signal, when the task has them:
	// a run that parks ends here (outcome "wait").
	var park error
	if serr == nil {
		park = h.durableWaits(ctx, run, t)
	}
	if serr == nil && park == nil && t.Payload.Kids > 0 {
		park = h.children(ctx, run, t)
	}
	work := time.Duration(t.Payload.WorkMS) * time.Millisecond
	fail := t.Payload.Fail && t.Attempts == 0
	if fail {
		work = min(work, 2*step)
	}
	last := start
	var late int64 // the most that a live step came after the lease deadline known then, µs
	outcome := "ok"
	var err error
	timer := time.NewTimer(0)
	<-timer.C
	defer timer.Stop()
	for serr == nil && park == nil {
		if ctx.Err() != nil {
			err = context.Cause(ctx)
			outcome = "ctx:" + word(err.Error())
			break
		}
		last = time.Now()
		late = max(late, last.UnixMicro()-t.Deadline().UnixMicro())
		done := last.Sub(start)
		if done >= work {
			switch {
			case t.Payload.Die:
				outcome, err = "fail", fmt.Errorf("%w: chaos: this task dies", fleet.ErrPermanent)
			case fail:
				outcome, err = "fail", errors.New("chaos: first attempt fails")
			}
			break
		}
		timer.Reset(min(step, work-done))
		select {
		case <-ctx.Done():
		case <-timer.C:
		}
	}
	switch {
	case serr != nil:
		err, outcome = serr, "step:"+word(serr.Error())
	case errors.Is(park, fleet.ErrSuspended):
		err, outcome = park, "wait"
	case park != nil:
		err, outcome = park, "waiterr:"+word(park.Error())
	}
	end := time.Now()
	// E run task last_live_us end_us outcome lease_deadline_us late_us end_mono_us
	rec.line("E %s %s %d %d %s %d %d %d", run, t.ID, last.UnixMicro(), end.UnixMicro(), outcome,
		t.Deadline().UnixMicro(), late, rec.mono(end))
	return err
}

// taskEnd records each acked task (err nil: the ack succeeded) and why the
// others were not.
func (h *handler) taskEnd(id string, err error) {
	now := time.Now().UnixMicro()
	switch {
	case err == nil:
		h.rec.line("A %s %d", id, now)
	case errors.Is(err, fleet.ErrLeaseLost):
		h.rec.line("F %s %d leaselost", id, now)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		h.rec.line("F %s %d ctx", id, now)
	default:
		h.rec.line("F %s %d %s", id, now, word(err.Error()))
	}
}

// reserverLoops is how many reserve loops a reserver process runs.
const reserverLoops = 4

// runReserver is a client without the worker runtime: reserverLoops
// goroutines each call Reserve with short ctxs (20-400 ms, so that under
// held replies, blackholes and restarts many end while the reserve script
// is in flight: the abandon path), run each task they got with a ctx that
// ends at Task.Deadline less a margin (they do not extend), and ack, nack
// or release it; one task in five they release unrun. Their acks and
// ends overlap, so they go through the group commit of Task.Ack and of
// the ends, with ctxs of 50 ms to 5 s: some end while their call waits
// (it is never sent) or is in flight (its outcome unknown).
func runReserver(ctx context.Context, c childConfig, f *fleet.Fleet, rec *recorder) error {
	q := fleet.NewQueue[job](f, c.Queue, c.queueOptions())
	if err := q.Err(); err != nil {
		return err
	}
	h := &handler{rec: rec, run: fmt.Sprintf("%s.%d", c.Name, c.Inc), kids: fleet.NewQueue[job](f, kidQueue, c.queueOptions())}
	margin := c.Lease / 10
	var wg sync.WaitGroup
	for range reserverLoops {
		wg.Go(func() {
			g := newRNG(time.Now().UnixNano())
			for ctx.Err() == nil {
				rctx, cancel := context.WithTimeout(ctx, g.between(20*time.Millisecond, 400*time.Millisecond))
				tasks, _ := q.Reserve(rctx, 1+g.intn(3), g.between(0, 200*time.Millisecond))
				cancel()
				if len(tasks) == 0 && ctx.Err() == nil {
					sleep(ctx, 10*time.Millisecond)
				}
				for _, t := range tasks {
					if g.intn(5) == 0 {
						// Handed back unrun: the concurrent loops' Releases
						// share calls (the ends' group commit), under the faults.
						ectx, ecancel := context.WithTimeout(context.Background(), g.between(50*time.Millisecond, 5*time.Second))
						_ = t.Release(ectx)
						ecancel()
						continue
					}
					hctx, hcancel := context.WithDeadlineCause(ctx, t.Deadline().Add(-margin),
						fmt.Errorf("%w: reserver: past Task.Deadline", fleet.ErrLeaseLost))
					herr := h.work(hctx, -1, t)
					hcancel()
					ectx, ecancel := context.WithTimeout(context.Background(), g.between(50*time.Millisecond, 5*time.Second))
					switch {
					case herr == nil:
						h.taskEnd(t.ID, t.Ack(ectx))
					case errors.Is(herr, fleet.ErrSuspended):
						// Parked as a worker parks it: uncounted, no lease held.
						if serr := t.Suspend(ectx, herr); serr != nil {
							h.taskEnd(t.ID, serr)
						} else {
							h.taskEnd(t.ID, herr) // an F line: parked, not acked
						}
					case errors.Is(herr, fleet.ErrLeaseLost) || ctx.Err() != nil:
						_ = t.Release(ectx) // uncounted; ErrLeaseLost when a sweeper has it
						h.taskEnd(t.ID, herr)
					default:
						_ = t.Nack(ectx, herr)
						h.taskEnd(t.ID, herr)
					}
					ecancel()
				}
			}
		})
	}
	wg.Wait()
	return nil
}

// signalName is the signal a waiting task waits for; waitTimeout bounds
// its wait far past any run's drain, so that a lost signal leaves its task
// parked (stuck) rather than timed out.
const (
	signalName  = "go"
	waitTimeout = 10 * time.Minute
)

// durableWaits sleeps and waits as t's payload says, after its step: a
// run that parks writes "W run task at_us sleep|wait" (it returns the
// *SleepError for its worker to park the task), a wait that returns its
// value "G run task at_us value", one that fails otherwise "H run task
// at_us class" (class "timeout" for ErrWaitTimeout).
func (h *handler) durableWaits(ctx context.Context, run string, t *fleet.Task[job]) error {
	parked := func(err error, kind string) error {
		if errors.Is(err, fleet.ErrSuspended) {
			h.rec.line("W %s %s %d %s", run, t.ID, time.Now().UnixMicro(), kind)
		} else {
			h.rec.line("H %s %s %d %s", run, t.ID, time.Now().UnixMicro(), waitClass(err))
		}
		return err
	}
	if t.Payload.NapMS > 0 {
		if err := fleet.Sleep(ctx, t, "nap", time.Duration(t.Payload.NapMS)*time.Millisecond); err != nil {
			return parked(err, "sleep")
		}
	}
	if !t.Payload.Wait {
		return nil
	}
	v, err := fleet.WaitSignal[int](ctx, t, signalName, waitTimeout)
	if err != nil {
		return parked(err, "wait")
	}
	h.rec.line("G %s %s %d %d", run, t.ID, time.Now().UnixMicro(), v)
	return nil
}

func waitClass(err error) string {
	if errors.Is(err, fleet.ErrWaitTimeout) {
		return "timeout"
	}
	return word(err.Error())
}
