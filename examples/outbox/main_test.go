package main

import (
	"os"
	"testing"
)

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
