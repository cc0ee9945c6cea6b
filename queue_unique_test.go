package fleet_test

import (
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/internal/redistest"
)

// TestQueueUniqueFor: the dedup key is held while the task lives and for
// UniqueFor after its ack; a duplicate gets the holder's id and a
// *DuplicateError naming it; once the window ends, the key is free.
func TestQueueUniqueFor(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		qk := e.qk("uq")
		uniq := qk.Pending + ":unique:daily-report"
		q := fleet.NewQueue[job](e.F, "uq", fleet.QueueOptions{})
		opts := fleet.SubmitOptions{DedupKey: "daily-report", UniqueFor: 2 * time.Second}
		id, err := q.SubmitWith(c, job{URL: "https://example.com/1"}, opts)
		if err != nil {
			t.Fatal(err)
		}
		if p := e.lrange(t, qk.Pending); len(p) != 1 || !strings.HasSuffix(p[0], `,"attempts":0,"dedup":"daily-report","unique_ms":2000}`) {
			t.Fatalf("pending %q", p)
		}
		dup := func(when string) {
			t.Helper()
			got, err := q.SubmitWith(c, job{URL: "https://example.com/2"}, opts)
			var de *fleet.DuplicateError
			if got != id || !errors.Is(err, fleet.ErrDuplicate) || !errors.As(err, &de) || de.ID != id || de.Key != "daily-report" || !strings.Contains(err.Error(), id) {
				t.Fatalf("%s: duplicate got %s, %v", when, got, err)
			}
		}
		dup("live")
		ts, err := q.Reserve(c, 1, 0)
		if err != nil || len(ts) != 1 {
			t.Fatal(ts, err)
		}
		if err := ts[0].Ack(c); err != nil {
			t.Fatal(err)
		}
		if got, _ := e.get(t, uniq); got != id {
			t.Fatalf("unique key %q", got)
		}
		pttl := mustInt(t, e.do(t, e.Raw.B().Pttl().Key(uniq).Build()))
		if pttl <= 0 || pttl > 2000 {
			t.Fatalf("pttl %d", pttl)
		}
		if d := e.hgetall(t, qk.Dedup); len(d) != 0 {
			t.Fatalf("dedup %v", d)
		}
		before := e.dump(t)
		dup("in the window")
		if after := e.dump(t); !maps.Equal(before, after) {
			t.Fatalf("a duplicate changed Redis:\n%v\n%v", before, after)
		}
		waitFor(t, 5*time.Second, func() bool { _, ok := e.get(t, uniq); return !ok }, "window never ended")
		id2, err := q.SubmitWith(c, job{URL: "https://example.com/3"}, opts)
		if err != nil || id2 == id {
			t.Fatalf("after the window: %s %v", id2, err)
		}
		// A task that dies frees its key at once, window or not.
		ts, _ = q.Reserve(c, 1, 0)
		if err := ts[0].DeadLetter(c, errors.New("no")); err != nil {
			t.Fatal(err)
		}
		if _, ok := e.get(t, uniq); ok {
			t.Fatal("a dead task holds its window")
		}
		if id3, err := q.SubmitWith(c, job{URL: "https://example.com/4"}, opts); err != nil || id3 == id2 {
			t.Fatalf("after a death: %s %v", id3, err)
		}
	})
}

// TestQueueUniqueForBadInput: refused, naming the field, nothing written.
func TestQueueUniqueForBadInput(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		q := fleet.NewQueue[job](e.F, "uqb", fleet.QueueOptions{})
		if _, err := q.Submit(c, job{URL: "https://example.com/"}); err != nil {
			t.Fatal(err)
		}
		before := e.dump(t)
		for _, o := range []fleet.SubmitOptions{{UniqueFor: time.Minute}, {DedupKey: "k", UniqueFor: -time.Second}, {DedupKey: "k", UniqueFor: time.Microsecond}} {
			if _, err := q.SubmitWith(c, job{URL: "https://example.com/"}, o); !errors.Is(err, fleet.ErrInvalidArgument) || !strings.Contains(err.Error(), "UniqueFor") {
				t.Errorf("%+v: %v", o, err)
			}
		}
		if after := e.dump(t); !maps.Equal(before, after) {
			t.Fatalf("changed:\n%v\n%v", before, after)
		}
	})
}
