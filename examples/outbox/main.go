// Command outbox places orders in PostgreSQL and submits each order's
// shipping task in the same transaction, through fleetsql's outbox: a
// task exists if and only if its order committed. A relay moves the
// committed tasks to the queue (woken by NOTIFY), and a worker ships each
// order, writing the shipment back to the order's row.
//
//	go run ./examples/outbox -orders 50
//
// Every fifth order is rolled back after its INSERT and its Submit, as a
// failed checkout would be: it leaves neither a row nor a task. The
// example works in a throwaway database that it creates on the server of
// -db (default FLEETSQL_POSTGRES_URL, else the local server) and drops at
// the end; it uses FLEET_REDIS_URL, or starts a throwaway redis-server.
package main

import (
	"context"
	"database/sql"
	"errors"
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

func main() {
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

func run(dbURL string, orders int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	f, done, err := exredis.Open(ctx, "outbox")
	if err != nil {
		return err
	}
	defer done()
	db, drop, err := throwawayDB(ctx, dbURL)
	if err != nil {
		return err
	}
	defer drop()

	// Once: the outbox's tables, and the application's own.
	ob, err := fleetsql.New(db, fleetsql.Options{})
	if err != nil {
		return err
	}
	if err := ob.Migrate(ctx); err != nil {
		return err
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE orders (
		id bigserial PRIMARY KEY, item text NOT NULL, placed_at timestamptz NOT NULL DEFAULT now(), shipped_at timestamptz)`); err != nil {
		return err
	}
	ship := fleet.NewQueue[Ship](f, "ship", fleet.QueueOptions{})

	// In the background of the host: the relay, and a worker.
	bg, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stop(); wg.Wait() }()
	relayErr := make(chan error, 1)
	wg.Go(func() { relayErr <- ob.Relay(bg, f, fleetsql.RelayOptions{}) })
	var mu sync.Mutex
	ran := 0
	wg.Go(func() {
		for bg.Err() == nil {
			ts, err := ship.Reserve(bg, 10, time.Second)
			if err != nil { // bg ended, or Redis is away: try again
				time.Sleep(50 * time.Millisecond)
				continue
			}
			for _, t := range ts {
				if err := shipOrder(bg, db, t); err != nil {
					_ = t.Nack(bg, err)
					continue
				}
				mu.Lock()
				ran++
				mu.Unlock()
			}
		}
	})

	placed, rolledBack := 0, 0
	for i := range orders {
		fail := i%5 == 4
		if err := placeOrder(ctx, db, ob, ship, fmt.Sprintf("book-%d", i), fail); err != nil {
			return err
		}
		if fail {
			rolledBack++
		} else {
			placed++
		}
	}

	// Wait for every placed order to be shipped, and its task acked.
	var shipped, left int
	for {
		if err := db.QueryRowContext(ctx, `SELECT count(*) FILTER (WHERE shipped_at IS NOT NULL), (SELECT count(*) FROM fleet_outbox) FROM orders`).Scan(&shipped, &left); err != nil {
			return err
		}
		mu.Lock()
		acked := ran
		mu.Unlock()
		// A row is shipped before its task is acked: wait for both, so
		// stopping the worker cannot cut an ack short.
		if shipped == placed && left == 0 && acked == placed {
			break
		}
		select {
		case err := <-relayErr:
			return fmt.Errorf("relay: %w", err)
		case <-ctx.Done():
			return fmt.Errorf("%d of %d orders shipped, %d acked, %d rows in the outbox: %w", shipped, placed, acked, left, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	stop()
	wg.Wait()
	var rows int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM orders`).Scan(&rows); err != nil {
		return err
	}
	st, err := ship.Stats(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("orders=%d rolled_back=%d rows=%d shipped=%d outbox=%d queue_left=%d\n",
		placed, rolledBack, rows, shipped, left, st.Pending+st.InFlight+st.Scheduled+st.Dead)
	if rows != placed || shipped != placed || ran != placed {
		return fmt.Errorf("%d rows, %d shipped, %d tasks run: want %d each", rows, shipped, ran, placed)
	}
	return nil
}

// placeOrder writes an order and its shipping task in one transaction;
// with fail, it rolls back after both, as a failed checkout would.
func placeOrder(ctx context.Context, db *sql.DB, ob *fleetsql.Outbox, ship *fleet.Queue[Ship], item string, fail bool) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	var id int64
	if err := tx.QueryRowContext(ctx, `INSERT INTO orders (item) VALUES ($1) RETURNING id`, item).Scan(&id); err != nil {
		return err
	}
	// Validated with the queue's rules here: a bad payload fails the
	// checkout, not the relay. Nothing reaches Redis before the commit.
	if _, err := fleetsql.Submit(ctx, tx, ob, ship, Ship{Order: id, Item: item}, fleet.SubmitOptions{}); err != nil {
		return err
	}
	if fail {
		return tx.Rollback()
	}
	return tx.Commit()
}

// shipOrder is the handler: it records the shipment on the order's row
// (once, should the task run again after a lost ack), then acks.
func shipOrder(ctx context.Context, db *sql.DB, t *fleet.Task[Ship]) error {
	var id int64
	err := db.QueryRowContext(ctx, `UPDATE orders SET shipped_at = coalesce(shipped_at, now()) WHERE id = $1 RETURNING id`,
		t.Payload.Order).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("order %d does not exist: a task without its order", t.Payload.Order)
	}
	if err != nil {
		return err
	}
	return t.Ack(ctx)
}

// throwawayDB creates a database of its own on the server of dbURL, and
// returns it open with a function that closes and drops it.
func throwawayDB(ctx context.Context, dbURL string) (*sql.DB, func(), error) {
	u, err := url.Parse(dbURL)
	if err != nil {
		return nil, nil, fmt.Errorf("-db: %w", err)
	}
	admin, err := sql.Open("pgx", dbURL)
	if err != nil {
		return nil, nil, err
	}
	name := fmt.Sprintf("fleet_outbox_example_%d", os.Getpid())
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		admin.Close()
		return nil, nil, fmt.Errorf("PostgreSQL at %s (install it: apt-get install -y postgresql, or set -db): %w", u.Redacted(), err)
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
		return nil, nil, err
	}
	return db, drop, nil
}
