package fleet_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/internal/redistest"
)

// TestWorkerMiddlewareOrder: the first middleware is the outermost; each sees
// the task's info and the handler's outcome; a middleware that recovers a
// panic turns it into its own error; one that does not call next skips the
// handler, and its error decides the outcome.
func TestWorkerMiddlewareOrder(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		qk := e.qk("mw")
		q := fleet.NewQueue[job](e.F, "mw", fleet.QueueOptions{MaxAttempts: 1})
		var mu sync.Mutex
		var trail []string
		note := func(s string) { mu.Lock(); trail = append(trail, s); mu.Unlock() }
		named := func(name string) fleet.Middleware {
			return func(next fleet.Handler) fleet.Handler {
				return func(ctx context.Context, ti fleet.TaskInfo) error {
					note(fmt.Sprintf("%s>%d", name, ti.Payload.(job).N))
					err := next(ctx, ti)
					note(fmt.Sprintf("%s<%d:%v", name, ti.Payload.(job).N, err))
					return err
				}
			}
		}
		recoverer := func(next fleet.Handler) fleet.Handler {
			return func(ctx context.Context, ti fleet.TaskInfo) (err error) {
				defer func() {
					if r := recover(); r != nil {
						err = fmt.Errorf("recovered %v: %w", r, fleet.ErrPermanent)
					}
				}()
				return next(ctx, ti)
			}
		}
		skipper := func(next fleet.Handler) fleet.Handler {
			return func(ctx context.Context, ti fleet.TaskInfo) error {
				if ti.Payload.(job).N == 3 {
					return errors.New("skipped")
				}
				return next(ctx, ti)
			}
		}
		var infos sync.Map
		capture := func(next fleet.Handler) fleet.Handler {
			return func(ctx context.Context, ti fleet.TaskInfo) error {
				infos.Store(ti.ID, ti)
				return next(ctx, ti)
			}
		}
		w := fleet.NewBatchWorker(e.F, fleet.WorkerOptions{Type: "mw", ID: "w1", Slots: 1,
			Middleware: []fleet.Middleware{capture, named("a"), named("b"), recoverer, skipper}}, q,
			fleet.BatchFunc[wcfg, out, job](func(ctx context.Context, s *fleet.Slot[wcfg, out], tk *fleet.Task[job]) error {
				note(fmt.Sprintf("h%d", tk.Payload.N))
				switch tk.Payload.N {
				case 2:
					panic("boom")
				}
				return nil
			}))
		startWorker(t, w)
		c := ctx(t)
		ids := make([]string, 0, 3)
		for n := 1; n <= 3; n++ {
			id, err := q.Submit(c, job{URL: "https://example.com/", N: n})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
			waitFor(t, 5*time.Second, func() bool { st := w.Stats(); return st.Done+st.Failed == int64(n) }, "task %d not ended", n)
		}
		want := []string{
			"a>1", "b>1", "h1", "b<1:<nil>", "a<1:<nil>",
			"a>2", "b>2", "h2", "b<2:recovered boom: fleet: permanent failure", "a<2:recovered boom: fleet: permanent failure",
			"a>3", "b>3", "b<3:skipped", "a<3:skipped",
		}
		mu.Lock()
		got := slices.Clone(trail)
		mu.Unlock()
		if !slices.Equal(got, want) {
			t.Fatalf("trail\n got %q\nwant %q", got, want)
		}
		v, ok := infos.Load(ids[0])
		if !ok {
			t.Fatal("no info for the first task")
		}
		ti := v.(fleet.TaskInfo)
		if ti.Queue != "mw" || ti.Type != "mw" || ti.Worker != "w1" || ti.Slot != 0 || ti.Attempts != 0 || ti.Deadline.IsZero() {
			t.Fatalf("info %+v", ti)
		}
		// The permanent error buried task 2; the skipped task 3 had one
		// attempt (MaxAttempts 1): both dead, with their middleware's errors.
		dead := e.lrange(t, qk.Dead)
		if len(dead) != 2 || !strings.Contains(dead[0], ids[1]) || !strings.Contains(dead[0], "recovered boom") ||
			!strings.Contains(dead[1], ids[2]) || !strings.Contains(dead[1], `"error":"skipped"`) {
			t.Fatalf("dead %q", dead)
		}
	})
}

// TestWorkerMiddlewarePanicOutside: a panic in a middleware itself is
// recovered by the worker, as a handler's is: the task is nacked, the worker
// keeps running.
func TestWorkerMiddlewarePanicOutside(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		q := fleet.NewQueue[job](e.F, "mwp", fleet.QueueOptions{MaxAttempts: 1})
		bad := func(next fleet.Handler) fleet.Handler {
			return func(ctx context.Context, ti fleet.TaskInfo) error {
				if ti.Payload.(job).N == 1 {
					panic("middleware broke")
				}
				return next(ctx, ti)
			}
		}
		var ends sync.Map
		w := fleet.NewBatchWorker(e.F, fleet.WorkerOptions{Type: "mwp", ID: "w1", Slots: 1, Middleware: []fleet.Middleware{nil, bad},
			OnTaskEnd: func(id string, err error) { ends.Store(id, err) }}, q,
			fleet.BatchFunc[wcfg, out, job](func(ctx context.Context, s *fleet.Slot[wcfg, out], tk *fleet.Task[job]) error { return nil }))
		startWorker(t, w)
		c := ctx(t)
		id1, _ := q.Submit(c, job{URL: "https://example.com/", N: 1})
		id2, _ := q.Submit(c, job{URL: "https://example.com/", N: 2})
		// OnTaskEnd runs after the stats count the task: wait for both.
		waitFor(t, 5*time.Second, func() bool {
			_, ok1 := ends.Load(id1)
			_, ok2 := ends.Load(id2)
			st := w.Stats()
			return st.Done == 1 && st.Failed == 1 && ok1 && ok2
		}, "stats %+v", w.Stats())
		e1, _ := ends.Load(id1)
		var pe *fleet.PanicError
		if err, _ := e1.(error); !errors.As(err, &pe) || pe.Value != "middleware broke" {
			t.Fatalf("end of task 1: %v", e1)
		}
		if e2, ok := ends.Load(id2); !ok || e2 != nil {
			t.Fatalf("end of task 2: %v", e2)
		}
	})
}

func ExampleMiddleware() {
	f, done := exampleFleet("middleware")
	defer done()
	ctx := context.Background()

	type Mail struct {
		To string `json:"to" validate:"required,email"`
	}
	var mu sync.Mutex
	var lines []string
	logging := func(next fleet.Handler) fleet.Handler {
		return func(ctx context.Context, t fleet.TaskInfo) error {
			err := next(ctx, t)
			mu.Lock()
			lines = append(lines, fmt.Sprintf("%s attempt=%d err=%v", t.Queue, t.Attempts, err))
			mu.Unlock()
			return err
		}
	}
	q := fleet.NewQueue[Mail](f, "mail", fleet.QueueOptions{})
	w := fleet.NewBatchWorker(f, fleet.WorkerOptions{Type: "mailer", ID: "m1", Slots: 1, Middleware: []fleet.Middleware{logging}}, q,
		fleet.BatchFunc[struct{}, struct{}, Mail](func(ctx context.Context, s *fleet.Slot[struct{}, struct{}], t *fleet.Task[Mail]) error {
			return nil
		}))
	if err := w.Start(ctx); err != nil {
		log.Fatal(err)
	}
	_, _ = q.Submit(ctx, Mail{To: "ann@example.org"})
	for w.Stats().Done < 1 {
		time.Sleep(5 * time.Millisecond)
	}
	_ = w.Stop(ctx)
	fmt.Println(lines[0])
	// Output: mail attempt=0 err=<nil>
}
