package main

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/internal/redistest"
)

// TestFleetctlSealed: task get shows a sealed queue's payload and result
// as sealed, naming the key, unless --keys (or $FLEET_KEYS_FILE) gives
// fleetctl the key; a bad key file is a clear error.
func TestFleetctlSealed(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		ctx, f, conn, _ := openTarget(t, tg)
		secret := []byte("0123456789abcdef0123456789abcdef")
		kr, err := fleet.NewKeyring(fleet.Key{ID: "k7", Secret: secret})
		if err != nil {
			t.Fatal(err)
		}
		q := fleet.NewQueue[job](f, "vault", fleet.QueueOptions{Sealer: kr, Retention: time.Hour})
		id, err := q.Submit(ctx, job{N: 4242})
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		good := filepath.Join(dir, "keys")
		if err := os.WriteFile(good, []byte("# newest first\nk7 "+base64.StdEncoding.EncodeToString(secret)+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		run := func(args ...string) (string, string, int) {
			t.Helper()
			return fctl(t, append(append([]string{}, conn...), args...)...)
		}
		out, _, code := run("task", "get", "vault", id)
		if code != 0 || !strings.Contains(out, "sealed (key k7") || strings.Contains(out, "4242") {
			t.Fatalf("task get without keys (%d):\n%s", code, out)
		}
		out, _, code = run("--keys", good, "task", "get", "vault", id)
		if code != 0 || !strings.Contains(out, `{"n":4242}`) {
			t.Fatalf("task get --keys (%d):\n%s", code, out)
		}
		tasks, err := q.Reserve(ctx, 1, time.Second)
		if err != nil || len(tasks) != 1 {
			t.Fatal(tasks, err)
		}
		_ = tasks[0].SetResult("paid 4242")
		tasks[0].Logger().Info("charged\nlog\tforged row", "card", 4242)
		if err := tasks[0].Ack(ctx); err != nil {
			t.Fatal(err)
		}
		out, _, code = run("--json", "--keys", good, "task", "get", "vault", id)
		if code != 0 || !strings.Contains(out, `"result": "paid 4242"`) {
			t.Fatalf("task get --json --keys of the done task (%d):\n%s", code, out)
		}
		out, _, code = run("task", "get", "vault", id)
		if code != 0 || !strings.Contains(out, "result") || !strings.Contains(out, "sealed (key k7") ||
			!strings.Contains(out, "log  ") || strings.Contains(out, "charged") {
			t.Fatalf("task get of the done task without keys (%d):\n%s", code, out)
		}
		// The log, opened: one header row, one row for the line, its
		// control characters quoted so that it cannot forge a row.
		out, _, code = run("--keys", good, "task", "get", "vault", id)
		if code != 0 || !strings.Contains(out, "attempt 1, ended ") || !strings.Contains(out, ` INFO "charged\nlog\tforged row" card=4242`) ||
			strings.Contains(out, "forged row\"\n") || strings.Count(out, "\nlog ") != 1 {
			t.Fatalf("task get --keys of the logged task (%d):\n%s", code, out)
		}
		bad := filepath.Join(dir, "bad")
		_ = os.WriteFile(bad, []byte("k7 c2hvcnQ=\n"), 0o600)
		for _, c := range []struct{ file, want string }{
			{bad, `key "k7" has a secret of 5 bytes`},
			{filepath.Join(dir, "none"), "no such file"},
		} {
			_, errOut, code := run("--keys", c.file, "task", "get", "vault", id)
			if code == 0 || !strings.Contains(errOut, c.want) {
				t.Fatalf("--keys %s: exit %d, %q; want %q", c.file, code, errOut, c.want)
			}
		}
	})
}
