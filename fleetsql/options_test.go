package fleetsql_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/fleetsql"
)

// placeholder is the i-th bind parameter of dialect d.
func placeholder(d fleetsql.Dialect, i int) string {
	if d == fleetsql.PostgreSQL {
		return fmt.Sprintf("$%d", i)
	}
	return "?"
}

// optionsColumn returns the options column of each row of table, by id
// ("" for NULL, marked by ok false).
func optionsColumn(tb testing.TB, db *sql.DB, o *fleetsql.Outbox, table string) map[string]sql.NullString {
	tb.Helper()
	col := "id"
	if o.Dialect() == fleetsql.PostgreSQL {
		col = "id::text"
	}
	rs, err := db.Query("SELECT " + col + ", options FROM " + quoted(o, table))
	if err != nil {
		tb.Fatal(err)
	}
	defer rs.Close()
	got := map[string]sql.NullString{}
	for rs.Next() {
		var id string
		var opts sql.NullString
		if err := rs.Scan(&id, &opts); err != nil {
			tb.Fatal(err)
		}
		got[id] = opts
	}
	if err := rs.Err(); err != nil {
		tb.Fatal(err)
	}
	return got
}

// takeAll reserves tasks of q until it has want of them, by Job.N, and
// fails tb on a second task for one N or a task more.
func takeAll(tb testing.TB, q *fleet.Queue[Job], want int) map[int]*fleet.Task[Job] {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	got := map[int]*fleet.Task[Job]{}
	for len(got) < want {
		ts, err := q.Reserve(ctx, want, time.Second)
		if err != nil {
			tb.Fatalf("reserve: %v (have %d of %d tasks)", err, len(got), want)
		}
		for _, t := range ts {
			if got[t.Payload.N] != nil {
				tb.Fatalf("two tasks for row %d", t.Payload.N)
			}
			got[t.Payload.N] = t
		}
	}
	if ts, err := q.Reserve(ctx, 10, 100*time.Millisecond); err != nil || len(ts) != 0 {
		tb.Fatalf("tasks beyond the %d expected: %d, %v", want, len(ts), err)
	}
	return got
}

// taskOptions is what a task's body says of its per-task options.
type taskOptions struct {
	Dedup       string            `json:"dedup"`
	Priority    int               `json:"priority"`
	MaxAttempts int               `json:"max_attempts"`
	TimeoutMS   int64             `json:"timeout_ms"`
	ExpiresAt   float64           `json:"expires_at"` // unix s
	Meta        map[string]string `json:"meta"`
	Group       string            `json:"group"`
}

// Every per-task option of SubmitOptions goes through the outbox to the
// task: the options column holds them as documented (NULL for a row of
// none), a relay whose submits fail puts the rows back with them intact,
// and the relayed task carries each, read back from the reserved Task
// (its body, Metadata, Group) and from Lookup.
func TestSubmitTaskOptions(t *testing.T) {
	forEach(t, func(t *testing.T, d fleetsql.Dialect) {
		o, db, _ := newOutbox(t, d)
		f, _ := openFleet(t, sharedRedis(t).URL())
		q := fleet.NewQueue[Job](f, jobs, fleet.QueueOptions{})
		ctx := context.Background()
		exp := time.UnixMilli(time.Now().Add(time.Hour).UnixMilli())
		rows := []struct {
			opts    fleet.SubmitOptions
			column  string // the options column; "" for NULL
			timeout int64  // the task's timeout_ms
		}{
			{fleet.SubmitOptions{Priority: 5, MaxAttempts: 3, Timeout: 1500 * time.Millisecond, ExpiresAt: exp, Metadata: map[string]string{"k": "v", "who": "<a&b>"}},
				fmt.Sprintf(`{"priority":5,"max_attempts":3,"timeout_ms":1500,"expires_at_ms":%d,"metadata":{"k":"v","who":"<a&b>"}}`, exp.UnixMilli()), 1500},
			{fleet.SubmitOptions{Group: "tenant-a", MaxAttempts: 2, Metadata: map[string]string{"m": "1"}, DedupKey: "order-9"},
				`{"max_attempts":2,"metadata":{"m":"1"},"group":"tenant-a"}`, 0},
			{fleet.SubmitOptions{Timeout: 300 * time.Microsecond}, `{"timeout_ms":1}`, 1}, // under a millisecond: 1 ms, as the core keeps it
			{fleet.SubmitOptions{}, "", 0},
		}
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		ids := make([]string, len(rows))
		for i, r := range rows {
			if ids[i], err = fleetsql.Submit(ctx, tx, o, q, Job{N: i}, r.opts); err != nil {
				t.Fatalf("row %d: %v", i, err)
			}
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		checkColumn := func(when string) {
			t.Helper()
			got := optionsColumn(t, db, o, o.Table())
			for i, r := range rows {
				if c := got[ids[i]]; c.Valid != (r.column != "") || c.String != r.column {
					t.Errorf("%s: row %d's options column %+v, want %q", when, i, c, r.column)
				}
			}
		}
		checkColumn("after the commit")

		// A relay whose Fleet is closed keeps every row (on PostgreSQL,
		// taking deleted them: they are written back), options and all.
		closed, err := fleet.Open(ctx, fleet.Options{URL: sharedRedis(t).URL(), Prefix: "fsql-closed-" + ids[0] + ":"})
		if err != nil {
			t.Fatal(err)
		}
		fleet.NewQueue[Job](closed, jobs, fleet.QueueOptions{})
		closed.Close()
		st, err := o.RelayOnce(ctx, closed, fleetsql.RelayOptions{Concurrency: 1})
		if !errors.Is(err, fleet.ErrClosed) || st != (fleetsql.RelayStats{Taken: 4, Kept: 4}) {
			t.Fatalf("relay through a closed Fleet: %+v, %v", st, err)
		}
		checkColumn("after a relay that kept the rows")

		st, err = o.RelayOnce(ctx, f, fleetsql.RelayOptions{})
		if err != nil || st != (fleetsql.RelayStats{Taken: 4, Relayed: 4}) {
			t.Fatalf("relay: %+v, %v", st, err)
		}
		tasks := takeAll(t, q, len(rows))
		for i, r := range rows {
			task := tasks[i]
			var b taskOptions
			if err := json.Unmarshal([]byte(task.Body()), &b); err != nil {
				t.Fatal(err)
			}
			want := r.opts
			wantKey := fleetsql.KeyPrefix + ids[i]
			if want.DedupKey != "" {
				wantKey = want.DedupKey
			}
			var wantExp float64
			if !want.ExpiresAt.IsZero() {
				wantExp = float64(want.ExpiresAt.UnixMilli()) / 1000
			}
			if b.Dedup != wantKey || b.Priority != want.Priority || b.MaxAttempts != want.MaxAttempts || b.TimeoutMS != r.timeout ||
				b.ExpiresAt != wantExp || !maps.Equal(b.Meta, want.Metadata) || b.Group != want.Group {
				t.Errorf("row %d: task body %s, want the options %+v", i, task.Body(), want)
			}
			if !maps.Equal(task.Metadata(), want.Metadata) || task.Group() != want.Group {
				t.Errorf("row %d: Task.Metadata %v, Task.Group %q, want %v, %q", i, task.Metadata(), task.Group(), want.Metadata, want.Group)
			}
			rec, err := q.Lookup(ctx, task.ID)
			if err != nil {
				t.Fatal(err)
			}
			if rec.Status != fleet.TaskActive || rec.Priority != want.Priority || rec.Group != want.Group || !maps.Equal(rec.Metadata, want.Metadata) || !rec.ExpiresAt.Equal(want.ExpiresAt) {
				t.Errorf("row %d: Lookup %+v, want the options %+v", i, rec, want)
			}
			if err := task.Ack(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if n := count(t, db, o, o.Table()) + count(t, db, o, o.DeadTable()); n != 0 {
			t.Fatalf("%d rows left", n)
		}
	})
}

// A row whose ExpiresAt passed before the relay took it is not submitted:
// it goes to the dead rows, options and all, with a reason that says so,
// and the queue gets no task and no dead letter; the row beside it, still
// in time, is relayed.
func TestRelayExpiredRow(t *testing.T) {
	forEach(t, func(t *testing.T, d fleetsql.Dialect) {
		o, db, _ := newOutbox(t, d)
		f, _ := openFleet(t, sharedRedis(t).URL())
		q := fleet.NewQueue[Job](f, jobs, fleet.QueueOptions{})
		ctx := context.Background()
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		// An ExpiresAt soon after now; Submit refuses one that passed
		// already (a loaded machine: try again further out).
		var soon time.Time
		var gone string
		for margin := 200 * time.Millisecond; ; margin *= 2 {
			soon = time.UnixMilli(time.Now().Add(margin).UnixMilli())
			gone, err = fleetsql.Submit(ctx, tx, o, q, Job{N: 0}, fleet.SubmitOptions{ExpiresAt: soon, Metadata: map[string]string{"k": "v"}})
			if err == nil {
				break
			}
			if !errors.Is(err, fleet.ErrInvalidArgument) || margin > 10*time.Second {
				t.Fatal(err)
			}
		}
		if _, err := fleetsql.Submit(ctx, tx, o, q, Job{N: 1}, fleet.SubmitOptions{ExpiresAt: time.Now().Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Until(soon) + time.Millisecond)
		st, err := o.RelayOnce(ctx, f, fleetsql.RelayOptions{})
		if err != nil || st != (fleetsql.RelayStats{Taken: 2, Relayed: 1, Dead: 1}) {
			t.Fatalf("relay: %+v, %v", st, err)
		}
		var reason string
		if err := db.QueryRowContext(ctx, "SELECT reason FROM "+quoted(o, o.DeadTable())+" WHERE id = "+placeholder(d, 1), gone).Scan(&reason); err != nil {
			t.Fatal(err)
		}
		if want := "fleetsql: expired before it was relayed: SubmitOptions.ExpiresAt " + soon.UTC().Format(time.RFC3339Nano) + " passed"; !strings.HasPrefix(reason, want) {
			t.Errorf("reason %q, want it to start with %q", reason, want)
		}
		if c := optionsColumn(t, db, o, o.DeadTable())[gone]; c.String != fmt.Sprintf(`{"expires_at_ms":%d,"metadata":{"k":"v"}}`, soon.UnixMilli()) {
			t.Errorf("the dead row's options %+v", c)
		}
		tasks := takeAll(t, q, 1)
		if tasks[1] == nil {
			t.Fatalf("tasks %v: want row 1's", tasks)
		}
		_ = tasks[1].Ack(ctx)
		if qs, err := q.Stats(ctx); err != nil || qs.Dead != 0 || qs.Pending != 0 || qs.Scheduled != 0 {
			t.Fatalf("queue %+v, %v: want nothing of the expired row", qs, err)
		}
	})
}

// v1 is the DDL of SchemaVersion 1, as fleetsql v1 created it.
func v1(d fleetsql.Dialect, table, dead string) []string {
	if d == fleetsql.MySQL {
		const cols = `id CHAR(36) CHARACTER SET ascii NOT NULL PRIMARY KEY, queue VARCHAR(512) NOT NULL, payload LONGTEXT NOT NULL,
			dedup_key VARCHAR(512) NULL, unique_ms BIGINT NOT NULL DEFAULT 0, not_before_ms BIGINT NULL,`
		const tail = `) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`
		return []string{
			"CREATE TABLE `" + table + "` (" + cols + ` created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)` + tail,
			"CREATE TABLE `" + dead + "` (" + cols + ` created_at DATETIME(6) NOT NULL,
				dead_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6), reason TEXT NOT NULL` + tail,
		}
	}
	const cols = `id uuid PRIMARY KEY, queue text NOT NULL, payload text NOT NULL, dedup_key text,
		unique_ms bigint NOT NULL DEFAULT 0, not_before_ms bigint,`
	return []string{
		`CREATE TABLE "` + table + `" (` + cols + ` created_at timestamptz NOT NULL DEFAULT now())`,
		`CREATE TABLE "` + dead + `" (` + cols + ` created_at timestamptz NOT NULL, dead_at timestamptz NOT NULL DEFAULT now(), reason text NOT NULL)`,
	}
}

// Tables of SchemaVersion 1 with rows in them: Submit and the relay refuse
// them with ErrNoTable naming the migration; Migrate (three at once, then
// again) upgrades them in place, and so do MigrationSQL's statements run
// as a migration tool would (twice); the old rows are intact and relayed,
// and so is a row that v1's Submit writes on the upgraded table, a dead
// row copied back with doc.go's SQL, and a new row with its options.
func TestMigrateUpgradesV1(t *testing.T) {
	forEach(t, func(t *testing.T, d fleetsql.Dialect) {
		db, _ := testDB(t, d)
		ctx := context.Background()
		for _, s := range append(v1(d, "fleet_outbox", "fleet_outbox_dead"), v1(d, "legacy", "legacy_dead")...) {
			if _, err := db.ExecContext(ctx, s); err != nil {
				t.Fatal(err)
			}
		}
		ph := func(i int) string { return placeholder(d, i) }
		// Rows as v1's Submit wrote them (rows 0 and 1 now, row 2 on the
		// upgraded table), and a dead row as its relay did.
		var old []string
		v1Submit := func(n int) {
			t.Helper()
			id := uuid.Must(uuid.NewV7()).String()
			old = append(old, id)
			if _, err := db.ExecContext(ctx, `INSERT INTO fleet_outbox (id, queue, payload, dedup_key, unique_ms, not_before_ms) VALUES (`+
				ph(1)+`, 'jobs', `+ph(2)+`, NULL, 0, NULL)`, id, fmt.Sprintf(`{"n":%d}`, n)); err != nil {
				t.Fatal(err)
			}
		}
		v1Submit(0)
		v1Submit(1)
		deadID := uuid.Must(uuid.NewV7()).String()
		if _, err := db.ExecContext(ctx, `INSERT INTO fleet_outbox_dead (id, queue, payload, dedup_key, unique_ms, not_before_ms, created_at, reason)
			VALUES (`+ph(1)+`, 'jobs', '{"n":3}', NULL, 0, NULL, CURRENT_TIMESTAMP, 'no such queue')`, deadID); err != nil {
			t.Fatal(err)
		}

		o, err := fleetsql.New(db, fleetsql.Options{})
		if err != nil {
			t.Fatal(err)
		}
		f, _ := openFleet(t, sharedRedis(t).URL())
		q := fleet.NewQueue[Job](f, jobs, fleet.QueueOptions{})
		check := func(what string, err error) {
			t.Helper()
			if !errors.Is(err, fleetsql.ErrNoTable) || !strings.Contains(err.Error(), "schema version 2") || !strings.Contains(err.Error(), "Outbox.Migrate") || !strings.Contains(err.Error(), "to version 3") {
				t.Errorf("%s on a v1 table: %v, want ErrNoTable naming schema version 2 and the migration", what, err)
			}
		}
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, err = fleetsql.Submit(ctx, tx, o, q, Job{N: 9}, fleet.SubmitOptions{})
		check("Submit", err)
		tx.Rollback()
		_, err = o.RelayOnce(ctx, f, fleetsql.RelayOptions{})
		check("RelayOnce", err)
		check("Relay", o.Relay(ctx, f, fleetsql.RelayOptions{}))

		// Three Migrates at once (hosts starting together), then one more.
		errs := make(chan error, 3)
		for range 3 {
			go func() { errs <- o.Migrate(ctx) }()
		}
		for range 3 {
			if err := <-errs; err != nil {
				t.Fatalf("concurrent Migrate: %v", err)
			}
		}
		if err := o.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		v1Submit(2)
		// The other pair, through MigrationSQL's statements.
		legacy, err := fleetsql.New(db, fleetsql.Options{Table: "legacy"})
		if err != nil {
			t.Fatal(err)
		}
		for range 2 {
			for _, s := range strings.Split(strings.TrimSuffix(legacy.MigrationSQL(), ";\n"), ";\n\n") {
				if _, err := db.ExecContext(ctx, s); err != nil {
					t.Fatalf("%v\n%s", err, s)
				}
			}
		}
		for _, tbl := range []string{"fleet_outbox", "fleet_outbox_dead", "legacy", "legacy_dead"} {
			var n int
			if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+tbl+" WHERE options IS NULL").Scan(&n); err != nil {
				t.Fatalf("%s after the upgrade: %v", tbl, err)
			}
			if want := map[string]int{"fleet_outbox": 3, "fleet_outbox_dead": 1}[tbl]; n != want {
				t.Errorf("%s: %d rows with NULL options, want %d", tbl, n, want)
			}
		}

		// The dead row, copied back as doc.go says.
		for _, s := range []string{
			`INSERT INTO fleet_outbox (id, queue, payload, dedup_key, unique_ms, not_before_ms, options, created_at)
			SELECT id, queue, payload, dedup_key, unique_ms, not_before_ms, options, created_at FROM fleet_outbox_dead WHERE id = ` + ph(1),
			`DELETE FROM fleet_outbox_dead WHERE id = ` + ph(1),
		} {
			if _, err := db.ExecContext(ctx, s, deadID); err != nil {
				t.Fatal(err)
			}
		}
		tx, err = db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fleetsql.Submit(ctx, tx, o, q, Job{N: 4}, fleet.SubmitOptions{Priority: 4, Metadata: map[string]string{"v": "2"}}); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		st, err := o.RelayOnce(ctx, f, fleetsql.RelayOptions{})
		if err != nil || st != (fleetsql.RelayStats{Taken: 5, Relayed: 5}) {
			t.Fatalf("relay after the upgrade: %+v, %v", st, err)
		}
		tasks := takeAll(t, q, 5)
		for n, id := range append(old, deadID) {
			var b taskOptions
			_ = json.Unmarshal([]byte(tasks[n].Body()), &b)
			if b.Dedup != fleetsql.KeyPrefix+id || b.Priority != 0 || b.Meta != nil {
				t.Errorf("row %d: task body %s, want dedup %s%s and no options", n, tasks[n].Body(), fleetsql.KeyPrefix, id)
			}
		}
		if rec, err := q.Lookup(ctx, tasks[4].ID); err != nil || rec.Priority != 4 || rec.Metadata["v"] != "2" {
			t.Errorf("the new row's task: %+v, %v", rec, err)
		}
		for _, task := range tasks {
			_ = task.Ack(ctx)
		}
		assertEmpty(t, db, o, q)
	})
}

// Migrate on tables of this version alters nothing: it runs while a
// transaction holds a Submit's row, where an ALTER TABLE on PostgreSQL
// (even ADD COLUMN IF NOT EXISTS of a column that is there) would wait for
// that transaction and hold up every Submit behind it. (MariaDB answers
// such an ALTER at once: there the test passes either way.)
func TestMigrateCurrentTakesNoLock(t *testing.T) {
	forEach(t, func(t *testing.T, d fleetsql.Dialect) {
		o, db, _ := newOutbox(t, d)
		f, _ := openFleet(t, sharedRedis(t).URL())
		q := fleet.NewQueue[Job](f, jobs, fleet.QueueOptions{})
		ctx := context.Background()
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		if _, err := fleetsql.Submit(ctx, tx, o, q, Job{N: 0}, fleet.SubmitOptions{Priority: 1}); err != nil {
			t.Fatal(err)
		}
		mctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if err := o.Migrate(mctx); err != nil {
			t.Fatalf("Migrate beside an open transaction: %v", err)
		}
	})
}

// Tables of SchemaVersion 2 with rows in them (an outbox row and a dead
// row): Complete, Completed and Reap refuse them with ErrNoTable naming the
// migration, while Submit and the relay go on; Migrate creates the
// completion table and keeps every row, and the completion then works.
func TestMigrateUpgradesV2(t *testing.T) {
	forEach(t, func(t *testing.T, d fleetsql.Dialect) {
		db, _ := testDB(t, d)
		ctx := context.Background()
		add := `ALTER TABLE "%s" ADD COLUMN options text`
		if d == fleetsql.MySQL {
			add = "ALTER TABLE `%s` ADD COLUMN options TEXT NULL"
		}
		stmts := append(v1(d, "fleet_outbox", "fleet_outbox_dead"), fmt.Sprintf(add, "fleet_outbox"), fmt.Sprintf(add, "fleet_outbox_dead"))
		for _, s := range stmts {
			if _, err := db.ExecContext(ctx, s); err != nil {
				t.Fatal(err)
			}
		}
		o, err := fleetsql.New(db, fleetsql.Options{})
		if err != nil {
			t.Fatal(err)
		}
		f, _ := openFleet(t, sharedRedis(t).URL())
		q := fleet.NewQueue[Job](f, jobs, fleet.QueueOptions{})
		ph := func(i int) string { return placeholder(d, i) }
		deadID := uuid.Must(uuid.NewV7()).String()
		if _, err := db.ExecContext(ctx, `INSERT INTO fleet_outbox_dead (id, queue, payload, dedup_key, unique_ms, not_before_ms, created_at, reason, options)
			VALUES (`+ph(1)+`, 'jobs', '{"n":3}', NULL, 0, NULL, CURRENT_TIMESTAMP, 'no such queue', '{"priority":2}')`, deadID); err != nil {
			t.Fatal(err)
		}
		// Submit works on version 2 (the outbox's tables are current).
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fleetsql.Submit(ctx, tx, o, q, Job{N: 1}, fleet.SubmitOptions{Priority: 1}); err != nil {
			t.Fatalf("Submit on version 2: %v", err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		if _, err := q.Submit(ctx, Job{N: 2}); err != nil {
			t.Fatal(err)
		}
		tk := takeAll(t, q, 1)[2]
		check := func(what string, err error) {
			t.Helper()
			if !errors.Is(err, fleetsql.ErrNoTable) || !strings.Contains(err.Error(), "fleet_outbox_done") || !strings.Contains(err.Error(), "Outbox.Migrate") {
				t.Errorf("%s on version 2: %v, want ErrNoTable naming the completion table and the migration", what, err)
			}
		}
		tx, err = db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		check("Complete", fleetsql.Complete(ctx, tx, o, tk, 1))
		tx.Rollback()
		_, _, err = fleetsql.Completed(ctx, o, tk)
		check("Completed", err)
		check("Reap", o.Reap(ctx, fleetsql.ReapOptions{}))

		for range 2 {
			if err := o.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
		}
		for tbl, want := range map[string]int{"fleet_outbox": 1, "fleet_outbox_dead": 1, "fleet_outbox_done": 0} {
			var n int
			if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+tbl).Scan(&n); err != nil || n != want {
				t.Errorf("%s after the upgrade: %d rows, %v; want %d", tbl, n, err, want)
			}
		}
		var opts string
		if err := db.QueryRowContext(ctx, "SELECT options FROM fleet_outbox_dead WHERE id = "+ph(1), deadID).Scan(&opts); err != nil || opts != `{"priority":2}` {
			t.Errorf("the dead row after the upgrade: %q, %v", opts, err)
		}
		tx, err = db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := fleetsql.Complete(ctx, tx, o, tk, 1); err != nil {
			t.Fatalf("Complete after the upgrade: %v", err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		if res, done, err := fleetsql.Completed(ctx, o, tk); err != nil || !done || string(res) != "1" {
			t.Fatalf("Completed after the upgrade: %s, %v, %v", res, done, err)
		}
		_ = tk.Ack(ctx)
	})
}
