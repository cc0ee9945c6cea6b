package fleetsql

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/google/uuid"

	"github.com/fleet-go/fleet"
)

// KeyPrefix starts the dedup key that the relay gives the task of a row
// without a SubmitOptions.DedupKey: the task's key is KeyPrefix plus the
// row's id.
const KeyPrefix = "fleetsql:"

// Submit writes a task for queue q into the outbox, inside the caller's
// transaction tx, and returns the outbox row's id (a UUIDv7). The task
// exists in the queue if and only if tx commits: the relay (Relay) moves
// the committed row there, once. Submit never touches Redis.
//
// It checks opts (Queue.CheckOptions) and validates payload (Queue.Encode)
// with the queue's rules first, so that bad options fail here with
// fleet.ErrInvalidArgument naming the field, and a bad payload with
// fleet.ErrInvalidPayload or fleet.ErrPayloadTooLarge, and nothing is
// written: the caller decides whether its transaction goes on. On
// PostgreSQL the same statement calls pg_notify (at most once per
// Options.NotifyInterval), which the server delivers to the relays only at
// commit, and never after a rollback.
//
// opts are Queue.SubmitWith's, and the task gets them all:
//   - NotBefore delays the task: the relay submits the row at once and the
//     task waits in the queue's :scheduled set.
//   - DedupKey, when set, is the task's dedup key in place of KeyPrefix plus
//     the row's id: rows with the same key make one task, and the key is
//     held for the relay's window after that task ends, not only while it
//     lives (see RelayOptions.Window), because the relay's exactly-once
//     rests on it.
//   - UniqueFor holds the key for this long after the task ends, when it
//     is longer than the relay's window. As for SubmitWith, it needs DedupKey.
//   - ShardKey must be empty or equal to DedupKey: the task goes to the
//     shard of its dedup key, and concurrent relays keep no order anyway.
//   - Priority, MaxAttempts, Timeout, ExpiresAt, Metadata and Group are
//     kept in the row's options column and given to the task as they are.
//     ExpiresAt must be in the future now, as for SubmitWith; a row whose
//     ExpiresAt passed before the relay took it is not submitted, and goes
//     to the dead rows with the reason "expired before it was relayed"
//     (see Relay). Group is refused on a sharded queue (QueueOptions.Shards
//     over 1): the relay submits every task with a dedup key, and the core
//     refuses a dedup key beside a Group there, since the group's shard is
//     not the key's.
//   - After and Track are refused: a tracked task takes no dedup key, on
//     which the relay's exactly-once rests. Submit a flow once the
//     transaction committed.
//
// May return ErrNoTable (run the migration), fleet.ErrInvalidArgument, the
// queue's own error (Queue.Err), and the database's errors. On PostgreSQL a
// failed statement aborts tx, as any would.
func Submit[T any](ctx context.Context, tx *sql.Tx, o *Outbox, q *fleet.Queue[T], payload T, opts fleet.SubmitOptions) (string, error) {
	const op = "submit"
	switch {
	case tx == nil || o == nil || q == nil:
		return "", fmt.Errorf("fleetsql: %s: %w: Submit needs a *sql.Tx, an *Outbox and a *fleet.Queue", op, fleet.ErrInvalidArgument)
	case opts.ShardKey != "" && opts.ShardKey != opts.DedupKey:
		return "", fmt.Errorf("fleetsql: %s %q: %w: SubmitOptions.ShardKey %q: an outbox task goes to the shard of its dedup key (leave ShardKey empty, or make it the DedupKey)", op, q.Name(), fleet.ErrInvalidArgument, opts.ShardKey)
	case len(opts.After) > 0 || opts.Track:
		return "", fmt.Errorf("fleetsql: %s %q: %w: SubmitOptions.After and Track are not for an outbox task (a tracked task takes no dedup key, on which the relay's exactly-once rests): submit the flow after the commit", op, q.Name(), fleet.ErrInvalidArgument)
	case opts.Group != "" && q.Options().Shards > 1:
		return "", fmt.Errorf("fleetsql: %s %q: %w: SubmitOptions.Group on a sharded queue (%d shards): the relay submits every outbox task with a dedup key, which its exactly-once rests on, and a sharded queue keeps a group's tasks on the group's shard, where their keys cannot be held (the core refuses DedupKey beside Group there): submit grouped tasks of a sharded queue with Queue.SubmitWith after the commit, or use an unsharded queue",
			op, q.Name(), fleet.ErrInvalidArgument, q.Options().Shards)
	}
	if err := q.CheckOptions(opts); err != nil {
		return "", fmt.Errorf("fleetsql: %s: %w", op, err)
	}
	raw, err := q.Encode(payload)
	if err != nil {
		return "", fmt.Errorf("fleetsql: %s: %w", op, err)
	}
	options, err := encodeOptions(opts)
	if err != nil {
		return "", fmt.Errorf("fleetsql: %s %q: %w", op, q.Name(), err)
	}
	u, err := uuid.NewV7()
	if err != nil {
		return "", fmt.Errorf("fleetsql: %s: row id: %w", op, err)
	}
	id := u.String()
	var dedup, notBefore any
	if opts.DedupKey != "" {
		dedup = opts.DedupKey
	}
	if !opts.NotBefore.IsZero() {
		notBefore = opts.NotBefore.UnixMilli()
	}
	stmt, args := o.insert, []any{id, q.Name(), string(raw), dedup, opts.UniqueFor.Milliseconds(), notBefore, options}
	if o.notify() {
		stmt, args = o.insertNotify, append(args, o.channel)
	}
	if _, err := tx.ExecContext(ctx, stmt, args...); err != nil {
		return "", o.tableErr(op, err)
	}
	return id, nil
}
