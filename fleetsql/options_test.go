package fleetsql_test

import (
	"context"
	"database/sql"
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/fleetsql"
)

// submitOne writes one row with opts in a transaction of its own and
// commits it; it returns Submit's error (the transaction is rolled back
// then).
func submitOne(t *testing.T, db *sql.DB, o *fleetsql.Outbox, q *fleet.Queue[Job], n int, opts fleet.SubmitOptions) (string, error) {
	t.Helper()
	ctx := context.Background()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	id, err := fleetsql.Submit(ctx, tx, o, q, Job{N: n}, opts)
	if err != nil {
		_ = tx.Rollback()
		return "", err
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	return id, nil
}

// Every per-task option of a row goes with its task: Priority,
// MaxAttempts, Timeout, ExpiresAt, Metadata and Group.
func TestSubmitTaskOptions(t *testing.T) {
	forEach(t, func(t *testing.T, d fleetsql.Dialect) {
		o, db, _ := newOutbox(t, d)
		f, _ := openFleet(t, sharedRedis(t).URL())
		q := fleet.NewQueue[Job](f, jobs, fleet.QueueOptions{})
		ctx := context.Background()
		expires := time.UnixMilli(time.Now().Add(time.Hour).UnixMilli())
		meta := map[string]string{"tenant": "acme", "order": "o-7"}
		if _, err := submitOne(t, db, o, q, 1, fleet.SubmitOptions{Priority: 4, MaxAttempts: 2, Timeout: 1500 * time.Millisecond,
			ExpiresAt: expires, Metadata: meta}); err != nil {
			t.Fatal(err)
		}
		if _, err := submitOne(t, db, o, q, 2, fleet.SubmitOptions{Group: "site-9"}); err != nil {
			t.Fatal(err)
		}
		if _, err := submitOne(t, db, o, q, 3, fleet.SubmitOptions{}); err != nil {
			t.Fatal(err)
		}
		var nulls int
		if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+quoted(o, o.Table())+" WHERE options IS NULL").Scan(&nulls); err != nil || nulls != 1 {
			t.Fatalf("rows without options: %d, %v (want 1: the plain one)", nulls, err)
		}
		st, err := o.RelayOnce(ctx, f, fleetsql.RelayOptions{})
		if err != nil || st != (fleetsql.RelayStats{Taken: 3, Relayed: 3}) {
			t.Fatalf("relay: %+v, %v", st, err)
		}
		qs, err := q.Stats(ctx)
		if err != nil || qs.Pending != 3 || qs.Prioritized != 1 || qs.Grouped != 1 {
			t.Fatalf("queue: %+v, %v (want 3 pending: 1 prioritized, 1 grouped)", qs, err)
		}
		got := map[int]*fleet.Task[Job]{}
		for len(got) < 3 {
			ts, err := q.Reserve(ctx, 3, time.Second)
			if err != nil {
				t.Fatal(err)
			}
			for _, tk := range ts {
				got[tk.Payload.N] = tk
			}
		}
		p := got[1]
		rec, err := q.Lookup(ctx, p.ID)
		if err != nil {
			t.Fatal(err)
		}
		if rec.Priority != 4 || !rec.ExpiresAt.Equal(expires) || !maps.Equal(rec.Metadata, meta) || !maps.Equal(p.Metadata(), meta) {
			t.Fatalf("row 1's task: %+v, metadata %v", rec, p.Metadata())
		}
		for _, field := range []string{`"max_attempts":2`, `"timeout_ms":1500`, `"priority":4`} {
			if !strings.Contains(p.Body(), field) {
				t.Errorf("row 1's body %s lacks %s", p.Body(), field)
			}
		}
		if got[2].Group() != "site-9" || got[3].Group() != "" || got[3].Metadata() != nil {
			t.Fatalf("groups %q %q, plain metadata %v", got[2].Group(), got[3].Group(), got[3].Metadata())
		}
		if strings.Contains(got[3].Body(), "priority") || strings.Contains(got[3].Body(), "meta") {
			t.Fatalf("the plain row's body has options: %s", got[3].Body())
		}
		for _, tk := range got {
			if err := tk.Ack(ctx); err != nil {
				t.Fatal(err)
			}
		}
		assertEmpty(t, db, o, q)
	})
}

// Options the queue would refuse fail Submit, naming the field, and write
// nothing; After and Track are not for an outbox task.
func TestSubmitBadTaskOptions(t *testing.T) {
	forEach(t, func(t *testing.T, d fleetsql.Dialect) {
		o, db, _ := newOutbox(t, d)
		f, _ := openFleet(t, sharedRedis(t).URL())
		q := fleet.NewQueue[Job](f, jobs, fleet.QueueOptions{})
		dep, err := q.SubmitWith(context.Background(), Job{N: 9}, fleet.SubmitOptions{Track: true})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			opts fleet.SubmitOptions
			says string
		}{
			{fleet.SubmitOptions{Priority: -1}, "Priority"},
			{fleet.SubmitOptions{Priority: fleet.MaxPriority + 1}, "Priority"},
			{fleet.SubmitOptions{MaxAttempts: -2}, "MaxAttempts"},
			{fleet.SubmitOptions{Timeout: -time.Second}, "Timeout"},
			{fleet.SubmitOptions{ExpiresAt: time.Now().Add(-time.Minute)}, "ExpiresAt"},
			{fleet.SubmitOptions{Metadata: map[string]string{"": "x"}}, "Metadata"},
			{fleet.SubmitOptions{Group: "a{b"}, "Group"},
			{fleet.SubmitOptions{Group: "g", Priority: 1}, "Priority"},
			{fleet.SubmitOptions{After: fleet.DependOn(q, dep)}, "After"},
			{fleet.SubmitOptions{Track: true}, "Track"},
		} {
			_, err := submitOne(t, db, o, q, 1, c.opts)
			if !errors.Is(err, fleet.ErrInvalidArgument) || !strings.Contains(err.Error(), c.says) {
				t.Errorf("%+v: Submit = %v, want ErrInvalidArgument naming %s", c.opts, err, c.says)
			}
		}
		if n := count(t, db, o, o.Table()); n != 0 {
			t.Fatalf("%d rows written by refused submits", n)
		}
	})
}

// A row whose ExpiresAt passed before it was relayed never becomes a task:
// it goes to the dead rows as expired; one whose options column was edited
// into garbage goes there too, and neither holds up the row behind it.
func TestRelayExpiredAndGarbageOptions(t *testing.T) {
	forEach(t, func(t *testing.T, d fleetsql.Dialect) {
		o, db, _ := newOutbox(t, d)
		f, _ := openFleet(t, sharedRedis(t).URL())
		q := fleet.NewQueue[Job](f, jobs, fleet.QueueOptions{})
		ctx := context.Background()
		expired, err := submitOne(t, db, o, q, 0, fleet.SubmitOptions{ExpiresAt: time.Now().Add(200 * time.Millisecond)})
		if err != nil {
			t.Fatal(err)
		}
		garbage, err := submitOne(t, db, o, q, 1, fleet.SubmitOptions{Priority: 1})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := submitOne(t, db, o, q, 2, fleet.SubmitOptions{Priority: 2}); err != nil {
			t.Fatal(err)
		}
		ph := "?"
		if d == fleetsql.PostgreSQL {
			ph = "$1"
		}
		if _, err := db.ExecContext(ctx, "UPDATE "+quoted(o, o.Table())+" SET options = '{\"priority\": \"high\"' WHERE id = "+ph, garbage); err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond) // the first row's ExpiresAt passes
		st, err := o.RelayOnce(ctx, f, fleetsql.RelayOptions{})
		if err != nil || st != (fleetsql.RelayStats{Taken: 3, Relayed: 1, Dead: 2}) {
			t.Fatalf("relay: %+v, %v", st, err)
		}
		l := newLedger()
		l.drain(t, q, 200*time.Millisecond)
		if l.total() != 1 || l.tasks(2) != 1 {
			t.Fatalf("tasks %v, want row 2 only", l.ids)
		}
		reasons := map[string]string{}
		rs, err := db.QueryContext(ctx, "SELECT "+idCol(o)+", reason, options FROM "+quoted(o, o.DeadTable()))
		if err != nil {
			t.Fatal(err)
		}
		defer rs.Close()
		for rs.Next() {
			var id, reason string
			var opts sql.NullString
			if err := rs.Scan(&id, &reason, &opts); err != nil {
				t.Fatal(err)
			}
			if !opts.Valid {
				t.Errorf("dead row %s lost its options", id)
			}
			reasons[id] = reason
		}
		if !strings.Contains(reasons[expired], "expired before it was relayed") || !strings.Contains(reasons[garbage], "options column does not decode") || len(reasons) != 2 {
			t.Fatalf("dead rows %v", reasons)
		}
	})
}

// idCol reads a row id as text in o's dialect.
func idCol(o *fleetsql.Outbox) string {
	if o.Dialect() == fleetsql.PostgreSQL {
		return "id::text"
	}
	return "id"
}

// Migrate upgrades tables of SchemaVersion 1 (no options column) in place:
// their rows are kept and relayed; a second Migrate changes nothing; the
// ALTER of MigrationSQL is idempotent too.
func TestMigrateFromVersion1(t *testing.T) {
	forEach(t, func(t *testing.T, d fleetsql.Dialect) {
		db, _ := testDB(t, d)
		o, err := fleetsql.New(db, fleetsql.Options{Table: "outbox_v1"})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		// Version 1's tables, as its MigrationSQL made them.
		v1 := []string{
			`CREATE TABLE outbox_v1 (id uuid PRIMARY KEY, queue text NOT NULL, payload text NOT NULL, dedup_key text, unique_ms bigint NOT NULL DEFAULT 0, not_before_ms bigint, created_at timestamptz NOT NULL DEFAULT now())`,
			`CREATE TABLE outbox_v1_dead (id uuid PRIMARY KEY, queue text NOT NULL, payload text NOT NULL, dedup_key text, unique_ms bigint NOT NULL DEFAULT 0, not_before_ms bigint, created_at timestamptz NOT NULL, dead_at timestamptz NOT NULL DEFAULT now(), reason text NOT NULL)`,
			`INSERT INTO outbox_v1 (id, queue, payload) VALUES ('01a23e41-a462-7083-9884-c4c0c5642e14', 'jobs', '{"n":5}')`,
		}
		if d == fleetsql.MySQL {
			v1 = []string{
				"CREATE TABLE outbox_v1 (id CHAR(36) CHARACTER SET ascii NOT NULL PRIMARY KEY, queue VARCHAR(512) NOT NULL, payload LONGTEXT NOT NULL, dedup_key VARCHAR(512) NULL, unique_ms BIGINT NOT NULL DEFAULT 0, not_before_ms BIGINT NULL, created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin",
				"CREATE TABLE outbox_v1_dead (id CHAR(36) CHARACTER SET ascii NOT NULL PRIMARY KEY, queue VARCHAR(512) NOT NULL, payload LONGTEXT NOT NULL, dedup_key VARCHAR(512) NULL, unique_ms BIGINT NOT NULL DEFAULT 0, not_before_ms BIGINT NULL, created_at DATETIME(6) NOT NULL, dead_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6), reason TEXT NOT NULL) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin",
				`INSERT INTO outbox_v1 (id, queue, payload) VALUES ('01a23e41-a462-7083-9884-c4c0c5642e14', 'jobs', '{"n":5}')`,
			}
		}
		for _, s := range v1 {
			if _, err := db.ExecContext(ctx, s); err != nil {
				t.Fatal(err)
			}
		}
		for range 2 {
			if err := o.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
		}
		// MigrationSQL's statements run again on the upgraded tables: no-ops.
		for _, s := range strings.Split(strings.TrimSpace(o.MigrationSQL()), ";\n\n") {
			if _, err := db.ExecContext(ctx, strings.TrimSuffix(s, ";")); err != nil {
				t.Fatalf("%s: %v", s, err)
			}
		}
		f, _ := openFleet(t, sharedRedis(t).URL())
		q := fleet.NewQueue[Job](f, jobs, fleet.QueueOptions{})
		if _, err := submitOne(t, db, o, q, 6, fleet.SubmitOptions{Priority: 3}); err != nil {
			t.Fatal(err)
		}
		st, err := o.RelayOnce(ctx, f, fleetsql.RelayOptions{})
		if err != nil || st != (fleetsql.RelayStats{Taken: 2, Relayed: 2}) {
			t.Fatalf("relay: %+v, %v", st, err)
		}
		l := newLedger()
		l.drain(t, q, 200*time.Millisecond)
		if l.total() != 2 || l.tasks(5) != 1 || l.tasks(6) != 1 {
			t.Fatalf("tasks %v, want the version 1 row and the new one", l.ids)
		}
	})
}
