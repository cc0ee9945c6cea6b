package fleet_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/internal/redistest"
)

// Open's errors for the mistakes a newcomer makes name the likely cause,
// and are classified so that a retry loop does not spin on them.
func TestOpenNamesLikelyCauses(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	url := redistest.SingleURL(t)
	hostPort := strings.TrimPrefix(url, "redis://")
	if i := strings.LastIndex(hostPort, "@"); i >= 0 {
		hostPort = hostPort[i+1:]
	}
	hostPort, _, _ = strings.Cut(hostPort, "/")

	t.Run("no scheme", func(t *testing.T) {
		_, err := fleet.Open(c, fleet.Options{URL: hostPort})
		if !errors.Is(err, fleet.ErrInvalidOptions) || !strings.Contains(err.Error(), "redis://"+hostPort) {
			t.Fatalf("Open(%q) = %v; want ErrInvalidOptions suggesting redis://", hostPort, err)
		}
		_, err = fleet.Open(c, fleet.Options{URL: "localhost:6379"})
		if !errors.Is(err, fleet.ErrInvalidOptions) || !strings.Contains(err.Error(), "redis://localhost:6379") {
			t.Fatalf("Open(localhost:6379) = %v; want ErrInvalidOptions suggesting redis://", err)
		}
	})

	t.Run("TLS to a plain-text port", func(t *testing.T) {
		short, cancel := context.WithTimeout(c, 2*time.Second)
		defer cancel()
		start := time.Now()
		_, err := fleet.Open(short, fleet.Options{URL: "rediss://" + hostPort})
		took := time.Since(start)
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "plain-text port") {
			t.Fatalf("Open(rediss:// to a plain port) = %v; want the ctx's deadline, naming a plain-text port", err)
		}
		if took > 3*time.Second {
			t.Fatalf("Open took %v on a 2 s ctx", took)
		}
		// Without a ctx deadline, DialTimeout bounds it, with the same hint.
		start = time.Now()
		_, err = fleet.Open(c, fleet.Options{URL: "rediss://" + hostPort, DialTimeout: time.Second})
		if !errors.Is(err, fleet.ErrUnavailable) || !strings.Contains(err.Error(), "plain-text port") || time.Since(start) > 5*time.Second {
			t.Fatalf("Open(rediss://, DialTimeout 1 s) = %v after %v", err, time.Since(start))
		}
	})

	t.Run("HTTP server", func(t *testing.T) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = w.Write([]byte("<html>hello</html>"))
		}))
		defer srv.Close()
		_, err := fleet.Open(c, fleet.Options{Addrs: []string{srv.Listener.Addr().String()}, DialTimeout: 2 * time.Second})
		if !errors.Is(err, fleet.ErrInvalidOptions) || errors.Is(err, fleet.ErrUnavailable) ||
			!strings.Contains(err.Error(), "does not speak the Redis protocol") {
			t.Fatalf("Open on an HTTP server = %v; want ErrInvalidOptions saying it is not Redis", err)
		}
	})

	t.Run("db out of range", func(t *testing.T) {
		_, err := fleet.Open(c, fleet.Options{URL: url, DB: 100000})
		if !errors.Is(err, fleet.ErrInvalidOptions) || errors.Is(err, fleet.ErrUnavailable) || !strings.Contains(err.Error(), "DB") {
			t.Fatalf("Open with DB 100000 = %v; want ErrInvalidOptions naming DB", err)
		}
	})
}

// With NoMarkerWrite, Open writes nothing (a dry run's target stays
// empty), and still refuses a marker of another layout.
func TestOpenNoMarkerWrite(t *testing.T) {
	t.Parallel()
	src := open(t, singleCompat(t))
	if err := src.F.KV("cfg").Set(ctx(t), "k", "v", 0); err != nil {
		t.Fatal(err)
	}
	tg := clusterTagged(t)
	raw := redistest.Client(t, tg)
	prefix := redistest.Prefix(t, tg)
	dst := openOn(t, tg, prefix, func(o *fleet.Options) { o.NoMarkerWrite = true })
	rep, err := src.F.MigrateTo(ctx(t), dst, fleet.MigrateOptions{DryRun: true})
	if err != nil || len(rep.Plan) != 1 {
		t.Fatalf("dry run = %+v, %v", rep, err)
	}
	if got := redistest.Keys(t, raw, prefix); len(got) != 0 {
		t.Fatalf("open and dry run wrote %v", got)
	}
	if m, err := dst.ReadMarker(ctx(t)); err != nil || m.Found {
		t.Fatalf("marker = %+v, %v", m, err)
	}
	// A marker of another layout is still refused.
	if err := raw.Do(ctx(t), raw.B().Hset().Key(prefix+"fleet:meta").FieldValue().FieldValue("layout", "compat").FieldValue("schema", "1").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	_, err = fleet.Open(ctx(t), fleet.Options{URL: tg.URL, Prefix: prefix, NoMarkerWrite: true})
	if !errors.Is(err, fleet.ErrMarker) {
		t.Fatalf("Open on a compat-marked prefix = %v, want ErrMarker", err)
	}
}
