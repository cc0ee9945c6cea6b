package handlertest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"go.uber.org/goleak"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/fleettest/handlertest"
	"github.com/fleet-go/fleet/internal/redistest"
)

// TestMain runs the tests on the harness's servers (a single node and a
// three-master cluster, redistest), and fails the run if a goroutine
// outlived its test.
func TestMain(m *testing.M) { redistest.Main(m) }

// env is one test's Fleet on one target, under a prefix of its own, with
// a raw client to read what Run left.
type env struct {
	f      *fleet.Fleet
	raw    rueidis.Client
	prefix string
}

func open(t *testing.T, tg redistest.Target, mods ...func(*fleet.Options)) *env {
	t.Helper()
	e := &env{raw: redistest.Client(t, tg), prefix: redistest.Prefix(t, tg)}
	opts := fleet.Options{URL: tg.URL, Prefix: e.prefix, Layout: fleet.LayoutCompat}
	if tg.Tagged {
		opts.Layout = fleet.LayoutTagged
	}
	for _, m := range mods {
		m(&opts)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	f, err := fleet.Open(ctx, opts)
	if err != nil {
		t.Fatalf("open %s: %v", tg.Name, err)
	}
	t.Cleanup(func() { _ = f.Close() })
	e.f = f
	return e
}

// keys returns every key under the test's prefix.
func (e *env) keys(t *testing.T) []string { return redistest.Keys(t, e.raw, e.prefix) }

// run runs Run and checks that it left no key beyond those there before.
func run[C, O, P any](t *testing.T, e *env, ctx context.Context, a fleet.BatchAutomation[C, O, P], payload P, opts handlertest.Options) (*handlertest.Outcome, error) {
	t.Helper()
	before := e.keys(t)
	out, err := handlertest.Run(ctx, e.f, a, payload, opts)
	if after := e.keys(t); !slices.Equal(before, after) {
		t.Errorf("keys before Run %q, after %q", before, after)
	}
	return out, err
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

type sum struct {
	A, B int
}

type total struct {
	Sum int `json:"sum"`
}

func raws(vs ...string) []json.RawMessage {
	out := make([]json.RawMessage, len(vs))
	for i, v := range vs {
		out[i] = json.RawMessage(v)
	}
	return out
}

func equalRaws(a, b []json.RawMessage) bool {
	return slices.EqualFunc(a, b, func(x, y json.RawMessage) bool { return string(x) == string(y) })
}

// TestRunAcked: a handler that sets a result, stores progress and emits
// outputs is acked, and the Outcome holds all three; nothing stays in
// Redis.
func TestRunAcked(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		e := open(t, tg)
		ctx := testCtx(t)
		var info fleet.TaskInfo
		mw := func(next fleet.Handler) fleet.Handler {
			return func(ctx context.Context, ti fleet.TaskInfo) error {
				info = ti
				return next(ctx, ti)
			}
		}
		h := fleet.BatchFunc[struct{}, string, sum](func(ctx context.Context, s *fleet.Slot[struct{}, string], task *fleet.Task[sum]) error {
			if err := task.Progress(ctx, 50); err != nil {
				return err
			}
			fleet.Logger(ctx).Info("summing", "a", task.Payload.A)
			task.Logger().Debug("<b>b</b>", "b", task.Payload.B)
			if _, err := s.Emit(ctx, "half"); err != nil {
				return err
			}
			if err := task.Progress(ctx, map[string]int{"done": 100}); err != nil {
				return err
			}
			if _, err := s.Emit(ctx, "all"); err != nil {
				return err
			}
			return task.SetResult(total{Sum: task.Payload.A + task.Payload.B})
		})
		out, err := run(t, e, ctx, h, sum{A: 1, B: 2}, handlertest.Options{Worker: fleet.WorkerOptions{Middleware: []fleet.Middleware{mw}}})
		if err != nil {
			t.Fatal(err)
		}
		if out.Kind != handlertest.Acked || out.Err != nil || out.Attempts != 0 || !out.RetryAt.IsZero() || out.Reason != "" {
			t.Fatalf("outcome %+v, want acked with no error", out)
		}
		if string(out.Result) != `{"sum":3}` {
			t.Errorf("result %s", out.Result)
		}
		if r, err := handlertest.ResultAs[total](out); err != nil || r.Sum != 3 {
			t.Errorf("ResultAs = %+v, %v", r, err)
		}
		if !equalRaws(out.Progress, raws(`50`, `{"done":100}`)) {
			t.Errorf("progress %s", out.Progress)
		}
		if !equalRaws(out.Emitted, raws(`"half"`, `"all"`)) {
			t.Errorf("emitted %s", out.Emitted)
		}
		if l := out.Logs; len(l) != 2 || l[0].Level != "INFO" || l[0].Message != "summing" || string(l[0].Attrs["a"]) != "1" ||
			l[1].Level != "DEBUG" || l[1].Message != "<b>b</b>" || string(l[1].Attrs["b"]) != "2" {
			t.Errorf("logs %+v", l)
		}
		if out.TaskID == "" || info.ID != out.TaskID || info.Worker != "handlertest" || !strings.HasPrefix(info.Queue, "handlertest-") || info.Type != info.Queue {
			t.Errorf("task %q, middleware saw %+v", out.TaskID, info)
		}
		if p, ok := info.Payload.(sum); !ok || p != (sum{1, 2}) {
			t.Errorf("middleware saw payload %#v", info.Payload)
		}
		if out.Duration <= 0 || out.Duration > 30*time.Second {
			t.Errorf("duration %v", out.Duration)
		}
	})
}

// TestRunNacked: a failed run is nacked, its attempt counted and its
// retry due after the backoff; nothing stays pending.
func TestRunNacked(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		e := open(t, tg)
		ctx := testCtx(t)
		boom := errors.New("boom")
		start := time.Now()
		out, err := run(t, e, ctx, fleet.TaskFunc(func(ctx context.Context, p sum) error {
			fleet.Logger(ctx).Error("failing", "err", boom)
			return boom
		}), sum{},
			handlertest.Options{Queue: fleet.QueueOptions{BackoffBase: time.Minute, BackoffMax: time.Minute}})
		if err != nil {
			t.Fatal(err)
		}
		if out.Kind != handlertest.Nacked || !errors.Is(out.Err, boom) || out.Attempts != 1 || out.Reason != "" || out.Result != nil {
			t.Fatalf("outcome %+v, want nacked with boom, attempt 1", out)
		}
		if l := out.Logs; len(l) != 1 || l[0].Message != "failing" || string(l[0].Attrs["err"]) != `"boom"` {
			t.Errorf("logs %+v", l)
		}
		// Jitter: between half and all of the backoff, on the server's clock.
		if lo, hi := start.Add(29*time.Second), time.Now().Add(61*time.Second); out.RetryAt.Before(lo) || out.RetryAt.After(hi) {
			t.Errorf("retry at %v, want within [%v, %v]", out.RetryAt, lo, hi)
		}
	})
}

// TestRunRetryAfter: a handler's RetryAfter(d, err) is nacked as any
// failure (the attempt counts), its retry due at d ± 10% in place of the
// backoff; on the last attempt the task is dead-lettered.
func TestRunRetryAfter(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		e := open(t, tg)
		ctx := testCtx(t)
		boom := errors.New("boom")
		h := fleet.TaskFunc(func(ctx context.Context, p sum) error { return fleet.RetryAfter(30*time.Second, boom) })
		start := time.Now()
		out, err := run(t, e, ctx, h, sum{}, handlertest.Options{Queue: fleet.QueueOptions{BackoffBase: time.Hour, BackoffMax: time.Hour}})
		if err != nil {
			t.Fatal(err)
		}
		var ra *fleet.RetryAfterError
		if out.Kind != handlertest.Nacked || !errors.Is(out.Err, boom) || !errors.As(out.Err, &ra) || out.Attempts != 1 {
			t.Fatalf("outcome %+v, want nacked with boom, attempt 1", out)
		}
		if lo, hi := start.Add(27*time.Second), time.Now().Add(33*time.Second); out.RetryAt.Before(lo) || out.RetryAt.After(hi) {
			t.Errorf("retry at %v, want within [%v, %v]", out.RetryAt, lo, hi)
		}
		out, err = run(t, e, ctx, h, sum{}, handlertest.Options{Queue: fleet.QueueOptions{MaxAttempts: 1}})
		if err != nil {
			t.Fatal(err)
		}
		if out.Kind != handlertest.DeadLettered || out.Attempts != 1 || !strings.Contains(out.Reason, "boom (retry after 30s)") {
			t.Fatalf("outcome %+v, want dead-lettered after its one attempt", out)
		}
	})
}

// TestRunDeadLettered: an error that wraps ErrPermanent, and a failure of
// the last attempt, dead-letter the task with the error as the reason.
func TestRunDeadLettered(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		e := open(t, tg)
		ctx := testCtx(t)
		perm := fmt.Errorf("%w: no such page", fleet.ErrPermanent)
		out, err := run(t, e, ctx, fleet.TaskFunc(func(ctx context.Context, p sum) error { return perm }), sum{}, handlertest.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if out.Kind != handlertest.DeadLettered || !errors.Is(out.Err, fleet.ErrPermanent) || !strings.Contains(out.Reason, "no such page") || !out.RetryAt.IsZero() {
			t.Fatalf("outcome %+v, want dead-lettered with the permanent error", out)
		}
		out, err = run(t, e, ctx, fleet.TaskFunc(func(ctx context.Context, p sum) error { return errors.New("flaky") }), sum{},
			handlertest.Options{Queue: fleet.QueueOptions{MaxAttempts: 1}})
		if err != nil {
			t.Fatal(err)
		}
		if out.Kind != handlertest.DeadLettered || out.Attempts != 1 || !strings.Contains(out.Reason, "flaky") {
			t.Fatalf("outcome %+v, want dead-lettered after its one attempt", out)
		}
	})
}

// TestRunSnoozed: RateLimited(d) snoozes the task, due after d, with no
// attempt counted.
func TestRunSnoozed(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		e := open(t, tg)
		ctx := testCtx(t)
		start := time.Now()
		out, err := run(t, e, ctx, fleet.TaskFunc(func(ctx context.Context, p sum) error { return fleet.RateLimited(time.Minute) }), sum{}, handlertest.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if out.Kind != handlertest.Snoozed || !errors.Is(out.Err, fleet.ErrRateLimited) || out.Attempts != 0 {
			t.Fatalf("outcome %+v, want snoozed", out)
		}
		if lo, hi := start.Add(59*time.Second), time.Now().Add(61*time.Second); out.RetryAt.Before(lo) || out.RetryAt.After(hi) {
			t.Errorf("due at %v, want within [%v, %v]", out.RetryAt, lo, hi)
		}
	})
}

// TestRunPanic: a handler's panic is recovered and nacked, as a worker
// does: Err is the *PanicError.
func TestRunPanic(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		e := open(t, tg)
		out, err := run(t, e, testCtx(t), fleet.TaskFunc(func(ctx context.Context, p sum) error { panic("oops") }), sum{}, handlertest.Options{})
		if err != nil {
			t.Fatal(err)
		}
		var pe *fleet.PanicError
		if out.Kind != handlertest.Nacked || !errors.As(out.Err, &pe) || pe.Value != "oops" || out.Attempts != 1 {
			t.Fatalf("outcome %+v, want nacked with the panic", out)
		}
	})
}

// TestRunCtxCanceled: when Run's ctx ends while the handler runs, the
// handler's ctx ends and the task is released uncounted, as a worker's
// hard stop releases it; Run still cleans up.
func TestRunCtxCanceled(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		e := open(t, tg)
		ctx, cancel := context.WithCancel(testCtx(t))
		defer cancel()
		out, err := run(t, e, ctx, fleet.TaskFunc(func(hctx context.Context, p sum) error {
			cancel()
			<-hctx.Done()
			return hctx.Err()
		}), sum{}, handlertest.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if out.Kind != handlertest.Released || !errors.Is(out.Err, context.Canceled) || out.Attempts != 0 || !out.RetryAt.IsZero() {
			t.Fatalf("outcome %+v, want released with context.Canceled", out)
		}
	})
}

// TestRunTimeout: past the worker's TaskTimeout the handler's ctx ends
// with ErrTaskTimeout and the task is nacked.
func TestRunTimeout(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		e := open(t, tg)
		out, err := run(t, e, testCtx(t), fleet.TaskFunc(func(ctx context.Context, p sum) error {
			<-ctx.Done()
			return context.Cause(ctx)
		}), sum{}, handlertest.Options{Worker: fleet.WorkerOptions{TaskTimeout: 100 * time.Millisecond}})
		if err != nil {
			t.Fatal(err)
		}
		if out.Kind != handlertest.Nacked || !errors.Is(out.Err, fleet.ErrTaskTimeout) || out.Attempts != 1 {
			t.Fatalf("outcome %+v, want nacked with ErrTaskTimeout", out)
		}
	})
}

// TestRunOverrunsLease: a handler that runs past its lease keeps it, the
// worker's keep-alive extending it, and is acked; one whose lease cannot
// be kept (extended too rarely) sees its ctx end with ErrLeaseLost, and
// the task is released uncounted.
func TestRunOverrunsLease(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		e := open(t, tg)
		ctx := testCtx(t)
		slow := fleet.TaskFunc(func(ctx context.Context, p sum) error {
			select {
			case <-time.After(2500 * time.Millisecond):
				return nil
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		})
		out, err := run(t, e, ctx, slow, sum{}, handlertest.Options{Queue: fleet.QueueOptions{Lease: time.Second}})
		if err != nil {
			t.Fatal(err)
		}
		if out.Kind != handlertest.Acked || out.Err != nil || out.Duration < 2500*time.Millisecond {
			t.Fatalf("outcome %+v, want acked after 2.5 s on a 1 s lease", out)
		}
		out, err = run(t, e, ctx, slow, sum{}, handlertest.Options{Queue: fleet.QueueOptions{Lease: time.Second},
			Worker: fleet.WorkerOptions{LeaseExtend: time.Minute}})
		if err != nil {
			t.Fatal(err)
		}
		if out.Kind != handlertest.Released || !errors.Is(out.Err, fleet.ErrLeaseLost) || out.Attempts != 0 || out.Duration >= 2500*time.Millisecond {
			t.Fatalf("outcome %+v, want released with ErrLeaseLost before the handler's end", out)
		}
	})
}

// TestRunMiddleware: the middleware wraps the handler as a worker's does,
// outermost first: its error stands for the handler's, and its progress
// is the run's.
func TestRunMiddleware(t *testing.T) {
	e := open(t, redistest.Targets(t)[0])
	var order []string
	mw := func(name string) fleet.Middleware {
		return func(next fleet.Handler) fleet.Handler {
			return func(ctx context.Context, ti fleet.TaskInfo) error {
				order = append(order, name)
				err := next(ctx, ti)
				order = append(order, "/"+name)
				return err
			}
		}
	}
	permanent := func(next fleet.Handler) fleet.Handler {
		return func(ctx context.Context, ti fleet.TaskInfo) error {
			if err := ti.Progress(ctx, "started"); err != nil {
				return err
			}
			if err := next(ctx, ti); err != nil {
				return fmt.Errorf("%w: %w", fleet.ErrPermanent, err)
			}
			return nil
		}
	}
	out, err := run(t, e, testCtx(t), fleet.TaskFunc(func(ctx context.Context, p sum) error {
		order = append(order, "handler")
		return errors.New("bad")
	}), sum{}, handlertest.Options{Worker: fleet.WorkerOptions{Middleware: []fleet.Middleware{mw("a"), permanent, mw("b")}}})
	if err != nil {
		t.Fatal(err)
	}
	if out.Kind != handlertest.DeadLettered || !errors.Is(out.Err, fleet.ErrPermanent) || !equalRaws(out.Progress, raws(`"started"`)) {
		t.Fatalf("outcome %+v, want dead-lettered by the middleware", out)
	}
	if got := strings.Join(order, " "); got != "a b handler /b /a" {
		t.Errorf("order %q", got)
	}
}

// TestRunConfig: the slot's config is Options.Worker.Config, decoded and
// validated as a worker's first Start does.
func TestRunConfig(t *testing.T) {
	e := open(t, redistest.Targets(t)[0])
	type cfg struct {
		Factor int `json:"factor" validate:"min=1"`
	}
	h := fleet.BatchResultFunc[cfg, struct{}, sum, int](func(ctx context.Context, s *fleet.Slot[cfg, struct{}], task *fleet.Task[sum]) (int, error) {
		return s.Config().Factor * (task.Payload.A + task.Payload.B), nil
	})
	out, err := run(t, e, testCtx(t), h, sum{A: 2, B: 3}, handlertest.Options{Worker: fleet.WorkerOptions{Config: cfg{Factor: 10}}})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := handlertest.ResultAs[int](out); out.Kind != handlertest.Acked || err != nil || r != 50 {
		t.Fatalf("outcome %+v, result %d, %v", out, r, err)
	}
	_, err = run(t, e, testCtx(t), h, sum{}, handlertest.Options{Worker: fleet.WorkerOptions{Config: cfg{Factor: 0}}})
	if !errors.Is(err, fleet.ErrInvalidConfig) {
		t.Fatalf("Run with a config that fails validation = %v, want ErrInvalidConfig", err)
	}
}

// TestRunBadInput: what Run cannot run is an error naming why, never a
// panic, and leaves nothing in Redis.
func TestRunBadInput(t *testing.T) {
	e := open(t, redistest.Targets(t)[0])
	ctx := testCtx(t)
	type page struct {
		URL string `json:"url" validate:"required,url"`
	}
	var ran atomic.Bool
	h := fleet.TaskFunc(func(ctx context.Context, p page) error { ran.Store(true); return nil })
	good := page{URL: "https://example.org"}
	var nilCtx context.Context
	for _, c := range []struct {
		name string
		run  func() (*handlertest.Outcome, error)
		want error
	}{
		{"nil ctx", func() (*handlertest.Outcome, error) {
			return handlertest.Run(nilCtx, e.f, h, good, handlertest.Options{})
		}, fleet.ErrInvalidArgument},
		{"nil fleet", func() (*handlertest.Outcome, error) { return handlertest.Run(ctx, nil, h, good, handlertest.Options{}) }, fleet.ErrInvalidArgument},
		{"nil handler", func() (*handlertest.Outcome, error) {
			return handlertest.Run[struct{}, struct{}, page](ctx, e.f, nil, good, handlertest.Options{})
		}, fleet.ErrInvalidArgument},
		{"nil BatchFunc", func() (*handlertest.Outcome, error) {
			return handlertest.Run(ctx, e.f, fleet.BatchFunc[struct{}, struct{}, page](nil), good, handlertest.Options{})
		}, fleet.ErrInvalidArgument},
		{"worker type", func() (*handlertest.Outcome, error) {
			return handlertest.Run(ctx, e.f, h, good, handlertest.Options{Worker: fleet.WorkerOptions{Type: "pages"}})
		}, fleet.ErrInvalidArgument},
		{"not before", func() (*handlertest.Outcome, error) {
			return handlertest.Run(ctx, e.f, h, good, handlertest.Options{Submit: fleet.SubmitOptions{NotBefore: time.Now().Add(time.Hour)}})
		}, fleet.ErrInvalidArgument},
		{"bad queue options", func() (*handlertest.Outcome, error) {
			return handlertest.Run(ctx, e.f, h, good, handlertest.Options{Queue: fleet.QueueOptions{Lease: -1}})
		}, fleet.ErrInvalidArgument},
		{"bad worker options", func() (*handlertest.Outcome, error) {
			return handlertest.Run(ctx, e.f, h, good, handlertest.Options{Worker: fleet.WorkerOptions{Slots: -1}})
		}, fleet.ErrInvalidArgument},
		{"payload fails validation", func() (*handlertest.Outcome, error) {
			return handlertest.Run(ctx, e.f, h, page{URL: "not a url"}, handlertest.Options{})
		}, fleet.ErrInvalidPayload},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := e.keys(t)
			out, err := c.run()
			if !errors.Is(err, c.want) || out != nil {
				t.Errorf("Run = %+v, %v; want %v", out, err, c.want)
			}
			if after := e.keys(t); !slices.Equal(before, after) {
				t.Errorf("keys before Run %q, after %q", before, after)
			}
		})
	}
	if ran.Load() {
		t.Error("a handler ran")
	}
	if _, err := handlertest.ResultAs[int](nil); !errors.Is(err, fleet.ErrInvalidArgument) {
		t.Errorf("ResultAs(nil) = %v", err)
	}
	if _, err := handlertest.ResultAs[int](&handlertest.Outcome{Kind: handlertest.Acked, Result: json.RawMessage(`"x"`)}); !errors.Is(err, fleet.ErrDecode) {
		t.Errorf("ResultAs of a string into int = %v", err)
	}
	closed := open(t, redistest.Targets(t)[0])
	_ = closed.f.Close()
	if _, err := handlertest.Run(ctx, closed.f, h, good, handlertest.Options{}); !errors.Is(err, fleet.ErrClosed) {
		t.Errorf("Run on a closed Fleet = %v, want ErrClosed", err)
	}
}

// TestRunHistoryForgotten: the Fleet's history forgets Run's queue, so no
// later flush writes its keys back.
func TestRunHistoryForgotten(t *testing.T) {
	e := open(t, redistest.Targets(t)[0], func(o *fleet.Options) { o.HistoryFlush = 20 * time.Millisecond })
	before := e.keys(t) // Open's own (fleet:meta)
	out, err := run(t, e, testCtx(t), fleet.TaskFunc(func(ctx context.Context, p sum) error { return nil }), sum{}, handlertest.Options{})
	if err != nil || out.Kind != handlertest.Acked {
		t.Fatalf("Run = %+v, %v", out, err)
	}
	time.Sleep(200 * time.Millisecond) // flushes
	if left := e.keys(t); !slices.Equal(before, left) {
		t.Errorf("keys before Run %q, after the history's flushes %q", before, left)
	}
}

// TestRunCanceled: a Queue.Cancel of the running task reaches the handler
// at its next lease extension (ctx cause ErrCanceled), and the task goes
// to the dead letters as cancelled.
func TestRunCanceled(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		e := open(t, tg)
		out, err := run(t, e, testCtx(t), fleet.BatchFunc[struct{}, struct{}, sum](func(ctx context.Context, s *fleet.Slot[struct{}, struct{}], task *fleet.Task[sum]) error {
			if err := s.Fleet().Queue(task.Queue()).Cancel(ctx, task.ID); err != nil {
				return err
			}
			<-ctx.Done()
			return context.Cause(ctx)
		}), sum{}, handlertest.Options{Worker: fleet.WorkerOptions{LeaseExtend: 20 * time.Millisecond}})
		if err != nil {
			t.Fatal(err)
		}
		if out.Kind != handlertest.Canceled || !errors.Is(out.Err, fleet.ErrCanceled) || !strings.Contains(out.Reason, fleet.ErrCanceled.Error()) {
			t.Fatalf("outcome %+v, want canceled", out)
		}
	})
}

// TestRunLeavesNoGoroutine: once Run returns, no goroutine of the run is
// left (the Fleet's own, such as its history's flusher, started by a
// first run, stay until Close).
func TestRunLeavesNoGoroutine(t *testing.T) {
	e := open(t, redistest.Targets(t)[0])
	ctx := testCtx(t)
	h := fleet.TaskFunc(func(ctx context.Context, p sum) error { return nil })
	if _, err := handlertest.Run(ctx, e.f, h, sum{}, handlertest.Options{}); err != nil {
		t.Fatal(err)
	}
	opt := goleak.IgnoreCurrent()
	for _, h := range []fleet.BatchAutomation[struct{}, struct{}, sum]{h,
		fleet.TaskFunc(func(ctx context.Context, p sum) error { return errors.New("boom") }),
		fleet.TaskFunc(func(ctx context.Context, p sum) error { panic("oops") }),
	} {
		if _, err := handlertest.Run(ctx, e.f, h, sum{}, handlertest.Options{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := goleak.Find(opt); err != nil {
		t.Error(err)
	}
}
