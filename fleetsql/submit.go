package fleetsql

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/fleet-go/fleet"
)

// maxKey bounds a dedup key, in bytes, as the core does.
const maxKey = 512

// KeyPrefix starts the dedup key that the relay gives the task of a row
// without a SubmitOptions.DedupKey: the task's key is KeyPrefix plus the
// row's id.
const KeyPrefix = "fleetsql:"

// Submit writes a task for queue q into the outbox, inside the caller's
// transaction tx, and returns the outbox row's id (a UUIDv7). The task
// exists in the queue if and only if tx commits: the relay (Relay) moves
// the committed row there, once. Submit never touches Redis.
//
// It validates payload with the queue's rules first (Queue.Encode), so a
// bad payload fails here with fleet.ErrInvalidPayload or
// fleet.ErrPayloadTooLarge and nothing is written: the caller decides
// whether its transaction goes on. On PostgreSQL the same statement calls
// pg_notify (at most once per Options.NotifyInterval), which the server
// delivers to the relays only at commit, and never after a rollback.
//
// opts are Queue.SubmitWith's:
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
//
// May return ErrNoTable (run the migration), fleet.ErrInvalidArgument, the
// queue's own error (Queue.Err), and the database's errors. On PostgreSQL a
// failed statement aborts tx, as any would.
func Submit[T any](ctx context.Context, tx *sql.Tx, o *Outbox, q *fleet.Queue[T], payload T, opts fleet.SubmitOptions) (string, error) {
	const op = "submit"
	switch {
	case tx == nil || o == nil || q == nil:
		return "", fmt.Errorf("fleetsql: %s: %w: Submit needs a *sql.Tx, an *Outbox and a *fleet.Queue", op, fleet.ErrInvalidArgument)
	case opts.UniqueFor < 0:
		return "", fmt.Errorf("fleetsql: %s %q: %w: SubmitOptions.UniqueFor %v is negative", op, q.Name(), fleet.ErrInvalidArgument, opts.UniqueFor)
	case opts.UniqueFor > 0 && opts.DedupKey == "":
		return "", fmt.Errorf("fleetsql: %s %q: %w: SubmitOptions.UniqueFor needs a DedupKey", op, q.Name(), fleet.ErrInvalidArgument)
	case opts.DedupKey != "" && (len(opts.DedupKey) > maxKey || !isText(opts.DedupKey)):
		return "", fmt.Errorf("fleetsql: %s %q: %w: dedup key of %d bytes must be valid text of at most %d bytes", op, q.Name(), fleet.ErrInvalidArgument, len(opts.DedupKey), maxKey)
	case opts.ShardKey != "" && opts.ShardKey != opts.DedupKey:
		return "", fmt.Errorf("fleetsql: %s %q: %w: SubmitOptions.ShardKey %q: an outbox task goes to the shard of its dedup key (leave ShardKey empty, or make it the DedupKey)", op, q.Name(), fleet.ErrInvalidArgument, opts.ShardKey)
	}
	raw, err := q.Encode(payload)
	if err != nil {
		return "", fmt.Errorf("fleetsql: %s: %w", op, err)
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
	stmt, args := o.insert, []any{id, q.Name(), string(raw), dedup, opts.UniqueFor.Milliseconds(), notBefore}
	if o.notify() {
		stmt, args = o.insertNotify, append(args, o.channel)
	}
	if _, err := tx.ExecContext(ctx, stmt, args...); err != nil {
		return "", o.tableErr(op, err)
	}
	return id, nil
}

// isText is the core's rule for dedup keys: valid UTF-8 with no control
// characters.
func isText(s string) bool {
	return utf8.ValidString(s) && strings.IndexFunc(s, func(r rune) bool { return r < ' ' || r == 0x7f }) < 0
}
