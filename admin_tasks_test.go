package fleet_test

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/internal/redistest"
)

// TestScheduledAfterCursor: pages of scheduled tasks read after a cursor
// stay correct while tasks are removed before it and added after it, also
// among tasks of equal ready time, on every layout and with shards.
func TestScheduledAfterCursor(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		counts := []int{1}
		if tg.Tagged {
			counts = append(counts, 3)
		}
		for _, shards := range counts {
			q := fleet.NewQueue[job](e.F, "sa"+string(rune('0'+shards)), fleet.QueueOptions{Shards: shards})
			at := time.Now().Add(time.Hour).Truncate(time.Millisecond)
			var ids []string
			for i := range 6 {
				// Two ready times, three tasks each: ties on the score.
				id, err := q.SubmitWith(c, job{URL: "https://example.com/", N: i}, fleet.SubmitOptions{NotBefore: at.Add(time.Duration(i/3) * time.Second)})
				if err != nil {
					t.Fatal(err)
				}
				ids = append(ids, id)
			}
			page1, cur, err := q.ScheduledAfter(c, fleet.TaskCursor{}, 2)
			if err != nil || len(page1) != 2 || cur.ID != page1[1].ID {
				t.Fatalf("shards %d: page 1 %v %+v %v", shards, page1, cur, err)
			}
			// Remove the first task listed (before the cursor) and add one
			// due later than all: the next pages show each remaining task once.
			if err := q.Cancel(c, page1[0].ID); err != nil {
				t.Fatal(err)
			}
			late, err := q.SubmitWith(c, job{URL: "https://example.com/", N: 9}, fleet.SubmitOptions{NotBefore: at.Add(time.Minute)})
			if err != nil {
				t.Fatal(err)
			}
			seen := []string{page1[0].ID, page1[1].ID}
			for range 10 {
				page, next, err := q.ScheduledAfter(c, cur, 2)
				if err != nil {
					t.Fatal(err)
				}
				for _, w := range page {
					seen = append(seen, w.ID)
				}
				if len(page) < 2 {
					break
				}
				cur = next
			}
			want := append(slices.Clone(ids), late)
			slices.Sort(want)
			got := slices.Clone(seen)
			slices.Sort(got)
			if !slices.Equal(got, want) {
				t.Fatalf("shards %d: listed %v, want each of %v once", shards, seen, want)
			}
			if _, _, err := q.ScheduledAfter(c, fleet.TaskCursor{}, 1001); !errors.Is(err, fleet.ErrInvalidArgument) {
				t.Fatalf("count 1001: %v", err)
			}
		}
	})
}

// TestRunningDedupRunNow: Running lists reserved tasks by deadline with
// their payloads; DedupTask finds a task by its dedup key; RunNow makes a
// scheduled task due, so that a reserve takes it.
func TestRunningDedupRunNow(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		q := fleet.NewQueue[job](e.F, "rn", fleet.QueueOptions{})
		for i := range 3 {
			if _, err := q.Submit(c, job{URL: "https://example.com/", N: i}); err != nil {
				t.Fatal(err)
			}
		}
		tasks, err := q.Reserve(c, 3, 0)
		if err != nil || len(tasks) != 3 {
			t.Fatalf("reserve %d %v", len(tasks), err)
		}
		run, err := q.Running(c, fleet.TaskCursor{}, 2)
		if err != nil || len(run) != 2 {
			t.Fatalf("running %v %v", run, err)
		}
		rest, err := q.Running(c, run[1].Cursor, 2)
		if err != nil || len(rest) != 1 {
			t.Fatalf("running page 2 %v %v", rest, err)
		}
		got := []string{run[0].ID, run[1].ID, rest[0].ID}
		slices.Sort(got)
		var want []string
		for _, tk := range tasks {
			want = append(want, tk.ID)
		}
		slices.Sort(want)
		if !slices.Equal(got, want) || run[0].Deadline.Before(time.Now()) || len(run[0].Payload) == 0 {
			t.Fatalf("running %v, want %v; %+v", got, want, run[0])
		}
		for _, tk := range tasks {
			if err := tk.Ack(c); err != nil {
				t.Fatal(err)
			}
		}

		id, err := q.SubmitWith(c, job{URL: "https://example.com/", N: 7}, fleet.SubmitOptions{DedupKey: "k7", NotBefore: time.Now().Add(time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		if got, err := q.DedupTask(c, "k7"); err != nil || got != id {
			t.Fatalf("dedup k7: %q %v, want %s", got, err, id)
		}
		// An acked task of UniqueFor holds its key for the window.
		uq := fleet.NewQueue[job](e.F, "rn", fleet.QueueOptions{})
		uid, err := uq.SubmitWith(c, job{URL: "https://example.com/", N: 8}, fleet.SubmitOptions{DedupKey: "k8", UniqueFor: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		ut, err := uq.Reserve(c, 1, 0)
		if err != nil || len(ut) != 1 || ut[0].ID != uid {
			t.Fatalf("reserve unique %v %v", ut, err)
		}
		if err := ut[0].Ack(c); err != nil {
			t.Fatal(err)
		}
		if got, err := q.DedupTask(c, "k8"); err != nil || got != uid {
			t.Fatalf("dedup k8 after ack: %q %v, want %s", got, err, uid)
		}
		if _, err := q.DedupTask(c, "nope"); !errors.Is(err, fleet.ErrTaskNotFound) {
			t.Fatalf("dedup nope: %v", err)
		}
		if err := q.RunNow(c, "0190c6e0-0000-7000-8000-000000000000"); !errors.Is(err, fleet.ErrTaskNotFound) {
			t.Fatalf("run now unknown: %v", err)
		}
		if err := q.RunNow(c, id); err != nil {
			t.Fatal(err)
		}
		got2, err := q.Reserve(c, 1, 5*time.Second)
		if err != nil || len(got2) != 1 || got2[0].ID != id {
			t.Fatalf("reserve after run now: %v %v", got2, err)
		}
		if err := got2[0].Ack(c); err != nil {
			t.Fatal(err)
		}
	})
}

// TestFlowMembers: a flow's tasks are listed with their queues and states.
func TestFlowMembers(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		q := fleet.NewQueue[job](e.F, "fm", fleet.QueueOptions{})
		fl := fleet.NewFlow(e.F, fleet.FlowOptions{Retention: time.Minute})
		a := fleet.AddStep(fl, q, job{URL: "https://example.com/a"}, fleet.SubmitOptions{})
		b := fleet.AddStep(fl, q, job{URL: "https://example.com/b"}, fleet.SubmitOptions{After: fleet.Steps(a)})
		if err := fl.Submit(c); err != nil {
			t.Fatal(err)
		}
		ms, err := e.F.FlowMembers(c, fl.ID())
		want := []fleet.FlowMember{{Queue: "fm", ID: a.ID(), State: "pending"}, {Queue: "fm", ID: b.ID(), State: "pending"}}
		slices.SortFunc(want, func(x, y fleet.FlowMember) int { return strings.Compare(x.ID, y.ID) })
		if err != nil || !slices.Equal(ms, want) {
			t.Fatalf("members %+v %v, want %+v", ms, err, want)
		}
		if ms, err := e.F.FlowMembers(c, "nosuch"); err != nil || len(ms) != 0 {
			t.Fatalf("unknown flow: %v %v", ms, err)
		}
		if _, err := e.F.FlowMembers(c, ""); !errors.Is(err, fleet.ErrInvalidArgument) {
			t.Fatalf("empty id: %v", err)
		}
	})
}

// TestDone: the records kept by QueueOptions.Retention are indexed in
// :retained as their acks happen, and Done lists them a page at a time
// after a cursor, oldest first, leaving out a record that ran out; the
// index drops the ids past the retention and expires with the last one; a
// bad page or cursor is refused; an index of another type fails Done and
// never an ack.
func TestDone(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		k := e.qk("dn")
		q := fleet.NewQueue[job](e.F, "dn", fleet.QueueOptions{Retention: time.Minute})
		ack := func(n int) []string {
			t.Helper()
			submitJobs(t, q, n)
			tasks, err := q.Reserve(c, n, 0)
			if err != nil || len(tasks) != n {
				t.Fatalf("reserve %d %v", len(tasks), err)
			}
			var ids []string
			for i, tk := range tasks {
				if err := tk.SetResult(map[string]int{"n": i}); err != nil {
					t.Fatal(err)
				}
				if err := tk.Ack(c); err != nil {
					t.Fatal(err)
				}
				ids = append(ids, tk.ID)
			}
			return ids
		}
		ids := ack(5)
		if got := e.zscores(t, k.Pending+":retained"); len(got) != 5 {
			t.Fatalf(":retained %v, want the 5 ids", got)
		}
		if ttl := rawPTTL(t, e.Raw, k.Pending+":retained"); ttl <= 0 || ttl > 60_000 {
			t.Fatalf(":retained PTTL %d, want within the retention", ttl)
		}
		var listed []string
		var after fleet.TaskCursor
		for page := 0; ; page++ {
			ds, err := q.Done(c, after, 2)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range ds {
				if d.DoneAt.IsZero() || d.Attempts != 0 || len(d.Result) == 0 || d.Cursor.ID != d.ID {
					t.Fatalf("done task %+v", d)
				}
				listed = append(listed, d.ID)
			}
			if len(ds) < 2 {
				break
			}
			after = ds[1].Cursor
		}
		if !slices.Equal(slices.Sorted(slices.Values(listed)), slices.Sorted(slices.Values(ids))) {
			t.Fatalf("listed %v, want %v", listed, ids)
		}
		// A record that ran out is left out.
		e.do(t, e.Raw.B().Del().Key(e.key("fleet:queue:dn", "fleet:queue:{dn}")+":result:"+ids[0]).Build())
		if ds, err := q.Done(c, fleet.TaskCursor{}, 10); err != nil || len(ds) != 4 || slices.ContainsFunc(ds, func(d fleet.DoneTask) bool { return d.ID == ids[0] }) {
			t.Fatalf("after a record ran out: %v %v", ds, err)
		}
		for _, bad := range []struct {
			after fleet.TaskCursor
			n     int
		}{{fleet.TaskCursor{}, -1}, {fleet.TaskCursor{}, 1001}, {fleet.TaskCursor{Score: math.NaN(), ID: "x"}, 1}} {
			if _, err := q.Done(c, bad.after, bad.n); !errors.Is(err, fleet.ErrInvalidArgument) {
				t.Fatalf("Done(%v, %d): %v, want ErrInvalidArgument", bad.after, bad.n, err)
			}
		}

		// A short retention: the next ack drops the ids past it.
		sq := fleet.NewQueue[job](e.F, "dn", fleet.QueueOptions{Retention: 300 * time.Millisecond})
		time.Sleep(400 * time.Millisecond) // the records of 5 acks are older than 300 ms now
		submitJobs(t, sq, 1)
		tasks, err := sq.Reserve(c, 1, 0)
		if err != nil || len(tasks) != 1 || tasks[0].Ack(c) != nil {
			t.Fatalf("short retention: %v %v", tasks, err)
		}
		if got := e.zscores(t, k.Pending+":retained"); len(got) != 1 || got[0].Member != tasks[0].ID {
			t.Fatalf(":retained %v, want only %s", got, tasks[0].ID)
		}

		// An index of another type: the ack and its record stand, Done fails.
		e.do(t, e.Raw.B().Set().Key(k.Pending+":retained").Value("x").Build())
		more := ack(1)
		if _, ok := e.get(t, e.key("fleet:queue:dn", "fleet:queue:{dn}")+":result:"+more[0]); !ok {
			t.Fatal("the record of an ack beside a wrong-type index is missing")
		}
		if got, _ := e.get(t, k.Pending+":retained"); got != "x" {
			t.Fatalf("the wrong-type index became %q", got)
		}
		if _, err := q.Done(c, fleet.TaskCursor{}, 10); !errors.Is(err, fleet.ErrWrongType) {
			t.Fatalf("Done over a string index: %v, want ErrWrongType", err)
		}
	})
}
