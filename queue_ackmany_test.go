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

// TestQueueAckMany: the group commit of a worker's acks (one reserve call
// that acks many tasks and takes more) checks each ack as a plain Ack
// does. Of five tasks: a stale token, and a reservation a documented-schema
// client re-reserved (its own :processing deadline), are refused and left
// exactly as they are; the others are acked, the dedup key of one freed,
// and the call takes the two tasks asked for. Acks alone (n = 0) take
// nothing; a wrong-type key refuses the acks with nothing changed.
func TestQueueAckMany(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		q := fastQueue(e.F, "many", time.Minute)
		k := e.qk("many")
		var ids []string
		for i := range 7 {
			opts := fleet.SubmitOptions{}
			if i == 3 {
				opts.DedupKey = "d3"
			}
			id, err := q.SubmitWith(ctx(t), jobN(i), opts)
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		held, err := q.Reserve(ctx(t), 5, 0)
		if err != nil || len(held) != 5 {
			t.Fatalf("reserve = %d tasks, %v", len(held), err)
		}
		// Task 1: a stale holder (its token is not the lease's).
		stale := fleet.StaleTask(held[1], "not-the-token.1")
		// Task 2: a documented-schema client re-reserved it, with a
		// deadline of its own.
		e.do(t, e.Raw.B().Zadd().Key(k.Processing).ScoreMember().ScoreMember(4102444800, ids[2]).Build())
		acks, next, err := fleet.AckManyAndTake(ctx(t), q, []*fleet.Task[job]{held[0], stale, held[2], held[3], held[4]}, 2)
		if err != nil || acks != "10011" {
			t.Fatalf("ack many = %q, %v; want 10011", acks, err)
		}
		if len(next) != 2 || next[0].ID != ids[5] || next[1].ID != ids[6] {
			t.Fatalf("took %v; want %s and %s", next, ids[5], ids[6])
		}
		want := []string{ids[1], ids[2], ids[5], ids[6]}
		if got := e.zmembers(t, k.Processing); !sameSet(got, want) {
			t.Fatalf(":processing = %v; want %v", got, want)
		}
		if got := e.hkeys(t, k.Body); !sameSet(got, want) {
			t.Fatalf(":processing:body = %v; want %v", got, want)
		}
		// The lease hash: the entries of 1, 2, 5 and 6, and the record of
		// the call that took 5 and 6 (the first call's record went with its
		// first ack).
		var entries, records []string
		for _, f := range e.hkeys(t, k.Lease) {
			if strings.HasPrefix(f, "\xffcall:") {
				records = append(records, f)
			} else {
				entries = append(entries, f)
			}
		}
		if !sameSet(entries, want) || len(records) != 1 {
			t.Fatalf(":processing:lease = entries %v, records %q; want entries %v and one record", entries, records, want)
		}
		if _, ok := e.hgetall(t, k.Dedup)["d3"]; ok {
			t.Fatal("the dedup key of an acked task is still held")
		}

		// Acks alone take nothing, and a lost one changes nothing.
		before := e.dump(t)
		acks, none, err := fleet.AckManyAndTake(ctx(t), q, []*fleet.Task[job]{held[0], held[3]}, 0)
		if err != nil || acks != "00" || len(none) != 0 {
			t.Fatalf("acks again = %q, %v, %v; want 00 and nothing taken", acks, none, err)
		}
		if got := e.dump(t); !maps.Equal(got, before) {
			t.Fatalf("stale acks changed Redis:\n got %v\nwant %v", got, before)
		}

		// A wrong-type lease hash: refused, nothing changed.
		e.do(t, e.Raw.B().Rename().Key(k.Lease).Newkey(k.Lease+"-saved").Build())
		e.do(t, e.Raw.B().Set().Key(k.Lease).Value("not a hash").Build())
		before = e.dump(t)
		if _, _, err := fleet.AckManyAndTake(ctx(t), q, next, 1); !errors.Is(err, fleet.ErrWrongType) {
			t.Fatalf("acks on a wrong-type lease hash: %v; want ErrWrongType", err)
		}
		if got := e.dump(t); !maps.Equal(got, before) {
			t.Fatalf("a refused group ack changed Redis:\n got %v\nwant %v", got, before)
		}
	})
}
