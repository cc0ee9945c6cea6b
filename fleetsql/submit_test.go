package fleetsql_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/fleetsql"
)

// forEach runs body as a parallel subtest per dialect.
func forEach(t *testing.T, body func(t *testing.T, d fleetsql.Dialect)) {
	for _, d := range dialects {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel()
			body(t, d)
		})
	}
}

// A rolled-back transaction makes no task; a committed one makes exactly
// one, with the row's id in its dedup key.
func TestSubmitRollbackCommit(t *testing.T) {
	forEach(t, func(t *testing.T, d fleetsql.Dialect) {
		o, db, _ := newOutbox(t, d)
		f, _ := openFleet(t, sharedRedis(t).URL())
		q := fleet.NewQueue[Job](f, jobs, fleet.QueueOptions{})
		ctx := context.Background()

		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fleetsql.Submit(ctx, tx, o, q, Job{N: 1}, fleet.SubmitOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
		st, err := o.RelayOnce(ctx, f, fleetsql.RelayOptions{})
		if err != nil || st != (fleetsql.RelayStats{}) {
			t.Fatalf("relay after a rollback: %+v, %v", st, err)
		}

		tx, err = db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		id, err := fleetsql.Submit(ctx, tx, o, q, Job{N: 0}, fleet.SubmitOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// Not committed yet: the relay sees nothing.
		if st, err := o.RelayOnce(ctx, f, fleetsql.RelayOptions{}); err != nil || st.Taken != 0 {
			t.Fatalf("relay before the commit: %+v, %v", st, err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		st, err = o.RelayOnce(ctx, f, fleetsql.RelayOptions{})
		if err != nil || st != (fleetsql.RelayStats{Taken: 1, Relayed: 1}) {
			t.Fatalf("relay after the commit: %+v, %v", st, err)
		}
		l := newLedger()
		l.drain(t, q, 300*time.Millisecond)
		l.exactlyOnce(t, 1)
		if got, want := l.keys[0], fleetsql.KeyPrefix+id; got != want {
			t.Errorf("dedup key %q, want %q", got, want)
		}
		assertEmpty(t, db, o, q)
	})
}

// The relay wakes on the commit's NOTIFY on PostgreSQL: with its looks
// after a batch a minute away and the safety poll an hour away, a
// committed row still reaches a worker at once.
func TestRelayWakesOnNotify(t *testing.T) {
	o, db, _ := newOutbox(t, fleetsql.PostgreSQL)
	f, _ := openFleet(t, sharedRedis(t).URL())
	q := fleet.NewQueue[Job](f, jobs, fleet.QueueOptions{})
	runRelay(t, o, f, fleetsql.RelayOptions{PollMin: time.Minute, PollMax: time.Minute, SafetyPoll: time.Hour})
	ctx := context.Background()
	time.Sleep(200 * time.Millisecond) // the relay's first look and LISTEN
	for n := range 5 {
		start := time.Now()
		submitRows(t, db, o, q, n, n+1, 1)
		ts, err := q.Reserve(ctx, 1, 10*time.Second)
		if err != nil || len(ts) != 1 {
			t.Fatalf("row %d: no task within 10s (%v)", n, err)
		}
		if ts[0].Payload.N != n {
			t.Fatalf("got task %d, want %d", ts[0].Payload.N, n)
		}
		if err := ts[0].Ack(ctx); err != nil {
			t.Fatal(err)
		}
		if el := time.Since(start); el > 3*time.Second {
			t.Fatalf("row %d took %v from commit to reserve: the relay did not wake on NOTIFY", n, el)
		}
	}
	waitFor(t, 5*time.Second, "an empty outbox", func() bool { return count(t, db, o, o.Table()) == 0 })
	assertEmpty(t, db, o, q)
}

// The relay on MySQL polls: a row committed to an idle outbox reaches the
// queue within PollMax.
func TestRelayPollsMySQL(t *testing.T) {
	o, db, _ := newOutbox(t, fleetsql.MySQL)
	f, _ := openFleet(t, sharedRedis(t).URL())
	q := fleet.NewQueue[Job](f, jobs, fleet.QueueOptions{})
	runRelay(t, o, f, fleetsql.RelayOptions{PollMax: 200 * time.Millisecond})
	time.Sleep(time.Second) // idle: the backoff reaches PollMax
	submitRows(t, db, o, q, 0, 3, 3)
	l := newLedger()
	waitFor(t, 10*time.Second, "3 tasks", func() bool { l.drain(t, q, 100*time.Millisecond); return l.total() == 3 })
	l.exactlyOnce(t, 3)
	waitFor(t, 5*time.Second, "an empty outbox", func() bool { return count(t, db, o, o.Table()) == 0 })
	assertEmpty(t, db, o, q)
}

// Submit's options reach the task: NotBefore delays it, a DedupKey makes
// rows with the same key one task.
func TestSubmitOptions(t *testing.T) {
	forEach(t, func(t *testing.T, d fleetsql.Dialect) {
		o, db, _ := newOutbox(t, d)
		f, _ := openFleet(t, sharedRedis(t).URL())
		q := fleet.NewQueue[Job](f, jobs, fleet.QueueOptions{})
		ctx := context.Background()
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		later := time.Now().Add(time.Hour)
		for _, s := range []struct {
			n    int
			opts fleet.SubmitOptions
		}{
			{0, fleet.SubmitOptions{NotBefore: later}},
			{1, fleet.SubmitOptions{DedupKey: "order-7"}},
			{2, fleet.SubmitOptions{DedupKey: "order-7", UniqueFor: 48 * time.Hour}},
			{3, fleet.SubmitOptions{DedupKey: "order-8", ShardKey: "order-8"}},
		} {
			if _, err := fleetsql.Submit(ctx, tx, o, q, Job{N: s.n}, s.opts); err != nil {
				t.Fatalf("row %d: %v", s.n, err)
			}
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		st, err := o.RelayOnce(ctx, f, fleetsql.RelayOptions{Concurrency: 1})
		if err != nil || st != (fleetsql.RelayStats{Taken: 4, Relayed: 3, Duplicates: 1}) {
			t.Fatalf("relay: %+v, %v", st, err)
		}
		qs, err := q.Stats(ctx)
		if err != nil || qs.Scheduled != 1 || qs.Pending != 2 {
			t.Fatalf("queue: %+v, %v (want 1 scheduled, 2 pending)", qs, err)
		}
		sched, err := f.Queue(jobs).Scheduled(ctx, 0, 10)
		if err != nil || len(sched) != 1 || sched[0].ReadyAt.Sub(later).Abs() > time.Second {
			t.Fatalf("scheduled: %+v, %v (want one ready at %v)", sched, err, later)
		}
		l := newLedger()
		l.drain(t, q, 200*time.Millisecond)
		if l.tasks(1) != 1 || l.tasks(3) != 1 || l.total() != 2 || l.keys[1] != "order-7" {
			t.Fatalf("tasks %v keys %v: want rows 1 and 3, row 1 under order-7", l.ids, l.keys)
		}
		if n := count(t, db, o, o.Table()); n != 0 {
			t.Fatalf("%d rows left", n)
		}
	})
}

// A payload that fails the queue's rules, or options that fail them,
// fail Submit (naming the option) and write nothing: the caller's
// transaction goes on.
func TestSubmitInvalidPayload(t *testing.T) {
	forEach(t, func(t *testing.T, d fleetsql.Dialect) {
		o, db, _ := newOutbox(t, d)
		f, _ := openFleet(t, sharedRedis(t).URL())
		q := fleet.NewQueue[Job](f, jobs, fleet.QueueOptions{MaxPayloadBytes: 50})
		ctx := context.Background()
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		for _, c := range []struct {
			p     Job
			opts  fleet.SubmitOptions
			want  error
			names string // what the message names
		}{
			{Job{N: -1}, fleet.SubmitOptions{}, fleet.ErrInvalidPayload, "n (fails gte=0)"},
			{Job{Note: strings.Repeat("x", 21)}, fleet.SubmitOptions{}, fleet.ErrInvalidPayload, "note (fails max=20)"},
			{Job{Note: strings.Repeat("é", 20)}, fleet.SubmitOptions{}, fleet.ErrPayloadTooLarge, "MaxPayloadBytes"},
			{Job{}, fleet.SubmitOptions{UniqueFor: time.Hour}, fleet.ErrInvalidArgument, "UniqueFor"},
			{Job{}, fleet.SubmitOptions{UniqueFor: -1}, fleet.ErrInvalidArgument, "UniqueFor"},
			{Job{}, fleet.SubmitOptions{DedupKey: "a\nb"}, fleet.ErrInvalidArgument, "dedup key"},
			{Job{}, fleet.SubmitOptions{DedupKey: strings.Repeat("k", 513)}, fleet.ErrInvalidArgument, "dedup key"},
			{Job{}, fleet.SubmitOptions{ShardKey: "s"}, fleet.ErrInvalidArgument, "ShardKey"},
			{Job{}, fleet.SubmitOptions{Priority: fleet.MaxPriority + 1}, fleet.ErrInvalidArgument, "Priority"},
			{Job{}, fleet.SubmitOptions{Priority: -1}, fleet.ErrInvalidArgument, "Priority"},
			{Job{}, fleet.SubmitOptions{MaxAttempts: -1}, fleet.ErrInvalidArgument, "MaxAttempts"},
			{Job{}, fleet.SubmitOptions{Timeout: -time.Second}, fleet.ErrInvalidArgument, "Timeout"},
			{Job{}, fleet.SubmitOptions{ExpiresAt: time.Now().Add(-time.Second)}, fleet.ErrInvalidArgument, "ExpiresAt"},
			{Job{}, fleet.SubmitOptions{Metadata: map[string]string{"": "x"}}, fleet.ErrInvalidArgument, "Metadata"},
			{Job{}, fleet.SubmitOptions{Metadata: map[string]string{"k": strings.Repeat("x", fleet.MaxMetadataBytes)}}, fleet.ErrInvalidArgument, "Metadata"},
			{Job{}, fleet.SubmitOptions{Group: "bad{group}"}, fleet.ErrInvalidArgument, "Group"},
			{Job{}, fleet.SubmitOptions{Group: "g", Priority: fleet.MaxPriority + 1}, fleet.ErrInvalidArgument, "Priority"},
			{Job{}, fleet.SubmitOptions{Track: true}, fleet.ErrInvalidArgument, "After and Track"},
			{Job{}, fleet.SubmitOptions{After: fleet.DependOn(q, "01a23e41-a462-7083-9884-c4c0c5642e14")}, fleet.ErrInvalidArgument, "After and Track"},
		} {
			if _, err := fleetsql.Submit(ctx, tx, o, q, c.p, c.opts); !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.names) {
				t.Errorf("Submit(%+v, %+v) = %v, want %v naming %s", c.p, c.opts, err, c.want, c.names)
			}
		}
		// A Group on a sharded queue: the relay's dedup key cannot be held
		// beside it.
		sharded := fleet.NewQueue[Job](f, "sharded", fleet.QueueOptions{Shards: 4})
		if _, err := fleetsql.Submit(ctx, tx, o, sharded, Job{}, fleet.SubmitOptions{Group: "g"}); !errors.Is(err, fleet.ErrInvalidArgument) ||
			!strings.Contains(err.Error(), "SubmitOptions.Group on a sharded queue (4 shards)") {
			t.Errorf("Submit with a Group to a sharded queue = %v, want ErrInvalidArgument saying why", err)
		}
		bad := fleet.NewQueue[Job](f, "bad{name}", fleet.QueueOptions{})
		if _, err := fleetsql.Submit(ctx, tx, o, bad, Job{}, fleet.SubmitOptions{}); !errors.Is(err, fleet.ErrInvalidName) {
			t.Errorf("Submit to a bad queue name = %v, want ErrInvalidName", err)
		}
		if _, err := fleetsql.Submit(ctx, nil, o, q, Job{}, fleet.SubmitOptions{}); !errors.Is(err, fleet.ErrInvalidArgument) {
			t.Errorf("Submit without a tx = %v, want ErrInvalidArgument", err)
		}
		// The transaction is untouched: a good row still goes in.
		if _, err := fleetsql.Submit(ctx, tx, o, q, Job{N: 0}, fleet.SubmitOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		if n, dead := count(t, db, o, o.Table()), count(t, db, o, o.DeadTable()); n != 1 || dead != 0 {
			t.Fatalf("%d rows (and %d dead), want the one good row", n, dead)
		}
	})
}

// A Submit that skipped pg_notify (Options.NotifyInterval) in a
// transaction that commits after the notifying one's batch ran is found by
// the relay's looks that follow every batch, though the safety poll is an
// hour away.
func TestRelayFindsUnnotifiedRows(t *testing.T) {
	db, _ := testDB(t, fleetsql.PostgreSQL)
	o, err := fleetsql.New(db, fleetsql.Options{NotifyInterval: time.Hour}) // only the first Submit notifies
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := o.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	f, _ := openFleet(t, sharedRedis(t).URL())
	q := fleet.NewQueue[Job](f, jobs, fleet.QueueOptions{})
	runRelay(t, o, f, fleetsql.RelayOptions{SafetyPoll: time.Hour})
	time.Sleep(200 * time.Millisecond) // the relay listens
	tx1, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	tx2, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, tx := range []*sql.Tx{tx1, tx2} {
		if _, err := fleetsql.Submit(ctx, tx, o, q, Job{N: i}, fleet.SubmitOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx1.Commit(); err != nil {
		t.Fatal(err)
	}
	ts, err := q.Reserve(ctx, 1, 5*time.Second)
	if err != nil || len(ts) != 1 || ts[0].Payload.N != 0 {
		t.Fatalf("the notified row: %v, %v", ts, err)
	}
	time.Sleep(300 * time.Millisecond) // the relay's looks back off
	start := time.Now()
	if err := tx2.Commit(); err != nil {
		t.Fatal(err)
	}
	ts, err = q.Reserve(ctx, 1, 10*time.Second)
	if err != nil || len(ts) != 1 || ts[0].Payload.N != 1 {
		t.Fatalf("the row that did not notify: %v, %v", ts, err)
	}
	if el := time.Since(start); el > 3*time.Second {
		t.Errorf("the row that did not notify took %v", el)
	}
	t.Logf("the row that did not notify, committed 300ms after the other's batch, reached the queue %v after its commit", time.Since(start).Round(time.Millisecond))
}

// A schema-qualified table name of mixed case works end to end on
// PostgreSQL: the migration, Submit, and the relay woken by NOTIFY on the
// channel named after it.
func TestQualifiedTable(t *testing.T) {
	db, _ := testDB(t, fleetsql.PostgreSQL)
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, `CREATE SCHEMA "Shop"`); err != nil {
		t.Fatal(err)
	}
	o, err := fleetsql.New(db, fleetsql.Options{Table: "Shop.Order_Tasks"})
	if err != nil {
		t.Fatal(err)
	}
	if err := o.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	f, _ := openFleet(t, sharedRedis(t).URL())
	q := fleet.NewQueue[Job](f, jobs, fleet.QueueOptions{})
	runRelay(t, o, f, fleetsql.RelayOptions{PollMin: time.Minute, PollMax: time.Minute, SafetyPoll: time.Hour})
	time.Sleep(200 * time.Millisecond) // the relay listens
	submitRows(t, db, o, q, 0, 1, 1)
	ts, err := q.Reserve(ctx, 1, 5*time.Second)
	if err != nil || len(ts) != 1 {
		t.Fatalf("no task from the qualified table: %v", err)
	}
	_ = ts[0].Ack(ctx)
	var n int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM "Shop"."Order_Tasks_dead"`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("dead table: %d, %v", n, err)
	}
}
