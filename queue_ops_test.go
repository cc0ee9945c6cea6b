package fleet_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/internal/redistest"
)

func TestSubmitJSON(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		k := e.qk("http")
		q := fleet.NewQueue[job](e.F, "http", fleet.QueueOptions{MaxPayloadBytes: 200})
		cases := []struct {
			name, queue, raw string
			want             error
			in               string // a part of the message
		}{
			{"unknown queue", "nope", `{"url":"https://example.com","n":1}`, fleet.ErrQueueNotFound, `"nope"`},
			{"syntax", "http", `{"url":`, fleet.ErrInvalidJSON, "unexpected EOF"},
			{"unknown field", "http", `{"url":"https://example.com","n":1,"x":2}`, fleet.ErrInvalidJSON, `unknown field "x"`},
			{"wrong type", "http", `{"url":"https://example.com","n":"1"}`, fleet.ErrInvalidJSON, "cannot unmarshal"},
			{"trailing data", "http", `{"url":"https://example.com","n":1} {}`, fleet.ErrInvalidJSON, "trailing data"},
			{"not an object", "http", `[1]`, fleet.ErrInvalidJSON, "cannot unmarshal array"},
			{"invalid fields", "http", `{"url":"nope","n":-1}`, fleet.ErrInvalidPayload, "url (fails url), n (fails gte=0)"},
			{"missing field", "http", `{"n":1}`, fleet.ErrInvalidPayload, "url (fails required)"},
			{"too large", "http", `{"url":"https://example.com/` + strings.Repeat("a", 200) + `","n":1}`, fleet.ErrPayloadTooLarge, "MaxPayloadBytes"},
			{"empty body", "http", ``, fleet.ErrInvalidJSON, "empty body"},
			{"blank body", "http", " \n\t", fleet.ErrInvalidJSON, "empty body"},
		}
		for _, c := range cases {
			id, err := e.F.SubmitJSON(ctx(t), c.queue, []byte(c.raw))
			if !errors.Is(err, c.want) || id != "" || !strings.Contains(err.Error(), c.in) {
				t.Errorf("%s: SubmitJSON = %q, %v; want %v containing %q", c.name, id, err, c.want, c.in)
			}
			for _, other := range []error{fleet.ErrQueueNotFound, fleet.ErrInvalidJSON, fleet.ErrInvalidPayload, fleet.ErrPayloadTooLarge} {
				if other != c.want && errors.Is(err, other) {
					t.Errorf("%s: %v is also %v", c.name, err, other)
				}
			}
		}
		if got := e.keys(t); len(got) != 0 {
			t.Fatalf("a refused submit wrote %v", got)
		}
		id, err := e.F.SubmitJSON(ctx(t), "http", []byte(` {"url":"https://example.com/ok","n":2} `))
		if err != nil {
			t.Fatal(err)
		}
		if l := e.lrange(t, k.Pending); len(l) != 1 || l[0] != `{"id":"`+id+`","payload":{"url":"https://example.com/ok","n":2},"attempts":0}` {
			t.Fatalf("pending %v", l)
		}
		_ = q
	})
}

func TestQueueBadInput(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		for _, name := range []string{"", "a:b", "a{b}", "a b", "a\nb", strings.Repeat("x", 600)} {
			q := fleet.NewQueue[job](e.F, name, fleet.QueueOptions{})
			if !errors.Is(q.Err(), fleet.ErrInvalidName) {
				t.Errorf("NewQueue(%q).Err() = %v", name, q.Err())
			}
			if _, err := q.Submit(ctx(t), jobN(1)); !errors.Is(err, fleet.ErrInvalidName) {
				t.Errorf("Submit on %q = %v", name, err)
			}
			if _, err := q.Reserve(ctx(t), 1, 0); !errors.Is(err, fleet.ErrInvalidName) {
				t.Errorf("Reserve on %q = %v", name, err)
			}
		}
		for _, o := range []fleet.QueueOptions{
			{Lease: -time.Second}, {MaxAttempts: -1}, {BackoffBase: -1}, {BackoffMax: -1}, {DeadMax: -1}, {DeadMaxAge: -time.Hour},
			{MaxPayloadBytes: -1}, {BackoffBase: time.Minute, BackoffMax: time.Second},
		} {
			q := fleet.NewQueue[job](e.F, "opts", o)
			if _, err := q.Submit(ctx(t), jobN(1)); !errors.Is(err, fleet.ErrInvalidArgument) || !errors.Is(q.Err(), fleet.ErrInvalidArgument) {
				t.Errorf("options %+v: Submit = %v, Err = %v", o, err, q.Err())
			}
		}
		if _, err := e.F.SubmitJSON(ctx(t), "opts", []byte(`{}`)); !errors.Is(err, fleet.ErrQueueNotFound) {
			t.Errorf("a queue with bad options is not registered for SubmitJSON: %v", err)
		}
		if q := fleet.NewQueue[job](nil, "x", fleet.QueueOptions{}); !errors.Is(q.Err(), fleet.ErrInvalidArgument) {
			t.Errorf("nil Fleet: %v", q.Err())
		}

		q := fleet.NewQueue[job](e.F, "bad", fleet.QueueOptions{})
		k := e.qk("bad")
		if _, err := q.Submit(ctx(t), job{URL: "x", N: 5000}); !errors.Is(err, fleet.ErrInvalidPayload) || !strings.Contains(err.Error(), "url (fails url), n (fails lte=1000)") {
			t.Errorf("invalid payload: %v", err)
		}
		small := fleet.NewQueue[job](e.F, "bad", fleet.QueueOptions{MaxPayloadBytes: 50})
		if _, err := small.Submit(ctx(t), job{URL: "https://example.com/" + strings.Repeat("a", 50)}); !errors.Is(err, fleet.ErrPayloadTooLarge) ||
			errors.Is(err, fleet.ErrInvalidPayload) || !strings.Contains(err.Error(), "MaxPayloadBytes 50") {
			t.Errorf("payload over the limit: %v, want ErrPayloadTooLarge", err)
		}
		if _, err := q.SubmitMany(ctx(t), []job{jobN(1), {}}); !errors.Is(err, fleet.ErrInvalidPayload) || !strings.Contains(err.Error(), "payload 1") {
			t.Errorf("SubmitMany with one invalid: %v", err)
		}
		if _, err := q.SubmitWith(ctx(t), jobN(1), fleet.SubmitOptions{DedupKey: "a\x00b"}); !errors.Is(err, fleet.ErrInvalidArgument) {
			t.Errorf("bad dedup key: %v", err)
		}
		for _, c := range []struct {
			n    int
			wait time.Duration
		}{{0, 0}, {-1, 0}, {fleet.MaxReserve + 1, 0}, {1, -time.Second}} {
			if _, err := q.Reserve(ctx(t), c.n, c.wait); !errors.Is(err, fleet.ErrInvalidArgument) {
				t.Errorf("Reserve(%d, %v) = %v", c.n, c.wait, err)
			}
		}
		cancelled, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := q.Submit(cancelled, jobN(1)); !errors.Is(err, context.Canceled) {
			t.Errorf("Submit on a cancelled ctx: %v", err)
		}
		if _, err := q.Reserve(cancelled, 1, time.Second); !errors.Is(err, context.Canceled) {
			t.Errorf("Reserve on a cancelled ctx: %v", err)
		}
		if got := e.keys(t); len(got) != 0 {
			t.Fatalf("refused calls wrote %v", got)
		}

		// Wrong-type keys: a clear ErrWrongType, and nothing changes.
		e.do(t, e.Raw.B().Set().Key(k.Pending).Value("not a list").Build())
		if _, err := q.Submit(ctx(t), jobN(1)); !errors.Is(err, fleet.ErrWrongType) {
			t.Errorf("Submit onto a string: %v", err)
		}
		if _, err := q.SubmitWith(ctx(t), jobN(1), fleet.SubmitOptions{DedupKey: "d"}); !errors.Is(err, fleet.ErrWrongType) {
			t.Errorf("SubmitWith onto a string: %v", err)
		}
		if _, err := q.Reserve(ctx(t), 1, 0); !errors.Is(err, fleet.ErrWrongType) {
			t.Errorf("Reserve from a string: %v", err)
		}
		if _, err := q.Stats(ctx(t)); !errors.Is(err, fleet.ErrWrongType) {
			t.Errorf("Stats: %v", err)
		}
		if s, _ := e.get(t, k.Pending); s != "not a list" {
			t.Errorf("pending now %q", s)
		}
		e.do(t, e.Raw.B().Del().Key(k.Pending).Build())
		if _, err := q.Submit(ctx(t), jobN(1)); err != nil {
			t.Fatal(err)
		}
		e.do(t, e.Raw.B().Set().Key(k.Processing).Value("x").Build())
		before := e.dump(t)
		if _, err := q.Reserve(ctx(t), 1, 0); !errors.Is(err, fleet.ErrWrongType) {
			t.Errorf("Reserve with a string at :processing: %v", err)
		}
		if got := e.dump(t); !mapsEqual(got, before) {
			t.Errorf("a failed reserve changed Redis: %v, was %v", got, before)
		}
		if _, err := e.F.Sweep(ctx(t), fleet.SweeperOptions{}); !errors.Is(err, fleet.ErrWrongType) {
			t.Errorf("Sweep: %v", err)
		}
		if _, err := e.F.Sweep(ctx(t), fleet.SweeperOptions{Interval: -1}); !errors.Is(err, fleet.ErrInvalidArgument) {
			t.Errorf("Sweep with a negative interval: %v", err)
		}
		if err := e.F.RunSweeper(ctx(t), fleet.SweeperOptions{Queue: fleet.QueueOptions{Lease: -1}}); !errors.Is(err, fleet.ErrInvalidArgument) {
			t.Errorf("RunSweeper with bad options: %v", err)
		}
	})
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func TestQueueDedupAndDelay(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		k := e.qk("once")
		q := fastQueue(e.F, "once", time.Minute)
		first, err := q.SubmitWith(ctx(t), jobN(1), fleet.SubmitOptions{DedupKey: "order-42"})
		if err != nil {
			t.Fatal(err)
		}
		again, err := q.SubmitWith(ctx(t), jobN(2), fleet.SubmitOptions{DedupKey: "order-42"})
		if err != nil || again != first {
			t.Fatalf("second submit = %q, %v; want %q", again, err, first)
		}
		if l := e.lrange(t, k.Pending); len(l) != 1 || l[0] != `{"id":"`+first+`","payload":{"url":"https://example.com/1","n":1},"attempts":0,"dedup":"order-42"}` {
			t.Fatalf("pending %v", l)
		}
		if m := e.hgetall(t, k.Dedup); len(m) != 1 || m["order-42"] != first {
			t.Fatalf("dedup %v", m)
		}
		got, _ := q.Reserve(ctx(t), 1, 0)
		if len(got) != 1 {
			t.Fatal("nothing reserved")
		}
		// In flight: still deduplicated.
		if again, _ := q.SubmitWith(ctx(t), jobN(3), fleet.SubmitOptions{DedupKey: "order-42"}); again != first {
			t.Fatalf("submit while in flight = %q", again)
		}
		if err := got[0].Ack(ctx(t)); err != nil {
			t.Fatal(err)
		}
		if got := e.keys(t); !slices.Equal(got, []string{k.Policy, k.Registry}) {
			t.Fatalf("after ack: keys %v", got)
		}
		next, err := q.SubmitWith(ctx(t), jobN(4), fleet.SubmitOptions{DedupKey: "order-42"})
		if err != nil || next == first {
			t.Fatalf("submit after ack = %q, %v", next, err)
		}
		got, _ = q.Reserve(ctx(t), 1, 0)
		if err := got[0].DeadLetter(ctx(t), errors.New("no")); err != nil {
			t.Fatal(err)
		}
		if m := e.hgetall(t, k.Dedup); len(m) != 0 {
			t.Fatalf("dedup entry outlived dead-lettering: %v", m)
		}

		// Delayed: waits in :scheduled, and a waiting Reserve wakes for it.
		start := time.Now()
		id, err := q.SubmitWith(ctx(t), jobN(5), fleet.SubmitOptions{NotBefore: start.Add(400 * time.Millisecond)})
		if err != nil {
			t.Fatal(err)
		}
		zs := e.zscores(t, k.Scheduled)
		if len(zs) != 1 || zs[0].Member != `{"id":"`+id+`","payload":{"url":"https://example.com/5","n":5},"attempts":0}` {
			t.Fatalf("scheduled %v", zs)
		}
		near(t, "ready_at", zs[0].Score, start.Add(400*time.Millisecond), 5*time.Millisecond)
		if got, err := q.Reserve(ctx(t), 1, 0); err != nil || len(got) != 0 {
			t.Fatalf("a delayed task was ready at once: %v %v", got, err)
		}
		got, err = q.Reserve(ctx(t), 1, 3*time.Second)
		if err != nil || len(got) != 1 || got[0].ID != id {
			t.Fatalf("Reserve of the delayed task = %v, %v", got, err)
		}
		if d := time.Since(start); d < 380*time.Millisecond || d > 900*time.Millisecond {
			t.Fatalf("delayed task reserved after %v, want about 400ms", d)
		}
		_ = got[0].Ack(ctx(t))
	})
}

func TestQueueDeadLetterOps(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		k := e.qk("dl")
		q := fleet.NewQueue[job](e.F, "dl", fleet.QueueOptions{DeadMax: 3, MaxAttempts: 1})
		ids, err := q.SubmitMany(ctx(t), []job{jobN(1), jobN(2), jobN(3), jobN(4)})
		if err != nil {
			t.Fatal(err)
		}
		got, err := q.Reserve(ctx(t), 10, 0)
		if err != nil || len(got) != 4 {
			t.Fatal(got, err)
		}
		for i, task := range got {
			if task.ID != ids[i] {
				t.Fatalf("order: %s, want %s", task.ID, ids[i])
			}
			if err := task.Nack(ctx(t), errors.New("boom")); err != nil { // MaxAttempts 1: straight to :dead
				t.Fatal(err)
			}
		}
		st, _ := q.Stats(ctx(t))
		if st != (fleet.QueueStats{Dead: 3}) {
			t.Fatalf("DeadMax 3 kept %+v", st)
		}
		dead, err := q.DeadLetters(ctx(t), 0, 10)
		if err != nil || len(dead) != 3 || dead[0].ID != ids[1] || dead[0].Error != "boom" || dead[0].Attempts != 1 || string(dead[0].Payload) != `{"url":"https://example.com/2","n":2}` {
			t.Fatalf("DeadLetters = %+v, %v", dead, err)
		}
		if err := q.RequeueDead(ctx(t), ids[2]); err != nil {
			t.Fatal(err)
		}
		if err := q.RequeueDead(ctx(t), ids[2]); !errors.Is(err, fleet.ErrDeadLetterNotFound) {
			t.Fatalf("second RequeueDead = %v", err)
		}
		if l := e.lrange(t, k.Pending); len(l) != 1 || l[0] != `{"attempts":0,"id":"`+ids[2]+`","payload":{"url":"https://example.com/3","n":3}}` {
			t.Fatalf("pending %v", l)
		}
		n, err := q.RequeueAllDead(ctx(t))
		if err != nil || n != 2 {
			t.Fatalf("RequeueAllDead = %d, %v", n, err)
		}
		e.do(t, e.Raw.B().Rpush().Key(k.Dead).Element("x", "y").Build())
		if n, err := q.PurgeDead(ctx(t)); err != nil || n != 2 {
			t.Fatalf("PurgeDead = %d, %v", n, err)
		}
		if st, _ := q.Stats(ctx(t)); counted(t, st) != (fleet.QueueStats{Pending: 3}) {
			t.Fatalf("Stats %+v", st)
		}
	})
}

// TestSweepersSideBySide: sweepers in different processes (Fleets), racing
// over the same expired reservations, re-queue each exactly once.
func TestSweepersSideBySide(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		const n = 300
		const lease = 300 * time.Millisecond
		q := fastQueue(e.F, "swept", lease)
		payloads := make([]job, n)
		for i := range payloads {
			payloads[i] = jobN(i)
		}
		if _, err := q.SubmitMany(ctx(t), payloads); err != nil {
			t.Fatal(err)
		}
		got := reserveAll(t, q, n)
		time.Sleep(time.Until(got[n-1].Deadline()) + lease/2) // every lease ran out
		fleets := []*fleet.Fleet{e.F, openOn(t, tg, e.Prefix), openOn(t, tg, e.Prefix)}
		var mu sync.Mutex
		var total fleet.SweepStats
		var wg sync.WaitGroup
		for _, f := range fleets {
			for range 2 {
				wg.Go(func() {
					st, err := f.Sweep(ctx(t), fleet.SweeperOptions{Batch: 40})
					if err != nil {
						t.Error(err)
					}
					mu.Lock()
					total.Requeued += st.Requeued
					total.DeadLettered += st.DeadLettered
					mu.Unlock()
				})
			}
		}
		wg.Wait()
		if total.Requeued != n || total.DeadLettered != 0 {
			t.Fatalf("sweepers requeued %d, buried %d; want %d, 0", total.Requeued, total.DeadLettered, n)
		}
		got = reserveAll(t, q, n)
		seen := map[string]bool{}
		for _, task := range got {
			if seen[task.ID] || task.Attempts != 1 {
				t.Fatalf("task %s twice or with attempts %d", task.ID, task.Attempts)
			}
			seen[task.ID] = true
		}
		if st, _ := q.Stats(ctx(t)); st != (fleet.QueueStats{InFlight: n}) {
			t.Fatalf("Stats %+v", st)
		}
	})
}

// SubmitJSONWith takes SubmitWith's options; Encode gives the payload's
// JSON, or the errors Submit would give, and writes nothing.
func TestSubmitJSONWithAndEncode(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		k := e.qk("http2")
		q := fleet.NewQueue[job](e.F, "http2", fleet.QueueOptions{MaxPayloadBytes: 200})
		b, err := q.Encode(job{URL: "https://example.com/x", N: 3})
		if err != nil || string(b) != `{"url":"https://example.com/x","n":3}` {
			t.Fatalf("Encode = %s, %v", b, err)
		}
		if _, err := q.Encode(job{URL: "nope", N: -1}); !errors.Is(err, fleet.ErrInvalidPayload) || !strings.Contains(err.Error(), "url (fails url)") {
			t.Fatalf("Encode(invalid) = %v", err)
		}
		if _, err := q.Encode(job{URL: "https://example.com/" + strings.Repeat("a", 200)}); !errors.Is(err, fleet.ErrPayloadTooLarge) {
			t.Fatalf("Encode(too large) = %v", err)
		}
		if _, err := fleet.NewQueue[job](e.F, "a b", fleet.QueueOptions{}).Encode(job{URL: "https://example.com"}); !errors.Is(err, fleet.ErrInvalidName) {
			t.Fatalf("Encode on a bad queue = %v", err)
		}
		if got := e.keys(t); len(got) != 0 {
			t.Fatalf("Encode wrote %v", got)
		}
		id, err := e.F.SubmitJSONWith(ctx(t), "http2", b, fleet.SubmitOptions{DedupKey: "row-1"})
		if err != nil {
			t.Fatal(err)
		}
		again, err := e.F.SubmitJSONWith(ctx(t), "http2", b, fleet.SubmitOptions{DedupKey: "row-1"})
		if err != nil || again != id {
			t.Fatalf("a second submit with the key = %q, %v; want %q", again, err, id)
		}
		if l := e.lrange(t, k.Pending); len(l) != 1 || l[0] != `{"id":"`+id+`","payload":{"url":"https://example.com/x","n":3},"attempts":0,"dedup":"row-1"}` {
			t.Fatalf("pending %v", l)
		}
		if _, err := e.F.SubmitJSONWith(ctx(t), "http2", []byte(`{"url":1}`), fleet.SubmitOptions{DedupKey: "row-2"}); !errors.Is(err, fleet.ErrInvalidJSON) {
			t.Fatalf("SubmitJSONWith(bad JSON) = %v", err)
		}
	})
}
