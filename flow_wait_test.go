package fleet_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/internal/redistest"
)

// TestWaitFlow: WaitFlow, called while a flow's fetches are held, returns
// only once the flow is done, with its final status (4 succeeded), and the
// join's result is there when it does; Batch.Wait returns a closed batch's
// final status; an open batch's wait ends with ctx; an unknown id gives
// ErrFlowNotFound, a bad one ErrInvalidArgument. With client-side caching
// and without (Options.DisableCache: the waiter looks again on a backoff).
func TestWaitFlow(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		for _, nocache := range []bool{false, true} {
			e := open(t, tg, func(o *fleet.Options) { o.DisableCache = nocache })
			c := ctx(t)
			fetch := fleet.NewQueue[node](e.F, "wf-fetch", fleet.QueueOptions{})
			join := fleet.NewQueue[node](e.F, "wf-join", fleet.QueueOptions{})
			gate := make(chan struct{})
			log := newRunLog()
			flowWorker(t, e.F, fetch, log, func(ctx context.Context, tk *fleet.Task[node]) (int, error) {
				<-gate
				return tk.Payload.N, nil
			})
			flowWorker(t, e.F, join, log, sumKids(fetch))
			fl := fleet.NewFlow(e.F, fleet.FlowOptions{})
			var kids []string
			var deps []*fleet.FlowStep
			for n := 1; n <= 3; n++ {
				s := fleet.AddStep(fl, fetch, node{N: n}, fleet.SubmitOptions{})
				kids, deps = append(kids, s.ID()), append(deps, s)
			}
			j := fleet.AddStep(fl, join, node{Kids: kids}, fleet.SubmitOptions{After: fleet.Steps(deps...)})
			if err := fl.Submit(c); err != nil {
				t.Fatal(err)
			}
			type res struct {
				st  fleet.FlowStatus
				err error
			}
			got := make(chan res, 1)
			go func() {
				st, err := e.F.WaitFlow(c, fl.ID())
				got <- res{st, err}
			}()
			waitFor(t, 10*time.Second, func() bool { return log.runs(kids[0])+log.runs(kids[1])+log.runs(kids[2]) == 3 }, "the fetches to start")
			select {
			case r := <-got:
				t.Fatalf("WaitFlow returned while the fetches were held: %+v %v", r.st, r.err)
			default:
			}
			close(gate)
			r := <-got
			if want := (fleet.FlowStatus{ID: fl.ID(), State: fleet.FlowDone, Total: 4, Succeeded: 4}); r.err != nil || r.st != want {
				t.Fatalf("WaitFlow = %+v, %v; want %+v", r.st, r.err, want)
			}
			if sum, err := fleet.ResultOf[int](c, join, j.ID()); err != nil || sum != 6 {
				t.Fatalf("the join's result once WaitFlow returned: %d %v", sum, err)
			}
			// Done already: at once.
			if st, err := e.F.WaitFlow(c, fl.ID()); err != nil || st.State != fleet.FlowDone {
				t.Fatalf("WaitFlow of a done flow: %+v %v", st, err)
			}

			b, err := e.F.NewBatch(c, fleet.BatchOptions{OnComplete: fleet.NewCallback(join, node{N: 100}, fleet.SubmitOptions{})})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := fleet.BatchAdd(c, b, fetch, []node{{N: 1}, {N: 2}}, fleet.SubmitOptions{}); err != nil {
				t.Fatal(err)
			}
			short, cancel := context.WithTimeout(c, 100*time.Millisecond)
			if _, err := b.Wait(short); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Wait of an open batch: %v", err)
			}
			cancel()
			if err := b.Close(c); err != nil {
				t.Fatal(err)
			}
			if st, err := b.Wait(c); err != nil || st != (fleet.FlowStatus{ID: b.ID(), State: fleet.FlowDone, Total: 2, Succeeded: 2}) {
				t.Fatalf("Batch.Wait = %+v, %v", st, err)
			}
			if _, err := e.F.WaitFlow(c, "0190aaaa-0000-7000-8000-000000000000"); !errors.Is(err, fleet.ErrFlowNotFound) {
				t.Fatalf("WaitFlow of no flow: %v", err)
			}
			if _, err := e.F.WaitFlow(c, ""); !errors.Is(err, fleet.ErrInvalidArgument) {
				t.Fatalf("WaitFlow of an empty id: %v", err)
			}
		}
	})
}
