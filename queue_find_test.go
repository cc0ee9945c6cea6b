package fleet_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/internal/keys"
	"github.com/fleet-go/fleet/internal/redistest"
)

// findAll walks FindByMeta to its end with pages of limit, and returns the
// ids in the order listed; it fails on an id listed twice or out of order.
func findAll(t *testing.T, c context.Context, q *fleet.Queue[job], key, value string, limit int) ([]string, map[string]fleet.TaskRecord) {
	t.Helper()
	var ids []string
	recs := map[string]fleet.TaskRecord{}
	cursor := ""
	for range 100_000 {
		page, next, err := q.FindByMeta(c, key, value, cursor, limit)
		if err != nil {
			t.Fatalf("find after %q: %v", cursor, err)
		}
		if len(page) > limit {
			t.Fatalf("a page of %d, limit %d", len(page), limit)
		}
		for _, r := range page {
			if len(ids) > 0 && r.ID <= ids[len(ids)-1] {
				t.Fatalf("%s listed after %s", r.ID, ids[len(ids)-1])
			}
			if cursor != "" && r.ID <= cursor {
				t.Fatalf("%s listed on the page after cursor %s", r.ID, cursor)
			}
			ids = append(ids, r.ID)
			recs[r.ID] = r
		}
		if next == "" {
			return ids, recs
		}
		cursor = next
	}
	t.Fatal("the walk did not end")
	return nil, nil
}

// TestFindByMetaKeys: the exact index keys and members a submit leaves
// (a hashed key for a long value), the ack that removes its task, a dead
// letter that stays and is found as dead, a purge whose entries the next
// page prunes, the horizon's PEXPIRE, the stored policy; and a task of a
// queue with Retention found done after its ack.
func TestFindByMetaKeys(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		qk := e.qk("fm")
		q := fleet.NewQueue[job](e.F, "fm", fleet.QueueOptions{IndexMeta: []string{"tenant", "site"}, MaxAttempts: 1})
		long := strings.Repeat("a b", 60)
		sub := func(meta map[string]string, o fleet.SubmitOptions) string {
			t.Helper()
			o.Metadata = meta
			id, err := q.SubmitWith(c, job{URL: "https://example.com/x"}, o)
			if err != nil {
				t.Fatal(err)
			}
			return id
		}
		a1 := sub(map[string]string{"tenant": "acme", "site": "s1", "other": "x"}, fleet.SubmitOptions{})
		a2 := sub(map[string]string{"tenant": "acme"}, fleet.SubmitOptions{NotBefore: time.Now().Add(time.Hour)})
		a3 := sub(map[string]string{"tenant": "acme"}, fleet.SubmitOptions{})
		l1 := sub(map[string]string{"tenant": long}, fleet.SubmitOptions{})
		plain, _ := q.Submit(c, job{URL: "https://example.com/p"}) // no metadata: not indexed
		acme := qk.Pending + ":meta:tenant:sacme"
		hashed := qk.Pending + ":meta:tenant:" + keys.MetaCanon(long)
		if !strings.HasPrefix(keys.MetaCanon(long), "h") || len(keys.MetaCanon(long)) != 41 {
			t.Fatalf("canon of a long value %q", keys.MetaCanon(long))
		}
		for key, want := range map[string][]string{acme: {a1, a2, a3}, qk.Pending + ":meta:site:ss1": {a1}, hashed: {l1}} {
			got := e.zmembers(t, key)
			if slices.Sort(want); !slices.Equal(got, want) {
				t.Fatalf("%s holds %v, want %v", key, got, want)
			}
			pttl := mustInt(t, e.do(t, e.Raw.B().Pttl().Key(key).Build()))
			if pttl < int64(fleet.DefaultDeadMaxAge/time.Millisecond)-60_000 || pttl > int64(fleet.DefaultDeadMaxAge/time.Millisecond) {
				t.Fatalf("%s pttl %d", key, pttl)
			}
		}
		if n := mustInt(t, e.do(t, e.Raw.B().Exists().Key(qk.Pending+":meta:other:sx").Build())); n != 0 {
			t.Fatal("a key the queue does not index was indexed")
		}
		if pol, _ := e.get(t, qk.Policy); !strings.Contains(pol, `"index_meta":["tenant","site"]`) {
			t.Fatalf("policy %s", pol)
		}
		if rec, _ := q.Lookup(c, a1); rec.Metadata["tenant"] != "acme" {
			t.Fatalf("lookup %+v", rec)
		}

		// Reserve a1 and a3 (and the plain one): ack a1, dead-letter a3.
		ts, err := q.Reserve(c, 10, 0)
		if err != nil || len(ts) != 4 {
			t.Fatalf("reserve %d %v", len(ts), err)
		}
		ids, recs := findAll(t, c, q, "tenant", "acme", 2)
		if !slices.Equal(ids, e.zmembers(t, acme)) || recs[a1].Status != fleet.TaskActive || recs[a2].Status != fleet.TaskScheduled || recs[a3].Status != fleet.TaskActive {
			t.Fatalf("while active: %v %+v", ids, recs)
		}
		for _, tk := range ts {
			switch tk.ID {
			case l1:
				if err := tk.Release(c); err != nil {
					t.Fatal(err)
				}
			case a1, plain:
				if err := tk.Ack(c); err != nil {
					t.Fatal(err)
				}
			case a3:
				if err := tk.Nack(c, errors.New("broke")); err != nil {
					t.Fatal(err)
				}
			}
		}
		if got, want := e.zmembers(t, acme), []string{a2, a3}; !slices.Equal(got, want) {
			t.Fatalf("after the ack: %v, want %v", got, want)
		}
		if n := mustInt(t, e.do(t, e.Raw.B().Exists().Key(qk.Pending+":meta:site:ss1").Build())); n != 0 {
			t.Fatal("the ack left a1 in the site index")
		}
		ids, recs = findAll(t, c, q, "tenant", "acme", 100)
		if !slices.Equal(ids, []string{a2, a3}) || recs[a3].Status != fleet.TaskDead || recs[a3].LastError != "broke" || recs[a2].Metadata["tenant"] != "acme" {
			t.Fatalf("after the dead letter: %v %+v", ids, recs)
		}
		if ids, _ := findAll(t, c, q, "tenant", long, 1); !slices.Equal(ids, []string{l1}) {
			t.Fatalf("the long value: %v", ids)
		}
		// A purge drops the dead letter; the next page prunes its entry.
		if _, err := q.PurgeDead(c); err != nil {
			t.Fatal(err)
		}
		if ids, _ := findAll(t, c, q, "tenant", "acme", 100); !slices.Equal(ids, []string{a2}) {
			t.Fatalf("after the purge: %v", ids)
		}
		if got := e.zmembers(t, acme); !slices.Equal(got, []string{a2}) {
			t.Fatalf("the purged entry was not pruned: %v", got)
		}

		// With Retention an ack keeps the entry while the record is kept.
		r := fleet.NewQueue[job](e.F, "fmr", fleet.QueueOptions{IndexMeta: []string{"tenant"}, Retention: time.Minute})
		id, err := r.SubmitWith(c, job{URL: "https://example.com/r"}, fleet.SubmitOptions{Metadata: map[string]string{"tenant": "acme"}})
		if err != nil {
			t.Fatal(err)
		}
		rs, err := r.Reserve(c, 1, 0)
		if err != nil || len(rs) != 1 {
			t.Fatal(len(rs), err)
		}
		if err := rs[0].Ack(c); err != nil {
			t.Fatal(err)
		}
		ids, recs = findAll(t, c, r, "tenant", "acme", 10)
		if !slices.Equal(ids, []string{id}) || recs[id].Status != fleet.TaskDone {
			t.Fatalf("a done task with its record kept: %v %+v", ids, recs)
		}
	})
}

// TestFindByMetaPagingChurn: a walk in small pages while other tasks of
// the same key and value are submitted, reserved and acked never skips a
// task that existed for the whole walk, and lists no task twice.
func TestFindByMetaPagingChurn(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		q := fleet.NewQueue[job](e.F, "fmc", fleet.QueueOptions{IndexMeta: []string{"tenant"}})
		meta := fleet.SubmitOptions{Metadata: map[string]string{"tenant": "acme"}}
		var stable []string
		for i := range 300 {
			subs := []fleet.Submission[job]{{Payload: job{URL: "https://example.com/s", N: 0}, Options: meta}}
			if i%3 == 0 { // and some to churn, between them
				subs = append(subs, fleet.Submission[job]{Payload: job{URL: "https://example.com/c", N: 1}, Options: meta})
			}
			ids, err := q.SubmitManyWith(c, subs)
			if err != nil {
				t.Fatal(err)
			}
			stable = append(stable, ids[0])
		}
		cctx, cancel := context.WithCancel(c)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { // churn: submit more, reserve and end the churn tasks
			defer wg.Done()
			for cctx.Err() == nil {
				if _, err := q.SubmitWith(cctx, job{URL: "https://example.com/c", N: 1}, meta); err != nil {
					return
				}
				ts, err := q.Reserve(cctx, 3, 0)
				if err != nil {
					return
				}
				for _, tk := range ts {
					if tk.Payload.N == 1 {
						_ = tk.Ack(cctx)
					} else {
						_ = tk.Release(cctx)
					}
				}
			}
		}()
		ids, _ := findAll(t, c, q, "tenant", "acme", 7)
		cancel()
		wg.Wait()
		seen := map[string]bool{}
		for _, id := range ids {
			seen[id] = true
		}
		for _, id := range stable {
			if !seen[id] {
				t.Fatalf("the walk skipped %s, which existed throughout (%d listed)", id, len(ids))
			}
		}
	})
}

// TestFindByMetaSharded: each shard indexes its own tasks, and one walk
// under one cursor lists them all, in id order, once.
func TestFindByMetaSharded(t *testing.T) {
	redistest.EachTagged(t, func(t *testing.T, tg redistest.Target) { // shards are the tagged layout's
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		q := fleet.NewQueue[job](e.F, "fms", fleet.QueueOptions{IndexMeta: []string{"tenant"}, Shards: 4})
		var want []string
		for i := range 40 {
			id, err := q.SubmitWith(c, job{URL: "https://example.com/s"}, fleet.SubmitOptions{Metadata: map[string]string{"tenant": "acme"}, ShardKey: fmt.Sprint(i)})
			if err != nil {
				t.Fatal(err)
			}
			want = append(want, id)
		}
		used := 0
		for i := range 4 {
			if len(e.zmembers(t, e.shard("fms", i).MetaKey("tenant", "acme"))) > 0 {
				used++
			}
		}
		if used < 2 {
			t.Fatalf("the tasks went to %d shards", used)
		}
		slices.Sort(want)
		for _, limit := range []int{1, 3, 100} {
			if got, _ := findAll(t, c, q, "tenant", "acme", limit); !slices.Equal(got, want) {
				t.Fatalf("limit %d: %d listed, want %d", limit, len(got), len(want))
			}
		}
	})
}

// TestFindByMetaBadInput: bad options and arguments are refused, naming
// what is wrong, and write nothing.
func TestFindByMetaBadInput(t *testing.T) {
	tg := redistest.Targets(t)[0]
	e := open(t, tg)
	c := ctx(t)
	for _, bad := range [][]string{{"a:b"}, {""}, {"x y"}, {"t", "t"}, {"1", "2", "3", "4", "5", "6", "7", "8", "9"}} {
		q := fleet.NewQueue[job](e.F, "fmb", fleet.QueueOptions{IndexMeta: bad})
		if err := q.Err(); !errors.Is(err, fleet.ErrInvalidOptions) || !strings.Contains(err.Error(), "IndexMeta") {
			t.Errorf("IndexMeta %q: %v", bad, err)
		}
	}
	q := fleet.NewQueue[job](e.F, "fmb", fleet.QueueOptions{IndexMeta: []string{"tenant"}})
	for _, tc := range []struct {
		key, cursor string
		limit       int
	}{
		{"other", "", 10}, {"a:b", "", 10}, {"", "", 10}, {"tenant", "nope", 10},
		{"tenant", "0193ABCD-0000-7000-8000-000000000000", 10}, {"tenant", "", -1}, {"tenant", "", fleet.MaxFindLimit + 1},
	} {
		if _, _, err := q.FindByMeta(c, tc.key, "v", tc.cursor, tc.limit); !errors.Is(err, fleet.ErrInvalidArgument) {
			t.Errorf("find %q cursor %q limit %d: %v", tc.key, tc.cursor, tc.limit, err)
		}
	}
	// An untyped handle (fleetctl's) knows the keys from the stored policy.
	if _, err := q.SubmitWith(c, job{URL: "https://example.com/b"}, fleet.SubmitOptions{Metadata: map[string]string{"tenant": "v"}}); err != nil {
		t.Fatal(err)
	}
	if page, next, err := e.F.Queue("fmb").FindByMeta(c, "tenant", "v", "", 0); err != nil || len(page) != 1 || next != "" {
		t.Fatalf("untyped: %v %q %v", page, next, err)
	}
	if _, _, err := e.F.Queue("fmb").FindByMeta(c, "site", "v", "", 0); !errors.Is(err, fleet.ErrInvalidArgument) {
		t.Fatalf("untyped, a key not indexed: %v", err)
	}
}

// TestFindByMetaCutConnection: a walk whose connection is frozen mid-walk
// gets a clear error, and the next call with the same cursor resumes it,
// so that the walk lists every task once.
func TestFindByMetaCutConnection(t *testing.T) {
	t.Parallel()
	p := startProxied(t, fleet.Options{Layout: fleet.LayoutCompat})
	c := ctx(t)
	q := fleet.NewQueue[job](p.Through, "fmx", fleet.QueueOptions{IndexMeta: []string{"tenant"}})
	var want []string
	for range 30 {
		id, err := q.SubmitWith(c, job{URL: "https://example.com/x"}, fleet.SubmitOptions{Metadata: map[string]string{"tenant": "acme"}})
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, id)
	}
	var got []string
	cursor, failed := "", 0
	for step := 0; ; step++ {
		if step == 2 {
			p.P.Freeze()
			short, cancel := context.WithTimeout(c, 300*time.Millisecond)
			_, _, err := q.FindByMeta(short, "tenant", "acme", cursor, 4)
			cancel()
			if err == nil || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("a frozen connection: %v", err)
			}
			failed++
			p.P.Cut()
			p.P.Thaw()
		}
		var page []fleet.TaskRecord
		var next string
		var err error
		waitFor(t, 10*time.Second, func() bool {
			page, next, err = q.FindByMeta(c, "tenant", "acme", cursor, 4)
			return err == nil
		}, "no reconnection: %v", err)
		for _, r := range page {
			got = append(got, r.ID)
		}
		if next == "" {
			break
		}
		cursor = next
	}
	if failed != 1 || !slices.Equal(got, want) {
		t.Fatalf("listed %d of %d (%d failures)", len(got), len(want), failed)
	}
}
