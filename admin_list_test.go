package fleet_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/internal/redistest"
)

type listJob struct {
	N int `json:"n"`
}

func TestAdminPendingAndScheduledTasks(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		q := fleet.NewQueue[listJob](e.F, "jobs", fleet.QueueOptions{})
		var ids []string
		for i := range 5 {
			id, err := q.Submit(c, listJob{N: i})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		later := time.Now().Add(time.Hour)
		sid, err := q.SubmitWith(c, listJob{N: 9}, fleet.SubmitOptions{NotBefore: later})
		if err != nil {
			t.Fatal(err)
		}
		got, err := e.F.Queue("jobs").Pending(c, 1, 3)
		if err != nil {
			t.Fatal(err)
		}
		var gotIDs []string
		for i, ti := range got {
			gotIDs = append(gotIDs, ti.ID)
			if string(ti.Payload) != `{"n":`+string(rune('1'+i))+`}` || ti.Attempts != 0 || !ti.ReadyAt.IsZero() {
				t.Errorf("pending %d: %+v", i, ti)
			}
		}
		if !slices.Equal(gotIDs, ids[1:4]) {
			t.Fatalf("pending ids %q, want %q", gotIDs, ids[1:4])
		}
		if got, err := e.F.Queue("jobs").Pending(c, 5, 10); err != nil || len(got) != 0 {
			t.Fatalf("past the end: %v %v", got, err)
		}
		sch, err := e.F.Queue("jobs").Scheduled(c, 0, 10)
		if err != nil || len(sch) != 1 {
			t.Fatalf("scheduled: %+v %v", sch, err)
		}
		if sch[0].ID != sid || string(sch[0].Payload) != `{"n":9}` || sch[0].ReadyAt.UnixMilli() != later.UnixMilli() {
			t.Fatalf("scheduled: %+v (want ready at %v)", sch[0], later)
		}
		if got, err := e.F.Queue("nope").Pending(c, 0, 10); err != nil || len(got) != 0 {
			t.Fatalf("unknown queue: %v %v", got, err)
		}
		if _, err := e.F.Queue("jobs").Pending(c, -1, 10); !errors.Is(err, fleet.ErrInvalidArgument) {
			t.Fatalf("negative offset: %v", err)
		}
		if _, err := e.F.Queue("a{b}").Scheduled(c, 0, 10); !errors.Is(err, fleet.ErrInvalidName) {
			t.Fatalf("bad name: %v", err)
		}
		// A poison body lists with no id and its raw text.
		e.do(t, e.Raw.B().Rpush().Key(e.key("fleet:queue:jobs", "fleet:queue:{jobs}")).Element("not json").Build())
		got, err = e.F.Queue("jobs").Pending(c, 5, 1)
		if err != nil || len(got) != 1 || got[0].ID != "" || got[0].Raw != "not json" {
			t.Fatalf("poison: %+v %v", got, err)
		}
	})
}

func TestAdminRegistered(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		if _, err := fleet.NewQueue[listJob](e.F, "jobs", fleet.QueueOptions{}).Submit(c, listJob{}); err != nil {
			t.Fatal(err)
		}
		if _, err := cookiePool(e, "cookies").Put(c, cookie{}, cookieTags{Site: "x"}, 0); err != nil {
			t.Fatal(err)
		}
		e.addWorker(t, "scraper", "h1", "IDLE", time.Now())
		for _, tc := range []struct {
			kind fleet.RegistryKind
			name string
			want bool
		}{
			{fleet.RegistryQueue, "jobs", true}, {fleet.RegistryQueue, "other", false}, {fleet.RegistryQueue, "a{b}", false},
			{fleet.RegistryPool, "cookies", true}, {fleet.RegistryPool, "jobs", false},
			{fleet.RegistryWorker, "scraper|h1", true}, {fleet.RegistryWorker, "scraper|h2", false},
			{fleet.RegistryWorker, "scraper", false}, {fleet.RegistryWorker, "x|y|z", false},
		} {
			if got, err := e.F.Registered(c, tc.kind, tc.name); err != nil || got != tc.want {
				t.Errorf("Registered(%d, %q) = %v, %v; want %v", tc.kind, tc.name, got, err, tc.want)
			}
		}
		if _, err := e.F.Registered(c, 0, "jobs"); !errors.Is(err, fleet.ErrInvalidArgument) {
			t.Fatalf("kind 0: %v", err)
		}
	})
}

func TestAdminStatsFrames(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		e.addWorker(t, "scraper", "h1", "IDLE", time.Now())
		e.do(t, e.Raw.B().Set().Key(e.key("wkr:scraper:h1:stats", "wkr:{scraper:h1}:stats")).
			Value(`{"ts":5,"gen":3,"slots":2,"busy":1,"done":40,"failed":2,"emitted":7}`).Build())
		ws := []fleet.WorkerInfo{{Type: "scraper", ID: "h1"}, {Type: "scraper", ID: "gone"}, {Type: "bad|type", ID: "x"}}
		got, err := e.F.StatsFrames(c, ws)
		if err != nil {
			t.Fatal(err)
		}
		want := fleet.WorkerStats{TS: 5, Gen: 3, Slots: 2, Busy: 1, Done: 40, Failed: 2, Emitted: 7}
		if len(got) != 3 || got[0].TS != want.TS || got[0].Gen != want.Gen || got[0].Done != want.Done ||
			got[0].Failed != want.Failed || got[0].Busy != want.Busy || got[0].Slots != want.Slots || got[0].Emitted != want.Emitted ||
			got[1].TS != 0 || got[2].TS != 0 {
			t.Fatalf("frames %+v", got)
		}
	})
}

func TestAdminPoolTagCounts(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		p := cookiePool(e, "cookies")
		for _, tags := range []cookieTags{{Site: "a", Fresh: true}, {Site: "a"}, {Site: "b", Fresh: true}} {
			if _, err := p.Put(c, cookie{}, tags, 0); err != nil {
				t.Fatal(err)
			}
		}
		cl, err := p.Where(fleet.Eq("site", "b")).Claim(c, fleet.ClaimOptions{Hold: time.Minute})
		if err != nil || cl == nil {
			t.Fatalf("claim: %v %v", cl, err)
		}
		got, err := e.F.PoolTagCounts(c, "cookies")
		if err != nil {
			t.Fatal(err)
		}
		want := []fleet.TagCount{
			{Field: "fresh", Value: "false", Items: 1}, {Field: "fresh", Value: "true", Items: 2, Claimed: 1},
			{Field: "ratio", Value: "0", Items: 3, Claimed: 1},
			{Field: "site", Value: `"a"`, Items: 2}, {Field: "site", Value: `"b"`, Items: 1, Claimed: 1},
		}
		if !slices.Equal(got, want) {
			t.Fatalf("counts\n got %+v\nwant %+v", got, want)
		}
		if got, err := e.F.PoolTagCounts(c, "none"); err != nil || len(got) != 0 {
			t.Fatalf("missing pool: %v %v", got, err)
		}
		if _, err := e.F.PoolTagCounts(c, "a:b"); !errors.Is(err, fleet.ErrInvalidName) {
			t.Fatalf("bad name: %v", err)
		}
	})
}

func TestAdminStreamTail(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		s := fleet.NewStream[listJob](e.F, "scraper", fleet.StreamOptions{})
		var ids []string
		for i := range 4 {
			id, err := s.Push(c, listJob{N: i})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		got, err := e.F.StreamTail(c, "scraper", time.Time{}, 2)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 2 || got[0].ID != ids[2] || got[1].ID != ids[3] || string(got[1].Data) != `{"n":3}` {
			t.Fatalf("newest two: %+v", got)
		}
		all, err := e.F.StreamTail(c, "scraper", got[1].Time, 10)
		if err != nil {
			t.Fatal(err)
		}
		// Every entry at or after the last one's time: that one at least,
		// and none before it.
		if len(all) == 0 || all[len(all)-1].ID != ids[3] {
			t.Fatalf("since: %+v", all)
		}
		for _, en := range all {
			if en.Time.Before(got[1].Time) {
				t.Fatalf("entry before since: %+v", en)
			}
		}
		if _, err := e.F.StreamTail(c, "scraper", time.Time{}, 0); !errors.Is(err, fleet.ErrInvalidArgument) {
			t.Fatalf("n 0: %v", err)
		}
		if got, err := e.F.StreamTail(c, "empty", time.Time{}, 5); err != nil || len(got) != 0 {
			t.Fatalf("empty: %v %v", got, err)
		}
	})
}
