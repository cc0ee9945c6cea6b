package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fleet-go/fleet/internal/keys"
	"github.com/fleet-go/fleet/internal/runone"
)

var (
	workerRegisterScript = newScript("worker_register.lua")
	workerBeatScript     = newScript("worker_beat.lua")
)

// WorkerState is the state a worker records in wkr:<type>:<id>:state.
type WorkerState string

// The states of a worker.
const (
	// StateIdle: the worker is stopped, or it is a batch worker with no
	// task in hand.
	StateIdle WorkerState = "IDLE"
	// StateRunning: a loop worker's slots run, or a batch worker handles at
	// least one task.
	StateRunning WorkerState = "RUNNING"
	// StateError: the last task (or loop run) failed or panicked, or the
	// last config was refused, and nothing has succeeded since; last_error
	// says why.
	StateError WorkerState = "ERROR"
)

// Defaults of WorkerOptions.
const (
	// DefaultSlots is how many tasks (or loop runs) a worker runs at once
	// when WorkerOptions.Slots is 0.
	DefaultSlots = 1
	// DefaultHeartbeat is how often a worker writes last_seen and its stats.
	DefaultHeartbeat = 5 * time.Second
	// DefaultConfigPoll is how often a worker re-reads its gen when no
	// invalidation came: it only covers a lost invalidation.
	DefaultConfigPoll = 5 * time.Second
	// DefaultStopGrace is how long Stop waits, after its ctx expired and the
	// slots were cancelled, for them to return. It is also how long the
	// tasks in hand get to finish when Start's ctx ends or the Fleet closes.
	DefaultStopGrace = 5 * time.Second
	// DefaultTaskTimeout bounds one run of a batch handler.
	DefaultTaskTimeout = 30 * time.Minute
	// NoTaskTimeout as WorkerOptions.TaskTimeout lets a handler run for as
	// long as it likes.
	NoTaskTimeout time.Duration = -1
)

// WorkerOptions configures a Worker. The zero value of each field means its
// default, but Type, which is required.
type WorkerOptions struct {
	// Type is the automation type (wkr:<type>:..., stream:<type>). Required.
	Type string
	// ID names this worker among those of its type. Defaults to
	// "<hostname>-<pid>".
	ID string
	// Slots is how many goroutines run the automation at once (a negative
	// count is refused). Defaults to DefaultSlots.
	Slots int
	// Heartbeat is how often last_seen and the stats frame are written.
	// Defaults to DefaultHeartbeat.
	Heartbeat time.Duration
	// ConfigPoll is how often the gen is re-read when no invalidation came
	// (new gens normally arrive through client-side caching at once).
	// Defaults to DefaultConfigPoll.
	ConfigPoll time.Duration
	// StopGrace bounds how long Stop waits for cancelled slots to return
	// after its ctx expired, and how long the tasks in hand get to finish
	// when Start's ctx ends or the Fleet closes. Defaults to
	// DefaultStopGrace.
	StopGrace time.Duration
	// TaskTimeout bounds one run of a batch handler: past it the handler's
	// ctx is cancelled with cause ErrTaskTimeout, and the task is nacked
	// (an attempt is counted) when the handler returns an error. The lease
	// is kept alive only while the handler runs, so without a timeout a
	// hung handler would hold its task and its slot forever. NoTaskTimeout
	// turns it off. Defaults to DefaultTaskTimeout.
	TaskTimeout time.Duration
	// Config is the config stored at the first start, when the worker has
	// none (later starts keep the stored one). It must encode as a JSON
	// object. Defaults to {}.
	Config any
	// Stream bounds stream:<type>, where Slot.Emit pushes. Defaults to the
	// StreamOptions defaults.
	Stream StreamOptions
	// LeaseExtend is how often a batch slot extends the lease of the task
	// it runs. Defaults to a third of the queue's Lease.
	LeaseExtend time.Duration
	// OnConfig, when set, is called after each new gen was applied (err
	// nil) or refused (err wraps ErrInvalidConfig), in gen order, from the
	// worker's config goroutine. It must not block.
	OnConfig func(gen int64, err error)
	// OnTaskEnd, when set, is called by a batch slot after it ended a task:
	// err is nil when the task was acked, else why it was not (the
	// handler's error, ErrLeaseLost, or a ctx error for a task released by
	// Stop; ErrCanceled for a task that Queue.Cancel asked to stop, which is
	// dead-lettered rather than released or retried). It runs on the slot's
	// goroutine.
	OnTaskEnd func(taskID string, err error)
	// Logger receives what the worker's goroutines have to say. Defaults to
	// the Fleet's logger.
	Logger *slog.Logger
	// Middleware wraps a batch worker's handler, for logging, metrics,
	// tracing or panic handling. The first is the outermost: it runs first,
	// calls the second, and so on to the handler, and it sees the outcome
	// last. A panic anywhere in the chain is still recovered by the worker
	// (and nacked) once the middleware's deferred calls have run. Loop
	// workers ignore it. Defaults to none.
	Middleware []Middleware
}

func (o WorkerOptions) withDefaults() (WorkerOptions, error) {
	if o.ID == "" {
		host, _ := os.Hostname()
		o.ID = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	if err := workerNames(o.Type, o.ID); err != nil {
		return o, err
	}
	switch {
	case o.Slots < 0:
		return o, fmt.Errorf("%w: WorkerOptions.Slots %d is negative", ErrInvalidArgument, o.Slots)
	case o.Heartbeat < 0, o.ConfigPoll < 0, o.StopGrace < 0, o.LeaseExtend < 0:
		return o, fmt.Errorf("%w: WorkerOptions durations may not be negative", ErrInvalidArgument)
	case o.TaskTimeout < 0 && o.TaskTimeout != NoTaskTimeout:
		return o, fmt.Errorf("%w: WorkerOptions.TaskTimeout %v is negative (NoTaskTimeout turns it off)", ErrInvalidArgument, o.TaskTimeout)
	}
	if o.Slots == 0 {
		o.Slots = DefaultSlots
	}
	if o.TaskTimeout == 0 {
		o.TaskTimeout = DefaultTaskTimeout
	}
	if o.Heartbeat == 0 {
		o.Heartbeat = DefaultHeartbeat
	}
	if o.ConfigPoll == 0 {
		o.ConfigPoll = DefaultConfigPoll
	}
	if o.StopGrace == 0 {
		o.StopGrace = DefaultStopGrace
	}
	return o, nil
}

// Worker hosts one automation type in a number of slots (goroutines): a
// loop automation (NewLoopWorker) or a batch automation that takes tasks
// from a Queue (NewBatchWorker). While it runs it keeps its keys
// (wkr:<type>:<id>:hardware, :config, :gen, :state, :stats) and its entries
// in wkrs:<type> and wkrs:all, writes a heartbeat, and applies each new
// config gen as it is pushed. Its methods are safe for concurrent use. A
// Worker runs once: Start it, Stop it, and make a new one to run again.
type Worker struct {
	f     *Fleet
	opts  WorkerOptions
	k     keys.Worker
	err   error
	kind  string        // "loop" or "batch"
	chunk *ChunkOptions // a chunk worker's (NewChunkWorker), registered in :hardware; nil for others
	// fixedSlots says whose slot count SetSlots cannot change ("a loop
	// worker's", "a chunk worker's"); "" for a batch worker.
	fixedSlots string
	log        *slog.Logger
	catalog    CatalogEntry

	timeoutCause error // a batch handler's ctx cause past TaskTimeout

	decode func([]byte) (any, error)                        // stored config -> C, validated
	spawn  func(run, soft context.Context) bool             // starts the slot goroutines
	one    func(ctx context.Context) (runone.Report, error) // runs one task unstarted (worker_one.go); batch workers only

	cfgMu   sync.Mutex
	cfg     atomic.Pointer[configSnap]
	seenGen atomic.Int64
	slots   []*slotState // the first WorkerOptions.Slots slots' states; never reassigned

	slotSize // the slot count in force, and the states of slots beyond slots (worker_resize.go)

	mu         sync.Mutex
	started    bool
	failing    bool // the last outcome was a failure: state ERROR
	cfgFailing bool // the last config was refused
	lastErr    string

	done, failed, emitted atomic.Int64

	soft       chan struct{} // closed when Stop begins: no new work
	softOnce   sync.Once
	cancelSoft context.CancelFunc
	cancelRun  context.CancelFunc
	slotWG     sync.WaitGroup
	aux        sync.WaitGroup // goroutines that end with run (the cancel listener)
	stopped    chan struct{}
}

// slotState is what a worker keeps of one slot.
type slotState struct {
	index   int
	busy    atomic.Bool
	done    atomic.Int64
	failed  atomic.Int64
	changed chan struct{} // poked when a new config is applied
	retire  chan struct{} // poked when the slot count fell to the slot's index or below
	live    bool          // its goroutine runs (guarded by the runner's mu)

	mu      sync.Mutex
	metrics map[string]float64
}

func newWorker(f *Fleet, opts WorkerOptions, kind string) *Worker {
	w := &Worker{f: f, kind: kind, stopped: make(chan struct{}), soft: make(chan struct{})}
	if kind == "loop" {
		w.fixedSlots = "a loop worker's"
	}
	if f == nil {
		w.err = fmt.Errorf("%w: a Worker needs a Fleet", ErrInvalidArgument)
		return w
	}
	w.opts, w.err = opts.withDefaults()
	w.timeoutCause = fmt.Errorf("%w after %v", ErrTaskTimeout, w.opts.TaskTimeout)
	w.k = f.keys.Worker(w.opts.Type, w.opts.ID)
	w.log = w.opts.Logger
	if w.log == nil {
		w.log = f.log
	}
	w.log = w.log.With("type", w.opts.Type, "worker", w.opts.ID)
	n := max(w.opts.Slots, 0)
	w.slots = make([]*slotState, n)
	for i := range w.slots {
		w.slots[i] = newSlotState(i)
	}
	w.target = n
	return w
}

// Type returns the worker's automation type.
func (w *Worker) Type() string { return w.opts.Type }

// ID returns the worker's id.
func (w *Worker) ID() string { return w.opts.ID }

// Err returns the error that Start would return for the worker's options
// (ErrInvalidName, ErrInvalidArgument), or nil.
func (w *Worker) Err() error { return w.err }

// Gen returns the gen of the config the slots run with (0 before Start).
func (w *Worker) Gen() int64 {
	if c := w.cfg.Load(); c != nil {
		return c.gen
	}
	return 0
}

// Catalog returns the worker's catalog entry (Describe or DescribeLoop of
// its types), for Fleet.PublishCatalog.
func (w *Worker) Catalog() CatalogEntry { return w.catalog }

// Stopped returns a channel that is closed once the worker has stopped:
// every slot returned, the final state was written, and no goroutine of
// the worker is left.
func (w *Worker) Stopped() <-chan struct{} { return w.stopped }

// Start registers the worker (hardware, config and gen when it has none,
// state, wkrs:<type> and wkrs:all), reads and validates its config, and
// starts the slots, the heartbeat and the config watcher. It returns once
// they run. The worker runs until Stop, until ctx ends, or until the Fleet
// closes. When ctx ends (a signal ctx from signal.NotifyContext is the usual
// one) the worker stops gracefully, as Stop with a StopGrace deadline does:
// it takes no new task, the tasks in hand get StopGrace to finish, and a
// task still running then is cancelled and released uncounted.
//
// May return ErrInvalidName, ErrInvalidArgument (bad options),
// ErrInvalidConfig (the stored config does not decode into the config type
// or fails validation; it is recorded in last_error), ErrWorkerStarted,
// ErrWrongType, ErrUnavailable, ErrClosed.
func (w *Worker) Start(ctx context.Context) error {
	if w.err != nil {
		return opErr("start worker", w.name(), w.err)
	}
	if err := w.f.alive(ctx); err != nil {
		return opErr("start worker", w.name(), err)
	}
	// The run and soft contexts exist before the worker counts as started,
	// so a Stop that comes while Start registers always finds them.
	w.mu.Lock()
	if w.started {
		w.mu.Unlock()
		return opErr("start worker", w.name(), ErrWorkerStarted)
	}
	run, cancelRun := context.WithCancel(context.WithoutCancel(ctx))
	soft, cancelSoft := context.WithCancel(run)
	w.cancelRun, w.cancelSoft = cancelRun, cancelSoft
	w.started = true
	w.mu.Unlock()
	if err := w.register(ctx); err != nil {
		cancelRun()
		close(w.stopped)
		return opErr("start worker", w.name(), err)
	}
	if !w.f.keepWorker(w) {
		cancelRun()
		close(w.stopped)
		return opErr("start worker", w.name(), ErrClosed)
	}

	// The supervisor waits for launched before it waits for the slots, so
	// that every slot's WaitGroup Add comes before that Wait.
	launched := make(chan struct{})
	defer close(launched)
	bg, cancelBg := context.WithCancel(context.Background())
	var bgWG sync.WaitGroup
	ok := w.f.spawn(func() {
		// The supervisor: it ends the worker when Stop begins, when ctx
		// ends (gracefully: the tasks in hand get StopGrace), or when the
		// Fleet closes (Close stops its workers first, so this is a last
		// resort).
		defer w.f.dropWorker(w)
		select {
		case <-w.soft:
		case <-ctx.Done():
			grace := time.AfterFunc(w.opts.StopGrace, cancelRun)
			defer grace.Stop()
		case <-w.f.done:
			cancelRun()
		}
		w.softStop()
		<-launched
		w.slotWG.Wait()
		cancelBg()
		bgWG.Wait()
		cancelRun()
		w.aux.Wait()
		wctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := w.beat(wctx, true); err != nil {
			w.log.Warn("fleet: worker final state not written", "err", err)
		}
		cancel()
		close(w.stopped)
	})
	if !ok {
		cancelBg()
		cancelRun()
		close(w.stopped)
		return opErr("start worker", w.name(), ErrClosed)
	}
	bgWG.Add(2)
	if !w.f.spawn(func() { defer bgWG.Done(); w.heartbeat(bg) }) {
		bgWG.Done()
	}
	if !w.f.spawn(func() { defer bgWG.Done(); w.watchConfig(bg) }) {
		bgWG.Done()
	}
	if !w.spawn(run, soft) {
		w.softStop()
		return opErr("start worker", w.name(), ErrClosed)
	}
	return nil
}

// goSlot runs fn in a goroutine that Stop and Fleet.Close wait for.
func (w *Worker) goSlot(fn func()) bool {
	w.slotWG.Add(1)
	if !w.f.spawn(func() { defer w.slotWG.Done(); fn() }) {
		w.slotWG.Done()
		return false
	}
	return true
}

func (w *Worker) softStop() {
	w.softOnce.Do(func() {
		close(w.soft)
		w.mu.Lock()
		cancel := w.cancelSoft
		w.mu.Unlock()
		if cancel != nil {
			cancel()
		}
	})
}

// stopForClose stops the worker as Fleet.Close does: Stop with a deadline
// of its StopGrace.
func (w *Worker) stopForClose() {
	ctx, cancel := context.WithTimeout(context.Background(), w.opts.StopGrace)
	defer cancel()
	_ = w.Stop(ctx)
}

// Stop stops the worker gracefully: it takes no new tasks, cancels the
// context of loop slots, and waits for the tasks in hand to finish. If ctx
// ends first, it cancels the slots' contexts; a task whose handler then
// returns an error is released back to the head of its queue without
// counting an attempt (it was interrupted, not failed), and a task that was
// reserved but not yet started is released too (a task that Queue.Cancel
// asked to stop is dead-lettered instead). Stop then waits up to
// StopGrace for the slots to return, writes the final state (IDLE, with the
// last stats), and returns ctx's error; otherwise nil. A handler that
// ignores its ctx keeps its goroutine, and Fleet.Close waits for it.
//
// May return ErrWorkerNotStarted, and ctx's error.
func (w *Worker) Stop(ctx context.Context) error {
	w.mu.Lock()
	started, cancelRun := w.started, w.cancelRun
	w.mu.Unlock()
	if !started {
		return opErr("stop worker", w.name(), ErrWorkerNotStarted)
	}
	w.softStop()
	select {
	case <-w.stopped:
		return nil
	case <-ctx.Done():
	}
	cancelRun()
	t := time.NewTimer(w.opts.StopGrace)
	defer t.Stop()
	select {
	case <-w.stopped:
	case <-t.C:
	}
	return ctx.Err()
}

func (w *Worker) name() string { return w.opts.Type + "|" + w.opts.ID }

// register writes the worker's keys, then reads its config. At Start the
// config stored when there is none is WorkerOptions.Config at gen 0; when
// the heartbeat registers again after Redis lost the keys, it is the config
// and gen in use.
func (w *Worker) register(ctx context.Context) error {
	hw, err := json.Marshal(w.hardware())
	if err != nil {
		return err
	}
	def, gen, applied := []byte(nil), int64(0), ""
	if c := w.cfg.Load(); c != nil && c.raw != nil {
		def, gen, applied = c.raw, c.gen, strconv.FormatInt(c.gen, 10)
	} else if def, err = configJSON(w.opts.Config); err != nil {
		return err
	}
	f, c := w.f, w.f.client
	res, err := workerRegisterScript.Exec(ctx, c, []string{w.k.Hardware, w.k.Config, w.k.Gen, w.k.State},
		[]string{string(hw), string(def), strconv.FormatInt(gen, 10), string(w.stateNow()), applied}).ToArray()
	if err != nil {
		return err
	}
	if len(res) != 2 {
		return unexpectedReply("register", len(res))
	}
	// The indexes live in other slots than the worker's keys on a cluster:
	// commands of their own.
	for _, r := range c.DoMulti(ctx,
		c.B().Sadd().Key(f.keys.Workers(w.opts.Type)).Member(w.opts.ID).Build(),
		c.B().Sadd().Key(f.keys.AllWorkers()).Member(w.name()).Build()) {
		if err := r.Error(); err != nil {
			return err
		}
	}
	genS, _ := res[0].ToString()
	if gen, err = strconv.ParseInt(genS, 10, 64); err != nil {
		return fmt.Errorf("%w: %s holds %q", ErrWrongType, w.k.Gen, genS)
	}
	raw, _ := res[1].ToString()
	if w.cfg.Load() != nil {
		// Registered again: a gen that rose meanwhile comes through the
		// config watcher, as any other.
		return nil
	}
	val, slots, has, err := w.decodeWithSlots([]byte(raw))
	if err != nil {
		err = within("config gen "+strconv.FormatInt(gen, 10), err)
		w.fail(err, false)
		return err
	}
	if has {
		w.setSlots(slots)
	}
	w.seenGen.Store(gen)
	w.cfg.Store(&configSnap{gen: gen, val: val, raw: []byte(raw)})
	w.recordApplied(gen)
	return nil
}

// stateNow computes the state from what the slots are doing.
func (w *Worker) stateNow() WorkerState {
	w.mu.Lock()
	failing := w.failing || w.cfgFailing
	w.mu.Unlock()
	switch {
	case failing:
		return StateError
	case w.kind == "loop" && !w.isStopping():
		return StateRunning
	}
	for _, s := range w.slotStates() {
		if s.busy.Load() {
			return StateRunning
		}
	}
	return StateIdle
}

func (w *Worker) isStopping() bool {
	select {
	case <-w.soft:
		return true
	default:
		return false
	}
}

// fail records a failure: last_error and state ERROR, written at once.
// task says whether a later success clears it (a config error clears when
// a valid config comes).
func (w *Worker) fail(err error, task bool) {
	msg := err.Error()
	if len(msg) > 4096 {
		msg = msg[:4096]
	}
	w.mu.Lock()
	if task {
		w.failing = true
	} else {
		w.cfgFailing = true
	}
	w.lastErr = msg
	w.mu.Unlock()
	w.log.Warn("fleet: worker failure", "err", msg)
	c := w.f.client
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Do(ctx, c.B().Hset().Key(w.k.State).FieldValue().
		FieldValue("state", string(StateError)).FieldValue("last_error", msg).Build()).Error(); err != nil {
		w.log.Warn("fleet: worker state not written", "err", err)
	}
}

// succeed clears a task failure; the next heartbeat writes the state.
func (w *Worker) succeed() {
	w.mu.Lock()
	w.failing = false
	w.mu.Unlock()
}

func (w *Worker) clearConfigError() {
	w.mu.Lock()
	w.cfgFailing = false
	w.mu.Unlock()
}

// heartbeat writes last_seen, the state and the stats every Heartbeat.
func (w *Worker) heartbeat(ctx context.Context) {
	t := time.NewTicker(w.opts.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := w.beat(ctx, false); err != nil && ctx.Err() == nil {
			w.log.Warn("fleet: worker heartbeat failed", "err", err)
		}
	}
}

// beat writes one heartbeat: state, last_seen (the server's clock) and
// stats in one script, and the worker's entries in wkrs:<type> and wkrs:all
// (they may live on another node, which may have lost them) in one more
// round trip. When the worker's own keys are gone, it registers again.
func (w *Worker) beat(ctx context.Context, final bool) error {
	st := w.stats()
	if final && st.State != StateError {
		st.State = StateIdle
	}
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	f, c := w.f, w.f.client
	n, err := workerBeatScript.Exec(ctx, c, []string{w.k.Hardware, w.k.State, w.k.Stats}, []string{string(st.State), string(b)}).AsInt64()
	if err != nil {
		return err
	}
	if n == 0 {
		w.log.Warn("fleet: worker registration was gone from Redis: registering again")
		return w.register(ctx)
	}
	if err := w.hardwareSlots(ctx, st.Slots); err != nil {
		return err
	}
	for _, r := range c.DoMulti(ctx,
		c.B().Sadd().Key(f.keys.Workers(w.opts.Type)).Member(w.opts.ID).Build(),
		c.B().Sadd().Key(f.keys.AllWorkers()).Member(w.name()).Build()) {
		if err := r.Error(); err != nil {
			return err
		}
	}
	return nil
}
