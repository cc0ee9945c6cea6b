// Package fleetsql submits fleet tasks from inside the application's own
// SQL transaction: a task is enqueued if and only if the transaction
// commits (River's InsertTx guarantee), through an outbox table, on
// PostgreSQL and on MariaDB or MySQL; and completes them inside it: a
// task is done if and only if the transaction that wrote its effects
// commits (River's JobCompleteTx guarantee; see "Completion in the
// caller's transaction" below). It is a module of its own, so that
// fleet's core needs no SQL driver.
//
// Redis cannot join a SQL transaction, but an outbox carries the
// guarantee:
//
//  1. [Submit] writes the task as a row of the outbox table inside the
//     caller's *sql.Tx, after checking the payload and the options with
//     the queue's rules (so bad ones fail the caller, not the relay). It
//     never touches Redis.
//  2. [Outbox.Relay], running in the background of any number of hosts,
//     takes committed rows in batches (FOR UPDATE SKIP LOCKED, in a
//     transaction that stays open), and submits each to its queue with a
//     dedup key derived from the row.
//  3. It deletes the rows once the queue answered, "duplicate" included,
//     and commits.
//
// A relay that dies between 2 and 3 loses its transaction (the database
// aborts it, and the rows are free again); the next relay submits the
// rows again, and the dedup key, still held, makes that a no-op.
//
//	ob, err := fleetsql.New(db, fleetsql.Options{}) // pgx stdlib or go-sql-driver/mysql
//	err = ob.Migrate(ctx)                           // once: CREATE TABLE IF NOT EXISTS
//	go ob.Relay(ctx, f, fleetsql.RelayOptions{})    // in each host, like RunSweeper
//
//	tx, err := db.BeginTx(ctx, nil)
//	_, err = tx.ExecContext(ctx, `INSERT INTO orders (id, total) VALUES ($1, $2)`, id, total)
//	_, err = fleetsql.Submit(ctx, tx, ob, shipQueue, Ship{Order: id}, fleet.SubmitOptions{})
//	err = tx.Commit() // the task exists if and only if this succeeds
//
// The relay process must know every queue of its outbox (fleet.NewQueue
// with the payload type): it decodes each row into it, through
// fleet.Fleet.SubmitJSONWith.
//
// # Schema
//
// [Outbox.MigrationSQL] returns the SQL for the outbox's dialect and
// table name ([Options.Table], default "fleet_outbox"), and
// [Outbox.Migrate] runs it; both tables are created with IF NOT EXISTS.
// [SchemaVersion] is 3 (version 3 added the completion table, below). The
// outbox table:
//
//	id             uuid / CHAR(36)     PRIMARY KEY, a UUIDv7 made by Submit (time-ordered)
//	queue          text / VARCHAR(512) the queue's name
//	payload        text / LONGTEXT     the payload's JSON, as Queue.Encode made it
//	dedup_key      text, NULL          SubmitOptions.DedupKey
//	unique_ms      bigint              SubmitOptions.UniqueFor in milliseconds, 0 for none
//	not_before_ms  bigint, NULL        SubmitOptions.NotBefore in unix milliseconds
//	created_at     timestamptz / DATETIME(6), the database's clock
//	options        text / TEXT, NULL   the per-task options (version 2), a JSON object
//
// The options column holds the per-task options of SubmitOptions that
// are set, and is NULL when none is (a row as version 1 wrote it):
//
//	{"priority":5,"max_attempts":3,"timeout_ms":1500,"expires_at_ms":1767225600000,
//	 "metadata":{"k":"v"},"group":"tenant-a"}
//
// Priority, MaxAttempts and Group as they are; Timeout in milliseconds (at
// least 1, as the core keeps it); ExpiresAt in unix milliseconds; Metadata
// as a JSON object of strings. The relay reads it strictly (an unknown
// field or trailing data is refused) and the core checks the values at
// the submit. Submit checks every option with the queue's rules first
// (Queue.CheckOptions), so bad options fail the caller's transaction.
// Two of them meet the outbox's own rules:
//   - ExpiresAt: a row whose ExpiresAt passed before a relay took it is not
//     submitted; it goes to the dead rows, with the reason "fleetsql:
//     expired before it was relayed" (see [Outbox.Relay] for why there and
//     not in the queue's dead letters).
//   - Group on a sharded queue is refused by Submit: the relay submits
//     every task with a dedup key, and a sharded queue keeps a group's
//     tasks on the group's shard, where the key cannot be held.
//
// The dead-row table (the same name plus "_dead") has the same columns
// plus dead_at and reason (before options, which version 2 added last). A
// row goes there, with the submit's error as its reason, when the relay's
// submit refuses it for good: its queue is unknown to the relay's process
// (fleet.ErrQueueNotFound), its payload no longer decodes into the
// queue's type (fleet.ErrInvalidJSON, also for a row edited by hand into
// garbage) or validates (fleet.ErrInvalidPayload,
// fleet.ErrPayloadTooLarge), its dedup key or options are not valid ones
// (fleet.ErrInvalidArgument; edited by hand), its options column does not
// decode, or its ExpiresAt passed. A dead row never holds up the rows
// behind it. To try one again, copy it back, naming the columns (their
// order differs between the tables):
//
//	INSERT INTO fleet_outbox (id, queue, payload, dedup_key, unique_ms, not_before_ms, options, created_at)
//	SELECT id, queue, payload, dedup_key, unique_ms, not_before_ms, options, created_at
//	FROM fleet_outbox_dead WHERE id = ...;
//	DELETE FROM fleet_outbox_dead WHERE id = ...;
//
// A table that does not exist, or lacks a column of this version, makes
// Submit, Relay and RelayOnce fail with [ErrNoTable], whose message names
// the migration to run.
//
// # Upgrading from SchemaVersion 1
//
// Version 2 added the options column to both tables. Migrate, or
// MigrationSQL's statements (ALTER TABLE ... ADD COLUMN IF NOT EXISTS
// options, on PostgreSQL and MariaDB; MySQL 8.0 has no IF NOT EXISTS
// there, so run Migrate), upgrade tables of version 1 in place: their rows
// stay, with NULL options, and are relayed as before. Adding a nullable
// column last rewrites no row (PostgreSQL; MariaDB 10.3 and MySQL 8.0.12
// add it instantly), but it takes a brief exclusive lock on the table,
// behind the transactions that hold it (on PostgreSQL even when the
// column is there already). Migrate alters only a table that lacks the
// column, so running it at every start costs a look.
//
// Upgrade in this order: run the migration (the relays and Submits of
// version 1 go on working with the new column, which they leave NULL), then
// deploy the relays of version 2, then the code that submits with
// per-task options. A relay of version 1 relays a row written with
// options without them (and loses them from a row it moves to the dead
// rows or, on PostgreSQL, puts back). A Submit or relay of version 2 on a
// table of version 1 fails with ErrNoTable, naming the migration.
//
// # Upgrading from SchemaVersion 2
//
// Version 3 added the completion table (Table plus "_done"; see
// Complete). Migrate, or MigrationSQL's CREATE TABLE IF NOT EXISTS,
// creates it beside the outbox's two tables, whose rows and columns it
// leaves as they are; Submit and the relays of version 2 go on working.
// Complete, Completed, Once and Reap on a database without it fail with
// ErrNoTable, naming the completion table and the migration.
//
// # The window
//
// A relayed task's dedup key is [KeyPrefix] plus the row's id (the
// task's body carries it as "dedup"), or the row's own
// SubmitOptions.DedupKey. The relay submits with SubmitOptions.UniqueFor
// set to [RelayOptions.Window] (default [DefaultWindow], 24 hours; or the
// row's UniqueFor when that is longer): the key is held while the task
// lives and for the window after it is acked, so a resubmit after the
// task already ran is still a no-op. The window must be longer than any
// row can stay undeleted after its submit: [RelayOptions.BatchTimeout]
// (30 s by default: a Redis stall cannot keep a batch's rows locked
// longer), plus the time the database takes to abort the transaction of a
// vanished relay (at once for a dead process; up to the TCP keepalive for
// a host cut off the network, over 2 hours with Linux's defaults), plus
// any outage of the database. Limits, on purpose:
//   - Each key held costs Redis a string key for the window
//     (fleet:queue:<name>:unique:<key>): about the task rate times the
//     window.
//   - The core frees a key at once when its task is dead-lettered or
//     cancelled. A relay that dies after its submit, while its task is
//     dead-lettered before the row is taken again, may make the task once
//     more.
//   - The window is written by fleet's ack (every ack path of Queue and
//     Worker). A worker of another language that acks by the documented
//     schema alone ends the task without it.
//   - A database outage longer than the window may double the tasks of
//     the rows whose delete it stopped (at most one batch per relay).
//   - Rows with the same SubmitOptions.DedupKey make one task while the
//     key is held, which is for the window after the task ends, not only
//     while it lives (as Queue.SubmitWith would do without UniqueFor).
//   - SubmitOptions.ShardKey must be empty or the DedupKey: the task goes
//     to its dedup key's shard. Concurrent relays keep no order among rows.
//
// # When Redis is down
//
// Submit does not touch Redis: the application goes on committing rows,
// which wait in the outbox. The relay's submits fail or time out
// ([RelayOptions.SubmitTimeout]); it deletes the rows whose submit was
// answered, keeps the others, commits, and retries with a backoff (50 ms
// doubling up to [RelayOptions.RetryMax]). A submit whose answer was lost
// (it may have happened) is submitted again later: a duplicate if it had.
// Rows are relayed once Redis is back. The outbox is as durable as the
// database; the tasks are as durable as Redis (use AOF with appendfsync
// always, as fleet's tests do): a row deleted after its task reached
// Redis cannot bring back a task that Redis lost.
//
// # When the database is down
//
// Submit fails with the database's error, and so does the caller's
// transaction: nothing is enqueued. A relay's batch fails, its
// transaction is aborted (the rows it submitted stay, and are duplicates
// when submitted again) and it retries with the same backoff. On
// PostgreSQL the relay listens again on a new connection, and looks at
// the table each time it does.
//
// # PostgreSQL and MySQL
//
// On PostgreSQL, Submit's INSERT calls pg_notify on the channel named
// after the table, in the caller's transaction: the server delivers it
// only at commit. Every notifying transaction holds PostgreSQL's global
// NOTIFY lock through its commit, which serializes concurrent writers, so
// Submit notifies at most once per [Options.NotifyInterval] (1 ms) per
// Outbox; the other Submits rely on the relay's looks. A relay whose
// database was opened through pgx's stdlib driver holds one connection of
// the pool for LISTEN (give the pool one more), wakes on each
// notification, and after every batch that found rows looks again after
// [RelayOptions.PollMin] (10 ms), each empty look (one SELECT without a
// lock) doubling the wait up to [RelayOptions.SafetyPoll] (5 s). So it
// does not poll an idle outbox but for the safety poll; a row committed
// after a burst whose Submit did not notify waits at most about the time
// since the burst (and SafetyPoll); and rows left by a relay that died,
// or committed while its LISTEN connection was being replaced, are found
// too (it looks each time it listens again). A batch takes its rows with
// DELETE ... WHERE id IN (SELECT ... FOR UPDATE SKIP LOCKED) RETURNING,
// which counts only at its commit, after the submits; a row whose submit
// was not answered is written back in the same transaction.
//
// MariaDB (10.6 or later) and MySQL (8.0) have no LISTEN: their relay
// polls, with a bounded backoff. After a batch that found rows it looks
// again after PollMin; each empty look doubles the wait up to
// [RelayOptions.PollMax] (1 s), so a row committed to an idle outbox
// waits up to PollMax. Its transaction is READ COMMITTED, so that its
// locking read (SELECT ... FOR UPDATE SKIP LOCKED) takes no gap locks,
// which would hold up the application's inserts, and it deletes row by
// row (an IN list locks the next row too, another relay's, and two relays
// deadlock). Set interpolateParams=true in go-sql-driver's DSN to spare
// round trips.
//
// # Cost
//
// Submit is one statement in the caller's transaction. On PostgreSQL a
// batch of n rows costs the relay three statements (BEGIN, DELETE ...
// RETURNING, COMMIT) plus n submits to Redis (one round trip each,
// Concurrency at a time); on MySQL, n+3. Under load that is 3/n
// statements per task (0.04 in bench/cmd/outbox's drain); at a low rate,
// one batch per row, plus a few looks after it. Each NOTIFY wakes every
// relay: replicas that find the row taken cost a statement or two each.
//
// # Completion in the caller's transaction
//
// The outbox makes a task "enqueued if and only if committed"; [Complete]
// makes it "completed if and only if committed", the other half of
// River's guarantee (JobCompleteTx), for a Redis queue and a database that
// cannot share a transaction. A worker's handler writes its effects and
// calls Complete in one transaction, then commits and returns nil:
//
//	ob.Reap(ctx, fleetsql.ReapOptions{}) // in the background of each worker host
//	w := fleet.NewBatchWorker(f, opts, ship, fleetsql.Once(ob, fleet.BatchFunc[C, O, Ship](
//		func(ctx context.Context, s *fleet.Slot[C, O], t *fleet.Task[Ship]) error {
//			tx, err := db.BeginTx(ctx, nil)
//			if err != nil {
//				return err
//			}
//			defer tx.Rollback()
//			if _, err := tx.ExecContext(ctx, `INSERT INTO shipments ...`, t.Payload.Order); err != nil {
//				return err
//			}
//			if err := fleetsql.Complete(ctx, tx, ob, t, result); err != nil {
//				return err // ErrCompleted, fleet.ErrLeaseLost: roll back
//			}
//			return tx.Commit() // the worker acks after this
//		})))
//
// Complete writes a row of the completion table (DoneTable, SchemaVersion
// 3: task_id PRIMARY KEY, queue, token, result, done_at) in the caller's
// transaction, then extends the task's lease in Redis, which only the
// reservation's holder can do (the fence). [Once] looks for the row before
// each delivery (one SELECT by primary key) and acks the task without
// running the handler when it is there, with the recorded result as the
// task's result. What happens at each point:
//
//   - The process dies before the COMMIT, or the COMMIT never reaches the
//     server: the database rolls the transaction back (effects and row);
//     the task comes back when its lease runs out, and runs again.
//   - It dies after the COMMIT and before the ack, or the connection
//     breaks at COMMIT after the server committed (the handler gets an
//     error, and cannot know): the next delivery finds the row and acks,
//     without a run. The row decides; nothing else needs to know.
//   - It dies after the ack: the task is gone; its row waits for the
//     retention (below).
//   - The lease runs out before Complete, and another worker reserved
//     the task: Complete gets fleet.ErrLeaseLost and the transaction rolls
//     back.
//   - The lease runs out after Complete, while the COMMIT is on its way,
//     and another worker runs the task: the two transactions meet on the
//     row's primary key. The second's Complete waits for the first's row,
//     and gets ErrCompleted once it commits (Once then acks with the
//     first's result), or writes its own if it rolled back. Exactly one
//     commits, at any isolation level of either database (a unique index
//     sees every written row, not the snapshot; PostgreSQL's SERIALIZABLE
//     may answer 40001 instead, a retry, after which the row is found).
//
// So a task's effects written in its completion's transaction happen
// once. What is not covered: effects outside that transaction (an HTTP
// call, a message) are at least once, as before; a handler's own reads
// need the isolation its logic needs (READ COMMITTED, PostgreSQL's
// default, or REPEATABLE READ, InnoDB's, serve a handler that only
// writes); a Redis that loses an acked task's ack (no AOF with appendfsync
// always) after Reap deleted its row delivers it again, and it runs again;
// and a delivery later than ReapOptions.Retention after its completion
// committed runs again.
//
// The rows. Complete and Once register Task.AfterAck: once the task's ack
// took effect, its id goes to this process's [Outbox.Reap], which deletes
// the rows of acked tasks in batches (one DELETE by primary key per 500
// ids or per 100 ms), so the table holds only the rows of tasks whose ack
// is not confirmed. A row whose ack was never confirmed to a running Reap
// (the process died between its ack and the delete, or a task deleted by
// hand) is deleted by a Reap once it is older than ReapOptions.Retention
// (7 days by default), in batches under FOR UPDATE SKIP LOCKED, by any
// number of replicas. Without a running Reap, the ids of acked tasks
// gather in memory (up to 100,000) and their rows stay.
//
// Cost per task: one SELECT before the handler (Once), one INSERT in the
// caller's transaction, one lease extension in Redis (a round trip), and
// 1/500 of a DELETE under load. [SpanAttribute] on the handler's span
// (fleetotel's worker middleware puts it in the ctx) says "sql" or
// "sql-found". A task acked this way releases its flow's dependents once,
// and gives back its group's and GlobalConcurrency's permits once, as any
// ack: a delivery that finds the row is an ordinary ack of that delivery.
//
// # Left out
//
// Submit takes a *sql.Tx: pgx's native pgx.Tx and other drivers' own
// transaction types are not supported. Submit returns the row's id, not
// the task's (the task's id is made by the queue at relay time; its dedup
// key names the row).
package fleetsql
