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

// TestSweepNullBody: a reservation that another client registered with
// the body null (JSON, but no task) is buried by the sweep as poison,
// wrapped, once its deadline passed; the sweep does not fail (a null body
// once made the sweeper's rewrite panic) and the queue's other task stays.
func TestSweepNullBody(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		k := e.qk("nullbody")
		q := fastQueue(e.F, "nullbody", time.Minute)
		id, err := q.Submit(ctx(t), job{URL: "https://example.com/a", N: 1})
		if err != nil {
			t.Fatal(err)
		}
		e.do(t, e.Raw.B().Zadd().Key(k.Processing).ScoreMember().ScoreMember(1, "n1").Build())
		e.do(t, e.Raw.B().Hset().Key(k.Body).FieldValue().FieldValue("n1", "null").Build())
		st, err := e.F.Sweep(ctx(t), fleet.SweeperOptions{})
		if err != nil || st.DeadLettered != 1 {
			t.Fatalf("Sweep = %+v, %v; want the null body dead-lettered", st, err)
		}
		dead, err := q.DeadLetters(ctx(t), 0, 10)
		if err != nil || len(dead) != 1 || !dead[0].Poison() {
			t.Fatalf("DeadLetters = %+v, %v", dead, err)
		}
		if m := decodeMap(t, dead[0].Raw); m["body"] != "null" || m["error"] != "lease ran out, and body has no usable id" {
			t.Fatalf("dead letter %s", dead[0].Raw)
		}
		if n := e.do(t, e.Raw.B().Zcard().Key(k.Processing).Build()); mustInt(t, n) != 0 {
			t.Fatalf("processing still holds %d", mustInt(t, n))
		}
		got, err := q.Reserve(ctx(t), 1, time.Second)
		if err != nil || len(got) != 1 || got[0].ID != id {
			t.Fatalf("Reserve = %v, %v; want %s", got, err, id)
		}
	})
}
