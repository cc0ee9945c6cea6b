package fleetsql_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/fleetsql"
)

// Ship is the completion tests' payload: the order whose shipment the
// handler writes.
type Ship struct {
	Order int `json:"order" validate:"gte=0"`
}

// Shipped is the handler's result.
type Shipped struct {
	Order int    `json:"order"`
	By    string `json:"by"`
}

const ships = "ships"

// makeShipments creates the effect table of the completion tests: one row
// per run of a handler's effect, with no unique key, so that a doubled
// effect shows as two rows.
func makeShipments(tb testing.TB, db *sql.DB, d fleetsql.Dialect) {
	tb.Helper()
	stmt := `CREATE TABLE shipments (n BIGSERIAL PRIMARY KEY, task_id text NOT NULL, order_no bigint NOT NULL)`
	if d == fleetsql.MySQL {
		stmt = `CREATE TABLE shipments (n BIGINT AUTO_INCREMENT PRIMARY KEY, task_id VARCHAR(255) NOT NULL, order_no BIGINT NOT NULL) ENGINE=InnoDB`
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := db.ExecContext(ctx, stmt); err != nil {
		tb.Fatal(err)
	}
}

// ship writes the shipment of t and completes t in one transaction, with
// before and after called around the commit (nil for none).
func ship(ctx context.Context, db *sql.DB, o *fleetsql.Outbox, t *fleet.Task[Ship], by string, beforeCommit func(tx *sql.Tx)) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	ins := `INSERT INTO shipments (task_id, order_no) VALUES ($1, $2)`
	if o.Dialect() == fleetsql.MySQL {
		ins = `INSERT INTO shipments (task_id, order_no) VALUES (?, ?)`
	}
	if _, err := tx.ExecContext(ctx, ins, t.ID, t.Payload.Order); err != nil {
		return err
	}
	if err := fleetsql.Complete(ctx, tx, o, t, Shipped{Order: t.Payload.Order, By: by}); err != nil {
		return err
	}
	if beforeCommit != nil {
		beforeCommit(tx)
	}
	return tx.Commit()
}

// shipments returns the shipment rows of each task id.
func shipments(tb testing.TB, db *sql.DB) map[string]int {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rows, err := db.QueryContext(ctx, `SELECT task_id, COUNT(*) FROM shipments GROUP BY task_id`)
	if err != nil {
		tb.Fatal(err)
	}
	defer rows.Close()
	m := map[string]int{}
	for rows.Next() {
		var id string
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			tb.Fatal(err)
		}
		m[id] = n
	}
	if err := rows.Err(); err != nil {
		tb.Fatal(err)
	}
	return m
}

// doneRow reads task id's completion row: its queue, token and result.
func doneRow(tb testing.TB, db *sql.DB, o *fleetsql.Outbox, id string) (queue, token string, result sql.NullString, ok bool) {
	tb.Helper()
	q := `SELECT queue, token, result FROM "` + o.DoneTable() + `" WHERE task_id = $1`
	if o.Dialect() == fleetsql.MySQL {
		q = "SELECT queue, token, result FROM `" + o.DoneTable() + "` WHERE task_id = ?"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	switch err := db.QueryRowContext(ctx, q, id).Scan(&queue, &token, &result); {
	case errors.Is(err, sql.ErrNoRows):
		return "", "", result, false
	case err != nil:
		tb.Fatal(err)
	}
	return queue, token, result, true
}

func reserveOne(tb testing.TB, q *fleet.Queue[Ship]) *fleet.Task[Ship] {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ts, err := q.Reserve(ctx, 1, 5*time.Second)
	if err != nil || len(ts) != 1 {
		tb.Fatalf("reserve: %d tasks, %v", len(ts), err)
	}
	return ts[0]
}

// A task completed in SQL by hand (Reserve, Complete, Commit, Ack): its
// row holds the queue, the reservation's token and the result until the
// ack, the task's retained record has the result, and ReapOnce deletes the
// row once the ack took effect.
func TestCompleteByHand(t *testing.T) {
	forEach(t, func(t *testing.T, d fleetsql.Dialect) {
		ctx := context.Background()
		o, db, _ := newOutbox(t, d)
		makeShipments(t, db, d)
		f, _ := openFleet(t, sharedRedis(t).URL())
		q := fleet.NewQueue[Ship](f, ships, fleet.QueueOptions{Retention: time.Hour})
		id, err := q.Submit(ctx, Ship{Order: 7})
		if err != nil {
			t.Fatal(err)
		}
		tk := reserveOne(t, q)
		if res, done, err := fleetsql.Completed(ctx, o, tk); err != nil || done || res != nil {
			t.Fatalf("Completed before any completion: %s, %v, %v", res, done, err)
		}
		if err := ship(ctx, db, o, tk, "hand", nil); err != nil {
			t.Fatal(err)
		}
		queue, token, res, ok := doneRow(t, db, o, id)
		if !ok || queue != ships || token != tk.Token() || res.String != `{"order":7,"by":"hand"}` {
			t.Fatalf("completion row: %q %q %q %v, want ships, %q, the result", queue, token, res.String, ok, tk.Token())
		}
		// Not acked yet: ReapOnce leaves the row.
		if n, err := o.ReapOnce(ctx, fleetsql.ReapOptions{}); err != nil || n != 0 {
			t.Fatalf("ReapOnce before the ack: %d, %v", n, err)
		}
		if err := tk.Ack(ctx); err != nil {
			t.Fatal(err)
		}
		if o.Pending() != 1 {
			t.Fatalf("Pending after the ack = %d, want 1", o.Pending())
		}
		if n, err := o.ReapOnce(ctx, fleetsql.ReapOptions{}); err != nil || n != 1 {
			t.Fatalf("ReapOnce after the ack: %d, %v, want 1", n, err)
		}
		if _, _, _, ok := doneRow(t, db, o, id); ok {
			t.Fatal("the completion row outlived its task's ack and a reap")
		}
		rec, err := q.Lookup(ctx, id)
		if err != nil || rec.Status != fleet.TaskDone || string(rec.Result) != `{"order":7,"by":"hand"}` {
			t.Fatalf("record: %+v, %v", rec, err)
		}
		if got := shipments(t, db); len(got) != 1 || got[id] != 1 {
			t.Fatalf("shipments: %v", got)
		}
	})
}

// A worker whose process died between the commit and the ack (here: the
// task's lease runs out without an ack) gets the task again: Once finds
// the row and acks with the recorded result, without running the handler,
// and the row goes once the ack took effect.
func TestOnceFindsCompletion(t *testing.T) {
	forEach(t, func(t *testing.T, d fleetsql.Dialect) {
		ctx := context.Background()
		o, db, _ := newOutbox(t, d)
		makeShipments(t, db, d)
		f, _ := openFleet(t, sharedRedis(t).URL())
		q := fleet.NewQueue[Ship](f, ships, fleet.QueueOptions{Retention: time.Hour, Lease: 300 * time.Millisecond})
		id, err := q.Submit(ctx, Ship{Order: 3})
		if err != nil {
			t.Fatal(err)
		}
		first := reserveOne(t, q)
		if err := ship(ctx, db, o, first, "first", nil); err != nil {
			t.Fatal(err)
		}
		// No ack: the lease runs out, and a sweep re-queues the task.
		sweepExpired(t, f)
		var runs atomic.Int32
		rctx, cancel := context.WithCancel(ctx)
		reaped := make(chan error, 1)
		go func() { reaped <- o.Reap(rctx, fleetsql.ReapOptions{FlushEvery: 10 * time.Millisecond}) }()
		defer func() {
			cancel()
			if err := <-reaped; err != nil {
				t.Errorf("Reap: %v", err)
			}
		}()
		startShipper(t, f, q, o, func(context.Context, *fleet.Slot[struct{}, struct{}], *fleet.Task[Ship]) error {
			runs.Add(1)
			return errors.New("the handler ran again")
		})
		waitDone(t, q, id)
		waitFor(t, 20*time.Second, "the row reaped", func() bool { _, _, _, ok := doneRow(t, db, o, id); return !ok })
		if runs.Load() != 0 {
			t.Fatalf("the handler ran %d times after its completion committed", runs.Load())
		}
		rec, _ := q.Lookup(ctx, id)
		if string(rec.Result) != `{"order":3,"by":"first"}` {
			t.Fatalf("result %s, want the recorded one", rec.Result)
		}
		if err := first.Ack(ctx); !errors.Is(err, fleet.ErrLeaseLost) {
			t.Fatalf("the first reservation's late ack: %v, want ErrLeaseLost", err)
		}
		if got := shipments(t, db); got[id] != 1 || len(got) != 1 {
			t.Fatalf("shipments: %v", got)
		}
	})
}

// The fence: a worker whose reservation was taken over (its lease ran out
// and another worker reserved the task) is refused by Complete with
// ErrLeaseLost, and its transaction rolls back; the new holder completes.
// Two holders racing to commit: the second Complete waits for the first
// transaction's row and gets ErrCompleted once it commits.
func TestCompleteFenced(t *testing.T) {
	forEach(t, func(t *testing.T, d fleetsql.Dialect) {
		ctx := context.Background()
		o, db, _ := newOutbox(t, d)
		makeShipments(t, db, d)
		f, _ := openFleet(t, sharedRedis(t).URL())
		q := fleet.NewQueue[Ship](f, ships, fleet.QueueOptions{Lease: 300 * time.Millisecond})
		id, err := q.Submit(ctx, Ship{Order: 1})
		if err != nil {
			t.Fatal(err)
		}
		old := reserveOne(t, q)
		sweepExpired(t, f)
		cur := reserveOne(t, q)
		if err := ship(ctx, db, o, old, "old", nil); !errors.Is(err, fleet.ErrLeaseLost) {
			t.Fatalf("Complete by a reservation taken over: %v, want ErrLeaseLost", err)
		}
		if _, _, _, ok := doneRow(t, db, o, id); ok || len(shipments(t, db)) != 0 {
			t.Fatal("a refused completion left rows")
		}
		// cur's transaction holds the row uncommitted while a second
		// transaction completes the same task: it waits, then gets
		// ErrCompleted.
		second := make(chan error, 1)
		if err := ship(ctx, db, o, cur, "cur", func(*sql.Tx) {
			go func() { second <- ship(ctx, db, o, cur, "again", nil) }()
			time.Sleep(200 * time.Millisecond) // let it reach the row lock: either order is checked below
		}); err != nil {
			t.Fatal(err)
		}
		if err := <-second; !errors.Is(err, fleetsql.ErrCompleted) {
			t.Fatalf("a second completion: %v, want ErrCompleted", err)
		}
		if got := shipments(t, db); got[id] != 1 {
			t.Fatalf("shipments: %v", got)
		}
		if _, token, res, ok := doneRow(t, db, o, id); !ok || token != cur.Token() || res.String != `{"order":1,"by":"cur"}` {
			t.Fatalf("row: %v %q %q", ok, token, res.String)
		}
		if err := cur.Ack(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// Bad input gets a clear error and changes nothing: nil arguments, a
// result that does not encode, a transaction already committed, a missing
// completion table, a row that names another queue, a row whose result was
// edited into garbage.
func TestCompleteBadInput(t *testing.T) {
	forEach(t, func(t *testing.T, d fleetsql.Dialect) {
		ctx := context.Background()
		o, db, _ := newOutbox(t, d)
		makeShipments(t, db, d)
		f, _ := openFleet(t, sharedRedis(t).URL())
		q := fleet.NewQueue[Ship](f, ships, fleet.QueueOptions{})
		other := fleet.NewQueue[Ship](f, "other", fleet.QueueOptions{})
		if _, err := q.Submit(ctx, Ship{Order: 1}); err != nil {
			t.Fatal(err)
		}
		tk := reserveOne(t, q)
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := fleetsql.Complete(ctx, nil, o, tk, 1); !errors.Is(err, fleet.ErrInvalidArgument) {
			t.Errorf("nil tx: %v", err)
		}
		if err := fleetsql.Complete[Ship](ctx, tx, o, nil, 1); !errors.Is(err, fleet.ErrInvalidArgument) {
			t.Errorf("nil task: %v", err)
		}
		if err := fleetsql.Complete(ctx, tx, o, tk, func() {}); !errors.Is(err, fleet.ErrInvalidArgument) {
			t.Errorf("a func result: %v", err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		if err := fleetsql.Complete(ctx, tx, o, tk, 1); !errors.Is(err, fleet.ErrInvalidArgument) || !errors.Is(err, sql.ErrTxDone) {
			t.Errorf("a committed tx: %v", err)
		}
		if _, _, _, ok := doneRow(t, db, o, tk.ID); ok {
			t.Fatal("a refused Complete wrote a row")
		}

		// A missing table: ErrNoTable naming the migration.
		bare, err := fleetsql.New(db, fleetsql.Options{Table: "nothing_here"})
		if err != nil {
			t.Fatal(err)
		}
		tx, _ = db.BeginTx(ctx, nil)
		err = fleetsql.Complete(ctx, tx, bare, tk, 1)
		tx.Rollback()
		if !errors.Is(err, fleetsql.ErrNoTable) || !contains(err.Error(), "nothing_here_done", "Migrate") {
			t.Errorf("no table: %v", err)
		}
		if _, _, err := fleetsql.Completed(ctx, bare, tk); !errors.Is(err, fleetsql.ErrNoTable) {
			t.Errorf("Completed with no table: %v", err)
		}
		if err := bare.Reap(ctx, fleetsql.ReapOptions{}); !errors.Is(err, fleetsql.ErrNoTable) {
			t.Errorf("Reap with no table: %v", err)
		}
		if err := o.Reap(ctx, fleetsql.ReapOptions{Retention: time.Second}); !errors.Is(err, fleet.ErrInvalidArgument) {
			t.Errorf("Reap with a retention of 1s: %v", err)
		}

		// A row of another queue's task, and a row edited into garbage:
		// ErrBadRow, the task nacked by Once, and the row as it was.
		if _, err := other.Submit(ctx, Ship{Order: 2}); err != nil {
			t.Fatal(err)
		}
		ot := reserveOne(t, other)
		tbl := `"` + o.DoneTable() + `"`
		ins := `INSERT INTO ` + tbl + ` (task_id, queue, token, result) VALUES ($1, $2, $3, $4)`
		if d == fleetsql.MySQL {
			tbl = "`" + o.DoneTable() + "`"
			ins = `INSERT INTO ` + tbl + ` (task_id, queue, token, result) VALUES (?, ?, ?, ?)`
		}
		if _, err := db.ExecContext(ctx, ins, ot.ID, ships, "x", `{"a":1}`); err != nil {
			t.Fatal(err)
		}
		if _, _, err := fleetsql.Completed(ctx, o, ot); !errors.Is(err, fleetsql.ErrBadRow) || !contains(err.Error(), `"ships"`, `"other"`) {
			t.Errorf("a row naming another queue: %v", err)
		}
		if _, err := db.ExecContext(ctx, ins, tk.ID, ships, "x", `{"a":`); err != nil {
			t.Fatal(err)
		}
		var runs atomic.Int32
		h := fleetsql.Once(o, fleet.TaskFunc(func(ctx context.Context, p Ship) error { runs.Add(1); return nil }))
		if err := h.Handle(ctx, nil, tk); !errors.Is(err, fleetsql.ErrBadRow) || runs.Load() != 0 {
			t.Errorf("Once over a garbage row: %v, %d runs", err, runs.Load())
		}
		for _, c := range []struct{ id, queue, res string }{{ot.ID, ships, `{"a":1}`}, {tk.ID, ships, `{"a":`}} {
			if queue, _, res, ok := doneRow(t, db, o, c.id); !ok || queue != c.queue || res.String != c.res {
				t.Errorf("row %s changed: %v %q %q", c.id, ok, queue, res.String)
			}
		}
	})
}

func contains(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// The lease runs out while a transaction that completed the task is still
// open, and another worker takes the task: its Once finds no row (not
// committed yet), runs the handler, and its Complete waits for the first
// transaction's row; the first commits, so the second gets ErrCompleted,
// rolls back, and Once acks the task with the first one's result. One
// shipment, the first's.
func TestLeaseRunsOutInTransaction(t *testing.T) {
	forEach(t, func(t *testing.T, d fleetsql.Dialect) {
		ctx := context.Background()
		o, db, _ := newOutbox(t, d)
		makeShipments(t, db, d)
		f, _ := openFleet(t, sharedRedis(t).URL())
		q := fleet.NewQueue[Ship](f, ships, fleet.QueueOptions{Lease: 300 * time.Millisecond, Retention: time.Hour})
		id, err := q.Submit(ctx, Ship{Order: 5})
		if err != nil {
			t.Fatal(err)
		}
		first := reserveOne(t, q)
		took := make(chan struct{})
		var once sync.Once
		firstDone := make(chan error, 1)
		go func() {
			firstDone <- ship(ctx, db, o, first, "first", func(*sql.Tx) {
				// Open past the lease, until the other worker runs the task.
				<-took
				time.Sleep(100 * time.Millisecond)
			})
		}()
		var runs atomic.Int32
		startShipper(t, f, q, o, func(ctx context.Context, _ *fleet.Slot[struct{}, struct{}], tk *fleet.Task[Ship]) error {
			runs.Add(1)
			once.Do(func() { close(took) })
			return ship(ctx, db, o, tk, "second", nil)
		})
		sweepExpired(t, f)
		if err := <-firstDone; err != nil {
			t.Fatalf("the first transaction: %v", err)
		}
		waitDone(t, q, id)
		rec, _ := q.Lookup(ctx, id)
		if string(rec.Result) != `{"order":5,"by":"first"}` || runs.Load() != 1 {
			t.Fatalf("result %s after %d runs, want the first's after 1", rec.Result, runs.Load())
		}
		if got := shipments(t, db); got[id] != 1 || len(got) != 1 {
			t.Fatalf("shipments: %v", got)
		}
	})
}

// With the rest of fleet: a task completed in SQL whose first worker died
// before its ack is a flow's step, in a group, on a queue with a
// GlobalConcurrency of 1. Its next delivery acks it without a run: its
// dependent is released once, and reads the recorded result; the group's
// and the queue's permits come back once (the next task of the group runs,
// and only one at a time).
func TestCompleteFlowGroupsLimits(t *testing.T) {
	forEach(t, func(t *testing.T, d fleetsql.Dialect) {
		ctx := context.Background()
		o, db, _ := newOutbox(t, d)
		makeShipments(t, db, d)
		f, _ := openFleet(t, sharedRedis(t).URL())
		q := fleet.NewQueue[Ship](f, ships, fleet.QueueOptions{Lease: 300 * time.Millisecond, GlobalConcurrency: 1,
			Groups: fleet.GroupLimits{Concurrency: 1}})
		notes := fleet.NewQueue[Job](f, jobs, fleet.QueueOptions{})
		fl := fleet.NewFlow(f, fleet.FlowOptions{})
		a := fleet.AddStep(fl, q, Ship{Order: 9}, fleet.SubmitOptions{Group: "acme"})
		fleet.AddStep(fl, notes, Job{N: 9}, fleet.SubmitOptions{After: fleet.Steps(a)})
		if err := fl.Submit(ctx); err != nil {
			t.Fatal(err)
		}
		first := reserveOne(t, q)
		if err := ship(ctx, db, o, first, "first", nil); err != nil {
			t.Fatal(err)
		}
		sweepExpired(t, f)
		again := reserveOne(t, q)
		if again.ID != first.ID {
			t.Fatalf("reserved %s, want %s again", again.ID, first.ID)
		}
		res, done, err := fleetsql.Completed(ctx, o, again)
		if err != nil || !done || string(res) != `{"order":9,"by":"first"}` {
			t.Fatalf("Completed: %s %v %v", res, done, err)
		}
		if err := again.Ack(ctx); err != nil {
			t.Fatal(err)
		}
		// The dependent, released once, reads the recorded result.
		ts, err := notes.Reserve(ctx, 2, 5*time.Second)
		if err != nil || len(ts) != 1 {
			t.Fatalf("dependents released: %d, %v", len(ts), err)
		}
		deps, err := ts[0].Dependencies(ctx)
		if err != nil || len(deps) != 1 || deps[0].Status != fleet.TaskDone || string(deps[0].Result) != `{"order":9,"by":"first"}` {
			t.Fatalf("dependencies: %+v, %v", deps, err)
		}
		if err := ts[0].Ack(ctx); err != nil {
			t.Fatal(err)
		}
		if more, err := notes.Reserve(ctx, 1, 200*time.Millisecond); err != nil || len(more) != 0 {
			t.Fatalf("a second release: %d, %v", len(more), err)
		}
		// The permits: one more task of the group runs, and only one.
		if _, err := q.SubmitWith(ctx, Ship{Order: 10}, fleet.SubmitOptions{Group: "acme"}); err != nil {
			t.Fatal(err)
		}
		if _, err := q.SubmitWith(ctx, Ship{Order: 11}, fleet.SubmitOptions{Group: "other"}); err != nil {
			t.Fatal(err)
		}
		next := reserveOne(t, q)
		if next.Payload.Order != 10 {
			t.Fatalf("next: order %d, want 10", next.Payload.Order)
		}
		if more, err := q.Reserve(ctx, 1, 200*time.Millisecond); err != nil || len(more) != 0 {
			t.Fatalf("a second task ran beside the first under GlobalConcurrency 1: %d, %v", len(more), err)
		}
		if err := next.Ack(ctx); err != nil {
			t.Fatal(err)
		}
		if last := reserveOne(t, q); last.Payload.Order != 11 {
			t.Fatalf("last: order %d, want 11", last.Payload.Order)
		} else if err := last.Ack(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// sweepExpired waits until a sweep re-queued a reservation whose lease ran
// out.
func sweepExpired(tb testing.TB, f *fleet.Fleet) {
	tb.Helper()
	waitFor(tb, 10*time.Second, "the lease to run out and a sweep", func() bool {
		st, err := f.Sweep(context.Background(), fleet.SweeperOptions{})
		return err == nil && st.Requeued > 0
	})
}

// startShipper starts a one-slot worker of q running h under Once,
// stopped after tb.
func startShipper(tb testing.TB, f *fleet.Fleet, q *fleet.Queue[Ship], o *fleetsql.Outbox, h fleet.BatchFunc[struct{}, struct{}, Ship]) {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := fleet.NewBatchWorker(f, fleet.WorkerOptions{Type: "shipper", Slots: 1}, q, fleetsql.Once(o, h))
	if err := w.Start(ctx); err != nil {
		cancel()
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		cancel()
		_ = w.Stop(context.Background())
	})
}

// waitDone waits until task id of q is done.
func waitDone(tb testing.TB, q *fleet.Queue[Ship], id string) {
	tb.Helper()
	waitFor(tb, time.Minute, "the task done", func() bool {
		rec, err := q.Lookup(context.Background(), id)
		return err == nil && rec.Status == fleet.TaskDone
	})
}

// Reap's retention: rows older than ReapOptions.Retention go, whoever
// wrote them, in batches, by replicas at once (FOR UPDATE SKIP LOCKED:
// each row deleted once, no replica fails), and younger rows stay.
func TestReapRetention(t *testing.T) {
	forEach(t, func(t *testing.T, d fleetsql.Dialect) {
		ctx := context.Background()
		o, db, _ := newOutbox(t, d)
		const old, young = 1000, 30
		tbl := `"` + o.DoneTable() + `"`
		ins := `INSERT INTO ` + tbl + ` (task_id, queue, token, result, done_at) VALUES ($1, 'ships', 't', NULL, now() - ($2 * interval '1 second'))`
		if d == fleetsql.MySQL {
			tbl = "`" + o.DoneTable() + "`"
			ins = `INSERT INTO ` + tbl + ` (task_id, queue, token, result, done_at) VALUES (?, 'ships', 't', NULL, NOW(6) - INTERVAL ? SECOND)`
		}
		for i := range old + young {
			age := 2 * 3600 // two hours
			if i >= old {
				age = 60
			}
			if _, err := db.ExecContext(ctx, ins, fmt.Sprintf("task-%04d", i), age); err != nil {
				t.Fatal(err)
			}
		}
		var wg sync.WaitGroup
		var deleted atomic.Int64
		for range 3 {
			wg.Go(func() {
				n, err := o.ReapOnce(ctx, fleetsql.ReapOptions{Retention: time.Hour, Batch: 50})
				if err != nil {
					t.Errorf("ReapOnce: %v", err)
				}
				deleted.Add(int64(n))
			})
		}
		wg.Wait()
		if n := count(t, db, o, o.DoneTable()); n != young || deleted.Load() != old {
			t.Fatalf("%d rows left (want the %d young ones), %d deleted (want %d)", n, young, deleted.Load(), old)
		}
	})
}
