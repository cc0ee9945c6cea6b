package fleetsql

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/fleet-go/fleet"
)

// Defaults of ReapOptions.
const (
	// DefaultRetention is how long a completion row whose ack was never
	// confirmed stays: a delivery of its task later than that runs the
	// handler again.
	DefaultRetention = 7 * 24 * time.Hour
	// DefaultReapBatch is how many rows one delete takes.
	DefaultReapBatch = 500
	// DefaultFlushEvery is how long the row of an acked task waits, at
	// most, for its delete.
	DefaultFlushEvery = 100 * time.Millisecond
	// DefaultRetentionEvery is how often Reap looks for rows past
	// Retention.
	DefaultRetentionEvery = time.Minute
	// maxPending bounds the ids of acked tasks that wait for their delete
	// in one process: past it (no Reap runs, or the database is down) the
	// newest are dropped, and their rows wait for Retention.
	maxPending = 100_000
)

// ReapOptions configures Reap. The zero value means the defaults.
type ReapOptions struct {
	// Retention is the age past which a completion row is deleted whatever
	// became of its task, for the rows whose ack was never confirmed to a
	// running Reap (the process died between the ack and the delete, or the
	// task was deleted from Redis by hand). It must be longer than any
	// task can wait between a delivery that committed its completion and
	// the next: a delivery after Retention runs the handler again. At
	// least one minute. Defaults to DefaultRetention.
	Retention time.Duration
	// Batch bounds the rows of one delete. Defaults to DefaultReapBatch.
	Batch int
	// FlushEvery is how long the ids of acked tasks gather before their
	// rows are deleted (sooner when Batch gather). Defaults to
	// DefaultFlushEvery.
	FlushEvery time.Duration
	// RetentionEvery is how often Reap deletes the rows past Retention.
	// Defaults to DefaultRetentionEvery.
	RetentionEvery time.Duration
	// Logger gets failed deletes (Warn) and counts (Debug). Defaults to
	// silent.
	Logger *slog.Logger
}

func (o ReapOptions) withDefaults() (ReapOptions, error) {
	if o.Retention < 0 || o.Batch < 0 || o.FlushEvery < 0 || o.RetentionEvery < 0 {
		return o, fmt.Errorf("%w: ReapOptions may not hold negative values: %+v", fleet.ErrInvalidArgument, o)
	}
	if o.Retention == 0 {
		o.Retention = DefaultRetention
	}
	if o.Batch == 0 {
		o.Batch = DefaultReapBatch
	}
	if o.FlushEvery == 0 {
		o.FlushEvery = DefaultFlushEvery
	}
	if o.RetentionEvery == 0 {
		o.RetentionEvery = DefaultRetentionEvery
	}
	switch {
	case o.Retention < time.Minute:
		return o, fmt.Errorf("%w: ReapOptions.Retention %v is under a minute: a task delivered again after it runs its handler again", fleet.ErrInvalidArgument, o.Retention)
	case o.Batch > MaxBatch:
		return o, fmt.Errorf("%w: ReapOptions.Batch %d is over %d", fleet.ErrInvalidArgument, o.Batch, MaxBatch)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o, nil
}

// ackedIDs gathers the ids of tasks whose ack took effect (Task.AfterAck,
// set by Complete and Completed), for Reap to delete their rows.
type ackedIDs struct {
	mu      sync.Mutex
	ids     []string
	dropped int
	full    chan struct{} // a send when a batch's worth gathered
	batch   int
}

// acked hands the row of task id, whose ack took effect, to Reap. It runs
// on the goroutine that read the ack's reply: it never blocks.
func (o *Outbox) acked(id string) {
	a := &o.ackedIDs
	a.mu.Lock()
	if len(a.ids) >= maxPending {
		a.dropped++
		a.mu.Unlock()
		return
	}
	a.ids = append(a.ids, id)
	full := len(a.ids) >= a.batchSize()
	a.mu.Unlock()
	if full {
		select {
		case a.full <- struct{}{}:
		default:
		}
	}
}

// batchSize is Reap's batch (a.mu held).
func (a *ackedIDs) batchSize() int {
	if a.batch > 0 {
		return a.batch
	}
	return DefaultReapBatch
}

// take returns up to n ids, and how many were dropped since the last take.
func (a *ackedIDs) take(n int) ([]string, int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	n = min(n, len(a.ids))
	ids := append([]string(nil), a.ids[:n]...)
	a.ids = append(a.ids[:0], a.ids[n:]...)
	d := a.dropped
	a.dropped = 0
	return ids, d
}

// giveBack returns ids whose delete failed, for the next flush.
func (a *ackedIDs) giveBack(ids []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	room := max(0, maxPending-len(a.ids))
	if len(ids) > room {
		a.dropped += len(ids) - room
		ids = ids[:room]
	}
	a.ids = append(ids, a.ids...)
}

// Pending returns how many completion rows of acked tasks wait in this
// process for Reap to delete them.
func (o *Outbox) Pending() int {
	o.ackedIDs.mu.Lock()
	defer o.ackedIDs.mu.Unlock()
	return len(o.ackedIDs.ids)
}

// Reap deletes completion rows (Complete) until ctx ends, then deletes
// those of the tasks acked until then and returns nil; none of its work
// outlives it. Run it in each process whose workers complete tasks in SQL
// (Once, Complete), as fleet.RunSweeper: it deletes the rows of the tasks
// that this process acked, in batches (one DELETE by primary key per
// ReapOptions.Batch ids, or per FlushEvery), so that the table holds only
// the rows of tasks whose ack is not confirmed yet. Every RetentionEvery it
// also deletes the rows older than Retention, whoever wrote them, Batch at
// a time (PostgreSQL: DELETE ... WHERE task_id IN (SELECT ... FOR UPDATE
// SKIP LOCKED); MySQL: the same SELECT, then a DELETE per row, in a READ
// COMMITTED transaction), so any number of replicas may run at once. That
// look scans the table (done_at has no index, which would cost every
// Complete an index write): cheap while the table holds only the rows of
// tasks in flight, as it does while a Reap keeps up. A delete that fails
// is retried at the next flush.
//
// Without a running Reap, the ids of acked tasks gather in memory (at most
// 100,000; past that their rows wait for a Reap's Retention). May return
// fleet.ErrInvalidArgument for bad options, and ErrNoTable.
func (o *Outbox) Reap(ctx context.Context, opts ReapOptions) error {
	opts, err := opts.withDefaults()
	if err != nil {
		return fmt.Errorf("fleetsql: reap: %w", err)
	}
	if err := hasColumns(ctx, o.db, o.qDone, doneCols); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return o.doneErr("reap", err)
	}
	log := opts.Logger.With("table", o.done)
	o.ackedIDs.mu.Lock()
	o.ackedIDs.batch = opts.Batch
	o.ackedIDs.mu.Unlock()
	flush := time.NewTicker(opts.FlushEvery)
	defer flush.Stop()
	old := time.NewTimer(0) // a look at the old rows at once, then every RetentionEvery
	defer old.Stop()
	for {
		select {
		case <-ctx.Done():
			// The rows of the tasks acked until now, within a few seconds.
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			o.flushAcked(fctx, opts, log)
			cancel()
			return nil
		case <-o.ackedIDs.full:
			o.flushAcked(ctx, opts, log)
		case <-flush.C:
			o.flushAcked(ctx, opts, log)
		case <-old.C:
			n, err := o.reapOld(ctx, opts)
			switch {
			case err != nil && ctx.Err() == nil:
				log.Warn("fleetsql: reap of old completion rows failed", "err", err)
			case n > 0:
				log.Info("fleetsql: reaped completion rows past their retention", "rows", n, "retention", opts.Retention)
			}
			old.Reset(opts.RetentionEvery)
		}
	}
}

// ReapOnce deletes the rows of the tasks acked so far and the rows older
// than opts.Retention once, and returns how many rows it deleted: for
// tests and tools, and for a host that reaps from a schedule of its own.
func (o *Outbox) ReapOnce(ctx context.Context, opts ReapOptions) (int, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return 0, fmt.Errorf("fleetsql: reap: %w", err)
	}
	n, err := o.flushAcked(ctx, opts, opts.Logger)
	if err != nil {
		return n, err
	}
	m, err := o.reapOld(ctx, opts)
	return n + m, err
}

// flushAcked deletes the rows of the acked tasks gathered so far, Batch at
// a time; a batch that fails goes back for the next flush.
func (o *Outbox) flushAcked(ctx context.Context, opts ReapOptions, log *slog.Logger) (int, error) {
	total := 0
	for {
		ids, dropped := o.ackedIDs.take(opts.Batch)
		if dropped > 0 {
			log.Warn("fleetsql: more acked tasks than Reap deletes: their completion rows wait for the retention", "dropped", dropped, "retention", opts.Retention)
		}
		if len(ids) == 0 {
			return total, nil
		}
		n, err := o.deleteDone(ctx, ids)
		if err != nil {
			o.ackedIDs.giveBack(ids)
			if ctx.Err() == nil {
				log.Warn("fleetsql: delete of acked tasks' completion rows failed: retried at the next flush", "rows", len(ids), "err", err)
			}
			return total, o.doneErr("reap", err)
		}
		total += n
		log.Debug("fleetsql: deleted the completion rows of acked tasks", "rows", n)
		if len(ids) < opts.Batch {
			return total, nil
		}
	}
}

// deleteDone deletes the rows of ids, in one statement.
func (o *Outbox) deleteDone(ctx context.Context, ids []string) (int, error) {
	var res sql.Result
	var err error
	if o.dialect == PostgreSQL {
		res, err = o.db.ExecContext(ctx, `DELETE FROM `+o.qDone+` WHERE task_id = ANY($1)`, ids)
	} else {
		args := make([]any, len(ids))
		for i, id := range ids {
			args[i] = id
		}
		res, err = o.db.ExecContext(ctx, `DELETE FROM `+o.qDone+` WHERE task_id IN (?`+strings.Repeat(", ?", len(ids)-1)+`)`, args...)
	}
	if err != nil {
		return 0, err
	}
	n, _ := res.RowsAffected()
	return int(n), nil
}

// reapOld deletes the rows older than opts.Retention, Batch at a time,
// skipping the rows another transaction holds.
func (o *Outbox) reapOld(ctx context.Context, opts ReapOptions) (int, error) {
	total := 0
	for {
		n, err := o.reapOldBatch(ctx, opts)
		total += n
		if err != nil || n < opts.Batch {
			if err != nil {
				err = o.doneErr("reap", err)
			}
			return total, err
		}
	}
}

func (o *Outbox) reapOldBatch(ctx context.Context, opts ReapOptions) (int, error) {
	age := opts.Retention.Microseconds()
	if o.dialect == PostgreSQL {
		res, err := o.db.ExecContext(ctx, `DELETE FROM `+o.qDone+` WHERE task_id IN (SELECT task_id FROM `+o.qDone+
			` WHERE done_at < now() - make_interval(secs => $1::bigint / 1e6) ORDER BY done_at LIMIT $2 FOR UPDATE SKIP LOCKED)`, age, opts.Batch)
		if err != nil {
			return 0, err
		}
		n, _ := res.RowsAffected()
		return int(n), nil
	}
	tx, err := o.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback() }()
	rows, err := tx.QueryContext(ctx, `SELECT task_id FROM `+o.qDone+` WHERE done_at < NOW(6) - INTERVAL ? MICROSECOND ORDER BY done_at LIMIT ? FOR UPDATE SKIP LOCKED`, age, opts.Batch)
	if err != nil {
		return 0, err
	}
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return 0, err
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return 0, err
	}
	// Row by row: an IN list would lock the next row too, which another
	// replica may hold (as the relay's deletes).
	for _, id := range ids {
		if _, err := tx.ExecContext(ctx, `DELETE FROM `+o.qDone+` WHERE task_id = ?`, id); err != nil {
			return 0, err
		}
	}
	return len(ids), tx.Commit()
}
