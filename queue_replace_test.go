package fleet_test

import (
	"encoding/json"
	"errors"
	"maps"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/internal/redistest"
)

// replBody is what the replace tests read of a stored body.
type replBody struct {
	ID       string `json:"id"`
	Payload  job    `json:"payload"`
	Attempts int    `json:"attempts"`
	Dedup    string `json:"dedup"`
	Priority int    `json:"priority"`
	Group    string `json:"group"`
}

func readBody(t *testing.T, s string) replBody {
	t.Helper()
	var b replBody
	if err := json.Unmarshal([]byte(s), &b); err != nil {
		t.Fatalf("body %q: %v", s, err)
	}
	return b
}

func url(n int) job { return job{URL: "https://example.com/" + strconv.Itoa(n), N: n} }

// TestQueueReplacePending: a replace gives the pending holder the new
// payload and options, keeping its id and its place; a change of route
// (a priority, a group) moves it, and back.
func TestQueueReplacePending(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		qk := e.qk("rp")
		q := fleet.NewQueue[job](e.F, "rp", fleet.QueueOptions{})
		id, err := q.SubmitWith(c, url(1), fleet.SubmitOptions{DedupKey: "k"})
		if err != nil {
			t.Fatal(err)
		}
		other, err := q.Submit(c, url(2))
		if err != nil {
			t.Fatal(err)
		}
		replace := func(p job, o fleet.SubmitOptions) {
			t.Helper()
			o.DedupKey, o.Replace = "k", true
			got, err := q.SubmitWith(c, p, o)
			if err != nil || got != id {
				t.Fatalf("replace: %s, %v; want %s, nil", got, err, id)
			}
			if d := e.hgetall(t, qk.Dedup); len(d) != 1 || d["k"] != id {
				t.Fatalf("dedup %v", d)
			}
		}
		replace(url(3), fleet.SubmitOptions{MaxAttempts: 4})
		p := e.lrange(t, qk.Pending)
		if len(p) != 2 || p[0] != `{"id":"`+id+`","payload":{"url":"https://example.com/3","n":3},"attempts":0,"dedup":"k","max_attempts":4}` || readBody(t, p[1]).ID != other {
			t.Fatalf("pending after a replace in place: %q", p)
		}
		// To the priorities: off the list.
		replace(url(4), fleet.SubmitOptions{Priority: 3})
		if p := e.lrange(t, qk.Pending); len(p) != 1 || readBody(t, p[0]).ID != other {
			t.Fatalf("pending %q", p)
		}
		z := e.zrange(t, qk.Prio)
		if len(z) != 1 || readBody(t, z[0].Member).ID != id || readBody(t, z[0].Member).Payload.N != 4 {
			t.Fatalf("prio %v", z)
		}
		// Within the priorities: in place, its ready time kept, aged by
		// the new priority.
		replace(url(5), fleet.SubmitOptions{Priority: 5})
		z2 := e.zrange(t, qk.Prio)
		if len(z2) != 1 || readBody(t, z2[0].Member).Payload.N != 5 || readBody(t, z2[0].Member).Priority != 5 ||
			z2[0].Score != z[0].Score-2*float64(fleet.PriorityStep.Milliseconds()) {
			t.Fatalf("prio %v after %v", z2, z)
		}
		// To a group, then back to the list's tail.
		replace(url(6), fleet.SubmitOptions{Group: "g"})
		if z := e.zrange(t, qk.Prio); len(z) != 0 {
			t.Fatalf("prio %v", z)
		}
		if g := e.lrange(t, qk.Group+"g"); len(g) != 1 || readBody(t, g[0]).ID != id || readBody(t, g[0]).Payload.N != 6 {
			t.Fatalf("group %q", g)
		}
		if n, _ := e.get(t, qk.GroupPending); n != "1" {
			t.Fatalf("gpending %q", n)
		}
		replace(url(7), fleet.SubmitOptions{})
		if g := e.lrange(t, qk.Group+"g"); len(g) != 0 {
			t.Fatalf("group %q", g)
		}
		if _, ok := e.get(t, qk.GroupPending); ok {
			t.Fatal("gpending left")
		}
		p = e.lrange(t, qk.Pending)
		if len(p) != 2 || readBody(t, p[0]).ID != other || p[1] != `{"id":"`+id+`","payload":{"url":"https://example.com/7","n":7},"attempts":0,"dedup":"k"}` {
			t.Fatalf("pending %q", p)
		}
		// It runs as the last replace made it.
		ts, err := q.Reserve(c, 2, 0)
		if err != nil || len(ts) != 2 || ts[1].ID != id || ts[1].Payload.N != 7 {
			t.Fatalf("reserve %v, %v\n%v", ts, err, e.dump(t))
		}
	})
}

// TestQueueReplaceScheduled: a scheduled holder takes the new ready time,
// or becomes ready at once without one.
func TestQueueReplaceScheduled(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		qk := e.qk("rs")
		q := fleet.NewQueue[job](e.F, "rs", fleet.QueueOptions{})
		at := time.Now().Add(time.Hour).Truncate(time.Millisecond)
		id, err := q.SubmitWith(c, url(1), fleet.SubmitOptions{DedupKey: "k", NotBefore: at})
		if err != nil {
			t.Fatal(err)
		}
		later := at.Add(time.Hour)
		if got, err := q.SubmitWith(c, url(2), fleet.SubmitOptions{DedupKey: "k", Replace: true, NotBefore: later}); err != nil || got != id {
			t.Fatalf("replace: %s, %v", got, err)
		}
		z := e.zrange(t, qk.Scheduled)
		if len(z) != 1 || readBody(t, z[0].Member).ID != id || readBody(t, z[0].Member).Payload.N != 2 || int64(z[0].Score*1000+0.5) != later.UnixMilli() {
			t.Fatalf("scheduled %v; want %s at %v", z, id, later.UnixMilli())
		}
		if p := e.lrange(t, qk.Pending); len(p) != 0 {
			t.Fatalf("pending %q", p)
		}
		if got, err := q.SubmitWith(c, url(3), fleet.SubmitOptions{DedupKey: "k", Replace: true}); err != nil || got != id {
			t.Fatalf("replace: %s, %v", got, err)
		}
		if z := e.zrange(t, qk.Scheduled); len(z) != 0 {
			t.Fatalf("scheduled %v", z)
		}
		if p := e.lrange(t, qk.Pending); len(p) != 1 || readBody(t, p[0]).ID != id || readBody(t, p[0]).Payload.N != 3 {
			t.Fatalf("pending %q", p)
		}
		// A pending one goes back to wait.
		if got, err := q.SubmitWith(c, url(4), fleet.SubmitOptions{DedupKey: "k", Replace: true, NotBefore: at}); err != nil || got != id {
			t.Fatalf("replace: %s, %v", got, err)
		}
		if p := e.lrange(t, qk.Pending); len(p) != 0 {
			t.Fatalf("pending %q", p)
		}
		if z := e.zrange(t, qk.Scheduled); len(z) != 1 || readBody(t, z[0].Member).Payload.N != 4 || int64(z[0].Score*1000+0.5) != at.UnixMilli() {
			t.Fatalf("scheduled %v", z)
		}
	})
}

// TestQueueReplaceRunning: a running holder is not touched: the holder's
// id and ErrTaskRunning, nothing changed; a stale key is a plain submit.
func TestQueueReplaceRunning(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		qk := e.qk("rr")
		q := fleet.NewQueue[job](e.F, "rr", fleet.QueueOptions{})
		id, err := q.SubmitWith(c, url(1), fleet.SubmitOptions{DedupKey: "k"})
		if err != nil {
			t.Fatal(err)
		}
		ts, err := q.Reserve(c, 1, 0)
		if err != nil || len(ts) != 1 {
			t.Fatal(ts, err)
		}
		before := e.dump(t)
		for _, o := range []fleet.SubmitOptions{
			{DedupKey: "k", Replace: true},
			{DedupKey: "k", Replace: true, NotBefore: time.Now().Add(time.Hour)},
			{DedupKey: "k", Debounce: &fleet.Debounce{Window: time.Second, MaxWait: time.Minute}},
		} {
			got, err := q.SubmitWith(c, url(2), o)
			if got != id || !errors.Is(err, fleet.ErrTaskRunning) || !strings.Contains(err.Error(), id) {
				t.Fatalf("%+v: %s, %v; want %s, ErrTaskRunning", o, got, err, id)
			}
		}
		ids, err := q.SubmitManyWith(c, []fleet.Submission[job]{{Payload: url(3), Options: fleet.SubmitOptions{DedupKey: "k", Replace: true}}})
		if len(ids) != 1 || ids[0] != id || !errors.Is(err, fleet.ErrTaskRunning) || !strings.Contains(err.Error(), "submission 0") {
			t.Fatalf("many: %v, %v", ids, err)
		}
		if after := e.dump(t); !maps.Equal(before, after) {
			t.Fatalf("a refused replace changed Redis:\n%v\n%v", before, after)
		}
		// Once it ends, the key is free: a replace is a plain submit.
		if err := ts[0].Ack(c); err != nil {
			t.Fatal(err)
		}
		id2, err := q.SubmitWith(c, url(4), fleet.SubmitOptions{DedupKey: "k", Replace: true})
		if err != nil || id2 == id {
			t.Fatalf("after the ack: %s, %v", id2, err)
		}
		// A key that names no live task (a stale entry) is taken.
		if err := e.do(t, e.Raw.B().Hset().Key(qk.Dedup).FieldValue().FieldValue("s", "gone").Build()).Error(); err != nil {
			t.Fatal(err)
		}
		id3, err := q.SubmitWith(c, url(5), fleet.SubmitOptions{DedupKey: "s", Replace: true})
		if err != nil || id3 == "gone" {
			t.Fatalf("stale: %s, %v", id3, err)
		}
		if d := e.hgetall(t, qk.Dedup); d["s"] != id3 || d["k"] != id2 {
			t.Fatalf("dedup %v", d)
		}
		if p := e.lrange(t, qk.Pending); len(p) != 2 {
			t.Fatalf("pending %q", p)
		}
	})
}

// TestQueueReplaceBadInput: refused, naming the field, nothing written.
func TestQueueReplaceBadInput(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		q := fleet.NewQueue[job](e.F, "rb", fleet.QueueOptions{})
		if _, err := q.SubmitWith(c, url(1), fleet.SubmitOptions{DedupKey: "k"}); err != nil {
			t.Fatal(err)
		}
		before := e.dump(t)
		for _, tc := range []struct {
			o     fleet.SubmitOptions
			field string
		}{
			{fleet.SubmitOptions{Replace: true}, "Replace"},
			{fleet.SubmitOptions{Debounce: &fleet.Debounce{Window: time.Second, MaxWait: time.Minute}}, "Debounce"},
			{fleet.SubmitOptions{DedupKey: "k", Debounce: &fleet.Debounce{Window: -time.Second, MaxWait: time.Minute}}, "Debounce.Window"},
			{fleet.SubmitOptions{DedupKey: "k", Debounce: &fleet.Debounce{}}, "Debounce.Window"},
			{fleet.SubmitOptions{DedupKey: "k", Debounce: &fleet.Debounce{Window: time.Minute, MaxWait: time.Second}}, "Debounce.MaxWait"},
			{fleet.SubmitOptions{DedupKey: "k", NotBefore: time.Now().Add(time.Hour), Debounce: &fleet.Debounce{Window: time.Second, MaxWait: time.Minute}}, "NotBefore"},
		} {
			if _, err := q.SubmitWith(c, url(2), tc.o); !errors.Is(err, fleet.ErrInvalidArgument) || !strings.Contains(err.Error(), "SubmitOptions."+tc.field) {
				t.Errorf("%+v: %v; want ErrInvalidArgument naming %s", tc.o, err, tc.field)
			}
		}
		if after := e.dump(t); !maps.Equal(before, after) {
			t.Fatalf("changed:\n%v\n%v", before, after)
		}
	})
}

// TestQueueReplaceConcurrent: three Fleets replacing one key at once leave
// exactly one task, carrying one of the payloads, under one id.
func TestQueueReplaceConcurrent(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		qk := e.qk("rc")
		fs := []*fleet.Fleet{e.F, openOn(t, tg, e.Prefix), openOn(t, tg, e.Prefix)}
		const each = 40
		var wg sync.WaitGroup
		ids := make([][]string, len(fs))
		errs := make(chan error, len(fs)*each)
		for i, f := range fs {
			q := fleet.NewQueue[job](f, "rc", fleet.QueueOptions{})
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := range each {
					id, err := q.SubmitWith(c, url(i*each+j), fleet.SubmitOptions{DedupKey: "k", Replace: true})
					if err != nil {
						errs <- err
						return
					}
					ids[i] = append(ids[i], id)
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		p := e.lrange(t, qk.Pending)
		if len(p) != 1 {
			t.Fatalf("pending %q", p)
		}
		b := readBody(t, p[0])
		if b.Payload.N < 0 || b.Payload.N >= len(fs)*each || b.Payload != url(b.Payload.N) {
			t.Fatalf("payload %+v", b.Payload)
		}
		for _, l := range ids {
			for _, id := range l {
				if id != b.ID {
					t.Fatalf("id %s; the task is %s", id, b.ID)
				}
			}
		}
		if d := e.hgetall(t, qk.Dedup); len(d) != 1 || d["k"] != b.ID {
			t.Fatalf("dedup %v", d)
		}
	})
}

// TestQueueReplaceSharded: the key and its task share a shard; a replace
// finds the holder there.
func TestQueueReplaceSharded(t *testing.T) {
	eachTagged(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		q := fleet.NewQueue[job](e.F, "rsh", fleet.QueueOptions{Shards: 4})
		id, err := q.SubmitWith(c, url(1), fleet.SubmitOptions{DedupKey: "k"})
		if err != nil {
			t.Fatal(err)
		}
		for n := 2; n <= 5; n++ {
			if got, err := q.SubmitWith(c, url(n), fleet.SubmitOptions{DedupKey: "k", Replace: true}); err != nil || got != id {
				t.Fatalf("replace %d: %s, %v", n, got, err)
			}
		}
		var bodies []string
		for i := range 4 {
			bodies = append(bodies, e.lrange(t, e.shard("rsh", i).Pending)...)
		}
		if len(bodies) != 1 || readBody(t, bodies[0]).ID != id || readBody(t, bodies[0]).Payload.N != 5 {
			t.Fatalf("pending across the shards %q", bodies)
		}
	})
}

// uuidMS is the unix ms of a UUIDv7 task id.
func uuidMS(t *testing.T, id string) int64 {
	t.Helper()
	ms, err := strconv.ParseInt(strings.ReplaceAll(id, "-", "")[:12], 16, 64)
	if err != nil {
		t.Fatalf("id %q: %v", id, err)
	}
	return ms
}

// TestQueueDebounce: a burst of submits with one key makes one task, run
// once with the last payload, Window after the last submit and within
// MaxWait of the first.
func TestQueueDebounce(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		qk := e.qk("db")
		q := fleet.NewQueue[job](e.F, "db", fleet.QueueOptions{})
		d := &fleet.Debounce{Window: 300 * time.Millisecond, MaxWait: 10 * time.Second}
		var id string
		var last time.Time
		for n := range 100 {
			last = time.Now()
			got, err := q.SubmitWith(c, url(n), fleet.SubmitOptions{DedupKey: "k", Debounce: d})
			if err != nil || (id != "" && got != id) {
				t.Fatalf("submit %d: %s, %v; want %s", n, got, err, id)
			}
			id = got
		}
		z := e.zrange(t, qk.Scheduled)
		if len(z) != 1 || readBody(t, z[0].Member).ID != id || readBody(t, z[0].Member).Payload.N != 99 {
			t.Fatalf("scheduled %v", z)
		}
		// The window runs from the last submit (the server's clock, on this host).
		if at := int64(z[0].Score*1000 + 0.5); at < last.Add(d.Window).UnixMilli()-50 || at > uuidMS(t, id)+d.MaxWait.Milliseconds() {
			t.Fatalf("ready at %d; last submit %d, first %d", at, last.UnixMilli(), uuidMS(t, id))
		}
		var ts []*fleet.Task[job]
		waitFor(t, 10*time.Second, func() bool {
			var err error
			ts, err = q.Reserve(c, 10, 100*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			return len(ts) > 0
		}, "the debounced task never ran")
		if len(ts) != 1 || ts[0].ID != id || ts[0].Payload.N != 99 || time.Now().UnixMilli() > uuidMS(t, id)+d.MaxWait.Milliseconds() {
			t.Fatalf("reserved %v", ts)
		}
		if err := ts[0].Ack(c); err != nil {
			t.Fatal(err)
		}
		if more, err := q.Reserve(c, 10, 0); err != nil || len(more) != 0 {
			t.Fatalf("a second run: %v, %v", more, err)
		}
	})
}

// TestQueueDebounceMaxWait: each submit pushes the start out to Window
// from itself, never past the first submit plus MaxWait.
func TestQueueDebounceMaxWait(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		qk := e.qk("dbm")
		q := fleet.NewQueue[job](e.F, "dbm", fleet.QueueOptions{})
		score := func() int64 {
			t.Helper()
			z := e.zrange(t, qk.Scheduled)
			if len(z) != 1 {
				t.Fatalf("scheduled %v", z)
			}
			return int64(z[0].Score*1000 + 0.5)
		}
		// MaxWait well past Window: the start moves out with each submit.
		o := fleet.SubmitOptions{DedupKey: "a", Debounce: &fleet.Debounce{Window: time.Hour, MaxWait: 3 * time.Hour}}
		id, err := q.SubmitWith(c, url(1), o)
		if err != nil {
			t.Fatal(err)
		}
		s1 := score()
		waitFor(t, 5*time.Second, func() bool { return time.Now().UnixMilli() > uuidMS(t, id)+20 }, "clock")
		if got, err := q.SubmitWith(c, url(2), o); err != nil || got != id {
			t.Fatalf("second: %s, %v", got, err)
		}
		if s2 := score(); s2 <= s1 || s2 > uuidMS(t, id)+3*time.Hour.Milliseconds() {
			t.Fatalf("ready at %d after %d", s2, s1)
		}
		if err := e.do(t, e.Raw.B().Del().Key(qk.Scheduled, qk.Dedup).Build()).Error(); err != nil {
			t.Fatal(err)
		}
		// MaxWait equal to Window: the second submit is held to the first's
		// MaxWait.
		o = fleet.SubmitOptions{DedupKey: "b", Debounce: &fleet.Debounce{Window: time.Hour, MaxWait: time.Hour}}
		id, err = q.SubmitWith(c, url(1), o)
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, 5*time.Second, func() bool { return time.Now().UnixMilli() > uuidMS(t, id)+20 }, "clock")
		if got, err := q.SubmitWith(c, url(2), o); err != nil || got != id {
			t.Fatalf("second: %s, %v", got, err)
		}
		if s := score(); s != uuidMS(t, id)+time.Hour.Milliseconds() {
			t.Fatalf("ready at %d; want the first submit %d + MaxWait", s, uuidMS(t, id))
		}
	})
}

// TestQueueReplaceIndexed: on a queue that indexes metadata, the replaced
// task leaves the old value's index and joins the new one, under its id.
func TestQueueReplaceIndexed(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		q := fleet.NewQueue[job](e.F, "rix", fleet.QueueOptions{IndexMeta: []string{"tenant"}})
		id, err := q.SubmitWith(c, url(1), fleet.SubmitOptions{DedupKey: "k", Metadata: map[string]string{"tenant": "a"}})
		if err != nil {
			t.Fatal(err)
		}
		if got, err := q.SubmitWith(c, url(2), fleet.SubmitOptions{DedupKey: "k", Replace: true, Metadata: map[string]string{"tenant": "b"}}); err != nil || got != id {
			t.Fatalf("replace: %s, %v", got, err)
		}
		if page, _, err := q.FindByMeta(c, "tenant", "a", "", 10); err != nil || len(page) != 0 {
			t.Fatalf("tenant a: %v, %v", page, err)
		}
		page, _, err := q.FindByMeta(c, "tenant", "b", "", 10)
		if err != nil || len(page) != 1 || page[0].ID != id || !strings.Contains(string(page[0].Payload), `"n":2`) {
			t.Fatalf("tenant b: %+v, %v", page, err)
		}
	})
}

// TestQueueReplaceMany: SubmitManyWith mixes replaces and plain submits in
// one script; a replace of a key that an earlier submission of the same
// call took replaces that one.
func TestQueueReplaceMany(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		qk := e.qk("rm")
		q := fleet.NewQueue[job](e.F, "rm", fleet.QueueOptions{})
		id, err := q.SubmitWith(c, url(1), fleet.SubmitOptions{DedupKey: "k"})
		if err != nil {
			t.Fatal(err)
		}
		r := func(k string) fleet.SubmitOptions { return fleet.SubmitOptions{DedupKey: k, Replace: true} }
		ids, err := q.SubmitManyWith(c, []fleet.Submission[job]{
			{Payload: url(2), Options: r("k")}, {Payload: url(3)}, {Payload: url(4), Options: r("n")}, {Payload: url(5), Options: r("n")},
		})
		if err != nil || len(ids) != 4 || ids[0] != id || ids[1] == id || ids[2] == id || ids[3] != ids[2] {
			t.Fatalf("ids %v, %v", ids, err)
		}
		p := e.lrange(t, qk.Pending)
		if len(p) != 3 {
			t.Fatalf("pending %q", p)
		}
		for i, want := range []struct {
			id string
			n  int
		}{{id, 2}, {ids[1], 3}, {ids[2], 5}} {
			if b := readBody(t, p[i]); b.ID != want.id || b.Payload.N != want.n {
				t.Fatalf("pending[%d] %q; want %s with %d", i, p[i], want.id, want.n)
			}
		}
	})
}

// TestQueueDebounceConcurrent: three Fleets submit a burst to one debounce
// key at once: every submit gets the one task's id, and the task runs once,
// with the payload of one Fleet's last submit (the server's last), Window
// after that submit and within MaxWait of the first.
func TestQueueDebounceConcurrent(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		qk := e.qk("dbc")
		fs := []*fleet.Fleet{e.F, openOn(t, tg, e.Prefix), openOn(t, tg, e.Prefix)}
		d := &fleet.Debounce{Window: 300 * time.Millisecond, MaxWait: 10 * time.Second}
		const each = 34
		var wg sync.WaitGroup
		ids := make([][]string, len(fs))
		lastSent := make([]time.Time, len(fs)) // when each Fleet sent its last submit
		errs := make(chan error, len(fs))
		for i, f := range fs {
			q := fleet.NewQueue[job](f, "dbc", fleet.QueueOptions{})
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := range each {
					lastSent[i] = time.Now()
					id, err := q.SubmitWith(c, url(i*each+j), fleet.SubmitOptions{DedupKey: "k", Debounce: d})
					if err != nil {
						errs <- err
						return
					}
					ids[i] = append(ids[i], id)
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		id := ids[0][0]
		for _, l := range ids {
			for _, got := range l {
				if got != id {
					t.Fatalf("ids %s and %s for one key", id, got)
				}
			}
		}
		q := fleet.NewQueue[job](e.F, "dbc", fleet.QueueOptions{})
		var ts []*fleet.Task[job]
		waitFor(t, 10*time.Second, func() bool {
			var err error
			ts, err = q.Reserve(c, 10, 100*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			return len(ts) > 0
		}, "the debounced task never ran")
		ran := time.Now()
		lasts := map[int]bool{each - 1: true, 2*each - 1: true, 3*each - 1: true}
		if len(ts) != 1 || ts[0].ID != id || !lasts[ts[0].Payload.N] || ts[0].Payload != url(ts[0].Payload.N) {
			t.Fatalf("reserved %+v; want task %s with one Fleet's last payload (%v)", ts, id, lasts)
		}
		// The window runs from the server's last submit: the one whose
		// payload ran, sent by Fleet N/each (the server's clock, this host's).
		if last := lastSent[ts[0].Payload.N/each]; ran.Before(last.Add(d.Window-5*time.Millisecond)) || ran.UnixMilli() > uuidMS(t, id)+d.MaxWait.Milliseconds() {
			t.Fatalf("ran at %v: the last submit was sent at %v (window %v), the first at %d ms (max wait %v)", ran, last, d.Window, uuidMS(t, id), d.MaxWait)
		}
		if err := ts[0].Ack(c); err != nil {
			t.Fatal(err)
		}
		if more, err := q.Reserve(c, 10, d.Window+100*time.Millisecond); err != nil || len(more) != 0 {
			t.Fatalf("a second run: %v, %v", more, err)
		}
		if dd := e.hgetall(t, qk.Dedup); len(dd) != 0 {
			t.Fatalf("dedup left %v", dd)
		}
		if st, err := q.Stats(c); err != nil || st.Pending+st.InFlight+st.Scheduled+st.Dead != 0 {
			t.Fatalf("stats %+v, %v", st, err)
		}
	})
}
