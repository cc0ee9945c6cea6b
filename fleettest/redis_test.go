package fleettest_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/fleet-go/fleet/fleettest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/testcontainers/testcontainers-go.(*Reaper).connect.func1"))
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return c
}

// Start takes the server of FLEET_REDIS_URL when set, and leaves it
// running on Close; Compat reads and writes it go-redis style.
func TestStartUsesFleetRedisURL(t *testing.T) {
	c := ctx(t)
	srv, err := fleettest.StartServer(c, fleettest.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	t.Setenv("FLEET_REDIS_URL", srv.URL())
	r, err := fleettest.Start(c)
	if err != nil {
		t.Fatal(err)
	}
	if r.URL() != srv.URL() || r.From() != "FLEET_REDIS_URL" {
		t.Fatalf("Start = %s from %s; want %s from FLEET_REDIS_URL", r.URL(), r.From(), srv.URL())
	}
	if err := r.Compat().HSet(c, "fleettest:h", "state", "IDLE", "gen", "3").Err(); err != nil {
		t.Fatal(err)
	}
	got, err := r.Compat().HGetAll(c, "fleettest:h").Result()
	if err != nil || len(got) != 2 || got["state"] != "IDLE" || got["gen"] != "3" {
		t.Fatalf("HGetAll = %v, %v", got, err)
	}
	// The value is on the server itself, as redis-cli sees it.
	if out, err := srv.Cli(c, "HGET", "fleettest:h", "gen"); err != nil || out != "3" {
		t.Fatalf("redis-cli HGET = %q, %v", out, err)
	}
	r.Close()
	r.Close() // idempotent
	if err := fleettest.Ping(c, srv.Addr); err != nil {
		t.Fatalf("Close stopped a server it did not start: %v", err)
	}
}

// Without FLEET_REDIS_URL, Start starts a redis-server from PATH, and
// Close stops it.
func TestStartFromPath(t *testing.T) {
	t.Setenv("FLEET_REDIS_URL", "")
	c := ctx(t)
	r, err := fleettest.Start(c)
	if err != nil {
		t.Fatal(err)
	}
	if r.From() != "redis-server on PATH" || !strings.HasPrefix(r.URL(), "redis://127.0.0.1:") {
		t.Fatalf("Start = %s from %s", r.URL(), r.From())
	}
	if err := r.Compat().Set(c, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if v, err := r.Compat().Get(c, "k").Result(); err != nil || v != "v" {
		t.Fatalf("Get = %q, %v", v, err)
	}
	addr := strings.TrimPrefix(r.URL(), "redis://")
	r.Close()
	pc, cancel := context.WithTimeout(c, time.Second)
	defer cancel()
	if err := fleettest.Ping(pc, addr); err == nil {
		t.Fatal("the server Start started still answers after Close")
	}
}

// Without redis-server on PATH, Start falls back to Docker; where Docker
// does not work either, the error says both.
func TestStartFallsBackToDocker(t *testing.T) {
	t.Setenv("FLEET_REDIS_URL", "")
	t.Setenv("PATH", t.TempDir()) // no redis-server here
	c := ctx(t)
	r, err := fleettest.Start(c)
	if err != nil {
		if !errors.Is(err, fleettest.ErrNoRedisServer) || !strings.Contains(err.Error(), "Docker failed too") {
			t.Fatalf("Start without PATH or Docker = %v; want ErrNoRedisServer naming Docker", err)
		}
		return
	}
	defer r.Close()
	if r.From() != "Docker (redis:7)" {
		t.Fatalf("Start = %s from %s; want Docker", r.URL(), r.From())
	}
	if err := r.Compat().Ping(c).Err(); err != nil {
		t.Fatal(err)
	}
}
