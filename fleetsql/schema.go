package fleetsql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"hash/fnv"
	"strings"
)

// SchemaVersion is the version of the tables that MigrationSQL creates.
// Version 2 added the options column (SubmitOptions' per-task options) to
// the outbox's two tables; version 3 added the completion table (Complete,
// DoneTable). MigrationSQL and Migrate upgrade tables of versions 1 and 2
// in place, keeping their rows.
const SchemaVersion = 3

// MigrationSQL returns the statements that create the outbox table and its
// dead-row table, and upgrade tables of an older SchemaVersion, for the
// outbox's dialect and table name, each ending in ";" and separated by
// blank lines, for a migration tool. Each is idempotent (CREATE TABLE IF
// NOT EXISTS, ALTER TABLE ... ADD COLUMN IF NOT EXISTS). On PostgreSQL:
//
//	CREATE TABLE IF NOT EXISTS "fleet_outbox" (
//	    id            uuid        PRIMARY KEY,  -- UUIDv7 made by Submit
//	    queue         text        NOT NULL,     -- the queue's name
//	    payload       text        NOT NULL,     -- the payload's JSON (Queue.Encode)
//	    dedup_key     text,                     -- SubmitOptions.DedupKey, or NULL
//	    unique_ms     bigint      NOT NULL DEFAULT 0,  -- SubmitOptions.UniqueFor
//	    not_before_ms bigint,                   -- SubmitOptions.NotBefore, unix ms, or NULL
//	    created_at    timestamptz NOT NULL DEFAULT now(),
//	    options       text                      -- the per-task options, a JSON object, or NULL
//	);
//	ALTER TABLE "fleet_outbox" ADD COLUMN IF NOT EXISTS options text;
//
// and "fleet_outbox_dead" with the same columns plus dead_at and reason
// (before options, which version 2 added last, as the upgrade does), and
// the completion table (version 3; Complete):
//
//	CREATE TABLE IF NOT EXISTS "fleet_outbox_done" (
//	    task_id       text        PRIMARY KEY,  -- the task's id
//	    queue         text        NOT NULL,     -- the task's queue
//	    token         text        NOT NULL,     -- the lease token of the reservation that completed it
//	    result        text,                     -- the task's result (JSON), or NULL
//	    done_at       timestamptz NOT NULL DEFAULT now()
//	);
//
// On MySQL the types are CHAR(36), VARCHAR(512), LONGTEXT, BIGINT,
// DATETIME(6) and TEXT, in InnoDB with utf8mb4 (the completion table:
// VARCHAR(255), VARCHAR(512), VARCHAR(255), LONGTEXT, DATETIME(6)). The ADD COLUMN IF NOT
// EXISTS is MariaDB's (10.0.2 and later); MySQL 8.0 has no such clause:
// there, run Migrate, or run the ALTER statements without IF NOT EXISTS,
// once, on tables of version 1 only. On PostgreSQL an ALTER TABLE waits
// for the transactions that hold the table (relays' batches, the
// application's Submits) and holds up the ones that come after it, even
// when the column is there already; Migrate runs one only on a table that
// lacks the column.
func (o *Outbox) MigrationSQL() string {
	var s []string
	for _, m := range o.migration() {
		s = append(s, m.sql)
	}
	return strings.Join(s, ";\n\n") + ";\n"
}

// Migrate brings the outbox's tables to SchemaVersion on its database,
// one statement at a time: it creates the tables that do not exist, and
// adds the columns that tables of an older version lack, keeping their
// rows. It runs MigrationSQL's statements, except that it looks for each
// column first (SELECT options ... WHERE 1 = 0) and alters only a table
// that lacks it: on PostgreSQL an ALTER TABLE takes an exclusive lock on
// the table even when the column is there (tested), which would queue the
// application's inserts behind the relays' open transactions at every
// run. On MySQL it adds the
// column without IF NOT EXISTS and takes "duplicate column" (another
// Migrate's) for done, which MariaDB and MySQL 8.0 both understand. On
// PostgreSQL it runs them on one connection holding a session advisory
// lock named after the outbox's table, so Migrates of the same tables
// take turns (a CREATE TABLE IF NOT EXISTS racing another can fail there
// on the table's row type); the lock stops no Submit or relay. So several
// processes may upgrade the same tables at once.
//
// A relay of version 1 relays the rows of an upgraded table without their
// options: upgrade the tables first, then the relays, then the code that
// submits with per-task options. A Submit or a relay of this version on a
// table of version 1 fails with ErrNoTable, naming the migration.
func (o *Outbox) Migrate(ctx context.Context) error {
	conn, err := o.db.Conn(ctx)
	if err != nil {
		return o.tableErr("migrate", err)
	}
	defer conn.Close()
	if o.dialect == PostgreSQL {
		key := migrateLockKey(o.qTable)
		// A connection that may hold the lock and cannot say it let go (a
		// lock granted as ctx ended, an unlock that failed) is discarded,
		// which ends its session and the lock with it.
		discard := func() { _ = conn.Raw(func(any) error { return driver.ErrBadConn }) }
		if _, err := conn.ExecContext(ctx, `SELECT pg_advisory_lock($1)`, key); err != nil {
			discard()
			return o.tableErr("migrate", err)
		}
		defer func() {
			if _, err := conn.ExecContext(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, key); err != nil {
				discard()
			}
		}()
	}
	for _, m := range o.migration() {
		if m.column != "" {
			err := hasColumns(ctx, conn, m.table, m.column)
			if err == nil {
				continue
			}
			if !isNoColumn(err) {
				return o.tableErr("migrate", err)
			}
		}
		s := m.sql
		if m.mysqlAlter != "" {
			s = m.mysqlAlter
		}
		if _, err := conn.ExecContext(ctx, s); err != nil && !isDupColumn(err) && !isDupTable(err) { // a column or table that another Migrate (of an older fleetsql, or MigrationSQL's statements) added meanwhile
			return o.tableErr("migrate", err)
		}
	}
	return nil
}

// migrateLockKey is the PostgreSQL advisory lock key of Migrate on the
// outbox whose table is table (quoted): FNV-1a of "fleetsql migrate " and
// the name, as a bigint.
func migrateLockKey(table string) int64 {
	h := fnv.New64a()
	h.Write([]byte("fleetsql migrate " + table))
	return int64(h.Sum64())
}

// querier is what hasColumns reads through: the pool or one connection.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// hasColumns returns nil when table (quoted) has columns (a list), and
// the database's error (isNoColumn for a missing one) when not.
func hasColumns(ctx context.Context, db querier, table, columns string) error {
	rows, err := db.QueryContext(ctx, `SELECT `+columns+` FROM `+table+` WHERE 1 = 0`)
	if err != nil {
		return err
	}
	return rows.Close()
}

// step is one statement of the migration. An upgrade's adds column to
// table (quoted), and Migrate runs it only when the column is missing;
// mysqlAlter, when set, is what Migrate runs in its place: the same ALTER
// without IF NOT EXISTS, for MySQL 8.0.
type step struct {
	sql           string
	table, column string
	mysqlAlter    string
}

func (o *Outbox) migration() []step {
	if o.dialect == MySQL {
		const cols = `
	id            CHAR(36) CHARACTER SET ascii NOT NULL PRIMARY KEY,
	queue         VARCHAR(512) NOT NULL,
	payload       LONGTEXT NOT NULL,
	dedup_key     VARCHAR(512) NULL,
	unique_ms     BIGINT NOT NULL DEFAULT 0,
	not_before_ms BIGINT NULL,`
		const options = `
	options       TEXT NULL`
		const tail = `
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`
		alter := func(t string) step {
			return step{
				sql:        `ALTER TABLE ` + t + ` ADD COLUMN IF NOT EXISTS options TEXT NULL`,
				table:      t,
				column:     "options",
				mysqlAlter: `ALTER TABLE ` + t + ` ADD COLUMN options TEXT NULL`,
			}
		}
		return []step{
			{sql: `CREATE TABLE IF NOT EXISTS ` + o.qTable + ` (` + cols + `
	created_at    DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),` + options + tail},
			{sql: `CREATE TABLE IF NOT EXISTS ` + o.qDead + ` (` + cols + `
	created_at    DATETIME(6) NOT NULL,
	dead_at       DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
	reason        TEXT NOT NULL,` + options + tail},
			{sql: `CREATE TABLE IF NOT EXISTS ` + o.qDone + ` (
	task_id       VARCHAR(255) NOT NULL PRIMARY KEY,
	queue         VARCHAR(512) NOT NULL,
	token         VARCHAR(255) NOT NULL,
	result        LONGTEXT NULL,
	done_at       DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)` + tail},
			alter(o.qTable),
			alter(o.qDead),
		}
	}
	const cols = `
	id            uuid        PRIMARY KEY,
	queue         text        NOT NULL,
	payload       text        NOT NULL,
	dedup_key     text,
	unique_ms     bigint      NOT NULL DEFAULT 0,
	not_before_ms bigint,`
	const options = `
	options       text`
	return []step{
		{sql: `CREATE TABLE IF NOT EXISTS ` + o.qTable + ` (` + cols + `
	created_at    timestamptz NOT NULL DEFAULT now(),` + options + `
)`},
		{sql: `CREATE TABLE IF NOT EXISTS ` + o.qDead + ` (` + cols + `
	created_at    timestamptz NOT NULL,
	dead_at       timestamptz NOT NULL DEFAULT now(),
	reason        text        NOT NULL,` + options + `
)`},
		{sql: `CREATE TABLE IF NOT EXISTS ` + o.qDone + ` (
	task_id       text        PRIMARY KEY,
	queue         text        NOT NULL,
	token         text        NOT NULL,
	result        text,
	done_at       timestamptz NOT NULL DEFAULT now()
)`},
		{sql: `ALTER TABLE ` + o.qTable + ` ADD COLUMN IF NOT EXISTS options text`, table: o.qTable, column: "options"},
		{sql: `ALTER TABLE ` + o.qDead + ` ADD COLUMN IF NOT EXISTS options text`, table: o.qDead, column: "options"},
	}
}
