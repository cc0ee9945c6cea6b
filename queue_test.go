package fleet_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/internal/redistest"
)

// TestQueueSchema follows one task through submit, reserve, nack, retry and
// dead-lettering, and asserts every key and value left in Redis.
func TestQueueSchema(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		k := e.qk("harvest")
		q := fleet.NewQueue[job](e.F, "harvest", fleet.QueueOptions{
			MaxAttempts: 2, Lease: 20 * time.Second, BackoffBase: 10 * time.Second, BackoffMax: 10 * time.Second,
		})
		id, err := q.Submit(ctx(t), job{URL: "https://example.com/a", N: 7})
		if err != nil {
			t.Fatal(err)
		}
		body := `{"id":"` + id + `","payload":{"url":"https://example.com/a","n":7},"attempts":0}`
		policy := "string:" + `{"max_attempts":2,"backoff_base_ms":10000,"backoff_max_ms":10000,"dead_max":10000,"dead_max_age_ms":604800000}`
		want := map[string]string{
			k.Pending:  "list:" + body,
			k.Policy:   policy,
			k.Registry: "set:harvest",
		}
		if got := e.dump(t); !maps.Equal(got, want) {
			t.Fatalf("after submit:\n got %v\nwant %v", got, want)
		}

		// Reserve: the body moves to :processing:body, the deadline to
		// :processing, the token and the deadline in ms to
		// :processing:lease, with the call's record (the ids it took).
		now := e.serverNow(t)
		tasks, err := q.Reserve(ctx(t), 5, 0)
		if err != nil || len(tasks) != 1 {
			t.Fatalf("Reserve = %v, %v", tasks, err)
		}
		task := tasks[0]
		if task.ID != id || task.Attempts != 0 || task.Payload != (job{URL: "https://example.com/a", N: 7}) || task.Body() != body {
			t.Fatalf("task %+v", task)
		}
		zs := e.zscores(t, k.Processing)
		if len(zs) != 1 || zs[0].Member != id {
			t.Fatalf("processing %v", zs)
		}
		near(t, "deadline", zs[0].Score, now.Add(20*time.Second), time.Second)
		near(t, "Deadline()", float64(task.Deadline().UnixMilli())/1000, now.Add(20*time.Second), time.Second)
		token := task.Token()
		want = map[string]string{
			k.Processing: fmt.Sprintf("zset:%s@%.3f", id, zs[0].Score),
			k.Body:       "hash:" + id + "=" + body,
			k.Lease: fmt.Sprintf("hash:%s=%s %d\n\xffcall:%s=[%q]", id, token, int64(math.Round(zs[0].Score*1000)),
				token[:len(token)-1], id),
			k.Policy:   policy,
			k.Registry: "set:harvest",
		}
		if got := e.dump(t); !maps.Equal(got, want) {
			t.Fatalf("after reserve:\n got %v\nwant %v", got, want)
		}

		// Nack: the attempt is counted and the retry waits in :scheduled.
		now = e.serverNow(t)
		if err := task.Nack(ctx(t), errors.New("upstream 503")); err != nil {
			t.Fatal(err)
		}
		retry := `{"attempts":1,"error":"upstream 503","id":"` + id + `","payload":{"url":"https://example.com/a","n":7}}`
		zs = e.zscores(t, k.Scheduled)
		if len(zs) != 1 || zs[0].Member != retry {
			t.Fatalf("scheduled %v, want member %s", zs, retry)
		}
		near(t, "ready_at", zs[0].Score, now.Add(7500*time.Millisecond), 2600*time.Millisecond) // 10 s backoff, jittered down to 5 s
		want = map[string]string{
			k.Scheduled: fmt.Sprintf("zset:%s@%.3f", retry, zs[0].Score),
			k.Policy:    policy,
			k.Registry:  "set:harvest",
		}
		if got := e.dump(t); !maps.Equal(got, want) {
			t.Fatalf("after nack:\n got %v\nwant %v", got, want)
		}

		// Make the retry due now, as a later clock would, and fail it again:
		// past MaxAttempts it goes to :dead with the error and the time.
		e.do(t, e.Raw.B().Zadd().Key(k.Scheduled).ScoreMember().ScoreMember(1, retry).Build())
		tasks, err = q.Reserve(ctx(t), 1, 0)
		if err != nil || len(tasks) != 1 || tasks[0].Attempts != 1 || tasks[0].Body() != retry {
			t.Fatalf("Reserve of the retry = %v, %v", tasks, err)
		}
		before := time.Now()
		if err := tasks[0].Nack(ctx(t), errors.New("still 503")); err != nil {
			t.Fatal(err)
		}
		dead := e.lrange(t, k.Dead)
		if len(dead) != 1 {
			t.Fatalf("dead %v", dead)
		}
		m := decodeMap(t, dead[0])
		deadAt, _ := m["dead_at"].(float64)
		near(t, "dead_at", deadAt, before, time.Second)
		// dead_at is the server's clock, appended by the script.
		wantDead := fmt.Sprintf(`{"attempts":2,"error":"still 503","id":"%s","payload":{"url":"https://example.com/a","n":7},"dead_at":%.3f}`, id, deadAt)
		want = map[string]string{
			k.Dead:     "list:" + wantDead,
			k.Policy:   policy,
			k.Registry: "set:harvest",
		}
		if got := e.dump(t); !maps.Equal(got, want) {
			t.Fatalf("after dead-lettering:\n got %v\nwant %v", got, want)
		}
		st, err := q.Stats(ctx(t))
		if err != nil || st != (fleet.QueueStats{Dead: 1}) {
			t.Fatalf("Stats = %+v, %v", st, err)
		}
	})
}

// TestQueueLeaseLost is the race of a late worker: its deadline passed, the
// task was re-queued and reserved by another; the late ack, nack, bury and
// extend are refused with ErrLeaseLost and change nothing.
func TestQueueLeaseLost(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		q := fastQueue(e.F, "race", 150*time.Millisecond)
		id, err := q.Submit(ctx(t), jobN(1))
		if err != nil {
			t.Fatal(err)
		}
		a, err := q.Reserve(ctx(t), 1, 0)
		if err != nil || len(a) != 1 {
			t.Fatalf("A: %v, %v", a, err)
		}
		late := a[0]
		// Past the deadline but not yet swept, the lease still holds: a late
		// extend is fine, since nobody else has the task.
		time.Sleep(time.Until(late.Deadline()) + 20*time.Millisecond)
		if err := late.Extend(ctx(t), 150*time.Millisecond); err != nil {
			t.Fatalf("extend before any sweep: %v", err)
		}
		time.Sleep(time.Until(late.Deadline()) + 20*time.Millisecond)
		// The server counts the lease from when the extend ran, a little
		// after it was sent (more on a loaded machine): sweep until the
		// lease has run out there too.
		requeued := 0
		waitFor(t, 10*time.Second, func() bool {
			st, err := e.F.Sweep(ctx(t), fleet.SweeperOptions{})
			if err != nil {
				t.Fatal(err)
			}
			requeued += st.Requeued
			return requeued > 0
		}, "no sweep re-queued the task")
		if requeued != 1 {
			t.Fatalf("sweeps re-queued %d tasks", requeued)
		}
		b, err := q.Reserve(ctx(t), 1, 0)
		if err != nil || len(b) != 1 || b[0].ID != id || b[0].Attempts != 1 {
			t.Fatalf("B: %v, %v", b, err)
		}
		if b[0].Token() == late.Token() {
			t.Fatal("same token twice")
		}
		before := e.dump(t)
		for name, op := range map[string]func() error{
			"ack":    func() error { return late.Ack(ctx(t)) },
			"nack":   func() error { return late.Nack(ctx(t), errors.New("late")) },
			"bury":   func() error { return late.DeadLetter(ctx(t), errors.New("late")) },
			"extend": func() error { return late.Extend(ctx(t), time.Minute) },
		} {
			if err := op(); !errors.Is(err, fleet.ErrLeaseLost) {
				t.Fatalf("late %s = %v, want ErrLeaseLost", name, err)
			}
			if got := e.dump(t); !maps.Equal(got, before) {
				t.Fatalf("late %s changed Redis:\n got %v\nwant %v", name, got, before)
			}
		}
		if err := b[0].Ack(ctx(t)); err != nil {
			t.Fatal(err)
		}
		if err := b[0].Ack(ctx(t)); !errors.Is(err, fleet.ErrLeaseLost) {
			t.Fatalf("second ack = %v", err)
		}
		k := e.qk("race")
		if got := e.keys(t); !slices.Equal(got, []string{k.Policy, k.Registry}) {
			t.Fatalf("keys left %v", got)
		}
	})
}

// TestQueueVanishedWorker: a worker reserves and vanishes; with a sweeper
// running, the task comes back after the deadline with attempts+1 and is
// done by another worker.
func TestQueueVanishedWorker(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		q := fastQueue(e.F, "vanish", 200*time.Millisecond)
		other := fastQueue(openOn(t, tg, e.Prefix), "vanish", 200*time.Millisecond)
		sctx, stop := context.WithCancel(ctx(t))
		done := make(chan error, 1)
		go func() { done <- e.F.RunSweeper(sctx, fleet.SweeperOptions{Interval: 50 * time.Millisecond}) }()
		defer func() { stop(); <-done }()

		id, _ := q.Submit(ctx(t), jobN(2))
		gone, err := q.Reserve(ctx(t), 1, 0)
		if err != nil || len(gone) != 1 {
			t.Fatal(gone, err)
		}
		start := time.Now()
		got, err := other.Reserve(ctx(t), 1, 5*time.Second)
		if err != nil || len(got) != 1 {
			t.Fatalf("other Reserve = %v, %v", got, err)
		}
		if got[0].ID != id || got[0].Attempts != 1 || got[0].Payload != jobN(2) {
			t.Fatalf("redelivered %+v", got[0])
		}
		if d := time.Since(start); d < 150*time.Millisecond {
			t.Fatalf("redelivered after %v, before the lease ran out", d)
		}
		if err := got[0].Ack(ctx(t)); err != nil {
			t.Fatal(err)
		}
		if st, _ := q.Stats(ctx(t)); st != (fleet.QueueStats{}) {
			t.Fatalf("Stats %+v", st)
		}
		if err := gone[0].Ack(ctx(t)); !errors.Is(err, fleet.ErrLeaseLost) {
			t.Fatalf("vanished worker's ack = %v", err)
		}
		stop()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		done <- nil
	})
}

// TestQueueStress: 2,000 tasks, 8 consumers, random nacks and abandoned
// reservations, a sweeper running: every task is acked exactly once, none is
// lost, and every redelivery follows a nack or a deadline that passed (an
// abandoned reservation, or one whose ack came too late: ErrLeaseLost).
func TestQueueStress(t *testing.T) {
	const tasks, consumers = 2000, 8
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		q := fastQueue(e.F, "stress", 700*time.Millisecond)
		payloads := make([]job, tasks)
		for i := range payloads {
			payloads[i] = jobN(i)
		}
		ids, err := q.SubmitMany(ctx(t), payloads)
		if err != nil || len(ids) != tasks {
			t.Fatal(err)
		}
		sctx, stop := context.WithCancel(ctx(t))
		defer stop()
		var wg sync.WaitGroup
		wg.Go(func() { _ = e.F.RunSweeper(sctx, fleet.SweeperOptions{Interval: 50 * time.Millisecond}) })

		type delivery struct {
			at, deadline time.Time
			attempts     int
			outcome      string // ack, nack, abandon, lost
		}
		var mu sync.Mutex
		recs := map[string][]*delivery{}
		acked := 0
		allDone := make(chan struct{})
		for c := range consumers {
			wg.Go(func() {
				for sctx.Err() == nil {
					got, err := q.Reserve(sctx, 8, 100*time.Millisecond)
					if err != nil {
						if sctx.Err() == nil {
							t.Error(err)
						}
						return
					}
					for i, task := range got {
						d := &delivery{at: time.Now(), deadline: task.Deadline(), attempts: task.Attempts}
						mu.Lock()
						recs[task.ID] = append(recs[task.ID], d)
						n := len(recs[task.ID])
						mu.Unlock()
						roll := (int(task.ID[len(task.ID)-1]) + int(task.ID[len(task.ID)-2]) + i + c + n*7) % 20
						var err error
						switch {
						case roll == 0 && n < 3:
							d.outcome = "abandon"
							continue
						case roll < 3 && n < 3:
							d.outcome = "nack"
							err = task.Nack(sctx, errors.New("random"))
						default:
							d.outcome = "ack"
							err = task.Ack(sctx)
						}
						if errors.Is(err, fleet.ErrLeaseLost) {
							d.outcome = "lost" // too slow: the deadline passed
							continue
						}
						if err != nil {
							t.Errorf("%s %s: %v", d.outcome, task.ID, err)
							continue
						}
						if d.outcome == "ack" {
							mu.Lock()
							if acked++; acked == tasks {
								close(allDone)
							}
							mu.Unlock()
						}
					}
				}
			})
		}
		select {
		case <-allDone:
		case <-time.After(30 * time.Second):
			t.Errorf("timed out: %d of %d acked", acked, tasks)
		}
		stop()
		wg.Wait()
		if len(recs) != tasks {
			t.Fatalf("%d distinct tasks delivered, want %d", len(recs), tasks)
		}
		expired := 0
		for _, id := range ids {
			ds := recs[id]
			acks := 0
			for i, d := range ds {
				if d.attempts != i {
					t.Fatalf("task %s: delivery %d has attempts %d", id, i, d.attempts)
				}
				if d.outcome == "ack" {
					acks++
				}
				if i == 0 {
					continue
				}
				switch prev := ds[i-1]; prev.outcome {
				case "nack":
				case "abandon", "lost":
					expired++
					if d.at.Before(prev.deadline.Add(-5 * time.Millisecond)) {
						t.Fatalf("task %s redelivered at %v, before its deadline %v", id, d.at, prev.deadline)
					}
				default:
					t.Fatalf("task %s redelivered after %q", id, prev.outcome)
				}
			}
			if acks != 1 || ds[len(ds)-1].outcome != "ack" {
				t.Fatalf("task %s acked %d times: %v", id, acks, ds)
			}
		}
		if expired == 0 {
			t.Fatal("no reservation expired: the test proves nothing")
		}
		st, err := q.Stats(ctx(t))
		if err != nil || st != (fleet.QueueStats{}) {
			t.Fatalf("Stats %+v %v", st, err)
		}
		t.Logf("%d expired reservations came back", expired)
	})
}

// TestQueuePoison: bodies written straight into the list that are not JSON,
// have no usable id, or hold a payload that does not decode into T or
// validate each land in :dead with the reason; the good task after them is
// delivered.
func TestQueuePoison(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		k := e.qk("poison")
		q := fastQueue(e.F, "poison", time.Minute)
		good := `{"id":"good","payload":{"url":"https://example.com/g","n":1}}`
		bodies := []string{
			`not json`,
			`{"payload":{"url":"https://example.com/x","n":1}}`,
			`{"id":5,"payload":{}}`,
			`[1,2]`,
			`{"id":"wrong-type","payload":"a string"}`,
			`{"id":"invalid","payload":{"url":"not a url","n":1}}`,
			good,
		}
		e.do(t, e.Raw.B().Rpush().Key(k.Pending).Element(bodies...).Build())
		got, err := q.Reserve(ctx(t), 10, time.Second)
		if err != nil || len(got) != 1 || got[0].ID != "good" {
			t.Fatalf("Reserve = %v, %v", got, err)
		}
		if err := got[0].Ack(ctx(t)); err != nil {
			t.Fatal(err)
		}
		dead, err := q.DeadLetters(ctx(t), 0, 100)
		if err != nil || len(dead) != 6 {
			t.Fatalf("DeadLetters = %v, %v", dead, err)
		}
		wantReason := []string{"body is not JSON", "body has no usable id", "body has no usable id", "body has no usable id",
			"payload does not decode into fleet_test.job", "payload no longer validates: invalid task payload: url (fails url)"}
		for i, d := range dead {
			if !strings.HasPrefix(d.Error, wantReason[i]) {
				t.Errorf("dead[%d].Error = %q, want prefix %q", i, d.Error, wantReason[i])
			}
			if d.DeadAt.IsZero() || time.Since(d.DeadAt) > time.Minute {
				t.Errorf("dead[%d].DeadAt = %v", i, d.DeadAt)
			}
			m := decodeMap(t, d.Raw)
			if i < 4 {
				if !d.Poison() || m["body"] != bodies[i] || len(m) != 3 {
					t.Errorf("dead[%d] = %s", i, d.Raw)
				}
			} else if d.Poison() || d.ID != decodeMap(t, bodies[i])["id"] || m["attempts"] != float64(0) {
				t.Errorf("dead[%d] = %s", i, d.Raw)
			}
		}
		if err := q.RequeueDead(ctx(t), ""); !errors.Is(err, fleet.ErrDeadLetterNotFound) {
			t.Fatalf("RequeueDead of poison = %v", err)
		}
		// Poison never ran, so its attempts stay. The reserve registered
		// the queue and stored its policy.
		want := []string{k.Dead, k.Policy, k.Registry}
		if got := e.keys(t); !slices.Equal(got, want) {
			t.Fatalf("keys %v, want %v", got, want)
		}
	})
}

// TestQueueInterop: a body another client pushed, with no attempts field,
// is consumed normally, retried with its payload bytes intact, and acked.
func TestQueueInterop(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		k := e.qk("interop")
		q := fastQueue(e.F, "interop", time.Minute)
		e.do(t, e.Raw.B().Rpush().Key(k.Pending).Element(`{"id": "py-1", "payload": {"url": "https://example.com/py", "n": 3}, "x": [1.50]}`).Build())
		got, err := q.Reserve(ctx(t), 1, time.Second)
		if err != nil || len(got) != 1 {
			t.Fatal(got, err)
		}
		if got[0].ID != "py-1" || got[0].Attempts != 0 || got[0].Payload != (job{URL: "https://example.com/py", N: 3}) {
			t.Fatalf("task %+v", got[0])
		}
		if err := got[0].Nack(ctx(t), errors.New("once")); err != nil {
			t.Fatal(err)
		}
		sched := e.zscores(t, k.Scheduled)
		if len(sched) != 1 || sched[0].Member != `{"attempts":1,"error":"once","id":"py-1","payload":{"url":"https://example.com/py","n":3},"x":[1.50]}` {
			t.Fatalf("scheduled %v", sched)
		}
		got, err = q.Reserve(ctx(t), 1, 5*time.Second)
		if err != nil || len(got) != 1 || got[0].ID != "py-1" || got[0].Attempts != 1 {
			t.Fatal(got, err)
		}
		if err := got[0].Ack(ctx(t)); err != nil {
			t.Fatal(err)
		}
		if keys := e.keys(t); !slices.Equal(keys, []string{k.Policy, k.Registry}) {
			t.Fatalf("keys left %v", keys) // the reserve registered the queue and stored its policy
		}
	})
}
