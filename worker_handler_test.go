package fleet_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/internal/redistest"
)

// Handler's plain function acks on nil and dead-letters an error wrapping
// ErrPermanent, as a BatchFunc does; its catalog entry has an empty config.
func TestHandlerShortForm(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		q := fleet.NewQueue[job](e.F, "short", fleet.QueueOptions{})
		w := fleet.NewBatchWorker(e.F, fleet.WorkerOptions{Type: "short", ID: "w1", Slots: 1}, q,
			fleet.TaskFunc(func(ctx context.Context, p job) error {
				if p.N == 2 {
					return fmt.Errorf("n=2 never works: %w", fleet.ErrPermanent)
				}
				return nil
			}))
		startWorker(t, w)
		if _, err := q.SubmitMany(c, []job{jobN(1), jobN(2), jobN(3)}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 10*time.Second, func() bool { st := w.Stats(); return st.Done == 2 && st.Failed == 1 }, "stats %+v", later(func() any { return w.Stats() }))
		// The dead letter is written before the stats count it, but wait on
		// Redis itself rather than on the in-process signal.
		var dead []fleet.DeadLetter
		waitFor(t, 5*time.Second, func() bool {
			var err error
			dead, err = q.DeadLetters(c, 0, 10)
			return err == nil && len(dead) == 1
		}, "no dead letter")
		if string(dead[0].Payload) != `{"url":"https://example.com/2","n":2}` || !strings.Contains(dead[0].Error, "n=2 never works") || dead[0].Attempts != 1 {
			t.Fatalf("dead letter %+v", dead[0])
		}
		if st, err := q.Stats(c); err != nil || st.Pending != 0 || st.InFlight != 0 || st.Scheduled != 0 || st.Dead != 1 {
			t.Fatalf("queue stats %+v, %v", st, err)
		}
	})
}
