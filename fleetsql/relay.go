package fleetsql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/fleet-go/fleet"
)

// Defaults of RelayOptions.
const (
	// DefaultBatch is how many rows one relay transaction takes.
	DefaultBatch = 100
	// MaxBatch bounds RelayOptions.Batch.
	MaxBatch = 10_000
	// DefaultWindow is how long a relayed task's dedup key stays held
	// after the task ends.
	DefaultWindow = 24 * time.Hour
	// DefaultSubmitTimeout bounds one submit to Redis.
	DefaultSubmitTimeout = 5 * time.Second
	// DefaultBatchTimeout bounds one relay transaction, and so how long
	// its rows stay locked.
	DefaultBatchTimeout = 30 * time.Second
	// DefaultConcurrency is how many submits of one batch are in flight.
	DefaultConcurrency = 16
	// DefaultSafetyPoll is how often a PostgreSQL relay looks at the table
	// without being notified.
	DefaultSafetyPoll = 5 * time.Second
	// DefaultPollMin is the shortest wait between polls of a MySQL relay.
	DefaultPollMin = 10 * time.Millisecond
	// DefaultPollMax is the longest wait between polls of a MySQL relay.
	DefaultPollMax = time.Second
	// DefaultRetryMax caps the backoff after a failed batch.
	DefaultRetryMax = 5 * time.Second
)

// RelayOptions configures Relay and RelayOnce. The zero value of each
// field means its default; negative values, and values that break the
// window's guarantee, are refused with fleet.ErrInvalidArgument.
type RelayOptions struct {
	// Batch is how many rows one transaction takes (FOR UPDATE SKIP
	// LOCKED), submits and deletes. At most MaxBatch. Defaults to
	// DefaultBatch.
	Batch int
	// Window is how long the dedup key of a relayed task stays held after
	// the task is acked (SubmitOptions.UniqueFor). A relay that dies after
	// its submit and before its commit leaves the row behind, and the row
	// is submitted again when another relay takes it: that submit is a
	// no-op while the key is held. So Window must be longer than a row can
	// stay locked and undeleted after its submit: BatchTimeout, plus the
	// time the database takes to notice a vanished client (TCP keepalive:
	// over 2 hours by default on Linux) and any outage of the database.
	// At least one minute, and more than BatchTimeout. Defaults to
	// DefaultWindow.
	Window time.Duration
	// SubmitTimeout bounds one submit to Redis; a submit that times out
	// leaves its row for a later batch. Defaults to DefaultSubmitTimeout.
	SubmitTimeout time.Duration
	// BatchTimeout bounds a batch's transaction, from BEGIN to COMMIT, and
	// so how long a Redis stall keeps its rows locked: no submit starts or
	// goes on past three quarters of it, and the rest is left for the
	// DELETE and COMMIT. Defaults to DefaultBatchTimeout.
	BatchTimeout time.Duration
	// Concurrency is how many submits of a batch are in flight at once.
	// Defaults to DefaultConcurrency.
	Concurrency int
	// SafetyPoll caps the wait of a PostgreSQL relay that listens between
	// two looks at the table unasked: after a batch that found rows it
	// looks again after PollMin, and each empty look doubles the wait, up
	// to SafetyPoll. The looks find the rows whose Submit skipped
	// pg_notify (Options.NotifyInterval) and committed after the batch
	// that the notifying transaction woke, rows left by a relay that died,
	// and rows committed while the relay's connection was being replaced
	// (it also looks each time it listens again). An idle relay looks once
	// per SafetyPoll; a notification wakes it at once. Defaults to
	// DefaultSafetyPoll.
	SafetyPoll time.Duration
	// PollMin and PollMax bound the polling of a relay that cannot listen
	// (MySQL, or PostgreSQL through another driver than pgx's): after a
	// batch that found rows it looks again after PollMin, and each empty
	// look doubles the wait, up to PollMax. So a row committed to an idle
	// outbox waits up to PollMax. A listening relay starts its looks at
	// PollMin too. Default to DefaultPollMin and DefaultPollMax.
	PollMin, PollMax time.Duration
	// RetryMax caps the backoff after a failed batch (Redis or the
	// database down), which starts at 50ms and doubles. Defaults to
	// DefaultRetryMax.
	RetryMax time.Duration
	// Logger receives whether the relay listens or polls (Info, at its
	// start), failed batches, dead rows and lost LISTEN connections (Warn),
	// and counts (Debug). Defaults to silent.
	Logger *slog.Logger
}

func (o RelayOptions) withDefaults() (RelayOptions, error) {
	if o.Batch < 0 || o.Window < 0 || o.SubmitTimeout < 0 || o.BatchTimeout < 0 || o.Concurrency < 0 ||
		o.SafetyPoll < 0 || o.PollMin < 0 || o.PollMax < 0 || o.RetryMax < 0 {
		return o, fmt.Errorf("%w: RelayOptions may not hold negative values: %+v", fleet.ErrInvalidArgument, o)
	}
	set := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	if o.Batch == 0 {
		o.Batch = DefaultBatch
	}
	if o.Concurrency == 0 {
		o.Concurrency = DefaultConcurrency
	}
	set(&o.Window, DefaultWindow)
	set(&o.SubmitTimeout, DefaultSubmitTimeout)
	set(&o.BatchTimeout, DefaultBatchTimeout)
	set(&o.SafetyPoll, DefaultSafetyPoll)
	set(&o.PollMin, DefaultPollMin)
	set(&o.PollMax, DefaultPollMax)
	set(&o.RetryMax, DefaultRetryMax)
	switch {
	case o.Batch > MaxBatch:
		return o, fmt.Errorf("%w: RelayOptions.Batch %d is over %d", fleet.ErrInvalidArgument, o.Batch, MaxBatch)
	case o.Window < time.Minute || o.Window <= o.BatchTimeout:
		return o, fmt.Errorf("%w: RelayOptions.Window %v must be at least 1m and longer than BatchTimeout %v: it is what makes a resubmit after a crash a no-op", fleet.ErrInvalidArgument, o.Window, o.BatchTimeout)
	case o.PollMax < o.PollMin:
		return o, fmt.Errorf("%w: RelayOptions.PollMax %v is below PollMin %v", fleet.ErrInvalidArgument, o.PollMax, o.PollMin)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o, nil
}

// RelayStats counts what one batch did.
type RelayStats struct {
	// Taken counts the rows the batch locked.
	Taken int
	// Relayed counts the rows that made a new task.
	Relayed int
	// Duplicates counts the rows whose dedup key was held, so that the
	// queue already had their task: a row submitted again after a relay
	// died, or a row whose SubmitOptions.DedupKey another row had. They
	// are deleted as relayed rows are.
	Duplicates int
	// Dead counts the rows moved to the dead-row table.
	Dead int
	// Kept counts the rows left in the outbox for a later batch, because
	// Redis did not answer (or the relay was stopping).
	Kept int
}

// stepHook, when set (by tests), is called at each step of a batch:
// "selected", "submit" (after each answered submit), "submitted",
// "deleted" (before the commit) and "committed".
var stepHook atomic.Pointer[func(o *Outbox, step string)]

func (r *relay) step(name string) {
	if h := stepHook.Load(); h != nil {
		(*h)(r.o, name)
	}
}

// relay is one Relay's state.
type relay struct {
	o    *Outbox
	f    *fleet.Fleet
	opts RelayOptions
	log  *slog.Logger

	txOpts *sql.TxOptions
	probe  string // any row that no relay holds?
	take   string // lock a batch (PostgreSQL: and delete it)
	dead   string // copy one row to the dead-row table
	back   string // PostgreSQL: put a taken row back
}

func (o *Outbox) newRelay(f *fleet.Fleet, opts RelayOptions) (*relay, error) {
	if f == nil {
		return nil, fmt.Errorf("%w: no *fleet.Fleet", fleet.ErrInvalidArgument)
	}
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	r := &relay{o: o, f: f, opts: opts, log: opts.Logger.With("table", o.table)}
	cols := `queue, payload, dedup_key, unique_ms, not_before_ms, options`
	// A look for a row that no relay holds, outside a transaction (the
	// lock ends with the statement).
	r.probe = `SELECT 1 FROM ` + o.qTable + ` LIMIT 1 FOR UPDATE SKIP LOCKED`
	if o.dialect == PostgreSQL {
		// The rows are deleted as they are taken (locked: SKIP LOCKED keeps
		// other relays off them), and the delete counts only at the commit,
		// after the submits: one statement fewer than SELECT then DELETE. A
		// row whose submit was not answered is put back in the same
		// transaction.
		r.take = `DELETE FROM ` + o.qTable + ` WHERE id IN (SELECT id FROM ` + o.qTable + ` ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED)` +
			` RETURNING id::text, ` + cols + `, created_at`
		r.dead = `INSERT INTO ` + o.qDead + ` (id, ` + cols + `, created_at, reason) VALUES ($1::uuid, $2, $3, $4, $5, $6, $7, $8, $9)` +
			` ON CONFLICT (id) DO UPDATE SET reason = EXCLUDED.reason, dead_at = now()`
		r.back = `INSERT INTO ` + o.qTable + ` (id, ` + cols + `, created_at) VALUES ($1::uuid, $2, $3, $4, $5, $6, $7, $8)`
	} else {
		// READ COMMITTED: a locking read then takes no gap locks, which
		// would hold up the application's inserts.
		r.txOpts = &sql.TxOptions{Isolation: sql.LevelReadCommitted}
		r.take = `SELECT id, ` + cols + ` FROM ` + o.qTable + ` ORDER BY id LIMIT ? FOR UPDATE SKIP LOCKED`
		r.dead = `INSERT INTO ` + o.qDead + ` (id, ` + cols + `, created_at, reason) SELECT id, ` + cols + `, created_at, ? FROM ` + o.qTable +
			` WHERE id = ? ON DUPLICATE KEY UPDATE reason = VALUES(reason), dead_at = CURRENT_TIMESTAMP(6)`
	}
	return r, nil
}

// Relay moves the committed rows of the outbox to their queues through f,
// until ctx ends; then it returns nil, and none of its work outlives it.
// It is meant to run in the background of each host (as
// fleet.RunSweeper), any number of replicas at once, in any processes.
//
// Each batch is one transaction: it locks up to Batch rows with FOR
// UPDATE SKIP LOCKED (so replicas take disjoint rows), submits each with
// fleet.Fleet.SubmitJSONWith, the row's options (those Submit was given),
// a dedup key derived from the row (KeyPrefix plus its id, or its
// SubmitOptions.DedupKey) and a unique window of RelayOptions.Window,
// then deletes the rows whose submit was answered (a new task or a
// duplicate) and commits. A relay that dies anywhere in
// between leaves its rows behind (the database aborts its transaction);
// the next relay that takes them submits them again, and the held dedup
// key makes that a no-op. So each committed row becomes exactly one task,
// within the window (see doc.go for the limits).
//
// A row whose queue no NewQueue of this process made, whose payload no
// longer decodes into the queue's type or validates, whose options column
// does not decode, or that was edited into something the queue refuses,
// goes to the dead-row table (DeadTable) with the reason, in the same
// transaction; it never holds up the rows behind it.
//
// So does a row whose SubmitOptions.ExpiresAt passed before a relay took
// it (by the relay's clock), with the reason "fleetsql: expired before it
// was relayed": no task is submitted. The core refuses an ExpiresAt in the
// past, and a task made only to be dead-lettered would carry an ExpiresAt
// and a NotBefore that the application never set. And an expiry in the
// outbox is an outbox incident (the relays or Redis were down longer than
// the task's life), which an operator looks for among the rows the relay
// could not deliver, not among the queue's expired tasks, which measure
// its workers; the dead row keeps the options, to edit and copy back if
// the task should run after all. Code that acts on the queue's "expired"
// dead letters must watch the dead rows too. A row taken again after a
// relay died past its submit may be there while its task is in the queue
// (the reason says so).
//
// When Redis does not answer, the answered rows of the batch are deleted,
// the others stay, and the relay backs off (up to RetryMax); when the
// database fails, it backs off the same way.
//
// On PostgreSQL through pgx's stdlib driver the relay holds one
// connection of the pool to LISTEN on the channel that Submit notifies,
// so it wakes at each commit; on its own it looks only after a batch
// (from PollMin, backing off to SafetyPoll), and listens again after a
// lost connection. Otherwise it polls with a bounded backoff (PollMin to
// PollMax).
//
// When ctx ends in the middle of a batch, the relay still ends the batch
// (the rows it submitted are deleted, the others kept) and commits, so it
// returns within BatchTimeout. Cancel
// ctx before closing f; a relay that sees fleet.ErrClosed returns nil.
// May return fleet.ErrInvalidArgument for bad options, and ErrNoTable when
// the tables are missing (a database that does not answer at the start is
// retried as later).
func (o *Outbox) Relay(ctx context.Context, f *fleet.Fleet, opts RelayOptions) error {
	r, err := o.newRelay(f, opts)
	if err != nil {
		return fmt.Errorf("fleetsql: relay: %w", err)
	}
	if err := o.check(ctx); errors.Is(err, ErrNoTable) {
		return err
	} else if err != nil && ctx.Err() == nil {
		r.log.Warn("fleetsql: relay cannot reach the database yet; retrying", "error", err)
	}
	lctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		stop()
		wg.Wait()
	}()
	if o.listen {
		r.log.Info("fleetsql: relay listens", "channel", o.channel, "safety_poll", r.opts.SafetyPoll)
	} else {
		r.log.Info("fleetsql: relay polls (no LISTEN on this database)", "dialect", o.dialect.String(), "poll_min", r.opts.PollMin, "poll_max", r.opts.PollMax)
	}
	var wake chan struct{} // nil: never ready
	if o.listen {
		wake = make(chan struct{}, 1)
		wg.Go(func() { r.listen(lctx, wake) })
	}
	t := time.NewTimer(0)
	defer t.Stop()
	poll := r.opts.PollMin
	var retry time.Duration
	probe := false // the last look found nothing: look before locking
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-wake:
			probe = false
		}
		st, err := r.once(ctx, probe)
		if ctx.Err() != nil || errors.Is(err, fleet.ErrClosed) {
			return nil
		}
		if err != nil {
			retry = min(max(2*retry, 50*time.Millisecond), r.opts.RetryMax)
			r.log.Warn("fleetsql: relay batch failed", "error", err, "relayed", st.Relayed+st.Duplicates, "kept", st.Kept, "retry_in", retry)
			probe = false
			t.Reset(retry)
			continue
		}
		retry = 0
		if st.Taken > 0 {
			r.log.Debug("fleetsql: relayed", "taken", st.Taken, "relayed", st.Relayed, "duplicates", st.Duplicates, "dead", st.Dead)
		}
		// After a batch that found rows, look again soon (PollMin), and
		// back off while the looks find nothing: up to PollMax when polling,
		// up to SafetyPoll when listening. A listening relay needs the
		// looks too: a transaction whose Submit skipped pg_notify
		// (NotifyInterval) may commit after the batch that the notifying
		// one woke.
		switch {
		case st.Taken == r.opts.Batch: // more may wait
			probe, poll = false, r.opts.PollMin
			t.Reset(0)
		case st.Taken > 0:
			// Polling, the next look likely finds rows: no probe. Listening,
			// it looks for stragglers: probe.
			probe, poll = o.listen, r.opts.PollMin
			t.Reset(poll)
		default:
			most := r.opts.PollMax
			if o.listen {
				most = r.opts.SafetyPoll
			}
			probe, poll = true, min(2*poll, most)
			t.Reset(poll)
		}
	}
}

// RelayOnce runs one batch of Relay, for hosts that schedule their own
// (and for tests): it returns what the batch did, and the first error
// that kept rows in the outbox. May return fleet.ErrInvalidArgument,
// ErrNoTable, the database's errors, and Redis's (fleet.ErrUnavailable).
func (o *Outbox) RelayOnce(ctx context.Context, f *fleet.Fleet, opts RelayOptions) (RelayStats, error) {
	r, err := o.newRelay(f, opts)
	if err != nil {
		return RelayStats{}, fmt.Errorf("fleetsql: relay: %w", err)
	}
	return r.once(ctx, false)
}

// row is an outbox row as the relay reads it.
type row struct {
	id, queue, payload string
	dedup              sql.NullString
	uniqueMS           int64
	notBefore          sql.NullInt64
	options            sql.NullString // the per-task options (options.go)
	created            any            // PostgreSQL: created_at, to write back
}

// values returns the row's columns in the order of relay.dead and
// relay.back (PostgreSQL).
func (w row) values() []any {
	return []any{w.id, w.queue, w.payload, w.dedup, w.uniqueMS, w.notBefore, w.options, w.created}
}

type outcomeKind int

const (
	kept outcomeKind = iota
	relayed
	duplicate
	dead
)

type outcome struct {
	kind outcomeKind
	err  error
}

// once runs one batch. probe makes it look for any row first, without a
// transaction, for an idle outbox.
func (r *relay) once(ctx context.Context, probe bool) (RelayStats, error) {
	var st RelayStats
	o := r.o
	start := time.Now()
	// The transaction is bounded by BatchTimeout but not by ctx: a relay
	// that stops deletes the rows it submitted and commits, within the
	// bound.
	dbctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.opts.BatchTimeout)
	defer cancel()
	if probe {
		var one int
		err := o.db.QueryRowContext(ctx, r.probe).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return st, nil
		}
		if err != nil {
			return st, o.tableErr("relay: look", err)
		}
	}
	tx, err := o.db.BeginTx(dbctx, r.txOpts)
	if err != nil {
		return st, o.tableErr("relay: begin", err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	rows, err := r.lock(ctx, tx)
	if err != nil {
		return st, o.tableErr("relay: take rows", err)
	}
	st.Taken = len(rows)
	if len(rows) == 0 {
		return st, o.tableErr("relay: commit", tx.Commit())
	}
	r.step("selected")
	sctx, scancel := context.WithDeadline(ctx, start.Add(r.opts.BatchTimeout*3/4))
	outs := r.submitAll(sctx, rows)
	scancel()
	r.step("submitted")
	pg := o.dialect == PostgreSQL
	var done []string // MySQL: rows to delete
	var firstErr error
	var deadRows []int
	for i, oc := range outs {
		switch oc.kind {
		case relayed:
			st.Relayed++
		case duplicate:
			st.Duplicates++
		case dead:
			reason := truncate(oc.err.Error(), 2000)
			args := []any{reason, rows[i].id}
			if pg {
				args = append(rows[i].values(), reason)
			}
			if _, err := tx.ExecContext(dbctx, r.dead, args...); err != nil {
				return RelayStats{Taken: st.Taken, Kept: st.Taken}, o.tableErr("relay: move a dead row", err)
			}
			st.Dead++
			deadRows = append(deadRows, i)
		default:
			st.Kept++
			if firstErr == nil {
				firstErr = oc.err
			}
			if pg {
				if _, err := tx.ExecContext(dbctx, r.back, rows[i].values()...); err != nil {
					return RelayStats{Taken: st.Taken, Kept: st.Taken}, o.tableErr("relay: put a row back", err)
				}
			}
			continue
		}
		done = append(done, rows[i].id)
	}
	if !pg && len(done) > 0 {
		if err := r.delete(dbctx, tx, done); err != nil {
			return RelayStats{Taken: st.Taken, Kept: st.Taken}, o.tableErr("relay: delete", err)
		}
	}
	r.step("deleted")
	if err := tx.Commit(); err != nil {
		return RelayStats{Taken: st.Taken, Kept: st.Taken}, o.tableErr("relay: commit", err)
	}
	r.step("committed")
	for _, i := range deadRows {
		r.log.Warn("fleetsql: row moved to the dead rows", "id", rows[i].id, "queue", rows[i].queue, "reason", outs[i].err)
	}
	if firstErr != nil {
		return st, fmt.Errorf("fleetsql: relay: %d of %d rows kept for later: %w", st.Kept, st.Taken, firstErr)
	}
	return st, nil
}

// lock takes a batch of rows, locked until the transaction ends, in id
// order.
func (r *relay) lock(ctx context.Context, tx *sql.Tx) ([]row, error) {
	rs, err := tx.QueryContext(ctx, r.take, r.opts.Batch)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	var out []row
	for rs.Next() {
		var w row
		dst := []any{&w.id, &w.queue, &w.payload, &w.dedup, &w.uniqueMS, &w.notBefore, &w.options}
		if r.o.dialect == PostgreSQL {
			dst = append(dst, &w.created)
		}
		if err := rs.Scan(dst...); err != nil {
			return nil, err
		}
		out = append(out, w)
	}
	if err := rs.Err(); err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b row) int { return strings.Compare(a.id, b.id) }) // RETURNING keeps no order
	return out, nil
}

// delete removes the rows ids in tx (MySQL: on PostgreSQL, taking them
// deleted them).
func (r *relay) delete(ctx context.Context, tx *sql.Tx, ids []string) error {
	// One statement per row on InnoDB: a DELETE ... WHERE id IN (...) is a
	// range scan, which locks the record after each id too (another
	// relay's), and two relays then deadlock (tested:
	// TestConcurrentRelayProcesses). By the primary key, a DELETE locks
	// only its row, which this transaction holds already.
	st, err := tx.PrepareContext(ctx, `DELETE FROM `+r.o.qTable+` WHERE id = ?`)
	if err != nil {
		return err
	}
	defer st.Close()
	for _, id := range ids {
		if _, err := st.ExecContext(ctx, id); err != nil {
			return err
		}
	}
	return nil
}

// submitAll submits rows, Concurrency at a time. After a submit that
// Redis did not answer it starts no more (they are kept).
func (r *relay) submitAll(ctx context.Context, rows []row) []outcome {
	outs := make([]outcome, len(rows))
	var stopped atomic.Bool
	run := func(i int) {
		if stopped.Load() || ctx.Err() != nil {
			outs[i] = outcome{kind: kept, err: errors.Join(errors.New("not submitted after an earlier failure"), ctx.Err())}
			return
		}
		outs[i] = r.submit(ctx, rows[i])
		if outs[i].kind == kept {
			stopped.Store(true)
		}
		r.step("submit")
	}
	if r.opts.Concurrency == 1 || len(rows) == 1 {
		for i := range rows {
			run(i)
		}
		return outs
	}
	sem := make(chan struct{}, r.opts.Concurrency)
	var wg sync.WaitGroup
	for i := range rows {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			run(i)
		})
	}
	wg.Wait()
	return outs
}

// submit submits one row and says what came of it.
func (r *relay) submit(ctx context.Context, w row) outcome {
	key := KeyPrefix + w.id
	if w.dedup.Valid && w.dedup.String != "" {
		key = w.dedup.String
	}
	opts := fleet.SubmitOptions{DedupKey: key, UniqueFor: r.opts.Window}
	if w.uniqueMS > r.opts.Window.Milliseconds() && w.uniqueMS < math.MaxInt64/int64(time.Millisecond) {
		opts.UniqueFor = time.Duration(w.uniqueMS) * time.Millisecond
	}
	if w.notBefore.Valid {
		opts.NotBefore = time.UnixMilli(w.notBefore.Int64)
	}
	if w.options.Valid {
		if err := decodeOptions(w.options.String, &opts); err != nil {
			return outcome{kind: dead, err: err}
		}
	}
	if expired(opts.ExpiresAt) {
		return outcome{kind: dead, err: errExpiredRow(opts.ExpiresAt)}
	}
	sctx, cancel := context.WithTimeout(ctx, r.opts.SubmitTimeout)
	defer cancel()
	_, err := r.f.SubmitJSONWith(sctx, w.queue, []byte(w.payload), opts)
	switch {
	case err == nil:
		return outcome{kind: relayed}
	case errors.Is(err, fleet.ErrDuplicate):
		return outcome{kind: duplicate}
	case errors.Is(err, fleet.ErrInvalidArgument) && expired(opts.ExpiresAt):
		return outcome{kind: dead, err: errExpiredRow(opts.ExpiresAt)} // it passed during the call
	case permanent(err):
		return outcome{kind: dead, err: err}
	}
	return outcome{kind: kept, err: err}
}

// expired reports whether a row's ExpiresAt is set and passed, by this
// process's clock (the one the core's check of ExpiresAt reads).
func expired(at time.Time) bool { return !at.IsZero() && !at.After(time.Now()) }

// errExpiredRow is the reason of a row whose ExpiresAt passed before the
// relay took it: the core refuses a task that expired already, and the
// relay submits none. See Relay.
func errExpiredRow(at time.Time) error {
	return fmt.Errorf("fleetsql: expired before it was relayed: SubmitOptions.ExpiresAt %s passed (relay's clock %s), so no task was submitted (unless an earlier relay died after submitting it)",
		at.UTC().Format(time.RFC3339Nano), time.Now().UTC().Format(time.RFC3339Nano))
}

// permanent reports the submit errors that the same row would get again:
// the row goes to the dead rows.
func permanent(err error) bool {
	for _, e := range []error{fleet.ErrQueueNotFound, fleet.ErrInvalidJSON, fleet.ErrInvalidPayload, fleet.ErrPayloadTooLarge,
		fleet.ErrInvalidArgument, fleet.ErrInvalidName, fleet.ErrWrongType} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// truncate cuts s to at most n bytes of valid UTF-8.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}
