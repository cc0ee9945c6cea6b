package fleetsql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/fleet-go/fleet"
)

// Errors of the outbox, for errors.Is. Bad options and arguments wrap
// fleet.ErrInvalidArgument; a payload that fails the queue's rules wraps
// fleet.ErrInvalidPayload or fleet.ErrPayloadTooLarge, as Queue.Submit's do.
var (
	// ErrNoTable is returned by Submit, Relay and RelayOnce when the outbox
	// table or its dead-row table does not exist, or lacks a column of this
	// SchemaVersion (a table of an older version). The message names the
	// migration to run: Outbox.Migrate, or the SQL of Outbox.MigrationSQL.
	ErrNoTable = errors.New("fleetsql: outbox table missing")
	// ErrDialect is returned by New when the dialect is not given and the
	// database's driver is neither pgx's stdlib (PostgreSQL) nor
	// go-sql-driver/mysql (MariaDB, MySQL).
	ErrDialect = errors.New("fleetsql: unknown SQL dialect")
)

// Dialect is the SQL spoken by the outbox's database.
type Dialect int

const (
	// DetectDialect tells New to find the dialect from the database's
	// driver: pgx's stdlib driver means PostgreSQL, go-sql-driver/mysql
	// means MySQL.
	DetectDialect Dialect = iota
	// PostgreSQL 12 or later. The relay wakes on LISTEN/NOTIFY when the
	// database is opened through pgx's stdlib driver (github.com/jackc/pgx/v5/stdlib).
	PostgreSQL
	// MySQL is MariaDB 10.6 or later, or MySQL 8.0 or later (both have
	// FOR UPDATE SKIP LOCKED). The relay polls, with a bounded backoff.
	MySQL
)

// String returns "postgresql", "mysql" or "detect".
func (d Dialect) String() string {
	switch d {
	case PostgreSQL:
		return "postgresql"
	case MySQL:
		return "mysql"
	case DetectDialect:
		return "detect"
	}
	return fmt.Sprintf("Dialect(%d)", int(d))
}

// DefaultTable is Options.Table's default.
const DefaultTable = "fleet_outbox"

// DefaultNotifyInterval is Options.NotifyInterval's default.
const DefaultNotifyInterval = time.Millisecond

// maxTable bounds a table name, so that its dead-row table's name (plus
// "_dead") stays within PostgreSQL's 63-byte identifiers.
const maxTable = 58

// Options configures an Outbox. The zero value means the defaults.
type Options struct {
	// Table is the outbox table's name, optionally qualified by a schema
	// ("app.outbox"): letters, digits and underscores, at most 58 bytes in
	// all. Its dead rows go to the table of the same name plus "_dead",
	// and the completions of tasks (Complete) to the same name plus
	// "_done". On
	// PostgreSQL, the NOTIFY channel is named after it too. Names are
	// quoted, so their case is kept. Defaults to DefaultTable.
	Table string
	// Dialect is the database's SQL. Defaults to DetectDialect: found from
	// the driver of the *sql.DB given to New.
	Dialect Dialect
	// NotifyInterval (PostgreSQL) spaces the notifications of Submit: it
	// calls pg_notify at most once per NotifyInterval per Outbox, and a
	// Submit that skips it relies on the wake of the transaction that did
	// notify, or on the relay's next look (see RelayOptions.PollMin). Every
	// notifying transaction takes PostgreSQL's global NOTIFY lock through
	// its commit, so that notifying each one serializes the commits of
	// concurrent writers and halves their throughput (bench/cmd/outbox);
	// one notification a millisecond keeps both the throughput and a
	// latency of a millisecond or two. Defaults to DefaultNotifyInterval.
	NotifyInterval time.Duration
}

// Outbox is an outbox table in one database: Submit writes tasks into it
// inside the caller's transaction, and Relay moves the committed ones to
// their queues. An Outbox is safe for concurrent use, and holds nothing
// that needs closing: it does not own db.
type Outbox struct {
	db      *sql.DB
	dialect Dialect
	table   string // as given: schema.table or table
	dead    string
	qTable  string // quoted
	qDead   string // quoted
	channel string // PostgreSQL NOTIFY channel: the table's name
	listen  bool   // the driver is pgx's: the relay can LISTEN

	done     string // the completion table: Table plus "_done"
	qDone    string // quoted
	complete string // Complete's statement
	lookDone string // Completed's statement
	ackedIDs ackedIDs

	insert       string       // Submit's statement
	insertNotify string       // ... with pg_notify (PostgreSQL)
	every        int64        // NotifyInterval in nanoseconds
	notified     atomic.Int64 // when Submit last notified, unix nanoseconds
}

// New returns the Outbox of db described by opts. It does not touch the
// database: run Migrate (or the SQL of MigrationSQL) once to create the
// tables. May return ErrDialect, and fleet.ErrInvalidArgument for a nil db
// or a bad table name.
func New(db *sql.DB, opts Options) (*Outbox, error) {
	if db == nil {
		return nil, fmt.Errorf("fleetsql: new: %w: no *sql.DB", fleet.ErrInvalidArgument)
	}
	if opts.Table == "" {
		opts.Table = DefaultTable
	}
	if opts.NotifyInterval < 0 {
		return nil, fmt.Errorf("fleetsql: new: %w: Options.NotifyInterval %v is negative", fleet.ErrInvalidArgument, opts.NotifyInterval)
	}
	if opts.NotifyInterval == 0 {
		opts.NotifyInterval = DefaultNotifyInterval
	}
	if err := checkTable(opts.Table); err != nil {
		return nil, fmt.Errorf("fleetsql: new: %w", err)
	}
	o := &Outbox{db: db, dialect: opts.Dialect, table: opts.Table, dead: opts.Table + "_dead", done: opts.Table + "_done",
		channel: opts.Table, every: int64(opts.NotifyInterval), ackedIDs: ackedIDs{full: make(chan struct{}, 1)}}
	drv := driverDialect(db)
	if o.dialect == DetectDialect {
		o.dialect = drv
	}
	switch o.dialect {
	case PostgreSQL, MySQL:
	case DetectDialect:
		return nil, fmt.Errorf("fleetsql: new: %w: driver %T is neither pgx's stdlib nor go-sql-driver/mysql: set Options.Dialect", ErrDialect, db.Driver())
	default:
		return nil, fmt.Errorf("fleetsql: new: %w: %v", ErrDialect, o.dialect)
	}
	o.listen = o.dialect == PostgreSQL && drv == PostgreSQL
	o.qTable, o.qDead, o.qDone = o.quote(o.table), o.quote(o.dead), o.quote(o.done)
	o.lookDone = `SELECT queue, result FROM ` + o.qDone + ` WHERE task_id = $1`
	o.complete = `INSERT INTO ` + o.qDone + ` (` + doneCols + `) VALUES ($1, $2, $3, $4)`
	if o.dialect == MySQL {
		o.lookDone = `SELECT queue, result FROM ` + o.qDone + ` WHERE task_id = ?`
		o.complete = `INSERT INTO ` + o.qDone + ` (` + doneCols + `) VALUES (?, ?, ?, ?)`
	}
	if o.dialect == PostgreSQL {
		o.insert = `INSERT INTO ` + o.qTable + ` (` + insertCols + `) VALUES ($1, $2, $3, $4, $5, $6, $7)`
		o.insertNotify = `WITH r AS (INSERT INTO ` + o.qTable + ` (` + insertCols + `) VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING 1) SELECT pg_notify($8, '') FROM r`
	} else {
		o.insert = `INSERT INTO ` + o.qTable + ` (` + insertCols + `) VALUES (?, ?, ?, ?, ?, ?, ?)`
	}
	return o, nil
}

// insertCols are the columns that Submit writes, in the order of its
// arguments.
const insertCols = `id, queue, payload, dedup_key, unique_ms, not_before_ms, options`

// doneCols are the columns that Complete writes, in the order of its
// arguments.
const doneCols = `task_id, queue, token, result`

// notify reports whether this Submit is to notify (PostgreSQL): the first
// in each NotifyInterval.
func (o *Outbox) notify() bool {
	if o.dialect != PostgreSQL {
		return false
	}
	now := time.Now().UnixNano()
	last := o.notified.Load()
	return now-last >= o.every && o.notified.CompareAndSwap(last, now)
}

// Dialect returns the outbox's dialect (never DetectDialect).
func (o *Outbox) Dialect() Dialect { return o.dialect }

// Table returns the outbox table's name.
func (o *Outbox) Table() string { return o.table }

// DeadTable returns the dead-row table's name: Table plus "_dead".
func (o *Outbox) DeadTable() string { return o.dead }

// DoneTable returns the completion table's name (Complete): Table plus
// "_done".
func (o *Outbox) DoneTable() string { return o.done }

// driverDialect names the dialect of db's driver, or DetectDialect.
func driverDialect(db *sql.DB) Dialect {
	switch db.Driver().(type) {
	case *stdlib.Driver:
		return PostgreSQL
	case *mysql.MySQLDriver, mysql.MySQLDriver:
		return MySQL
	}
	return DetectDialect
}

// checkTable accepts [schema.]table of letters, digits and underscores.
func checkTable(name string) error {
	if len(name) > maxTable {
		return fmt.Errorf("%w: Options.Table %q is longer than %d bytes", fleet.ErrInvalidArgument, name, maxTable)
	}
	parts := strings.Split(name, ".")
	if len(parts) > 2 {
		return fmt.Errorf("%w: Options.Table %q has more than one dot", fleet.ErrInvalidArgument, name)
	}
	for _, p := range parts {
		if p == "" || (p[0] >= '0' && p[0] <= '9') {
			return fmt.Errorf("%w: Options.Table %q: each part must start with a letter or underscore", fleet.ErrInvalidArgument, name)
		}
		for _, c := range p {
			if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
				return fmt.Errorf("%w: Options.Table %q: only letters, digits and underscores (and one dot)", fleet.ErrInvalidArgument, name)
			}
		}
	}
	return nil
}

// quote quotes a checked [schema.]name for the dialect.
func (o *Outbox) quote(name string) string {
	q := `"`
	if o.dialect == MySQL {
		q = "`"
	}
	parts := strings.Split(name, ".")
	for i, p := range parts {
		parts[i] = q + p + q
	}
	return strings.Join(parts, ".")
}

// tableErr turns "no such table" into ErrNoTable naming the migration, and
// wraps anything else with op.
func (o *Outbox) tableErr(op string, err error) error {
	if err == nil {
		return nil
	}
	if isNoTable(err) {
		return fmt.Errorf("fleetsql: %s: %w: %s or %s does not exist in this database: run the migration (Outbox.Migrate, or the SQL of Outbox.MigrationSQL): %w",
			op, ErrNoTable, o.table, o.dead, err)
	}
	if isNoColumn(err) {
		return fmt.Errorf("fleetsql: %s: %w: %s or %s lacks a column of schema version %d (a table of an older version): run the migration (Outbox.Migrate, or the SQL of Outbox.MigrationSQL), which upgrades it in place to version %d: %w",
			op, ErrNoTable, o.table, o.dead, outboxVersion, SchemaVersion, err)
	}
	return fmt.Errorf("fleetsql: %s: %w", op, err)
}

// outboxVersion is the SchemaVersion that last changed the outbox's own
// two tables (the options column).
const outboxVersion = 2

// isNoTable reports PostgreSQL's undefined_table (42P01) and MySQL's
// ER_NO_SUCH_TABLE (1146).
func isNoTable(err error) bool { return isDBError(err, "42P01", 1146) }

// isNoColumn reports PostgreSQL's undefined_column (42703) and MySQL's
// ER_BAD_FIELD_ERROR (1054): a table of an older SchemaVersion.
func isNoColumn(err error) bool { return isDBError(err, "42703", 1054) }

// isDupColumn reports PostgreSQL's duplicate_column (42701) and MySQL's
// ER_DUP_FIELDNAME (1060).
func isDupColumn(err error) bool { return isDBError(err, "42701", 1060) }

// isDupTable reports what PostgreSQL answers a CREATE TABLE IF NOT EXISTS
// whose table another session created at the same moment: duplicate_table
// (42P07), or, on its row type, unique_violation (23505) in pg_type or
// duplicate_object (42710, "type ... already exists"). Migrate takes turns
// under an advisory lock; these are for a Migrate beside an older
// fleetsql's or MigrationSQL's statements run by a tool. (MySQL takes a
// metadata lock: IF NOT EXISTS holds there.)
func isDupTable(err error) bool {
	return isDBError(err, "42P07", 0) || isDBError(err, "23505", 0) || isDBError(err, "42710", 0)
}

// isDBError reports whether err is PostgreSQL's error of SQLSTATE pgCode
// or MySQL's error number myNumber.
func isDBError(err error, pgCode string, myNumber uint16) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code == pgCode
	}
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return me.Number == myNumber
	}
	return false
}

// check returns ErrNoTable unless both tables exist with the columns the
// relay reads, in one query of each.
func (o *Outbox) check(ctx context.Context) error {
	for _, t := range []string{o.qTable, o.qDead} {
		if err := hasColumns(ctx, o.db, t, `id, queue, payload, dedup_key, unique_ms, not_before_ms, created_at, options`); err != nil {
			return o.tableErr("check tables", err)
		}
	}
	return nil
}
