package fleetotel_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/fleetotel"
	"github.com/fleet-go/fleet/fleettest"
)

// target is a Redis the tests run on: a single node (compat layout) and a
// three-master cluster (tagged layout), started once for the package.
type target struct {
	name   string
	opts   fleet.Options // URL or Addrs, and Layout
	server *fleettest.Server
}

var targets []target

var prefixes atomic.Int64

func TestMain(m *testing.M) {
	code := func() int {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		s, err := fleettest.StartServer(ctx, fleettest.Config{})
		if err != nil {
			fmt.Fprintln(os.Stderr, "fleetotel tests:", err)
			return 1
		}
		defer s.Stop()
		c, err := fleettest.StartCluster(ctx, 3)
		if err != nil {
			fmt.Fprintln(os.Stderr, "fleetotel tests:", err)
			return 1
		}
		defer c.Stop()
		targets = []target{
			{name: "single", opts: fleet.Options{URL: s.URL(), Layout: fleet.LayoutCompat}, server: s},
			{name: "cluster", opts: fleet.Options{Addrs: c.Addrs(), Layout: fleet.LayoutTagged}},
		}
		return m.Run()
	}()
	if code == 0 {
		if err := goleak.Find(
			// rueidis ends these by themselves after a cluster refresh.
			goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*clusterClient)._refresh.func2"),
			goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*call).DelayDo.func1"),
		); err != nil {
			fmt.Fprintf(os.Stderr, "goroutines outlived the tests: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// each runs fn on every target, in parallel subtests.
func each(t *testing.T, fn func(t *testing.T, tg target)) {
	for _, tg := range targets {
		t.Run(tg.name, func(t *testing.T) {
			t.Parallel()
			fn(t, tg)
		})
	}
}

// prefix returns a key prefix of the test's own.
func prefix(t *testing.T) string {
	return fmt.Sprintf("otel%d-%d:", os.Getpid(), prefixes.Add(1))
}

// open opens a Fleet on tg under prefix with obs, closed when the test ends.
func open(t *testing.T, tg target, prefix string, obs *fleet.Observer) *fleet.Fleet {
	t.Helper()
	opts := tg.opts
	opts.Prefix, opts.Observer = prefix, obs
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	f, err := fleet.Open(ctx, opts)
	if err != nil {
		t.Fatalf("open %s: %v", tg.name, err)
	}
	t.Cleanup(func() {
		_ = f.Close()
		deletePrefix(t, tg, prefix)
	})
	return f
}

// deletePrefix deletes every key under prefix, on every node; t (nil in
// an Example) is told of a failure.
func deletePrefix(t testing.TB, tg target, prefix string) {
	if t == nil {
		t = &quiet{}
	}
	opts := tg.opts
	opts.Observer = nil
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	f, err := fleet.Open(ctx, opts)
	if err != nil {
		t.Errorf("cleanup: %v", err)
		return
	}
	defer f.Close()
	c := f.Client()
	for _, node := range c.Nodes() {
		var cursor uint64
		for {
			e, err := node.Do(ctx, node.B().Scan().Cursor(cursor).Match(prefix+"*").Count(1000).Build()).AsScanEntry()
			if err != nil {
				t.Errorf("cleanup scan: %v", err)
				break
			}
			for _, k := range e.Elements {
				_ = c.Do(ctx, c.B().Del().Key(k).Build()).Error()
			}
			if e.Cursor == 0 {
				break
			}
			cursor = e.Cursor
		}
	}
}

// quiet is a testing.TB for an Example's clean-up, which has none.
type quiet struct{ testing.TB }

func (*quiet) Errorf(string, ...any) {}

// kit is one process's OpenTelemetry: an SDK with an in-memory span
// exporter and a manual metric reader, and the Telemetry over it.
type kit struct {
	spans  *tracetest.InMemoryExporter
	reader *sdkmetric.ManualReader
	tel    *fleetotel.Telemetry
}

func newKit(t *testing.T, opts fleetotel.Options) *kit {
	t.Helper()
	k := &kit{spans: tracetest.NewInMemoryExporter(), reader: sdkmetric.NewManualReader()}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(k.spans))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(k.reader))
	t.Cleanup(func() {
		_ = tp.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	})
	opts.TracerProvider, opts.MeterProvider = tp, mp
	tel, err := fleetotel.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	k.tel = tel
	return k
}

// ended returns the spans ended so far, sorted by start time.
func (k *kit) ended() tracetest.SpanStubs {
	s := k.spans.GetSpans()
	sort.SliceStable(s, func(i, j int) bool { return s[i].StartTime.Before(s[j].StartTime) })
	return s
}

// waitFor polls cond until it holds, failing the test after d.
func waitFor(t *testing.T, d time.Duration, cond func() bool, format string, args ...any) {
	t.Helper()
	end := time.Now().Add(d)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf(format, args...)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

type (
	cfg  struct{}
	out  struct{}
	page struct {
		URL string `json:"url" validate:"required"`
	}
)

// worker starts a batch worker of q on f with the kit's middleware and
// handle, stopped when the test ends.
func worker(t *testing.T, f *fleet.Fleet, q *fleet.Queue[page], mw fleet.Middleware, handle func(ctx context.Context, tk *fleet.Task[page]) error) *fleet.Worker {
	t.Helper()
	var mws []fleet.Middleware
	if mw != nil {
		mws = []fleet.Middleware{mw}
	}
	w := fleet.NewBatchWorker(f, fleet.WorkerOptions{Type: "crawler", ID: "w1", Slots: 2, Middleware: mws}, q,
		fleet.BatchFunc[cfg, out, page](func(ctx context.Context, _ *fleet.Slot[cfg, out], tk *fleet.Task[page]) error {
			return handle(ctx, tk)
		}))
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = w.Stop(ctx)
	})
	return w
}

func attrs(kvs []attribute.KeyValue) map[string]string {
	m := map[string]string{}
	for _, kv := range kvs {
		m[string(kv.Key)] = kv.Value.String()
	}
	return m
}

func sameMap(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestTraceAcrossFleets: a task submitted on one Fleet (one process's SDK)
// and run by a worker of another (another SDK) makes a producer span and,
// per run, a consumer span that is its child in the same trace; a failed
// run's span says so. With LinkOnly, the run's span starts a trace of its
// own, linked to the submit span.
func TestTraceAcrossFleets(t *testing.T) {
	each(t, func(t *testing.T, tg target) {
		for _, linkOnly := range []bool{false, true} {
			t.Run(fmt.Sprintf("linkOnly=%v", linkOnly), func(t *testing.T) {
				p := prefix(t)
				sub := newKit(t, fleetotel.Options{})
				run := newKit(t, fleetotel.Options{LinkOnly: linkOnly})
				fa := open(t, tg, p, sub.tel.Observer())
				fb := open(t, tg, p, run.tel.Observer())
				qa := fleet.NewQueue[page](fa, "pages", fleet.QueueOptions{BackoffBase: time.Millisecond, BackoffMax: time.Millisecond})
				qb := fleet.NewQueue[page](fb, "pages", fleet.QueueOptions{BackoffBase: time.Millisecond, BackoffMax: time.Millisecond})
				var runs atomic.Int64
				worker(t, fb, qb, run.tel.Middleware(), func(ctx context.Context, tk *fleet.Task[page]) error {
					if runs.Add(1) == 1 {
						return errors.New("flaky")
					}
					return nil
				})
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				id, err := qa.Submit(ctx, page{URL: "https://example.com/"})
				if err != nil {
					t.Fatal(err)
				}
				waitFor(t, 10*time.Second, func() bool { return len(run.spans.GetSpans()) == 2 }, "handler spans: %d", len(run.spans.GetSpans()))

				subs := sub.ended()
				if len(subs) != 1 {
					t.Fatalf("submit side spans: %d", len(subs))
				}
				s := subs[0]
				wantAttrs := map[string]string{"messaging.system": "fleet", "messaging.destination.name": "pages",
					"messaging.operation.name": "submit", "messaging.operation.type": "send", "messaging.message.id": id}
				if s.Name != "submit pages" || s.SpanKind != trace.SpanKindProducer || !sameMap(attrs(s.Attributes), wantAttrs) ||
					s.Status.Code != codes.Unset || s.Parent.IsValid() {
					t.Fatalf("submit span %q kind %v attrs %v status %v parent %v", s.Name, s.SpanKind, attrs(s.Attributes), s.Status, s.Parent)
				}
				for i, h := range run.ended() {
					wantAttrs := map[string]string{"messaging.system": "fleet", "messaging.destination.name": "pages",
						"messaging.operation.name": "process", "messaging.operation.type": "process", "messaging.message.id": id,
						"fleet.task.attempts": fmt.Sprint(i)}
					wantStatus := codes.Unset
					if i == 0 {
						wantAttrs["error.type"] = "_OTHER"
						wantStatus = codes.Error
					}
					if h.Name != "process pages" || h.SpanKind != trace.SpanKindConsumer || !sameMap(attrs(h.Attributes), wantAttrs) || h.Status.Code != wantStatus {
						t.Fatalf("run %d: span %q kind %v attrs %v status %v", i, h.Name, h.SpanKind, attrs(h.Attributes), h.Status)
					}
					if !linkOnly {
						if !h.Parent.Equal(s.SpanContext.WithRemote(true)) || h.SpanContext.TraceID() != s.SpanContext.TraceID() || len(h.Links) != 0 {
							t.Fatalf("run %d: parent %v trace %v links %d; submit %v", i, h.Parent, h.SpanContext.TraceID(), len(h.Links), s.SpanContext)
						}
						continue
					}
					if h.Parent.IsValid() || h.SpanContext.TraceID() == s.SpanContext.TraceID() || len(h.Links) != 1 ||
						!h.Links[0].SpanContext.Equal(s.SpanContext.WithRemote(true)) {
						t.Fatalf("run %d: parent %v trace %v links %v; submit %v", i, h.Parent, h.SpanContext.TraceID(), h.Links, s.SpanContext)
					}
				}
				// The submitting Fleet's SDK saw no handler span, the
				// worker's no submit span.
				if n := len(sub.spans.GetSpans()); n != 1 {
					t.Fatalf("submit side spans: %d", n)
				}
			})
		}
	})
}

// TestTraceOptional: a task submitted without fleetotel carries no trace
// field, and its handler span has no parent; SubmitMany makes one span
// for the batch, parent of every run.
func TestTraceOptional(t *testing.T) {
	each(t, func(t *testing.T, tg target) {
		p := prefix(t)
		k := newKit(t, fleetotel.Options{})
		plain := open(t, tg, p, nil)
		traced := open(t, tg, p, k.tel.Observer())
		qp := fleet.NewQueue[page](plain, "mixed", fleet.QueueOptions{})
		qt := fleet.NewQueue[page](traced, "mixed", fleet.QueueOptions{})
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		id, err := qp.Submit(ctx, page{URL: "a"})
		if err != nil {
			t.Fatal(err)
		}
		body, err := plain.Queue("mixed").Pending(ctx, 0, 10)
		if err != nil || len(body) != 1 {
			t.Fatalf("pending %v %v", body, err)
		}
		ids, err := qt.SubmitMany(ctx, []page{{URL: "b"}, {URL: "c"}})
		if err != nil {
			t.Fatal(err)
		}
		worker(t, traced, qt, k.tel.Middleware(), func(context.Context, *fleet.Task[page]) error { return nil })
		waitFor(t, 10*time.Second, func() bool { return len(k.spans.GetSpans()) == 4 }, "spans: %d", len(k.spans.GetSpans()))
		var submit tracetest.SpanStub
		runs := map[string]tracetest.SpanStub{}
		for _, s := range k.ended() {
			if s.Name == "submit mixed" {
				submit = s
				continue
			}
			runs[attrs(s.Attributes)["messaging.message.id"]] = s
		}
		if got := attrs(submit.Attributes)["messaging.batch.message_count"]; got != "2" {
			t.Fatalf("batch count %q in %v", got, attrs(submit.Attributes))
		}
		if r, ok := runs[id]; !ok || r.Parent.IsValid() || len(r.Links) != 0 {
			t.Fatalf("untraced task's run: %+v", r)
		}
		for _, tid := range ids {
			if r, ok := runs[tid]; !ok || !r.Parent.Equal(submit.SpanContext.WithRemote(true)) {
				t.Fatalf("run of %s: %+v", tid, r)
			}
		}
	})
}

// metricsOf collects the reader and returns each metric by name.
func (k *kit) metricsOf(t *testing.T) map[string]metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := k.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != fleetotel.ScopeName {
			t.Fatalf("scope %q", sm.Scope.Name)
		}
		for _, m := range sm.Metrics {
			out[m.Name] = m
		}
	}
	return out
}

// points spells a metric's points as "attr=value,...: value" lines, sorted;
// a histogram's value is its count.
func points(t *testing.T, m metricdata.Metrics) []string {
	t.Helper()
	var out []string
	line := func(set attribute.Set, v string) {
		var kv []string
		for _, a := range set.ToSlice() {
			kv = append(kv, string(a.Key)+"="+a.Value.String())
		}
		out = append(out, strings.Join(kv, ",")+": "+v)
	}
	switch d := m.Data.(type) {
	case metricdata.Sum[int64]:
		if !d.IsMonotonic || d.Temporality != metricdata.CumulativeTemporality {
			t.Fatalf("%s: not a cumulative counter", m.Name)
		}
		for _, p := range d.DataPoints {
			line(p.Attributes, fmt.Sprint(p.Value))
		}
	case metricdata.Gauge[int64]:
		for _, p := range d.DataPoints {
			line(p.Attributes, fmt.Sprint(p.Value))
		}
	case metricdata.Gauge[float64]:
		// A latency: "0", or "fresh" for under a minute (a wall-clock reading).
		for _, p := range d.DataPoints {
			v := fmt.Sprint(p.Value)
			if p.Value > 0 && p.Value < 60 {
				v = "fresh"
			}
			line(p.Attributes, v)
		}
	case metricdata.Histogram[float64]:
		for _, p := range d.DataPoints {
			line(p.Attributes, fmt.Sprint(p.Count))
		}
	default:
		t.Fatalf("%s: data %T", m.Name, m.Data)
	}
	slices.Sort(out)
	return out
}

// checkMetrics asserts that the kit's metrics are exactly want (name ->
// points as points spells them), each in its unit: seconds for durations,
// {decision} for limiter decisions, {task} for the rest.
func (k *kit) checkMetrics(t *testing.T, want map[string][]string) {
	t.Helper()
	got := k.metricsOf(t)
	if len(got) != len(want) {
		names := make([]string, 0, len(got))
		for n := range got {
			names = append(names, n)
		}
		slices.Sort(names)
		t.Fatalf("metrics %q, want %d", names, len(want))
	}
	for name, pts := range want {
		m, ok := got[name]
		if !ok {
			t.Fatalf("no metric %s", name)
		}
		unit := "{task}"
		switch {
		case strings.HasSuffix(name, ".duration"), name == "fleet.queue.latency":
			unit = "s"
		case name == "fleet.limiter.decisions":
			unit = "{decision}"
		}
		if m.Unit != unit {
			t.Fatalf("%s: unit %q, want %q", name, m.Unit, unit)
		}
		if g := points(t, m); !slices.Equal(g, pts) {
			t.Fatalf("%s:\n got %q\nwant %q", name, g, pts)
		}
	}
}

// TestMetrics: the exact instruments, units, attributes and values after
// submits, runs that succeed, fail and retry, fail for good; lock and claim
// waits; and the queue gauges, named and from the registry.
func TestMetrics(t *testing.T) {
	each(t, func(t *testing.T, tg target) {
		p := prefix(t)
		k := newKit(t, fleetotel.Options{LockNames: true})
		f := open(t, tg, p, k.tel.Observer())
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		q := fleet.NewQueue[page](f, "jobs", fleet.QueueOptions{MaxAttempts: 2, BackoffBase: time.Millisecond, BackoffMax: time.Millisecond})
		idle := fleet.NewQueue[page](f, "idle", fleet.QueueOptions{})
		if _, err := q.SubmitMany(ctx, []page{{URL: "ok"}, {URL: "flaky"}, {URL: "bad"}, {URL: "hopeless"}}); err != nil {
			t.Fatal(err)
		}
		if _, err := idle.Submit(ctx, page{URL: "x"}); err != nil {
			t.Fatal(err)
		}
		if _, err := idle.SubmitWith(ctx, page{URL: "y"}, fleet.SubmitOptions{NotBefore: time.Now().Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
		var flaky atomic.Int64
		w := worker(t, f, q, k.tel.Middleware(), func(ctx context.Context, tk *fleet.Task[page]) error {
			switch tk.Payload.URL {
			case "flaky":
				if flaky.Add(1) == 1 {
					return errors.New("try again")
				}
			case "bad":
				return fmt.Errorf("no: %w", fleet.ErrPermanent)
			case "hopeless":
				return errors.New("still no")
			}
			return nil
		})
		// ok: 1 run; flaky: 2 runs; bad: 1 run, buried; hopeless: 2 runs, dead.
		waitFor(t, 10*time.Second, func() bool { st := w.Stats(); return st.Done == 2 && st.Failed == 4 }, "stats %+v", w.Stats())

		lk := f.Lock("crawl:example.com")
		lease, err := lk.Acquire(ctx, fleet.LockOptions{Hold: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := lk.Acquire(ctx, fleet.LockOptions{Hold: 10 * time.Second, Wait: 20 * time.Millisecond}); !errors.Is(err, fleet.ErrNotObtained) {
			t.Fatalf("second acquire: %v", err)
		}
		if err := lease.Release(ctx); err != nil {
			t.Fatal(err)
		}
		pool := fleet.NewPool[string, struct{}](f, "proxies", fleet.PoolOptions{})
		if _, err := pool.Put(ctx, "p1", struct{}{}, time.Minute); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if _, err := pool.Claim(ctx, fleet.ClaimOptions{Hold: time.Minute}); err != nil {
				t.Fatal(err)
			}
		}
		named, err := k.tel.ObserveQueues(f, fleetotel.GaugeOptions{Queues: []string{"idle"}})
		if err != nil {
			t.Fatal(err)
		}

		q1 := "messaging.destination.name=jobs,messaging.system=fleet: "
		idleQ := "messaging.destination.name=idle,messaging.system=fleet: "
		want := map[string][]string{
			"messaging.client.sent.messages": {
				"messaging.destination.name=idle,messaging.operation.name=submit,messaging.system=fleet: 2",
				"messaging.destination.name=jobs,messaging.operation.name=submit,messaging.system=fleet: 4"},
			"fleet.tasks.processed":     {q1 + "2"},
			"fleet.tasks.failed":        {q1 + "4"},
			"fleet.tasks.retried":       {q1 + "2"},
			"fleet.tasks.dead_lettered": {q1 + "2"},
			"messaging.process.duration": {
				"error.type=_OTHER,messaging.destination.name=jobs,messaging.operation.name=process,messaging.system=fleet: 3",
				"error.type=permanent,messaging.destination.name=jobs,messaging.operation.name=process,messaging.system=fleet: 1",
				"messaging.destination.name=jobs,messaging.operation.name=process,messaging.system=fleet: 2"},
			"fleet.lock.wait.duration": {
				"fleet.lock.name=crawl:example.com,fleet.lock.outcome=not_obtained: 1",
				"fleet.lock.name=crawl:example.com,fleet.lock.outcome=obtained: 1"},
			"fleet.pool.claim.wait.duration": {
				"fleet.claim.outcome=claimed,fleet.pool.name=proxies: 1",
				"fleet.claim.outcome=none,fleet.pool.name=proxies: 1"},
			"fleet.queue.depth":     {idleQ + "1"},
			"fleet.queue.in_flight": {idleQ + "0"},
			"fleet.queue.scheduled": {idleQ + "1"},
			"fleet.queue.dead":      {idleQ + "0"},
			"fleet.queue.latency":   {idleQ + "fresh"},
		}
		k.checkMetrics(t, want)
		if err := named.Unregister(); err != nil {
			t.Fatal(err)
		}

		// From the registry: both queues; jobs is empty now.
		all, err := k.tel.ObserveQueues(f, fleetotel.GaugeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = all.Unregister() }()
		want["fleet.queue.depth"] = []string{idleQ + "1", q1 + "0"}
		want["fleet.queue.in_flight"] = []string{idleQ + "0", q1 + "0"}
		want["fleet.queue.scheduled"] = []string{idleQ + "1", q1 + "0"}
		want["fleet.queue.dead"] = []string{idleQ + "0", q1 + "2"}
		want["fleet.queue.latency"] = []string{idleQ + "fresh", q1 + "0"}
		k.checkMetrics(t, want)
	})
}

// TestObserveQueuesArgs: bad arguments are errors, not panics.
func TestObserveQueuesArgs(t *testing.T) {
	k := newKit(t, fleetotel.Options{})
	if _, err := k.tel.ObserveQueues(nil, fleetotel.GaugeOptions{}); err == nil {
		t.Fatal("nil Fleet accepted")
	}
	f := open(t, targets[0], prefix(t), nil)
	if _, err := k.tel.ObserveQueues(f, fleetotel.GaugeOptions{Timeout: -1}); err == nil {
		t.Fatal("negative timeout accepted")
	}
}

// TestProgressAndRelease: Task.Progress in a handler adds "progress"
// events to its process span (the value cut to 1 KiB), and the tasks
// released onto their queue are counted in fleet.tasks.released.
func TestProgressAndRelease(t *testing.T) {
	each(t, func(t *testing.T, tg target) {
		p := prefix(t)
		k := newKit(t, fleetotel.Options{})
		f := open(t, tg, p, k.tel.Observer())
		q := fleet.NewQueue[page](f, "steps", fleet.QueueOptions{})
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		long := strings.Repeat("x", 2000)
		var ran atomic.Int64
		worker(t, f, q, k.tel.Middleware(), func(ctx context.Context, tk *fleet.Task[page]) error {
			if tk.Payload.URL == "first" {
				if err := tk.Progress(ctx, map[string]int{"done": 1}); err != nil {
					return err
				}
				if err := tk.Progress(ctx, long); err != nil {
					return err
				}
			}
			ran.Add(1)
			return nil
		})
		first, err := q.SubmitWith(ctx, page{URL: "first"}, fleet.SubmitOptions{Track: true})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := q.SubmitWith(ctx, page{URL: "second"}, fleet.SubmitOptions{After: fleet.DependOn(q, first)}); err != nil {
			t.Fatal(err)
		}
		processSpans := func() int {
			n := 0
			for _, s := range k.ended() {
				if s.Name == "process steps" {
					n++
				}
			}
			return n
		}
		waitFor(t, 20*time.Second, func() bool { return ran.Load() == 2 && processSpans() == 2 }, "the two tasks did not both run")
		var events []string
		for _, s := range k.ended() {
			for _, ev := range s.Events {
				if ev.Name != "progress" {
					continue
				}
				v := attrs(ev.Attributes)["fleet.task.progress"]
				if len(v) > 20 {
					v = fmt.Sprintf("%d bytes of %q", len(v), v[:3])
				}
				events = append(events, v)
			}
		}
		if want := []string{`{"done":1}`, `1024 bytes of "\"xx"`}; !slices.Equal(events, want) {
			t.Fatalf("progress events %q, want %q", events, want)
		}
		waitFor(t, 10*time.Second, func() bool {
			pts := points(t, k.metricsOf(t)["fleet.tasks.released"])
			// first at its submit's commit (a tracked task waits until
			// then), second once first ended.
			return slices.Equal(pts, []string{"messaging.destination.name=steps,messaging.system=fleet: 2"})
		}, "releases counted: %q", points(t, k.metricsOf(t)["fleet.tasks.released"]))
	})
}

// TestStepSpans: each durable step of a handler's run is a span "step
// <name>" under its process span, its fn's ctx carrying it; a failed
// step's span has an error status; the retry's memoized step is a span
// with fleet.step.memoized.
func TestStepSpans(t *testing.T) {
	each(t, func(t *testing.T, tg target) {
		p := prefix(t)
		k := newKit(t, fleetotel.Options{})
		f := open(t, tg, p, k.tel.Observer())
		q := fleet.NewQueue[page](f, "durable", fleet.QueueOptions{BackoffBase: time.Millisecond, BackoffMax: time.Millisecond})
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		var runs atomic.Int64
		worker(t, f, q, k.tel.Middleware(), func(ctx context.Context, tk *fleet.Task[page]) error {
			run := runs.Add(1)
			if _, err := fleet.Step(ctx, tk, "login", func(ctx context.Context) (int, error) {
				if !trace.SpanFromContext(ctx).SpanContext().IsValid() {
					return 0, errors.New("no span in the step's ctx")
				}
				return 1, nil
			}); err != nil {
				return err
			}
			_, err := fleet.Step(ctx, tk, "fetch", func(ctx context.Context) (int, error) {
				if run == 1 {
					return 0, errors.New("503")
				}
				return 2, nil
			})
			return err
		})
		if _, err := q.Submit(ctx, page{URL: "a"}); err != nil {
			t.Fatal(err)
		}
		var got []string
		waitFor(t, 20*time.Second, func() bool {
			got = got[:0]
			parents := map[trace.SpanID]string{}
			for _, s := range k.ended() {
				parents[s.SpanContext.SpanID()] = s.Name
			}
			for _, s := range k.ended() {
				if !strings.HasPrefix(s.Name, "step ") {
					continue
				}
				a := attrs(s.Attributes)
				got = append(got, fmt.Sprintf("%s under %q attempt %s memoized %s status %s", s.Name, parents[s.Parent.SpanID()],
					a["fleet.step.attempt"], a["fleet.step.memoized"], s.Status.Code))
			}
			return len(got) == 4
		}, "step spans: %q", got)
		want := []string{
			`step login under "process durable" attempt 1 memoized false status Unset`,
			`step fetch under "process durable" attempt 1 memoized false status Error`,
			`step login under "process durable" attempt 1 memoized true status Unset`,
			`step fetch under "process durable" attempt 2 memoized false status Unset`,
		}
		if !slices.Equal(got, want) {
			t.Fatalf("step spans:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	})
}
