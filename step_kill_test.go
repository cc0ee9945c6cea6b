package fleet_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/internal/redistest"
)

// The environment of a step-killer process (runStepKiller): the point to
// die at, and the Fleet to open.
const (
	stepKillAt     = "FLEET_TEST_STEP_KILL_AT"
	stepKillURL    = "FLEET_TEST_STEP_KILL_URL"
	stepKillPrefix = "FLEET_TEST_STEP_KILL_PREFIX"
	stepKillTagged = "FLEET_TEST_STEP_KILL_TAGGED"
)

// stepKillLease is the lease of the killed task's queue: the next worker
// gets the task once it ran out.
const stepKillLease = time.Second

// stepKillHandler is the handler of both processes: one durable step
// whose effect is an INCR of "<prefix>effects" (its result: the count it
// made), then the step's result as the task's. kill, when not nil, is
// called at each point: "in" (inside fn, before its effect), "effect"
// (after the effect, before the record), "record" (after Step returned:
// the record acknowledged).
func stepKillHandler(prefix string, kill func(point string), runs *atomic.Int32) fleet.BatchFunc[wcfg, out, job] {
	return func(ctx context.Context, s *fleet.Slot[wcfg, out], t *fleet.Task[job]) error {
		c := s.Fleet().Client()
		v, err := fleet.Step(ctx, t, "charge", func(ctx context.Context) (int64, error) {
			if runs != nil {
				runs.Add(1)
			}
			kill("in")
			n, err := c.Do(ctx, c.B().Incr().Key(prefix+"effects").Build()).AsInt64()
			if err != nil {
				return 0, err
			}
			kill("effect")
			return n, nil
		})
		if err != nil {
			return err
		}
		kill("record")
		return t.SetResult(v)
	}
}

// runStepKiller is a worker process of TestStepKilledAtEachPoint: it runs
// the queue "killed" and SIGKILLs itself at the point its environment
// names, saying so on stderr first.
func runStepKiller() int {
	at := os.Getenv(stepKillAt)
	prefix := os.Getenv(stepKillPrefix)
	opts := fleet.Options{URL: os.Getenv(stepKillURL), Prefix: prefix, Layout: fleet.LayoutCompat}
	if os.Getenv(stepKillTagged) == "1" {
		opts.Layout = fleet.LayoutTagged
	}
	ctx := context.Background()
	f, err := fleet.Open(ctx, opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		return 2
	}
	q := fleet.NewQueue[job](f, "killed", fleet.QueueOptions{Lease: stepKillLease})
	kill := func(point string) {
		if point != at {
			return
		}
		fmt.Fprintf(os.Stderr, "killed at %s\n", point)
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way
	}
	w := fleet.NewBatchWorker(f, fleet.WorkerOptions{Type: "killed", ID: "killer", Slots: 1}, q, stepKillHandler(prefix, kill, nil))
	if err := w.Start(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "start:", err)
		return 2
	}
	time.Sleep(time.Minute)
	fmt.Fprintln(os.Stderr, "not killed within a minute")
	return 3
}

// TestStepKilledAtEachPoint: a worker process SIGKILLed at each point of
// a durable step, on the three targets. Killed inside fn before its
// effect, or after the effect but before the record, it recorded nothing
// (the steps hash has no record of the step); killed after Step returned,
// the record is there. The next worker, once the lease ran out, runs fn
// again in the first two cases (after the effect: the effect repeats, as
// documented) and not in the third (the recorded result comes back); the
// task ends with the step's result, recorded once.
func TestStepKilledAtEachPoint(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		for _, pt := range []struct {
			point    string
			effects  int64 // the INCRs at the kill
			recorded bool  // the step's record is there at the kill
			rerun    int32 // fn's runs in the next worker
			result   int64 // the task's result: the recorded step's
		}{
			{"in", 0, false, 1, 1},
			{"effect", 1, false, 1, 2},
			{"record", 1, true, 0, 1},
		} {
			t.Run(pt.point, func(t *testing.T) {
				t.Parallel()
				e := open(t, tg)
				c := ctx(t)
				q := fleet.NewQueue[job](e.F, "killed", fleet.QueueOptions{Lease: stepKillLease})
				id, err := q.SubmitWith(c, jobN(1), fleet.SubmitOptions{Track: true})
				if err != nil {
					t.Fatal(err)
				}

				cmd := exec.Command(os.Args[0], "-test.run=^$")
				cmd.Env = append(os.Environ(), stepKillAt+"="+pt.point, stepKillURL+"="+tg.URL, stepKillPrefix+"="+e.Prefix,
					stepKillTagged+"="+map[bool]string{true: "1", false: "0"}[tg.Tagged])
				var stderr bytes.Buffer
				cmd.Stderr = &stderr
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				done := make(chan error, 1)
				go func() { done <- cmd.Wait() }()
				select {
				case <-done:
				case <-time.After(time.Minute):
					_ = cmd.Process.Kill()
					<-done
					t.Fatalf("the worker process did not die within a minute:\n%s", stderr.String())
				}
				ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
				if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL || !strings.Contains(stderr.String(), "killed at "+pt.point+"\n") {
					t.Fatalf("the worker process ended %v, not SIGKILLed at %s:\n%s", cmd.ProcessState, pt.point, stderr.String())
				}

				effects := func() int64 {
					v, err := e.compat().Get(c, e.Prefix+"effects").Result()
					if err != nil {
						return 0
					}
					n, _ := strconv.ParseInt(v, 10, 64)
					return n
				}
				if n := effects(); n != pt.effects {
					t.Fatalf("effects at the kill: %d, want %d", n, pt.effects)
				}
				recs := e.stepRecs(t, "killed", id)
				if rec, ok := recs["charge"]; ok != pt.recorded || (ok && (rec["s"] != "done" || rec["r"] != 1.0)) {
					t.Fatalf("the step's record at a kill %s: %v (recorded %v, want %v)", pt.point, recs, ok, pt.recorded)
				}
				if n, _ := e.compat().ZCard(c, e.qk("killed").Processing).Result(); n != 1 {
					t.Fatalf("%d in processing at the kill, want the dead worker's lease", n)
				}

				runSweeper(t, e.F, 50*time.Millisecond)
				var runs atomic.Int32
				startWorker(t, fleet.NewBatchWorker(e.F, fleet.WorkerOptions{Type: "killed", ID: "next", Slots: 1}, q,
					stepKillHandler(e.Prefix, func(string) {}, &runs)))
				await, cancel := context.WithTimeout(c, 30*time.Second)
				defer cancel()
				got, err := fleet.ResultOf[int64](await, q, id, fleet.Await())
				if err != nil {
					t.Fatalf("the killed task's result: %v; its steps %v", err, e.stepRecs(t, "killed", id))
				}
				if got != pt.result || runs.Load() != pt.rerun || effects() != pt.result {
					t.Fatalf("after a kill %s: result %d (want %d), fn ran %d times in the next worker (want %d), effects %d (want %d)",
						pt.point, got, pt.result, runs.Load(), pt.rerun, effects(), pt.result)
				}
				rec, err := q.Lookup(c, id)
				if err != nil || rec.Status != fleet.TaskDone || len(rec.Steps) != 1 || rec.Steps[0].Name != "charge" ||
					rec.Steps[0].State != fleet.StepDone || string(rec.Steps[0].Result) != strconv.FormatInt(pt.result, 10) {
					t.Fatalf("Lookup: %+v, %v", rec, err)
				}
			})
		}
	})
}
