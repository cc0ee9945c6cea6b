package fleetsql_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fleet-go/fleet/fleetsql"
)

// Processes that start together each run Migrate on tables that do not
// exist yet: every Migrate returns nil and the three tables are there with
// every column, round after round. (On PostgreSQL two CREATE TABLE IF NOT
// EXISTS of one table at once can fail on its row type, "type ... already
// exists" or a unique violation in pg_type: Migrates take turns under an
// advisory lock.)
func TestMigrateConcurrentFresh(t *testing.T) {
	forEach(t, func(t *testing.T, d fleetsql.Dialect) {
		db, _ := testDB(t, d)
		db.SetMaxOpenConns(12)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		const rounds, procs = 8, 6
		for r := range rounds {
			table := fmt.Sprintf("race%d", r)
			var wg sync.WaitGroup
			errs := make([]error, procs)
			for p := range procs {
				o, err := fleetsql.New(db, fleetsql.Options{Table: table})
				if err != nil {
					t.Fatal(err)
				}
				wg.Go(func() { errs[p] = o.Migrate(ctx) })
			}
			wg.Wait()
			for p, err := range errs {
				if err != nil {
					t.Fatalf("round %d: Migrate %d of %d at once: %v", r, p+1, procs, err)
				}
			}
			for tbl, cols := range map[string]string{
				table:           "id, queue, payload, dedup_key, unique_ms, not_before_ms, created_at, options",
				table + "_dead": "id, queue, payload, dedup_key, unique_ms, not_before_ms, created_at, dead_at, reason, options",
				table + "_done": "task_id, queue, token, result, done_at",
			} {
				rows, err := db.QueryContext(ctx, `SELECT `+cols+` FROM `+tbl+` WHERE 1 = 0`)
				if err != nil {
					t.Fatalf("round %d: table %s after the Migrates: %v", r, tbl, err)
				}
				rows.Close()
			}
		}
	})
}

// A Migrate whose ctx ends while another session holds its advisory lock
// returns the ctx's error and leaves no lock behind: the next Migrate, once
// the other session lets go, runs, and no session holds the lock after it.
func TestMigrateLockCtxEnds(t *testing.T) {
	o, db, _ := newOutbox(t, fleetsql.PostgreSQL)
	ctx := context.Background()
	key := fleetsql.MigrateLockKey(o)
	holder, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	if _, err := holder.ExecContext(ctx, `SELECT pg_advisory_lock($1)`, key); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	err = o.Migrate(short)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Migrate while another session holds its lock, ctx 300 ms: %v, want the ctx's deadline", err)
	}
	if _, err := holder.ExecContext(ctx, `SELECT pg_advisory_unlock($1)`, key); err != nil {
		t.Fatal(err)
	}
	mctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := o.Migrate(mctx); err != nil {
		t.Fatalf("Migrate after the lock was let go: %v", err)
	}
	var held int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'
		AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&held); err != nil {
		t.Fatal(err)
	}
	if held != 0 {
		t.Fatalf("%d sessions hold Migrate's advisory lock after it returned, want 0", held)
	}
}
