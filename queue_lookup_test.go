package fleet_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"strings"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/internal/redistest"
)

type crawlResult struct {
	Links int `json:"links"`
}

// TestQueueLookup: a task found in each state, with what Lookup says of it;
// a done task's record and result retained for Retention (the exact key
// left in Redis), and read back typed with ResultOf.
func TestQueueLookup(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		qk := e.qk("lk")
		q := fleet.NewQueue[job](e.F, "lk", fleet.QueueOptions{Retention: time.Minute, MaxAttempts: 1})
		before := time.Now().Add(-time.Second)
		pending, _ := q.Submit(c, job{URL: "https://example.com/p"})
		readyAt := time.Now().Add(time.Hour).Truncate(time.Millisecond)
		sched, _ := q.SubmitWith(c, job{URL: "https://example.com/s"}, fleet.SubmitOptions{NotBefore: readyAt})
		rec, err := q.Lookup(c, pending)
		if err != nil || rec.Status != fleet.TaskPending || string(rec.Payload) != `{"url":"https://example.com/p","n":0}` || rec.SubmittedAt.Before(before) || rec.SubmittedAt.After(time.Now()) {
			t.Fatalf("pending %+v %v", rec, err)
		}
		rec, err = q.Lookup(c, sched)
		if err != nil || rec.Status != fleet.TaskScheduled || !rec.ReadyAt.Equal(readyAt) {
			t.Fatalf("scheduled %+v %v (want ready at %v)", rec, err, readyAt)
		}
		if err := q.Cancel(c, pending); err != nil {
			t.Fatal(err)
		}
		if err := q.Cancel(c, sched); err != nil {
			t.Fatal(err)
		}
		if _, err := q.Lookup(c, pending); !errors.Is(err, fleet.ErrTaskNotFound) {
			t.Fatalf("a cancelled waiting task: %v", err)
		}

		started := make(chan string, 4)
		release := make(chan struct{})
		w := fleet.NewBatchWorker(e.F, fleet.WorkerOptions{Type: "lk", ID: "w1", Slots: 2}, q,
			fleet.BatchResultFunc[wcfg, out, job, crawlResult](func(ctx context.Context, s *fleet.Slot[wcfg, out], tk *fleet.Task[job]) (crawlResult, error) {
				started <- tk.ID
				select {
				case <-release:
				case <-ctx.Done():
					return crawlResult{}, ctx.Err()
				}
				if tk.Payload.N == 1 {
					return crawlResult{}, errors.New("broke")
				}
				return crawlResult{Links: 42}, nil
			}))
		startWorker(t, w)
		ok, _ := q.Submit(c, job{URL: "https://example.com/ok"})
		<-started
		rec, err = q.Lookup(c, ok)
		if err != nil || rec.Status != fleet.TaskActive || rec.Worker != "lk|w1" || time.Until(rec.Deadline) < 20*time.Second || time.Until(rec.Deadline) > 31*time.Second {
			t.Fatalf("active %+v %v", rec, err)
		}
		close(release)
		waitFor(t, 5*time.Second, func() bool { return w.Stats().Done == 1 }, "not done")
		rec, err = q.Lookup(c, ok)
		if err != nil || rec.Status != fleet.TaskDone || string(rec.Result) != `{"links":42}` || rec.Worker != "lk|w1" || rec.Payload != nil ||
			time.Since(rec.DoneAt) > 10*time.Second || rec.Attempts != 0 {
			t.Fatalf("done %+v %v", rec, err)
		}
		stored, _ := e.get(t, qk.Pending+":result:"+ok)
		var raw map[string]any
		if json.Unmarshal([]byte(stored), &raw) != nil || raw["id"] != ok || raw["worker"] != "lk|w1" || raw["attempts"] != 0.0 || fmt.Sprint(raw["result"]) != "map[links:42]" || len(raw) != 5 {
			t.Fatalf("stored record %s", stored)
		}
		if pttl := mustInt(t, e.do(t, e.Raw.B().Pttl().Key(qk.Pending+":result:"+ok).Build())); pttl <= 50_000 || pttl > 60_000 {
			t.Fatalf("record pttl %d", pttl)
		}
		r, err := fleet.ResultOf[crawlResult](c, q, ok)
		if err != nil || r.Links != 42 {
			t.Fatalf("ResultOf %v %v", r, err)
		}
		if err := q.Cancel(c, ok); !errors.Is(err, fleet.ErrTaskFinished) {
			t.Fatalf("cancel of a done task: %v", err)
		}

		bad, _ := q.Submit(c, job{URL: "https://example.com/bad", N: 1})
		waitFor(t, 5*time.Second, func() bool { return w.Stats().Failed == 1 }, "not failed")
		rec, err = q.Lookup(c, bad)
		if err != nil || rec.Status != fleet.TaskDead || rec.LastError != "broke" || rec.Attempts != 1 || time.Since(rec.DeadAt) > 10*time.Second {
			t.Fatalf("dead %+v %v", rec, err)
		}
		if _, err := fleet.ResultOf[crawlResult](c, q, bad); !errors.Is(err, fleet.ErrTaskNotFound) || !strings.Contains(err.Error(), "dead") {
			t.Fatalf("ResultOf a dead task: %v", err)
		}

		for _, tc := range []struct {
			id   string
			want error
		}{{"nope", fleet.ErrTaskNotFound}, {"", fleet.ErrInvalidArgument}} {
			if _, err := q.Lookup(c, tc.id); !errors.Is(err, tc.want) {
				t.Errorf("lookup %q: %v", tc.id, err)
			}
		}
	})
}

// TestQueueLookupCanceled: a task cancelled while it ran shows as canceled.
func TestQueueLookupCanceled(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		q := fleet.NewQueue[job](e.F, "lkc", fleet.QueueOptions{})
		started := make(chan string, 1)
		w := fleet.NewBatchWorker(e.F, fleet.WorkerOptions{Type: "lkc", ID: "w1", Slots: 1}, q,
			fleet.BatchFunc[wcfg, out, job](func(ctx context.Context, s *fleet.Slot[wcfg, out], tk *fleet.Task[job]) error {
				started <- tk.ID
				<-ctx.Done()
				return ctx.Err()
			}))
		startWorker(t, w)
		id, _ := q.Submit(c, job{URL: "https://example.com/"})
		<-started
		if err := q.Cancel(c, id); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 5*time.Second, func() bool { return len(e.lrange(t, e.qk("lkc").Dead)) == 1 }, "not buried")
		rec, err := q.Lookup(c, id)
		if err != nil || rec.Status != fleet.TaskCanceled || !strings.HasPrefix(rec.LastError, "fleet: task canceled") {
			t.Fatalf("%+v %v", rec, err)
		}
	})
}

// TestQueueRetentionOff: without Retention, an ack leaves nothing behind,
// and a result set is dropped; a negative Retention is refused.
func TestQueueRetentionOff(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		q := fleet.NewQueue[job](e.F, "nr", fleet.QueueOptions{})
		id, _ := q.Submit(c, job{URL: "https://example.com/"})
		ts, err := q.Reserve(c, 1, 0)
		if err != nil || len(ts) != 1 {
			t.Fatal(ts, err)
		}
		if err := ts[0].SetResult(crawlResult{Links: 1}); err != nil {
			t.Fatal(err)
		}
		if err := ts[0].SetResult(func() {}); !errors.Is(err, fleet.ErrInvalidArgument) {
			t.Fatalf("unencodable result: %v", err)
		}
		if err := ts[0].Ack(c); err != nil {
			t.Fatal(err)
		}
		for _, k := range e.keys(t) {
			if strings.Contains(k, ":result:") {
				t.Fatalf("%s written", k)
			}
		}
		if _, err := q.Lookup(c, id); !errors.Is(err, fleet.ErrTaskNotFound) {
			t.Fatalf("lookup %v", err)
		}
		if err := fleet.NewQueue[job](e.F, "neg", fleet.QueueOptions{Retention: -time.Second}).Err(); !errors.Is(err, fleet.ErrInvalidArgument) || !strings.Contains(err.Error(), "Retention") {
			t.Fatalf("negative retention: %v", err)
		}
	})
}

func ExampleResultOf() {
	f, done := exampleFleet("results")
	defer done()
	ctx := context.Background()

	type Page struct {
		URL string `json:"url" validate:"required,url"`
	}
	type Links struct {
		Count int `json:"count"`
	}
	q := fleet.NewQueue[Page](f, "pages", fleet.QueueOptions{Retention: time.Hour})
	w := fleet.NewBatchWorker(f, fleet.WorkerOptions{Type: "pages", ID: "w1", Slots: 1}, q,
		fleet.BatchResultFunc[struct{}, struct{}, Page, Links](func(ctx context.Context, s *fleet.Slot[struct{}, struct{}], t *fleet.Task[Page]) (Links, error) {
			return Links{Count: 3}, nil
		}))
	if err := w.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer func() { _ = w.Stop(ctx) }()
	id, _ := q.Submit(ctx, Page{URL: "https://example.org/"})
	for {
		rec, err := q.Lookup(ctx, id)
		if err == nil && rec.Status == fleet.TaskDone {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	links, err := fleet.ResultOf[Links](ctx, q, id)
	fmt.Println(links.Count, err)
	// Output: 3 <nil>
}
