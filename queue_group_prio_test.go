package fleet_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/internal/redistest"
)

// uuidAt returns a UUIDv7 whose time is t: a task id as fleet makes them,
// submitted then.
func uuidAt(t time.Time) string {
	ms := uint64(t.UnixMilli())
	return fmt.Sprintf("%08x-%04x-7%03x-8%03x-%012x", ms>>16, ms&0xffff, rand.N(0x1000), rand.N(0x1000), rand.N(uint64(1)<<48))
}

// groupIDs reads the ids on group g's list of queue name, in order.
func (e *env) groupIDs(t *testing.T, name, g string) []string {
	t.Helper()
	var ids []string
	for _, b := range e.lrange(t, e.qk(name).Group+g) {
		ids = append(ids, decodeMap(t, b)["id"].(string))
	}
	return ids
}

// TestQueueGroupPriority: a group's prioritized tasks go on its list in
// the aged order of priorities (p x PriorityStep before when each was
// submitted): before the normal tasks submitted less than that before
// them, after older ones, and after the tasks of their own priority
// submitted before them. A sequential group runs them in that order.
// Exact list contents are asserted in Redis.
func TestQueueGroupPriority(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		k := e.qk("gprio")
		q := fleet.NewQueue[job](e.F, "gprio", fleet.QueueOptions{Groups: fleet.GroupLimits{Concurrency: 1}})
		sub := func(n, p int) string {
			t.Helper()
			id, err := q.SubmitWith(c, jobN(n), fleet.SubmitOptions{Group: "g", Priority: p})
			if err != nil {
				t.Fatal(err)
			}
			return id
		}
		// A normal task submitted 5 minutes ago: its id says when.
		old := sub(0, 0)
		oldID := uuidAt(time.Now().Add(-5 * time.Minute))
		body := e.lrange(t, k.Group+"g")[0]
		if err := e.compat().LSet(c, k.Group+"g", 0, strings.Replace(body, old, oldID, 1)).Err(); err != nil {
			t.Fatal(err)
		}
		n1, n2 := sub(1, 0), sub(2, 0)
		p3 := sub(3, 3)  // 3 min: after the old one, before the fresh ones
		p9 := sub(4, 9)  // 9 min: before all
		p9b := sub(5, 9) // after p9, its equal
		p3b := sub(6, 3) // after p3
		n3 := sub(7, 0)  // last
		p1 := sub(8, 1)  // 1 min: before n1..n3, after p3b
		want := []string{p9, p9b, oldID, p3, p3b, p1, n1, n2, n3}
		if got := e.groupIDs(t, "gprio", "g"); !slices.Equal(got, want) {
			t.Fatalf("group list\n got %v\nwant %v", got, want)
		}
		if n, err := e.compat().Get(c, k.GroupPending).Int(); err != nil || n != len(want) {
			t.Fatalf("gpending %d %v", n, err)
		}
		// A sequential group: one at a time, in that order; a released task
		// goes back first.
		var ran []string
		released := false
		for len(ran) < len(want) {
			ts := reserveAll(t, q, 1)
			if ts[0].ID == oldID && !released {
				released = true
				if err := ts[0].Release(c); err != nil {
					t.Fatal(err)
				}
				continue
			}
			ran = append(ran, ts[0].ID)
			if err := ts[0].Ack(c); err != nil {
				t.Fatal(err)
			}
		}
		if !released || !slices.Equal(ran, want) {
			t.Fatalf("ran\n got %v\nwant %v", ran, want)
		}
		if got := e.lrange(t, k.Group+"g"); len(got) != 0 {
			t.Fatalf("group list left %v", got)
		}
	})
}

// TestQueueGroupPriorityRetry: a prioritized task of a group that failed
// comes back from :scheduled in its aged place, not last; a task of
// priority past MaxPriority is refused and nothing is stored.
func TestQueueGroupPriorityRetry(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		q := fleet.NewQueue[job](e.F, "gpr", fleet.QueueOptions{BackoffBase: time.Millisecond, BackoffMax: time.Millisecond, MaxAttempts: 3})
		p5, err := q.SubmitWith(c, jobN(1), fleet.SubmitOptions{Group: "g", Priority: 5})
		if err != nil {
			t.Fatal(err)
		}
		ts := reserveAll(t, q, 1)
		if ts[0].ID != p5 {
			t.Fatalf("took %s, want %s", ts[0].ID, p5)
		}
		n1, _ := q.SubmitWith(c, jobN(2), fleet.SubmitOptions{Group: "g"})
		n2, _ := q.SubmitWith(c, jobN(3), fleet.SubmitOptions{Group: "g"})
		if err := ts[0].Nack(c, errors.New("503")); err != nil {
			t.Fatal(err)
		}
		// Due at once: the next reserve moves it, before the normal ones.
		var ran []string
		for len(ran) < 3 {
			ts := reserveAll(t, q, 1)
			ran = append(ran, ts[0].ID)
			if err := ts[0].Ack(c); err != nil {
				t.Fatal(err)
			}
		}
		if want := []string{p5, n1, n2}; !slices.Equal(ran, want) {
			t.Fatalf("ran %v, want %v", ran, want)
		}
		before := e.dump(t)
		if _, err := q.SubmitWith(c, jobN(4), fleet.SubmitOptions{Group: "g", Priority: fleet.MaxPriority + 1}); !errors.Is(err, fleet.ErrInvalidArgument) || !strings.Contains(err.Error(), "Priority") {
			t.Fatalf("priority past MaxPriority: %v", err)
		}
		if got := e.dump(t); !mapsEqual(got, before) {
			t.Fatalf("a refused submit changed Redis:\n got %v\nwant %v", got, before)
		}
	})
}

// TestQueueGroupPriorityFair: with priorities inside the groups, the round
// over the groups stays fair: three groups with a backlog each get a third
// of the runs (±10%) while their own priority-9 tasks go first within
// each.
func TestQueueGroupPriorityFair(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		q := fleet.NewQueue[job](e.F, "gpf", fleet.QueueOptions{})
		const per = 300
		urgent := map[string]bool{}
		var subs []fleet.Submission[job]
		for _, g := range []string{"a", "b", "c"} {
			for i := range per {
				p := 0
				if i%10 == 9 {
					p = 9
				}
				subs = append(subs, fleet.Submission[job]{Payload: jobN(i), Options: fleet.SubmitOptions{Group: g, Priority: p}})
			}
		}
		ids, err := q.SubmitManyWith(c, subs)
		if err != nil {
			t.Fatal(err)
		}
		for i, s := range subs {
			if s.Options.Priority > 0 {
				urgent[ids[i]] = true
			}
		}
		var mu sync.Mutex
		count := map[string]int{}
		seenNormal := map[string]bool{}
		var late []string
		const take = 300 // a third of the tasks
		done := make(chan struct{})
		var n int
		w := fleet.NewBatchWorker(e.F, fleet.WorkerOptions{Type: "gpf", ID: "w", Slots: 1}, q,
			fleet.BatchFunc[wcfg, out, job](func(ctx context.Context, _ *fleet.Slot[wcfg, out], tk *fleet.Task[job]) error {
				mu.Lock()
				defer mu.Unlock()
				n++
				if n > take {
					return nil
				}
				g := tk.Group()
				count[g]++
				if urgent[tk.ID] && seenNormal[g] {
					late = append(late, tk.ID)
				}
				if !urgent[tk.ID] {
					seenNormal[g] = true
				}
				if n == take {
					close(done)
				}
				return nil
			}))
		startWorker(t, w)
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			t.Fatal("the worker did not run 300 tasks in 60 s")
		}
		mu.Lock()
		defer mu.Unlock()
		for _, g := range []string{"a", "b", "c"} {
			if got := count[g]; got < 90 || got > 110 {
				t.Errorf("group %s ran %d of the first %d, want 100 ±10%%: %v", g, got, take, count)
			}
		}
		if len(late) > 0 {
			t.Errorf("%d priority-9 tasks ran after a normal task of their group, e.g. %s", len(late), late[0])
		}
	})
}

// TestQueueGroupPriorityReplace: a replace that raises the priority of a
// group's waiting task moves it to its aged place on the group's list,
// keeping its id; one at the same priority stays in place.
func TestQueueGroupPriorityReplace(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		q := fleet.NewQueue[job](e.F, "gprep", fleet.QueueOptions{})
		sub := func(n, p int, dk string, replace bool) string {
			t.Helper()
			id, err := q.SubmitWith(c, jobN(n), fleet.SubmitOptions{Group: "g", Priority: p, DedupKey: dk, Replace: replace})
			if err != nil {
				t.Fatal(err)
			}
			return id
		}
		n1, n2, n3 := sub(1, 0, "k1", false), sub(2, 0, "k2", false), sub(3, 0, "k3", false)
		if got := sub(4, 0, "k2", true); got != n2 {
			t.Fatalf("replace of n2 gave %s", got)
		}
		if got := e.groupIDs(t, "gprep", "g"); !slices.Equal(got, []string{n1, n2, n3}) {
			t.Fatalf("after a replace at the same priority: %v", got)
		}
		if got := sub(5, 9, "k3", true); got != n3 {
			t.Fatalf("replace of n3 gave %s", got)
		}
		if got := e.groupIDs(t, "gprep", "g"); !slices.Equal(got, []string{n3, n1, n2}) {
			t.Fatalf("after raising n3 to priority 9: %v, want [%s %s %s]", got, n3, n1, n2)
		}
		if list := e.lrange(t, e.qk("gprep").Group+"g"); !strings.Contains(list[0], `"n":5`) || !strings.Contains(list[2], `"n":4`) {
			t.Fatalf("bodies %v", list)
		}
	})
}
