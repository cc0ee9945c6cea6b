package fleetsql_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/fleetsql"
	"github.com/fleet-go/fleet/fleettest"
)

// A rolled-back transaction makes no task; a committed one makes one,
// with the options it was submitted with, once the relay ran (here one
// batch of it: RelayOnce; a host runs Relay in the background).
func ExampleSubmit() {
	ctx := context.Background()
	db, done := exampleDB() // a throwaway database on FLEETSQL_POSTGRES_URL, or the local server
	defer done()
	f, stop := exampleFleet() // FLEET_REDIS_URL, or a throwaway redis-server
	defer stop()

	ob, err := fleetsql.New(db, fleetsql.Options{}) // pgx's stdlib driver: PostgreSQL
	if err != nil {
		log.Fatal(err)
	}
	if err := ob.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	q := fleet.NewQueue[Job](f, "jobs", fleet.QueueOptions{})

	for n, commit := range []bool{false, true} {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			log.Fatal(err)
		}
		opts := fleet.SubmitOptions{Priority: 3, Metadata: map[string]string{"order": fmt.Sprint("A-", n)}}
		if _, err := fleetsql.Submit(ctx, tx, ob, q, Job{N: n}, opts); err != nil {
			log.Fatal(err)
		}
		if commit {
			err = tx.Commit()
		} else {
			err = tx.Rollback()
		}
		if err != nil {
			log.Fatal(err)
		}
	}
	st, err := ob.RelayOnce(ctx, f, fleetsql.RelayOptions{})
	fmt.Printf("taken %d, relayed %d, %v\n", st.Taken, st.Relayed, err)
	ts, err := q.Reserve(ctx, 10, time.Second)
	if err != nil {
		log.Fatal(err)
	}
	for _, t := range ts {
		fmt.Println("task of row", t.Payload.N, "for order", t.Metadata()["order"])
		_ = t.Ack(ctx)
	}
	// Output:
	// taken 1, relayed 1, <nil>
	// task of row 1 for order A-1
}

// The migration for MariaDB, with a table name of one's own.
func ExampleOutbox_MigrationSQL() {
	db, err := sql.Open("mysql", "root@tcp(127.0.0.1:3306)/shop") // connects only when used
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	ob, err := fleetsql.New(db, fleetsql.Options{Table: "order_tasks"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(ob.MigrationSQL())
	// Output:
	// CREATE TABLE IF NOT EXISTS `order_tasks` (
	// 	id            CHAR(36) CHARACTER SET ascii NOT NULL PRIMARY KEY,
	// 	queue         VARCHAR(512) NOT NULL,
	// 	payload       LONGTEXT NOT NULL,
	// 	dedup_key     VARCHAR(512) NULL,
	// 	unique_ms     BIGINT NOT NULL DEFAULT 0,
	// 	not_before_ms BIGINT NULL,
	// 	created_at    DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
	// 	options       TEXT NULL
	// ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
	//
	// CREATE TABLE IF NOT EXISTS `order_tasks_dead` (
	// 	id            CHAR(36) CHARACTER SET ascii NOT NULL PRIMARY KEY,
	// 	queue         VARCHAR(512) NOT NULL,
	// 	payload       LONGTEXT NOT NULL,
	// 	dedup_key     VARCHAR(512) NULL,
	// 	unique_ms     BIGINT NOT NULL DEFAULT 0,
	// 	not_before_ms BIGINT NULL,
	// 	created_at    DATETIME(6) NOT NULL,
	// 	dead_at       DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
	// 	reason        TEXT NOT NULL,
	// 	options       TEXT NULL
	// ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
	//
	// CREATE TABLE IF NOT EXISTS `order_tasks_done` (
	// 	task_id       VARCHAR(255) NOT NULL PRIMARY KEY,
	// 	queue         VARCHAR(512) NOT NULL,
	// 	token         VARCHAR(255) NOT NULL,
	// 	result        LONGTEXT NULL,
	// 	done_at       DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
	// ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
	//
	// ALTER TABLE `order_tasks` ADD COLUMN IF NOT EXISTS options TEXT NULL;
	//
	// ALTER TABLE `order_tasks_dead` ADD COLUMN IF NOT EXISTS options TEXT NULL;
}

// exampleDB is testDB for examples: it exits with how to get a server
// when there is none.
func exampleDB() (*sql.DB, func()) {
	admin := env(envPostgres, defaultPostgres)
	adm, err := sql.Open("pgx", admin)
	if err != nil {
		log.Fatal(err)
	}
	name := fmt.Sprintf("fleetsql_example_%d_%d", os.Getpid(), dbSeq.Add(1))
	if _, err := adm.Exec("CREATE DATABASE " + name); err != nil {
		log.Fatalf("%v\n%s", err, howToPostgres)
	}
	cfgURL := withDBURL(admin, name)
	db, err := sql.Open("pgx", cfgURL)
	if err != nil {
		log.Fatal(err)
	}
	return db, func() {
		db.Close()
		_, _ = adm.Exec("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)")
		adm.Close()
	}
}

// exampleFleet opens a Fleet on FLEET_REDIS_URL or a throwaway
// redis-server, under a prefix of its own.
func exampleFleet() (*fleet.Fleet, func()) {
	ctx := context.Background()
	r, err := fleettest.Start(ctx)
	if err != nil {
		log.Fatalf("no Redis: %v (apt-get install -y redis-server, or set FLEET_REDIS_URL)", err)
	}
	prefix := fmt.Sprintf("fsql-example-%d:", os.Getpid())
	f, err := fleet.Open(ctx, fleet.Options{URL: r.URL(), Prefix: prefix})
	if err != nil {
		log.Fatal(err)
	}
	return f, func() {
		deletePrefix(nil, f.Client(), prefix)
		f.Close()
		r.Close()
	}
}
