package fleetsql

import (
	"context"
	"strings"
)

// SchemaVersion is the version of the tables that MigrationSQL creates.
// Version 2 added the options column (the per-task options of
// fleet.SubmitOptions); Migrate and MigrationSQL add it to a version 1
// table in place.
const SchemaVersion = 2

// MigrationSQL returns the statements that create the outbox table and its
// dead-row table, for the outbox's dialect and table name, each ending in
// ";" and separated by blank lines, for a migration tool. Each is
// idempotent (CREATE TABLE IF NOT EXISTS). On PostgreSQL:
//
//	CREATE TABLE IF NOT EXISTS "fleet_outbox" (
//	    id            uuid        PRIMARY KEY,  -- UUIDv7 made by Submit
//	    queue         text        NOT NULL,     -- the queue's name
//	    payload       text        NOT NULL,     -- the payload's JSON (Queue.Encode)
//	    dedup_key     text,                     -- SubmitOptions.DedupKey, or NULL
//	    unique_ms     bigint      NOT NULL DEFAULT 0,  -- SubmitOptions.UniqueFor
//	    not_before_ms bigint,                   -- SubmitOptions.NotBefore, unix ms, or NULL
//	    created_at    timestamptz NOT NULL DEFAULT now(),
//	    options       text                      -- the per-task options (JSON), or NULL
//	);
//
// and "fleet_outbox_dead" with the same columns plus dead_at and reason;
// then, for tables of SchemaVersion 1, ALTER TABLE ... ADD COLUMN IF NOT
// EXISTS options on each. On MySQL the types are CHAR(36), VARCHAR(512),
// LONGTEXT, BIGINT and DATETIME(6), in InnoDB with utf8mb4. MySQL 8.0 has
// no ADD COLUMN IF NOT EXISTS (MariaDB has): there, leave the two ALTER
// statements out for new tables, and run them once without IF NOT EXISTS
// to upgrade version 1 tables; Migrate does that by itself.
func (o *Outbox) MigrationSQL() string {
	return strings.Join(o.migration(), ";\n\n") + ";\n"
}

// Migrate creates the tables that do not exist, and upgrades those of
// an earlier SchemaVersion in place (adding the options column where it
// is missing), one statement at a time: rows are kept.
func (o *Outbox) Migrate(ctx context.Context) error {
	stmts := o.migration()
	for _, s := range stmts[:2] {
		if _, err := o.db.ExecContext(ctx, s); err != nil {
			return o.tableErr("migrate", err)
		}
	}
	for _, table := range []string{o.table, o.dead} {
		has, err := o.hasOptions(ctx, table)
		if err != nil {
			return o.tableErr("migrate", err)
		}
		if !has {
			if _, err := o.db.ExecContext(ctx, `ALTER TABLE `+o.quote(table)+` ADD COLUMN options `+o.optionsType()); err != nil {
				return o.tableErr("migrate", err)
			}
		}
	}
	return nil
}

// hasOptions reports whether table (as given: [schema.]name) has the
// options column, from information_schema.
func (o *Outbox) hasOptions(ctx context.Context, table string) (bool, error) {
	schema, name, qualified := strings.Cut(table, ".")
	if !qualified {
		schema, name = "", table
	}
	q := `SELECT COUNT(*) FROM information_schema.columns WHERE table_name = $1 AND column_name = 'options' AND table_schema = COALESCE(NULLIF($2, ''), current_schema())`
	if o.dialect == MySQL {
		q = `SELECT COUNT(*) FROM information_schema.columns WHERE table_name = ? AND column_name = 'options' AND table_schema = COALESCE(NULLIF(?, ''), DATABASE())`
	}
	var n int
	err := o.db.QueryRowContext(ctx, q, name, schema).Scan(&n)
	return n > 0, err
}

// optionsType is the options column's type in the outbox's dialect.
func (o *Outbox) optionsType() string {
	if o.dialect == MySQL {
		return "LONGTEXT NULL"
	}
	return "text"
}

func (o *Outbox) migration() []string {
	if o.dialect == MySQL {
		const cols = `
	id            CHAR(36) CHARACTER SET ascii NOT NULL PRIMARY KEY,
	queue         VARCHAR(512) NOT NULL,
	payload       LONGTEXT NOT NULL,
	dedup_key     VARCHAR(512) NULL,
	unique_ms     BIGINT NOT NULL DEFAULT 0,
	not_before_ms BIGINT NULL,`
		const tail = `
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`
		return []string{
			`CREATE TABLE IF NOT EXISTS ` + o.qTable + ` (` + cols + `
	created_at    DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
	options       LONGTEXT NULL` + tail,
			`CREATE TABLE IF NOT EXISTS ` + o.qDead + ` (` + cols + `
	created_at    DATETIME(6) NOT NULL,
	dead_at       DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
	reason        TEXT NOT NULL,
	options       LONGTEXT NULL` + tail,
			`ALTER TABLE ` + o.qTable + ` ADD COLUMN IF NOT EXISTS options LONGTEXT NULL`,
			`ALTER TABLE ` + o.qDead + ` ADD COLUMN IF NOT EXISTS options LONGTEXT NULL`,
		}
	}
	const cols = `
	id            uuid        PRIMARY KEY,
	queue         text        NOT NULL,
	payload       text        NOT NULL,
	dedup_key     text,
	unique_ms     bigint      NOT NULL DEFAULT 0,
	not_before_ms bigint,`
	return []string{
		`CREATE TABLE IF NOT EXISTS ` + o.qTable + ` (` + cols + `
	created_at    timestamptz NOT NULL DEFAULT now(),
	options       text
)`,
		`CREATE TABLE IF NOT EXISTS ` + o.qDead + ` (` + cols + `
	created_at    timestamptz NOT NULL,
	dead_at       timestamptz NOT NULL DEFAULT now(),
	reason        text        NOT NULL,
	options       text
)`,
		`ALTER TABLE ` + o.qTable + ` ADD COLUMN IF NOT EXISTS options text`,
		`ALTER TABLE ` + o.qDead + ` ADD COLUMN IF NOT EXISTS options text`,
	}
}
