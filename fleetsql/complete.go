package fleetsql

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/fleet-go/fleet"
)

// Errors of a completion, for errors.Is.
var (
	// ErrCompleted is returned by Complete when an earlier delivery of the
	// task completed it in a transaction that committed first: the
	// caller's transaction must roll back, so that its effects are not
	// made twice. Once acks such a task with the recorded result.
	ErrCompleted = errors.New("fleetsql: task already completed")
	// ErrBadRow is returned by Completed (and so by Once, which nacks the
	// task with it) for a completion row that does not belong to the task
	// (it names another queue) or whose result is not JSON: a row edited
	// by hand, or written for another queue's task. The row is left as
	// it is.
	ErrBadRow = errors.New("fleetsql: completion row unreadable")
)

// SpanAttribute is the attribute that Complete and Once set on the span
// in the handler's ctx (fleetotel's worker middleware puts the task's
// span there): "fleet.completion" = "sql" once the task's completion is
// written in the caller's transaction, "sql-found" when a delivery found
// it done and acks it without running the handler.
const SpanAttribute = "fleet.completion"

// Complete records in tx that task t is done, with result (encoded as
// JSON; nil for none, and set as the task's result, Task.SetResult),
// beside the handler's own writes: a row of the
// completion table (DoneTable), keyed by the task's id. Commit tx, then
// return nil from the handler (or Ack the task): the ack follows the
// commit. So the task's effects in tx and its completion commit together
// or not at all:
//   - a delivery of the task after the commit (the worker died before its
//     ack, the ack's reply was lost, the connection broke at COMMIT and
//     the commit happened) finds the row: Once (or Completed) acks it
//     without running the handler, with the recorded result as the
//     task's result;
//   - a delivery after a rollback, or a commit that did not happen, finds
//     no row, and runs the handler.
//
// The fence. Complete writes the row, then extends the task's lease by
// Task.Lease in Redis, a call that only the reservation's holder can make
// (its lease token): a worker whose reservation was taken over (its lease
// ran out and another worker reserved the task, or Queue.Cancel asked it
// to stop) gets fleet.ErrLeaseLost (or fleet.ErrCanceled) and must roll
// back. The extension also gives the commit a whole lease. A takeover
// after that check, while the commit is on its way, is decided by the
// table's primary key: the other worker's Complete waits for this
// transaction's row, and gets ErrCompleted if it commits (its own
// transaction then rolls back, and Once acks the task with this result),
// or writes its own if it rolls back. So exactly one transaction that
// called Complete for a task commits, at any isolation level of either
// database: a unique index is checked against every row written, not
// against the transaction's snapshot. (At PostgreSQL's SERIALIZABLE, the
// loser may get a serialization failure, 40001, instead of ErrCompleted:
// the handler returns it, the task is retried, and the next delivery
// finds the row.) What the isolation level must still cover are the
// handler's own reads: READ COMMITTED (PostgreSQL's default) or
// REPEATABLE READ (InnoDB's default) are enough for a handler that only
// writes.
//
// The row's lifetime: once the task's ack took effect, this process's
// Reap deletes the row in a batch; a row whose ack was never confirmed
// (the process died) is deleted by a later delivery's ack, or by Reap once
// it is older than ReapOptions.Retention.
//
// May return ErrCompleted, fleet.ErrLeaseLost, fleet.ErrCanceled,
// ErrNoTable (run the migration), fleet.ErrInvalidArgument (a nil
// argument, a result that does not encode as JSON, a transaction already
// committed or rolled back) and the database's and Redis's errors. On
// every error, roll tx back. On PostgreSQL a failed statement aborts tx.
func Complete[P any](ctx context.Context, tx *sql.Tx, o *Outbox, t *fleet.Task[P], result any) error {
	const op = "complete"
	if tx == nil || o == nil || t == nil {
		return fmt.Errorf("fleetsql: %s: %w: Complete needs a *sql.Tx, an *Outbox and the *fleet.Task", op, fleet.ErrInvalidArgument)
	}
	raw, err := json.Marshal(result)
	if err != nil {
		return fmt.Errorf("fleetsql: %s: task %s: %w: the result %T does not encode as JSON: %w", op, t.ID, fleet.ErrInvalidArgument, result, err)
	}
	var res any // NULL for a nil result
	if string(raw) != "null" {
		// The task's result too, as the ack will keep it: checked against
		// the queue's MaxPayloadBytes before anything is written.
		if err := t.SetResult(json.RawMessage(raw)); err != nil {
			return fmt.Errorf("fleetsql: %s: task %s: %w", op, t.ID, err)
		}
		res = string(raw)
	}
	if _, err := tx.ExecContext(ctx, o.complete, t.ID, t.Queue(), t.Token(), res); err != nil {
		switch {
		case errors.Is(err, sql.ErrTxDone):
			return fmt.Errorf("fleetsql: %s: task %s: %w: the transaction was already committed or rolled back: call Complete before Commit: %w", op, t.ID, fleet.ErrInvalidArgument, err)
		case isDBError(err, "23505", 1062): // unique_violation, ER_DUP_ENTRY
			return fmt.Errorf("fleetsql: %s: task %s: %w: an earlier delivery's transaction committed its completion first: roll back: %w", op, t.ID, ErrCompleted, err)
		}
		return o.doneErr(op, err)
	}
	// The fence, after the row: a takeover while the INSERT waited on
	// another transaction's row is seen too.
	if err := t.Extend(ctx, t.Lease()); err != nil {
		return fmt.Errorf("fleetsql: %s: task %s: the reservation no longer holds the task (roll back): %w", op, t.ID, err)
	}
	t.AfterAck(func() { o.acked(t.ID) })
	trace.SpanFromContext(ctx).SetAttributes(attribute.String(SpanAttribute, "sql"))
	return nil
}

// Completed reads the completion row of task t, outside any transaction:
// done is true when a transaction that called Complete for it committed.
// Then it sets the recorded result as the task's result (Task.SetResult)
// and, once the task's ack takes effect, hands the row to this process's
// Reap: ack the task (Task.Ack) without running its handler again. Once
// does all this before each delivery of a worker's task; call Completed
// yourself when you Reserve tasks by hand.
//
// A row that names another queue than the task's, or whose result is not
// JSON, is refused with ErrBadRow and left as it is. May return
// ErrNoTable, and the database's errors.
func Completed[P any](ctx context.Context, o *Outbox, t *fleet.Task[P]) (result json.RawMessage, done bool, err error) {
	const op = "completed"
	if o == nil || t == nil {
		return nil, false, fmt.Errorf("fleetsql: %s: %w: Completed needs an *Outbox and the *fleet.Task", op, fleet.ErrInvalidArgument)
	}
	var queue string
	var res sql.NullString
	switch err := o.db.QueryRowContext(ctx, o.lookDone, t.ID).Scan(&queue, &res); {
	case errors.Is(err, sql.ErrNoRows):
		return nil, false, nil
	case err != nil:
		return nil, false, o.doneErr(op, err)
	}
	if queue != t.Queue() {
		return nil, false, fmt.Errorf("fleetsql: %s: task %s: %w: its row in %s names queue %q, not the task's %q (a row edited by hand, or a task id reused across queues); the row is left as it is",
			op, t.ID, ErrBadRow, o.done, queue, t.Queue())
	}
	if res.Valid {
		if !json.Valid([]byte(res.String)) {
			return nil, false, fmt.Errorf("fleetsql: %s: task %s: %w: the result in its row in %s is not JSON (edited by hand?); the row is left as it is", op, t.ID, ErrBadRow, o.done)
		}
		result = json.RawMessage(res.String)
		if err := t.SetResult(result); err != nil {
			return nil, false, fmt.Errorf("fleetsql: %s: task %s: %w", op, t.ID, err)
		}
	}
	t.AfterAck(func() { o.acked(t.ID) })
	return result, true, nil
}

// Once wraps a worker's automation so that a task completed in SQL
// (Complete) runs once: before each delivery it looks for the task's
// completion row (Completed, one SELECT by primary key), and when there is
// one it returns nil without calling a, so the worker acks the task with
// the recorded result. When a's Complete finds that another delivery's
// transaction committed first (ErrCompleted), Once reads that row and acks
// the same way. Every other outcome of a is the worker's as usual.
//
//	w := fleet.NewBatchWorker(f, opts, ship, fleetsql.Once(ob, fleet.BatchFunc[C, O, Ship](
//		func(ctx context.Context, s *fleet.Slot[C, O], t *fleet.Task[Ship]) error {
//			... // BEGIN, the effects, Complete(ctx, tx, ob, t, result), COMMIT
//		})))
//
// (a BatchFunc, not a TaskFunc: Complete needs the *fleet.Task).
//
// Run Reap in the worker's process, so that the rows of acked tasks are
// deleted.
func Once[C, O, P any](o *Outbox, a fleet.BatchAutomation[C, O, P]) fleet.BatchAutomation[C, O, P] {
	return once[C, O, P]{o: o, a: a}
}

type once[C, O, P any] struct {
	o *Outbox
	a fleet.BatchAutomation[C, O, P]
}

// Handle runs t through the completion check, then a.
func (w once[C, O, P]) Handle(ctx context.Context, s *fleet.Slot[C, O], t *fleet.Task[P]) error {
	if w.o == nil || w.a == nil {
		return fmt.Errorf("fleetsql: once: %w: Once needs an *Outbox and an automation", fleet.ErrInvalidArgument)
	}
	if _, done, err := Completed(ctx, w.o, t); err != nil || done {
		if done {
			trace.SpanFromContext(ctx).SetAttributes(attribute.String(SpanAttribute, "sql-found"))
		}
		return err
	}
	err := w.a.Handle(ctx, s, t)
	if errors.Is(err, ErrCompleted) {
		_, done, cerr := Completed(ctx, w.o, t)
		switch {
		case cerr != nil:
			return cerr
		case done:
			trace.SpanFromContext(ctx).SetAttributes(attribute.String(SpanAttribute, "sql-found"))
			return nil
		}
	}
	return err
}

// doneErr turns "no such table" into ErrNoTable naming the migration that
// creates the completion table (SchemaVersion 3), and wraps anything else
// with op.
func (o *Outbox) doneErr(op string, err error) error {
	if isNoTable(err) || isNoColumn(err) {
		return fmt.Errorf("fleetsql: %s: %w: the completion table %s does not exist in this database, or lacks a column of schema version %d (it came with version 3): run the migration (Outbox.Migrate, or the SQL of Outbox.MigrationSQL), which creates it and keeps every row of the outbox: %w",
			op, ErrNoTable, o.done, SchemaVersion, err)
	}
	return fmt.Errorf("fleetsql: %s: %w", op, err)
}
