package main

import (
	"log"
	"os"
	"testing"
)

// TestMain runs the worker processes that run starts: they are this test
// binary started again, with the worker's config in workerEnv.
func TestMain(m *testing.M) {
	if cfg := os.Getenv(workerEnv); cfg != "" {
		if err := runWorker(cfg); err != nil {
			log.Fatal(err)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestExample runs the example end to end: on FLEETSQL_POSTGRES_URL (or
// the local PostgreSQL) and FLEET_REDIS_URL (or a throwaway
// redis-server). It fails, saying how to get them, when either is
// missing.
func TestExample(t *testing.T) {
	db := os.Getenv("FLEETSQL_POSTGRES_URL")
	if db == "" {
		db = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	}
	if err := run(db, 25); err != nil {
		t.Fatalf("%v\n(the example needs PostgreSQL: apt-get install -y postgresql, started, or FLEETSQL_POSTGRES_URL; and redis-server: apt-get install -y redis-server, or FLEET_REDIS_URL)", err)
	}
}
