package fleet_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/internal/redistest"
)

// RemoveWorkersAfter removes the workers not seen for that long (server
// clock), keys and index entries, and keeps the others; without it no
// worker is ever removed.
func TestSweeperForgetsWorkers(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		now := e.serverNow(t)
		for i := range 30 {
			e.addWorker(t, "scraper", "old-"+string(rune('a'+i%26))+string(rune('a'+i/26)), "IDLE", now.Add(-2*time.Hour))
		}
		e.addWorker(t, "scraper", "fresh", "RUNNING", now.Add(-time.Minute))
		e.addWorker(t, "mailer", "fresh", "IDLE", now)
		before := e.keys(t)

		st, err := e.F.Sweep(ctx(t), fleet.SweeperOptions{})
		if err != nil || st.WorkersRemoved != 0 || !slices.Equal(e.keys(t), before) {
			t.Fatalf("without the option: %+v %v, keys changed: %v", st, err, !slices.Equal(e.keys(t), before))
		}
		st, err = e.F.Sweep(ctx(t), fleet.SweeperOptions{RemoveWorkersAfter: time.Hour, RemoveBatch: 7})
		if err != nil || st.WorkersRemoved != 30 {
			t.Fatalf("Sweep = %+v, %v; want 30 forgotten", st, err)
		}
		want := append(append(e.workerKeys("scraper", "fresh"), e.workerKeys("mailer", "fresh")...),
			e.Prefix+"wkrs:scraper", e.Prefix+"wkrs:mailer", e.Prefix+"wkrs:all")
		sameKeys(t, "after forgetting", e.keys(t), want)
		if m := e.smembers(t, e.Prefix+"wkrs:all"); !slices.Equal(m, []string{"mailer|fresh", "scraper|fresh"}) {
			t.Fatalf("wkrs:all %v", m)
		}
		if _, err := e.F.Sweep(ctx(t), fleet.SweeperOptions{RemoveWorkersAfter: -time.Second}); !errors.Is(err, fleet.ErrInvalidArgument) {
			t.Fatalf("negative RemoveWorkersAfter: %v", err)
		}
	})
}
