package fleet_test

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/internal/redistest"
)

// workerKeys spells the five keys of a worker.
func (e *env) workerKeys(typ, id string) []string {
	var out []string
	for _, f := range []string{"config", "gen", "hardware", "state", "stats"} {
		out = append(out, e.key("wkr:"+typ+":"+id+":"+f, "wkr:{"+typ+":"+id+"}:"+f))
	}
	return out
}

// without returns keys less every key that starts with one of prefixes.
func without(keys []string, prefixes ...string) []string {
	return slices.DeleteFunc(slices.Clone(keys), func(k string) bool {
		for _, p := range prefixes {
			if strings.HasPrefix(k, p) {
				return true
			}
		}
		return false
	})
}

func sameKeys(t *testing.T, what string, got, want []string) {
	t.Helper()
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("%s: keys\n got %q\nwant %q", what, got, want)
	}
}

func TestAdminRemoveWorker(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		e := open(t, tg)
		c := ctx(t)
		e.addWorker(t, "scraper", "host1", "RUNNING", time.Now())
		e.addWorker(t, "scraper", "host2", "IDLE", time.Now())
		before := e.keys(t)
		r, err := e.F.RemoveWorker(c, "scraper", "host1")
		if err != nil || r != (fleet.RemoveReport{Workers: 1, Keys: 5, Entries: 2}) {
			t.Fatalf("remove: %+v %v", r, err)
		}
		want := slices.DeleteFunc(before, func(k string) bool { return slices.Contains(e.workerKeys("scraper", "host1"), k) })
		sameKeys(t, "after remove", e.keys(t), want)
		if m := e.smembers(t, e.Prefix+"wkrs:all"); !slices.Equal(m, []string{"scraper|host2"}) {
			t.Fatalf("wkrs:all %q", m)
		}
		if m := e.smembers(t, e.Prefix+"wkrs:scraper"); !slices.Equal(m, []string{"host2"}) {
			t.Fatalf("wkrs:scraper %q", m)
		}
		if r, err := e.F.RemoveWorker(c, "scraper", "host1"); err != nil || r != (fleet.RemoveReport{}) {
			t.Fatalf("remove again: %+v %v", r, err)
		}
		for _, bad := range [][2]string{{"a|b", "x"}, {"a", "x{y}"}, {"", "x"}, {"a:b", "x"}} {
			if _, err := e.F.RemoveWorker(c, bad[0], bad[1]); !errors.Is(err, fleet.ErrInvalidName) {
				t.Errorf("remove %q: %v", bad, err)
			}
		}
	})
}

func TestAdminPurgeType(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		e := open(t, tg)
		c := ctx(t)
		e.addWorker(t, "scraper", "host1", "RUNNING", time.Now())
		e.addWorker(t, "scraper", "host2", "IDLE", time.Now())
		e.addWorker(t, "mailer", "m1", "IDLE", time.Now())
		e.do(t, e.Raw.B().Zadd().Key(e.Prefix+"stream:scraper").ScoreMember().ScoreMember(1, `{"a":1}`).Build())
		e.do(t, e.Raw.B().Zadd().Key(e.Prefix+"stream:mailer").ScoreMember().ScoreMember(1, `{"a":1}`).Build())
		e.do(t, e.Raw.B().Hset().Key(e.Prefix+"fleet:catalog").FieldValue().FieldValue("scraper", "{}").FieldValue("mailer", "{}").Build())
		q := fleet.NewQueue[job](e.F, "scraper", fleet.QueueOptions{})
		if _, err := q.SubmitWith(c, jobN(1), fleet.SubmitOptions{DedupKey: "d"}); err != nil {
			t.Fatal(err)
		}
		if reserved, err := q.Reserve(c, 1, 0); err != nil || len(reserved) != 1 {
			t.Fatal(reserved, err)
		}
		if _, err := q.SubmitWith(c, jobN(2), fleet.SubmitOptions{NotBefore: time.Now().Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
		if _, err := fleet.NewQueue[job](e.F, "mailer", fleet.QueueOptions{}).Submit(c, jobN(3)); err != nil {
			t.Fatal(err)
		}
		// The queue's done-record index and history: this hour's and a
		// day's of three days ago.
		sq := e.qk("scraper")
		now := time.Now().Unix()
		for _, k := range []string{sq.Pending + ":hist:m:" + strconv.FormatInt(now/3600*3600, 10), sq.Pending + ":hist:d:" + strconv.FormatInt(now/86400*86400-3*86400, 10)} {
			e.do(t, e.Raw.B().Hset().Key(k).FieldValue().FieldValue("d", "1").Build())
		}
		e.do(t, e.Raw.B().Zadd().Key(sq.Pending+":retained").ScoreMember().ScoreMember(1, "x").Build())
		r, err := e.F.RemoveType(c, "scraper")
		if err != nil {
			t.Fatal(err)
		}
		// 10 worker keys, the stream, and the queue's processing, body,
		// lease, scheduled, dedup and policy (its pending list is empty;
		// wkrs:scraper empties as its workers go, 2 entries each), its
		// :retained and two history buckets.
		if r.Workers != 2 || r.Keys != 10+1+6+3 || r.Entries != 4+1+1 {
			t.Fatalf("report %+v", r)
		}
		mq := e.qk("mailer")
		want := append(e.workerKeys("mailer", "m1"), e.Prefix+"wkrs:mailer", e.Prefix+"wkrs:all", e.Prefix+"stream:mailer",
			e.Prefix+"fleet:catalog", e.Prefix+"fleet:queues", mq.Pending, mq.Policy)
		sameKeys(t, "after purge", e.keys(t), want)
		if m := e.smembers(t, e.Prefix+"fleet:queues"); !slices.Equal(m, []string{"mailer"}) {
			t.Fatalf("fleet:queues %q", m)
		}
		if m := e.hgetall(t, e.Prefix+"fleet:catalog"); len(m) != 1 || m["mailer"] != "{}" {
			t.Fatalf("catalog %q", m)
		}
		if r, err := e.F.RemoveType(c, "scraper"); err != nil || r != (fleet.RemoveReport{}) {
			t.Fatalf("purge again: %+v %v", r, err)
		}
		if _, err := e.F.RemoveType(c, "a|b"); !errors.Is(err, fleet.ErrInvalidName) {
			t.Fatalf("bad type: %v", err)
		}
	})
}

func TestAdminDropPool(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		e := open(t, tg)
		c := ctx(t)
		keep := fleet.NewPool[string, adminTags](e.F, "keep", fleet.PoolOptions{})
		if _, err := keep.Put(c, "k", adminTags{Region: "eu"}, 0); err != nil {
			t.Fatal(err)
		}
		kept := e.keys(t)
		fx := newFixture(t, e) // pool "cookies" with a claim, queue, workers
		_ = fx
		other := without(e.keys(t), e.key("fleet:pool:cookies", "fleet:pool:{cookies}"), e.key("fleet:pidx:cookies:", "fleet:pidx:{cookies}:"))
		r, err := e.F.RemovePool(c, "cookies")
		if err != nil {
			t.Fatal(err)
		}
		// hash, all, exp, sig, tags, free, held, fields, 3 tag sets of the
		// free items (region:seu, fast:T, fast:F), claim, owner, token
		if r.Items != 3 || r.Keys != 14 || r.Entries != 1 {
			t.Fatalf("report %+v", r)
		}
		sameKeys(t, "after drop", e.keys(t), other)
		if m := e.smembers(t, e.Prefix+"fleet:pools"); !slices.Equal(m, []string{"keep"}) {
			t.Fatalf("fleet:pools %q", m)
		}
		if r, err := e.F.RemovePool(c, "cookies"); err != nil || r != (fleet.RemoveReport{}) {
			t.Fatalf("drop again: %+v %v", r, err)
		}
		if _, err := e.F.RemovePool(c, "a:b"); !errors.Is(err, fleet.ErrInvalidName) {
			t.Fatalf("bad name: %v", err)
		}
		if n, err := keep.Size(c); err != nil || n != 1 {
			t.Fatalf("kept pool: %d %v", n, err)
		}
		_ = kept
	})
}

func TestAdminWorkers(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		e := open(t, tg)
		c := ctx(t)
		now := time.Now()
		e.addWorker(t, "scraper", "host1", "RUNNING", now)
		e.addWorker(t, "scraper", "host2", "IDLE", now.Add(-time.Hour))
		e.addWorker(t, "mailer", "m1", "ERROR", now)
		e.do(t, e.Raw.B().Hset().Key(e.key("wkr:mailer:m1:state", "wkr:{mailer:m1}:state")).FieldValue().FieldValue("last_error", "smtp down").Build())
		all, err := e.F.Workers(c, fleet.WorkersFilter{})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, w := range all {
			got = append(got, w.Type+"|"+w.ID+"|"+string(w.State)+"|"+w.LastError)
			if w.Gen != 7 || w.LastSeen.IsZero() {
				t.Errorf("worker %+v", w)
			}
		}
		if want := []string{"mailer|m1|ERROR|smtp down", "scraper|host1|RUNNING|", "scraper|host2|IDLE|"}; !slices.Equal(got, want) {
			t.Fatalf("workers %q", got)
		}
		act, err := e.F.Workers(c, fleet.WorkersFilter{Type: "scraper", ActiveWithin: time.Minute})
		if err != nil || len(act) != 1 || act[0].ID != "host1" {
			t.Fatalf("active scrapers: %+v %v", act, err)
		}
		if w, err := e.F.Workers(c, fleet.WorkersFilter{Type: "none"}); err != nil || len(w) != 0 {
			t.Fatalf("no type: %+v %v", w, err)
		}
		if _, err := e.F.Workers(c, fleet.WorkersFilter{Type: "a|b"}); !errors.Is(err, fleet.ErrInvalidName) {
			t.Fatalf("bad type: %v", err)
		}
		if _, err := e.F.Workers(c, fleet.WorkersFilter{ActiveWithin: -1}); !errors.Is(err, fleet.ErrInvalidArgument) {
			t.Fatalf("negative: %v", err)
		}
	})
}

func TestAdminQueueOpsAndOverview(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		e := open(t, tg)
		c := ctx(t)
		newFixture(t, e)
		st, err := e.F.Queue("crawl").Stats(c)
		if err != nil || counted(t, st) != (fleet.QueueStats{Pending: 2, InFlight: 1, Scheduled: 1, Dead: 1}) {
			t.Fatalf("stats %+v %v", st, err)
		}
		ov, err := e.F.Overview(c)
		if err != nil {
			t.Fatal(err)
		}
		if len(ov.Queues) != 1 || (fleet.QueueCounts{Name: ov.Queues[0].Name, QueueStats: counted(t, ov.Queues[0].QueueStats)}) != (fleet.QueueCounts{Name: "crawl", QueueStats: fleet.QueueStats{Pending: 2, InFlight: 1, Scheduled: 1, Dead: 1}}) {
			t.Fatalf("overview queues %+v", ov.Queues)
		}
		if len(ov.Pools) != 1 || ov.Pools[0] != (fleet.PoolCounts{Name: "cookies", Items: 3, Claimed: 1}) {
			t.Fatalf("overview pools %+v", ov.Pools)
		}
		dl, err := e.F.Queue("crawl").DeadLetters(c, 0, 10)
		if err != nil || len(dl) != 1 || dl[0].ID != "dead1" || dl[0].Error != "boom" {
			t.Fatalf("dead letters %+v %v", dl, err)
		}
		if err := e.F.Queue("crawl").RequeueDead(c, "nope"); !errors.Is(err, fleet.ErrDeadLetterNotFound) {
			t.Fatalf("requeue missing: %v", err)
		}
		if err := e.F.Queue("crawl").RequeueDead(c, "dead1"); err != nil {
			t.Fatal(err)
		}
		if st, _ := e.F.Queue("crawl").Stats(c); st.Pending != 3 || st.Dead != 0 {
			t.Fatalf("after requeue %+v", st)
		}
		e.do(t, e.Raw.B().Rpush().Key(e.qk("crawl").Dead).Element(`{"id":"d2","payload":1}`, `not json`).Build())
		if n, err := e.F.Queue("crawl").RequeueAllDead(c); err != nil || n != 1 {
			t.Fatalf("requeue all: %d %v", n, err)
		}
		if n, err := e.F.Queue("crawl").PurgeDead(c); err != nil || n != 1 {
			t.Fatalf("purge: %d %v", n, err)
		}
		if st, err := e.F.Queue("nothing").Stats(c); err != nil || st != (fleet.QueueStats{}) {
			t.Fatalf("missing queue: %+v %v", st, err)
		}
		if _, err := e.F.Queue("a:b").Stats(c); !errors.Is(err, fleet.ErrInvalidName) {
			t.Fatalf("bad name: %v", err)
		}
		if _, err := e.F.Queue("a{b}").PurgeDead(c); !errors.Is(err, fleet.ErrInvalidName) {
			t.Fatalf("bad name: %v", err)
		}
	})
}
