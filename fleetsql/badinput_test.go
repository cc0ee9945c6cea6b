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

// Rows edited by hand into garbage (their payload, dedup key or options
// column), and a row whose queue this process does not know, go to the
// dead rows with the reason, and the garbage kept; the good rows around
// them are relayed in the same batch, a row given good options by hand
// too.
func TestRelayDeadRows(t *testing.T) {
	forEach(t, func(t *testing.T, d fleetsql.Dialect) {
		o, db, _ := newOutbox(t, d)
		f, _ := openFleet(t, sharedRedis(t).URL())
		q := fleet.NewQueue[Job](f, jobs, fleet.QueueOptions{})
		ctx := context.Background()
		submitRows(t, db, o, q, 0, 12, 12)
		ids := rowIDs(t, db, o)
		tbl := quoted(o, o.Table())
		ph := func(i int) string {
			if d == fleetsql.PostgreSQL {
				return "$" + string(rune('0'+i))
			}
			return "?"
		}
		edits := map[int]struct{ set, why string }{
			1:  {"payload = 'not json {'", "bad task JSON"},
			3:  {`payload = '{"n": "three"}'`, "bad task JSON"},
			4:  {`payload = '{"n": 4, "extra": 1}'`, "bad task JSON"},
			5:  {`payload = '{"n": -5}'`, "invalid task payload"},
			6:  {"queue = 'nosuch'", "no such queue"},
			7:  {"dedup_key = 'a\tb'", "invalid argument"},
			8:  {"options = 'not json'", "the options column does not decode"},
			9:  {`options = '{"priority": 1, "colour": "red"}'`, `the options column does not decode: json: unknown field "colour"`},
			10: {`options = '{"priority": 12}'`, "SubmitOptions.Priority 12"},
		}
		if _, err := db.ExecContext(ctx, "UPDATE "+tbl+` SET options = '{"max_attempts": 4}' WHERE id = `+ph(1), ids[11]); err != nil {
			t.Fatal(err)
		}
		for i, e := range edits {
			if _, err := db.ExecContext(ctx, "UPDATE "+tbl+" SET "+e.set+" WHERE id = "+ph(1), ids[i]); err != nil {
				t.Fatalf("edit row %d: %v", i, err)
			}
		}
		st, err := o.RelayOnce(ctx, f, fleetsql.RelayOptions{})
		if err != nil || st != (fleetsql.RelayStats{Taken: 12, Relayed: 3, Dead: 9}) {
			t.Fatalf("relay: %+v, %v", st, err)
		}
		l := newLedger()
		l.drain(t, q, 200*time.Millisecond)
		if l.total() != 3 || l.tasks(0) != 1 || l.tasks(2) != 1 || l.tasks(11) != 1 {
			t.Fatalf("tasks %v, want rows 0, 2 and 11", l.ids)
		}
		if c := optionsColumn(t, db, o, o.DeadTable())[ids[8]]; c.String != "not json" {
			t.Errorf("dead row 8's options %+v, want the garbage kept", c)
		}
		if n := count(t, db, o, o.Table()); n != 0 {
			t.Fatalf("%d rows left in the outbox", n)
		}
		rs, err := db.QueryContext(ctx, "SELECT id, queue, reason FROM "+quoted(o, o.DeadTable()))
		if err != nil {
			t.Fatal(err)
		}
		defer rs.Close()
		got := map[string]string{}
		for rs.Next() {
			var id, queue, reason string
			if err := rs.Scan(&id, &queue, &reason); err != nil {
				t.Fatal(err)
			}
			got[id] = reason
			t.Logf("dead %s %s: %s", id, queue, reason)
		}
		if err := rs.Err(); err != nil {
			t.Fatal(err)
		}
		for i, e := range edits {
			if !strings.Contains(got[ids[i]], e.why) {
				t.Errorf("row %d (%s): dead reason %q, want one naming %q", i, e.set, got[ids[i]], e.why)
			}
		}
		if len(got) != len(edits) {
			t.Errorf("%d dead rows, want %d", len(got), len(edits))
		}
	})
}

// rowIDs returns the outbox's row ids in their order.
func rowIDs(tb testing.TB, db *sql.DB, o *fleetsql.Outbox) []string {
	tb.Helper()
	col := "id"
	if o.Dialect() == fleetsql.PostgreSQL {
		col = "id::text"
	}
	rs, err := db.Query("SELECT " + col + " FROM " + quoted(o, o.Table()) + " ORDER BY id")
	if err != nil {
		tb.Fatal(err)
	}
	defer rs.Close()
	var ids []string
	for rs.Next() {
		var id string
		if err := rs.Scan(&id); err != nil {
			tb.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}

func quoted(o *fleetsql.Outbox, table string) string {
	if o.Dialect() == fleetsql.MySQL {
		return "`" + table + "`"
	}
	return `"` + table + `"`
}

// Without the migration, Submit, RelayOnce and Relay fail with ErrNoTable,
// and the message says what to run.
func TestNoTable(t *testing.T) {
	forEach(t, func(t *testing.T, d fleetsql.Dialect) {
		db, _ := testDB(t, d)
		o, err := fleetsql.New(db, fleetsql.Options{Table: "orders_outbox"})
		if err != nil {
			t.Fatal(err)
		}
		f, _ := openFleet(t, sharedRedis(t).URL())
		q := fleet.NewQueue[Job](f, jobs, fleet.QueueOptions{})
		ctx := context.Background()
		check := func(what string, err error) {
			t.Helper()
			if !errors.Is(err, fleetsql.ErrNoTable) || !strings.Contains(err.Error(), "Outbox.Migrate") || !strings.Contains(err.Error(), "orders_outbox") {
				t.Errorf("%s: %v, want ErrNoTable naming the table and the migration", what, err)
			}
		}
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, err = fleetsql.Submit(ctx, tx, o, q, Job{}, fleet.SubmitOptions{})
		check("Submit", err)
		tx.Rollback()
		_, err = o.RelayOnce(ctx, f, fleetsql.RelayOptions{})
		check("RelayOnce", err)
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		check("Relay", o.Relay(rctx, f, fleetsql.RelayOptions{}))

		// After the migration (twice: it is idempotent) all is well.
		for range 2 {
			if err := o.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
		}
		submitRows(t, db, o, q, 0, 1, 1)
		if st, err := o.RelayOnce(ctx, f, fleetsql.RelayOptions{}); err != nil || st.Relayed != 1 {
			t.Fatalf("relay after the migration: %+v, %v", st, err)
		}
	})
}

// Bad options are refused with fleet.ErrInvalidArgument, naming the field.
func TestBadOptions(t *testing.T) {
	db, _ := testDB(t, fleetsql.PostgreSQL)
	for _, tbl := range []string{"1abc", "a.b.c", "a-b", "a b", `a"b`, ".a", strings.Repeat("t", 59)} {
		if _, err := fleetsql.New(db, fleetsql.Options{Table: tbl}); !errors.Is(err, fleet.ErrInvalidArgument) {
			t.Errorf("New(Table %q) = %v, want ErrInvalidArgument", tbl, err)
		}
	}
	if _, err := fleetsql.New(nil, fleetsql.Options{}); !errors.Is(err, fleet.ErrInvalidArgument) {
		t.Errorf("New(nil) = %v", err)
	}
	if _, err := fleetsql.New(db, fleetsql.Options{Dialect: 7}); !errors.Is(err, fleetsql.ErrDialect) {
		t.Errorf("New(Dialect 7) = %v, want ErrDialect", err)
	}
	o, err := fleetsql.New(db, fleetsql.Options{Table: "app_1.Outbox"})
	if err != nil {
		t.Fatal(err)
	}
	if o.DeadTable() != "app_1.Outbox_dead" || o.Dialect() != fleetsql.PostgreSQL {
		t.Errorf("dead table %q, dialect %v", o.DeadTable(), o.Dialect())
	}
	f, _ := openFleet(t, sharedRedis(t).URL())
	for _, opts := range []fleetsql.RelayOptions{
		{Batch: -1}, {Batch: fleetsql.MaxBatch + 1}, {Window: time.Second}, {Window: time.Minute, BatchTimeout: time.Minute},
		{PollMin: time.Second, PollMax: time.Millisecond}, {SafetyPoll: -time.Second},
	} {
		if _, err := o.RelayOnce(context.Background(), f, opts); !errors.Is(err, fleet.ErrInvalidArgument) {
			t.Errorf("RelayOnce(%+v) = %v, want ErrInvalidArgument", opts, err)
		}
	}
	if err := o.Relay(context.Background(), nil, fleetsql.RelayOptions{}); !errors.Is(err, fleet.ErrInvalidArgument) {
		t.Errorf("Relay(nil Fleet) = %v", err)
	}
}

// A relay whose Fleet was closed under it returns nil at its next submit,
// leaving the row for another relay.
func TestRelayFleetClosed(t *testing.T) {
	o, db, _ := newOutbox(t, fleetsql.PostgreSQL)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f, err := fleet.Open(ctx, fleet.Options{URL: sharedRedis(t).URL(), Prefix: "fsql-closed-" + o.Table() + ":"})
	if err != nil {
		t.Fatal(err)
	}
	q := fleet.NewQueue[Job](f, jobs, fleet.QueueOptions{})
	done := make(chan error, 1)
	go func() { done <- o.Relay(ctx, f, fleetsql.RelayOptions{}) }()
	time.Sleep(100 * time.Millisecond)
	f.Close()
	submitRows(t, db, o, q, 0, 1, 1)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Relay after Close: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("Relay still running after its Fleet closed and a row came")
	}
	if n := count(t, db, o, o.Table()); n != 1 {
		t.Fatalf("%d rows, want the one row left for another relay", n)
	}
}
