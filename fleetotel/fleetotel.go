// Package fleetotel reports what a fleet does to OpenTelemetry: metrics
// that follow the messaging semantic conventions where they apply, and
// traces that follow a task from its submit to each run of its handler,
// across processes. It is a module of its own, so that the fleet module
// keeps no OpenTelemetry dependency; it uses the otel API only (metric,
// trace, propagation), and the application picks the SDK.
//
// # Installing
//
// One [Telemetry] serves any number of Fleets. Its [Telemetry.Observer]
// goes in fleet.Options.Observer (submits, task ends, lock and claim
// waits), its [Telemetry.Middleware] in each batch worker's
// WorkerOptions.Middleware (handler runs), and [Telemetry.ObserveQueues]
// adds the gauges of queue depth.
//
// # Metrics
//
// Counters, by queue (messaging.system "fleet", messaging.destination.name
// the queue's name):
//
//   - messaging.client.sent.messages {task}: tasks submitted (written; a
//     duplicate dedup key writes none), with messaging.operation.name
//     "submit".
//   - fleet.tasks.processed {task}: tasks acked.
//   - fleet.tasks.failed {task}: tasks whose run failed and was ended so:
//     each is then counted as retried or dead-lettered too.
//   - fleet.tasks.retried {task}: failed runs scheduled for another attempt.
//   - fleet.tasks.dead_lettered {task}: tasks moved to the dead letters
//     (past their attempts, buried, cancelled, or a poisoned body).
//   - fleet.tasks.lease_expired {task}: reservations whose lease ran out,
//     found by a sweeper (RunSweeper, Sweep) of a Fleet with the Observer;
//     each is counted as failed and as retried or dead-lettered too.
//   - fleet.tasks.released {task}: tasks released onto their queue by a
//     Fleet with the Observer once the tasks they waited for ended
//     (fleet.SubmitOptions.After, flows).
//
// Histograms:
//
//   - messaging.process.duration (s): each handler run, by queue, with
//     messaging.operation.name "process" and error.type when it failed
//     (lease_lost, timeout, canceled, permanent, panic or _OTHER).
//   - fleet.lock.wait.duration (s): each Lock.Acquire (and Do), with
//     fleet.lock.outcome (obtained, not_obtained, error), and
//     fleet.lock.name when Options.LockNames is set.
//   - fleet.pool.claim.wait.duration (s): each pool Claim (and Do), with
//     fleet.pool.name and fleet.claim.outcome (claimed, none, error).
//   - fleet.semaphore.wait.duration (s): each Semaphore.Acquire, with
//     fleet.semaphore.outcome (obtained, not_obtained, error), and
//     fleet.semaphore.name when Options.LimitNames is set.
//
// Limiter decisions: fleet.limiter.decisions {decision}, a counter of the
// round trips to a Limiter (Allow, Wait, a rate-limited queue's reserves),
// with fleet.limiter.outcome (allowed, delayed: booked ahead, denied), and
// fleet.limiter.name when Options.LimitNames is set.
//
// Observable gauges, by queue, read by [Telemetry.ObserveQueues] in one
// round trip per queue at each collection: fleet.queue.depth (pending
// tasks), fleet.queue.in_flight (reserved), fleet.queue.scheduled
// (waiting for a retry or a delayed start) and fleet.queue.dead (dead
// letters), all {task}; and fleet.queue.latency (s), how long the
// longest-waiting of the tasks that go next has waited (QueueStats.Latency:
// the usual signal to scale workers on).
//
// Counts come from the calls of the Fleets that have the Observer: a task
// is counted by the Fleet that submitted it, the one that ended its run,
// and, when its lease ran out, the one whose sweeper found it.
//
// # Traces
//
// Each submit makes a span "submit <queue>" (kind producer; for
// SubmitMany one span for the batch, with messaging.batch.message_count),
// and its trace context goes into each new task's body as the optional
// "trace" field (fleet's SCHEMA.md). Each handler run makes a span
// "process <queue>" (kind consumer) that is a child of the submit span, in
// the same trace, on whichever process or Fleet runs it; with
// Options.LinkOnly, or when the handler's ctx already has a span, it is
// linked to the submit span instead. A body without the field (submitted
// without a tracer, or by another client) makes a handler span of its own.
// With a no-op tracer no span is made and no field is written.
//
// A scheduler's ticks (fleet.RunScheduler) make submit spans too, with
// fleet.schedule.name: every process that runs a scheduler tries each
// tick, so a tick makes one span per scheduler, and only the one that wrote
// the task has fleet.submit.written 1 (and the task's handler span as a
// child). A handler that hands work on reads its task's trace context with
// fleet.Task.TraceContext (or TaskInfo.Trace in a middleware). Each
// fleet.Task.Progress call from a handler adds an event "progress" to its
// process span, with fleet.task.progress, the value's JSON (cut to 1 KiB).
package fleetotel

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/fleet-go/fleet"
)

// ScopeName is the instrumentation scope of the tracer and meter.
const ScopeName = "github.com/fleet-go/fleet/fleetotel"

// DefaultCollectTimeout bounds the Redis reads of one collection of the
// queue gauges.
const DefaultCollectTimeout = 5 * time.Second

// Options configures New. The zero value uses the global providers.
type Options struct {
	// TracerProvider makes the tracer. Defaults to otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
	// MeterProvider makes the meter. Defaults to otel.GetMeterProvider().
	MeterProvider metric.MeterProvider
	// Propagator writes the trace context into task bodies and reads it
	// back; every process of a fleet must use the same. Defaults to
	// propagation.TraceContext{} (W3C traceparent and tracestate).
	Propagator propagation.TextMapPropagator
	// LinkOnly starts each handler span as the root of a trace of its own,
	// linked to the submit span, instead of as its child. Defaults to false.
	LinkOnly bool
	// LockNames adds fleet.lock.name to the lock wait histogram. Leave it
	// off when lock names are many (one per URL, per user): each name is a
	// time series. Defaults to false.
	LockNames bool
	// LimitNames adds fleet.limiter.name to the limiter decisions and
	// fleet.semaphore.name to the semaphore wait histogram. Leave it off
	// when there is a limiter or semaphore per site, per account: each name
	// is a time series. Defaults to false.
	LimitNames bool
}

// Telemetry reports a fleet's work to OpenTelemetry. Make it with New; it
// is safe for concurrent use, and starts no goroutine.
type Telemetry struct {
	tracer     trace.Tracer
	meter      metric.Meter
	prop       propagation.TextMapPropagator
	linkOnly   bool
	lockNames  bool
	limitNames bool

	submitted, processed, failed, retried, dead, expired metric.Int64Counter
	released                                             metric.Int64Counter
	limits                                               metric.Int64Counter
	process, lockWait, claimWait, semWait                metric.Float64Histogram
	gDepth, gInFlight, gScheduled, gDead                 metric.Int64ObservableGauge
	gLatency                                             metric.Float64ObservableGauge

	attrs sync.Map // queue name -> *queueAttrs
}

// queueAttrs are one queue's attribute sets and span options, made once.
type queueAttrs struct {
	queue   attribute.Set // system and destination
	submit  attribute.Set // ... and operation submit
	process attribute.Set // ... and operation process

	submitName, processName string             // the spans' names
	submitAdd, queueAdd     []metric.AddOption // the sets above as options
	processRecord           []metric.RecordOption

	// submitStarts and processStarts hold *spanStart: the options of a
	// span's start, with the attributes of the call in them.
	submitStarts, processStarts sync.Pool
}

// spanStart is the options of one span start: its kind, and its
// attributes, all of them, so that the SDK sizes the span's attribute
// slice once. The first spanFixed entries of kv are the queue's, set when
// the spanStart is made; a call sets the others, starts its span (the
// API's NewSpanStartConfig copies the attributes: nothing keeps kv past
// the start), and puts the spanStart back in its pool.
type spanStart struct {
	kv []attribute.KeyValue
	// opts[i] starts a span with the fixed attributes and the first i of
	// the call's.
	opts [3][]trace.SpanStartOption
}

// spanFixed counts the queue's attributes in a spanStart's kv: system,
// destination, operation name and type.
const spanFixed = 4

// newSpanStart makes the start options of spans of kind whose first
// attributes are fixed (spanFixed of them).
func newSpanStart(kind trace.SpanKind, fixed ...attribute.KeyValue) *spanStart {
	s := &spanStart{}
	s.kv = make([]attribute.KeyValue, spanFixed+len(s.opts)-1)
	copy(s.kv, fixed)
	for i := range s.opts {
		s.opts[i] = []trace.SpanStartOption{trace.WithSpanKind(kind), trace.WithAttributes(s.kv[:spanFixed+i]...)}
	}
	return s
}

// New returns a Telemetry that reports through opts's providers. It
// returns an error when an instrument cannot be made.
func New(opts Options) (*Telemetry, error) {
	tp, mp, prop := opts.TracerProvider, opts.MeterProvider, opts.Propagator
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	if prop == nil {
		prop = propagation.TraceContext{}
	}
	t := &Telemetry{tracer: tp.Tracer(ScopeName), meter: mp.Meter(ScopeName), prop: prop,
		linkOnly: opts.LinkOnly, lockNames: opts.LockNames, limitNames: opts.LimitNames}
	m := t.meter
	var errs []error
	counter := func(name, desc string) metric.Int64Counter {
		c, err := m.Int64Counter(name, metric.WithUnit("{task}"), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	seconds := func(name, desc string) metric.Float64Histogram {
		h, err := m.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc),
			metric.WithExplicitBucketBoundaries(0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10))
		errs = append(errs, err)
		return h
	}
	gauge := func(name, desc string) metric.Int64ObservableGauge {
		g, err := m.Int64ObservableGauge(name, metric.WithUnit("{task}"), metric.WithDescription(desc))
		errs = append(errs, err)
		return g
	}
	t.submitted = counter("messaging.client.sent.messages", "Tasks submitted.")
	t.processed = counter("fleet.tasks.processed", "Tasks acked.")
	t.failed = counter("fleet.tasks.failed", "Task runs that failed: each is retried or dead-lettered.")
	t.retried = counter("fleet.tasks.retried", "Failed task runs scheduled for another attempt.")
	t.dead = counter("fleet.tasks.dead_lettered", "Tasks moved to the dead letters.")
	t.expired = counter("fleet.tasks.lease_expired", "Reservations whose lease ran out, found by a sweeper.")
	t.released = counter("fleet.tasks.released", "Tasks released onto their queue once the tasks they waited for ended.")
	t.process = seconds("messaging.process.duration", "Duration of task handler runs.")
	t.lockWait = seconds("fleet.lock.wait.duration", "Time Lock.Acquire took, waiting included.")
	t.claimWait = seconds("fleet.pool.claim.wait.duration", "Time a pool Claim took, waiting included.")
	t.semWait = seconds("fleet.semaphore.wait.duration", "Time Semaphore.Acquire took, waiting included.")
	var err error
	t.limits, err = m.Int64Counter("fleet.limiter.decisions", metric.WithUnit("{decision}"), metric.WithDescription("Decisions of fleet-wide rate limiters."))
	errs = append(errs, err)
	t.gDepth = gauge("fleet.queue.depth", "Tasks pending on the queue.")
	t.gInFlight = gauge("fleet.queue.in_flight", "Tasks reserved by workers.")
	t.gScheduled = gauge("fleet.queue.scheduled", "Tasks waiting for a retry or a delayed start.")
	t.gDead = gauge("fleet.queue.dead", "Dead letters.")
	t.gLatency, err = m.Float64ObservableGauge("fleet.queue.latency", metric.WithUnit("s"),
		metric.WithDescription("How long the longest-waiting of the tasks that go next has waited: the queue's latency."))
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("fleetotel: %w", err)
	}
	return t, nil
}

const system = "fleet"

func (t *Telemetry) queue(name string) *queueAttrs {
	if a, ok := t.attrs.Load(name); ok {
		return a.(*queueAttrs)
	}
	sys, dest := attribute.String("messaging.system", system), attribute.String("messaging.destination.name", name)
	opSubmit, opProcess := attribute.String("messaging.operation.name", "submit"), attribute.String("messaging.operation.name", "process")
	typSend, typProcess := attribute.String("messaging.operation.type", "send"), attribute.String("messaging.operation.type", "process")
	a := &queueAttrs{
		queue:       attribute.NewSet(sys, dest),
		submit:      attribute.NewSet(sys, dest, opSubmit),
		process:     attribute.NewSet(sys, dest, opProcess),
		submitName:  "submit " + name,
		processName: "process " + name,
	}
	a.submitStarts.New = func() any { return newSpanStart(trace.SpanKindProducer, sys, dest, opSubmit, typSend) }
	a.processStarts.New = func() any { return newSpanStart(trace.SpanKindConsumer, sys, dest, opProcess, typProcess) }
	a.submitAdd = []metric.AddOption{metric.WithAttributeSet(a.submit)}
	a.queueAdd = []metric.AddOption{metric.WithAttributeSet(a.queue)}
	a.processRecord = []metric.RecordOption{metric.WithAttributeSet(a.process)}
	v, _ := t.attrs.LoadOrStore(name, a)
	return v.(*queueAttrs)
}

// Observer returns the hooks to set in fleet.Options.Observer.
func (t *Telemetry) Observer() *fleet.Observer {
	return &fleet.Observer{
		Submit:          t.submit,
		TaskEnded:       t.taskEnded,
		Swept:           t.swept,
		LockWaited:      t.lockWaited,
		ClaimWaited:     t.claimWaited,
		Limited:         t.limited,
		SemaphoreWaited: t.semaphoreWaited,
		Released:        t.releasedTask,
		Progressed:      t.progressed,
		Step:            t.step,
	}
}

// step makes a span "step <name>" for each durable step (fleet.Step), a
// child of the handler's process span, around its fn: attributes
// fleet.step.name, fleet.step.index, fleet.step.attempt and
// fleet.step.memoized (a zero-length span for a step whose recorded
// result was returned without running fn), and an error status when its
// fn or its record failed.
func (t *Telemetry) step(ctx context.Context, e fleet.StepEvent) (context.Context, func(error)) {
	ctx, span := t.tracer.Start(ctx, "step "+e.Name, trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(
		attribute.String("messaging.destination.name", e.Queue),
		attribute.String("messaging.message.id", e.ID),
		attribute.String("fleet.step.name", e.Name),
		attribute.Int("fleet.step.index", e.Index),
		attribute.Int("fleet.step.attempt", e.Attempt),
		attribute.Bool("fleet.step.memoized", e.Memoized)))
	return ctx, func(err error) {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}
}

func (t *Telemetry) releasedTask(ctx context.Context, e fleet.ReleaseEvent) {
	t.released.Add(ctx, 1, t.queue(e.Queue).queueAdd...)
}

// maxProgressAttr bounds the progress value a span event carries.
const maxProgressAttr = 1 << 10

// progressed adds an event "progress" to the span of ctx (a handler's
// process span, under the Middleware), with the value's JSON, cut to
// maxProgressAttr bytes.
func (t *Telemetry) progressed(ctx context.Context, e fleet.ProgressEvent) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	v := string(e.Progress)
	if len(v) > maxProgressAttr {
		v = v[:maxProgressAttr]
	}
	span.AddEvent("progress", trace.WithAttributes(attribute.String("fleet.task.progress", v)))
}

func (t *Telemetry) submit(ctx context.Context, e fleet.SubmitEvent) (map[string]string, func(int, error)) {
	a := t.queue(e.Queue)
	st := a.submitStarts.Get().(*spanStart)
	if len(e.IDs) == 1 {
		st.kv[spanFixed] = attribute.String("messaging.message.id", e.IDs[0])
	} else {
		st.kv[spanFixed] = attribute.Int("messaging.batch.message_count", len(e.IDs))
	}
	opts := st.opts[1]
	schedule := e.Schedule
	if schedule != "" {
		st.kv[spanFixed+1] = attribute.String("fleet.schedule.name", schedule)
		opts = st.opts[2]
	}
	ctx, span := t.tracer.Start(ctx, a.submitName, opts...)
	a.submitStarts.Put(st)
	var carrier propagation.MapCarrier
	if span.SpanContext().IsValid() {
		carrier = propagation.MapCarrier{}
		t.prop.Inject(ctx, carrier)
	}
	return carrier, func(n int, err error) {
		if n > 0 {
			t.submitted.Add(ctx, int64(n), a.submitAdd...)
		}
		if schedule != "" && span.IsRecording() {
			span.SetAttributes(attribute.Int("fleet.submit.written", n))
		}
		if err != nil {
			span.SetAttributes(attribute.String("error.type", errorType(err)))
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}
}

func (t *Telemetry) taskEnded(ctx context.Context, e fleet.TaskEndEvent) {
	set := t.queue(e.Queue).queueAdd
	switch e.Outcome {
	case fleet.TaskProcessed:
		t.processed.Add(ctx, 1, set...)
	case fleet.TaskRetried:
		t.failed.Add(ctx, 1, set...)
		t.retried.Add(ctx, 1, set...)
	case fleet.TaskDeadLettered:
		t.failed.Add(ctx, 1, set...)
		t.dead.Add(ctx, 1, set...)
	}
}

func (t *Telemetry) swept(ctx context.Context, e fleet.SweepEvent) {
	n := e.Requeued + e.DeadLettered
	if n == 0 {
		return
	}
	set := t.queue(e.Queue).queueAdd
	t.expired.Add(ctx, int64(n), set...)
	t.failed.Add(ctx, int64(n), set...)
	if e.Requeued > 0 {
		t.retried.Add(ctx, int64(e.Requeued), set...)
	}
	if e.DeadLettered > 0 {
		t.dead.Add(ctx, int64(e.DeadLettered), set...)
	}
}

func (t *Telemetry) lockWaited(ctx context.Context, e fleet.LockWaitEvent) {
	attrs := []attribute.KeyValue{attribute.String("fleet.lock.outcome", waitOutcome(e.Obtained, e.Err))}
	if t.lockNames {
		attrs = append(attrs, attribute.String("fleet.lock.name", e.Lock))
	}
	t.lockWait.Record(ctx, e.Wait.Seconds(), metric.WithAttributes(attrs...))
}

func (t *Telemetry) limited(ctx context.Context, e fleet.LimitEvent) {
	attrs := []attribute.KeyValue{attribute.String("fleet.limiter.outcome", e.Outcome())}
	if t.limitNames {
		attrs = append(attrs, attribute.String("fleet.limiter.name", e.Limiter))
	}
	t.limits.Add(ctx, 1, metric.WithAttributes(attrs...))
}

func (t *Telemetry) semaphoreWaited(ctx context.Context, e fleet.SemaphoreWaitEvent) {
	attrs := []attribute.KeyValue{attribute.String("fleet.semaphore.outcome", waitOutcome(e.Obtained, e.Err))}
	if t.limitNames {
		attrs = append(attrs, attribute.String("fleet.semaphore.name", e.Semaphore))
	}
	t.semWait.Record(ctx, e.Wait.Seconds(), metric.WithAttributes(attrs...))
}

// waitOutcome names how a lock or semaphore acquire ended.
func waitOutcome(obtained bool, err error) string {
	switch {
	case errors.Is(err, fleet.ErrNotObtained):
		return "not_obtained"
	case err != nil || !obtained:
		return "error"
	}
	return "obtained"
}

func (t *Telemetry) claimWaited(ctx context.Context, e fleet.ClaimWaitEvent) {
	outcome := "claimed"
	switch {
	case e.Err != nil:
		outcome = "error"
	case !e.Claimed:
		outcome = "none"
	}
	t.claimWait.Record(ctx, e.Wait.Seconds(), metric.WithAttributes(
		attribute.String("fleet.pool.name", e.Pool), attribute.String("fleet.claim.outcome", outcome)))
}

// Middleware returns the worker middleware that traces and times each
// handler run: put it first in WorkerOptions.Middleware, so that it sees
// the outcome of the others too.
func (t *Telemetry) Middleware() fleet.Middleware {
	return func(next fleet.Handler) fleet.Handler {
		return func(ctx context.Context, ti fleet.TaskInfo) error {
			start := time.Now()
			a := t.queue(ti.Queue)
			st := a.processStarts.Get().(*spanStart)
			st.kv[spanFixed] = attribute.String("messaging.message.id", ti.ID)
			st.kv[spanFixed+1] = attribute.Int("fleet.task.attempts", ti.Attempts)
			opts := st.opts[2]
			if ti.Trace != nil {
				carrier := propagation.MapCarrier(ti.Trace)
				if t.linkOnly || trace.SpanContextFromContext(ctx).IsValid() {
					if sc := trace.SpanContextFromContext(t.prop.Extract(context.Background(), carrier)); sc.IsValid() {
						opts = append(opts[:len(opts):len(opts)], trace.WithLinks(trace.Link{SpanContext: sc}))
					}
				} else {
					ctx = t.prop.Extract(ctx, carrier) // the submit span, as the remote parent (and baggage, if propagated)
				}
			}
			if t.linkOnly {
				opts = append(opts[:len(opts):len(opts)], trace.WithNewRoot())
			}
			ctx, span := t.tracer.Start(ctx, a.processName, opts...)
			a.processStarts.Put(st)
			ended := false
			defer func() {
				if !ended { // the handler panicked: the worker recovers it
					t.endRun(ctx, span, a, start, "panic", nil)
				}
			}()
			err := next(ctx, ti)
			ended = true
			typ := ""
			if err != nil {
				typ = errorType(err)
			}
			t.endRun(ctx, span, a, start, typ, err)
			return err
		}
	}
}

func (t *Telemetry) endRun(ctx context.Context, span trace.Span, a *queueAttrs, start time.Time, typ string, err error) {
	d := time.Since(start).Seconds()
	if typ == "" {
		t.process.Record(ctx, d, a.processRecord...)
		span.End()
		return
	}
	e := attribute.String("error.type", typ)
	t.process.Record(ctx, d, metric.WithAttributeSet(a.process), metric.WithAttributes(e))
	span.SetAttributes(e)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	} else {
		span.SetStatus(codes.Error, typ)
	}
	span.End()
}

// errorType names an error by fleet's kinds, for error.type.
func errorType(err error) string {
	var pe *fleet.PanicError
	switch {
	case errors.As(err, &pe):
		return "panic"
	case errors.Is(err, fleet.ErrLeaseLost):
		return "lease_lost"
	case errors.Is(err, fleet.ErrTaskTimeout):
		return "timeout"
	case errors.Is(err, fleet.ErrCanceled):
		return "canceled"
	case errors.Is(err, fleet.ErrPermanent):
		return "permanent"
	case errors.Is(err, context.DeadlineExceeded):
		return "context_deadline_exceeded"
	case errors.Is(err, context.Canceled):
		return "context_canceled"
	case errors.Is(err, fleet.ErrUnavailable):
		return "unavailable"
	}
	return "_OTHER"
}

// GaugeOptions says which queues ObserveQueues reads.
type GaugeOptions struct {
	// Queues names the queues to read. Defaults to every queue of the
	// fleet-wide registry (Fleet.QueueNames), read again at each
	// collection.
	Queues []string
	// Timeout bounds the reads of one collection. Defaults to
	// DefaultCollectTimeout.
	Timeout time.Duration
}

// ObserveQueues reports the depth gauges of f's queues at each collection
// of the meter provider's readers: one pipelined round trip per queue (and
// one for the registry when opts.Queues is empty). A queue that cannot be
// read is left out of that collection, and the error goes to the SDK's
// error handler. Unregister the registration before closing f. It returns
// an error for a nil Fleet, a negative timeout, or what the meter says.
func (t *Telemetry) ObserveQueues(f *fleet.Fleet, opts GaugeOptions) (metric.Registration, error) {
	if f == nil {
		return nil, errors.New("fleetotel: ObserveQueues needs a Fleet")
	}
	if opts.Timeout < 0 {
		return nil, fmt.Errorf("fleetotel: GaugeOptions.Timeout %v is negative", opts.Timeout)
	}
	if opts.Timeout == 0 {
		opts.Timeout = DefaultCollectTimeout
	}
	names := append([]string(nil), opts.Queues...)
	reg, err := t.meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		ctx, cancel := context.WithTimeout(ctx, opts.Timeout)
		defer cancel()
		qs := names
		if len(qs) == 0 {
			var err error
			if qs, err = f.QueueNames(ctx); err != nil {
				return fmt.Errorf("fleetotel: %w", err)
			}
		}
		var errs []error
		for _, name := range qs {
			st, err := f.Queue(name).Stats(ctx)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			set := metric.WithAttributeSet(t.queue(name).queue)
			o.ObserveInt64(t.gDepth, st.Pending, set)
			o.ObserveInt64(t.gInFlight, st.InFlight, set)
			o.ObserveInt64(t.gScheduled, st.Scheduled, set)
			o.ObserveInt64(t.gDead, st.Dead, set)
			o.ObserveFloat64(t.gLatency, st.Latency.Seconds(), set)
		}
		if err := errors.Join(errs...); err != nil {
			return fmt.Errorf("fleetotel: %w", err)
		}
		return nil
	}, t.gDepth, t.gInFlight, t.gScheduled, t.gDead, t.gLatency)
	if err != nil {
		return nil, fmt.Errorf("fleetotel: %w", err)
	}
	return reg, nil
}
