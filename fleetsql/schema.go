package fleetsql

import (
	"context"
	"strings"
)

// SchemaVersion is the version of the tables that MigrationSQL creates.
// A later version will come with the SQL that upgrades this one.
const SchemaVersion = 1

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
//	    created_at    timestamptz NOT NULL DEFAULT now()
//	);
//
// and "fleet_outbox_dead" with the same columns plus dead_at and reason.
// On MySQL the types are CHAR(36), VARCHAR(512), LONGTEXT, BIGINT and
// DATETIME(6), in InnoDB with utf8mb4.
func (o *Outbox) MigrationSQL() string {
	return strings.Join(o.migration(), ";\n\n") + ";\n"
}

// Migrate runs MigrationSQL's statements on the outbox's database, one at
// a time: tables that exist are left as they are.
func (o *Outbox) Migrate(ctx context.Context) error {
	for _, s := range o.migration() {
		if _, err := o.db.ExecContext(ctx, s); err != nil {
			return o.tableErr("migrate", err)
		}
	}
	return nil
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
	created_at    DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)` + tail,
			`CREATE TABLE IF NOT EXISTS ` + o.qDead + ` (` + cols + `
	created_at    DATETIME(6) NOT NULL,
	dead_at       DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
	reason        TEXT NOT NULL` + tail,
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
	created_at    timestamptz NOT NULL DEFAULT now()
)`,
		`CREATE TABLE IF NOT EXISTS ` + o.qDead + ` (` + cols + `
	created_at    timestamptz NOT NULL,
	dead_at       timestamptz NOT NULL DEFAULT now(),
	reason        text        NOT NULL
)`,
	}
}
