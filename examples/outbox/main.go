// Command outbox shows a task completed if and only if its effects
// committed, with fleetsql, from PostgreSQL through Redis and back:
//
//   - the host places each order and submits its shipping task in one
//     transaction (fleetsql.Submit); every fifth order is rolled back, as
//     a failed checkout would be, and leaves neither a row nor a task. A
//     relay (Outbox.Relay) moves the committed tasks to the queue;
//   - a worker, wrapped in fleetsql.Once, writes the order's shipment row
//     and the task's completion (fleetsql.Complete) in one transaction,
//     commits, then acks; Outbox.Reap deletes the completion rows of the
//     acked tasks;
//   - the workers run in processes of their own, this program started
//     again. The first one kills itself (SIGKILL) right after the COMMIT
//     of one order's shipment, before its ack. The second takes that task
//     again once its lease ran out (a sweeper re-queues it): Once finds its
//     completion row and acks it without running the handler.
//
// At the end the host checks that every order has exactly one shipment
// row (the shipments table has no unique key that would hide a second
// one) and every task is done, acked once, the killed order's by the
// second worker with the first one's result; it exits non-zero when not.
//
//	go run ./examples/outbox -orders 50
//
// The example works in a throwaway database that it creates on the server
// of -db (default FLEETSQL_POSTGRES_URL, else the local server) and drops
// at the end; it uses FLEET_REDIS_URL, or starts a throwaway redis-server.
package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"log"
	"net/url"
	"os"
	"sync"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/examples/internal/exredis"
	"github.com/fleet-go/fleet/fleetsql"
)

// Ship is the shipping task of one order.
type Ship struct {
	Order int64  `json:"order" validate:"gt=0"`
	Item  string `json:"item" validate:"required,max=100"`
}

// Shipped is a shipping task's result, recorded by fleetsql.Complete.
type Shipped struct {
	Order int64  `json:"order"`
	By    string `json:"by"` // the worker that committed the shipment
}

// queueOptions are the ship queue's, in the host and in the workers: a
// short lease, so that the killed worker's tasks come back within seconds,
// and the records of acked tasks kept for the host's checks (Lookup).
var queueOptions = fleet.QueueOptions{Lease: 2 * time.Second, Retention: 10 * time.Minute}

func main() {
	if cfg := os.Getenv(workerEnv); cfg != "" { // run by the host as a worker
		if err := runWorker(cfg); err != nil {
			log.Fatal(err)
		}
		return
	}
	def := os.Getenv("FLEETSQL_POSTGRES_URL")
	if def == "" {
		def = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	}
	dbURL := flag.String("db", def, "a PostgreSQL server (pgx URL) where the example may create a database")
	orders := flag.Int("orders", 50, "orders to place")
	flag.Parse()
	if err := run(*dbURL, *orders); err != nil {
		log.Fatal(err)
	}
}

// run is the host: it places the orders, relays their tasks, sweeps, runs
// the two worker processes one after the other, and checks the outcome.
func run(dbURL string, orders int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	redisURL, stopRedis, err := exredis.URL(ctx)
	if err != nil {
		return err
	}
	defer stopRedis()
	prefix := fmt.Sprintf("example-outbox-%d:", os.Getpid()) // the workers' too
	f, err := fleet.Open(ctx, fleet.Options{URL: redisURL, Prefix: prefix})
	if err != nil {
		return err
	}
	defer func() {
		exredis.Cleanup(context.WithoutCancel(ctx), f.Client(), prefix)
		f.Close()
	}()
	db, exampleDB, drop, err := throwawayDB(ctx, dbURL)
	if err != nil {
		return err
	}
	defer drop()

	// Once: the outbox's tables (with the completion table), and the
	// application's own. shipments has no unique key on the order: a
	// shipment made twice would show as two rows.
	ob, err := fleetsql.New(db, fleetsql.Options{})
	if err != nil {
		return err
	}
	if err := ob.Migrate(ctx); err != nil {
		return err
	}
	if _, err := db.ExecContext(ctx, `
		CREATE TABLE orders (id bigserial PRIMARY KEY, item text NOT NULL, placed_at timestamptz NOT NULL DEFAULT now());
		CREATE TABLE shipments (id bigserial PRIMARY KEY, order_id bigint NOT NULL REFERENCES orders,
			task_id text NOT NULL, worker text NOT NULL, shipped_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return err
	}
	ship := fleet.NewQueue[Ship](f, "ship", queueOptions)

	// In the background of the host: the relay, and the sweeper that
	// re-queues the tasks whose lease ran out.
	bg, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stop(); wg.Wait() }()
	relayErr := make(chan error, 1)
	wg.Go(func() { relayErr <- ob.Relay(bg, f, fleetsql.RelayOptions{}) })
	wg.Go(func() { _ = f.RunSweeper(bg, fleet.SweeperOptions{Interval: 200 * time.Millisecond}) })

	var placed []int64 // the committed orders
	for i := range orders {
		fail := i%5 == 4
		id, err := placeOrder(ctx, db, ob, ship, fmt.Sprintf("book-%d", i), fail)
		if err != nil {
			return err
		}
		if !fail {
			placed = append(placed, id)
		}
	}
	if len(placed) == 0 {
		return fmt.Errorf("-orders %d: no order to ship", orders)
	}
	fmt.Printf("placed %d orders, rolled back %d (neither a row nor a task)\n", len(placed), orders-len(placed))

	// worker-1 ships until it committed the shipment of the victim, and
	// dies there, before the ack.
	victim := placed[len(placed)/2]
	cfg := workerConfig{DB: exampleDB, Redis: redisURL, Prefix: prefix}
	w1, err := startWorker(ctx, cfg.as("worker-1", victim))
	if err != nil {
		return err
	}
	if err := w1.wait(); ctx.Err() != nil || !killed(err) {
		return fmt.Errorf("worker-1 ended with %v, want it killed after the commit of order %d (ctx: %v)", err, victim, ctx.Err())
	}
	// The task's id: the relay's submit made it (fleetsql.Submit returns
	// the outbox row's), and the handler wrote it in the shipment.
	var victimTask string
	if err := db.QueryRowContext(ctx, `SELECT task_id FROM shipments WHERE order_id = $1`, victim).Scan(&victimTask); err != nil {
		return fmt.Errorf("worker-1 died without the shipment of order %d: %w", victim, err)
	}
	fmt.Printf("worker-1: committed the shipment of order %d (task %s), then killed itself before the ack\n", victim, victimTask)

	// worker-2 ships the rest, and gets the victim again once its lease ran
	// out; stopped once the outbox and the queue are empty (a dead task
	// would stay there: check finds it).
	w2, err := startWorker(ctx, cfg.as("worker-2", 0))
	if err != nil {
		return err
	}
	for {
		var left int
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM `+ob.Table()).Scan(&left); err != nil {
			return err
		}
		st, err := ship.Stats(ctx)
		if err != nil {
			return err
		}
		if left == 0 && st.Pending+st.InFlight+st.Scheduled == 0 {
			break
		}
		select {
		case err := <-relayErr:
			return fmt.Errorf("relay: %w", err)
		case <-w2.read:
			return fmt.Errorf("worker-2 ended before the queue was empty: %v", w2.wait())
		case <-ctx.Done():
			return fmt.Errorf("%d rows in the outbox, queue %+v: %w", left, st, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
	if err := w2.stop(); err != nil {
		return fmt.Errorf("worker-2: %w", err)
	}
	stop()
	wg.Wait()
	return check(ctx, db, ob, ship, placed, victim, w1, w2)
}

// placeOrder writes an order and its shipping task in one transaction;
// with fail, it rolls back after both, as a failed checkout would. It
// returns the order's id.
func placeOrder(ctx context.Context, db *sql.DB, ob *fleetsql.Outbox, ship *fleet.Queue[Ship], item string, fail bool) (int64, error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	var id int64
	if err := tx.QueryRowContext(ctx, `INSERT INTO orders (item) VALUES ($1) RETURNING id`, item).Scan(&id); err != nil {
		return 0, err
	}
	// Validated with the queue's rules here: a bad payload fails the
	// checkout, not the relay. Nothing reaches Redis before the commit.
	if _, err := fleetsql.Submit(ctx, tx, ob, ship, Ship{Order: id, Item: item}, fleet.SubmitOptions{}); err != nil {
		return 0, err
	}
	if fail {
		return id, tx.Rollback()
	}
	return id, tx.Commit()
}

// throwawayDB creates a database of its own on the server of dbURL, and
// returns it open, its URL, and a function that closes and drops it.
func throwawayDB(ctx context.Context, dbURL string) (*sql.DB, string, func(), error) {
	u, err := url.Parse(dbURL)
	if err != nil {
		return nil, "", nil, fmt.Errorf("-db: %w", err)
	}
	admin, err := sql.Open("pgx", dbURL)
	if err != nil {
		return nil, "", nil, err
	}
	name := fmt.Sprintf("fleet_outbox_example_%d", os.Getpid())
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		admin.Close()
		return nil, "", nil, fmt.Errorf("PostgreSQL at %s (install it: apt-get install -y postgresql, or set -db): %w", u.Redacted(), err)
	}
	u.Path = "/" + name
	db, err := sql.Open("pgx", u.String())
	drop := func() {
		if db != nil {
			db.Close()
		}
		_, _ = admin.ExecContext(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
		admin.Close()
	}
	if err != nil {
		drop()
		return nil, "", nil, err
	}
	return db, u.String(), drop, nil
}
