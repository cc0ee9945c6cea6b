package fleetsql_test

import (
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/fleet-go/fleet/fleettest"
)

// pgCluster is a private PostgreSQL cluster (initdb and pg_ctl in a
// temporary directory, on a free port), for the test that restarts the
// server: the shared one is not the tests' to restart.
type pgCluster struct {
	bin, dir, data string
	port           int
	cred           *syscall.Credential // run as postgres when we are root
}

const howToPGBin = "the PostgreSQL restart test runs a private cluster with initdb and pg_ctl: install them (apt-get install -y postgresql) or set FLEETSQL_PG_BIN to their directory"

// startPG starts a private cluster, stopped and removed after tb.
func startPG(tb testing.TB) *pgCluster {
	tb.Helper()
	bin := os.Getenv("FLEETSQL_PG_BIN")
	if bin == "" {
		found, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
		sort.Slice(found, func(i, j int) bool { return pgMajor(found[i]) > pgMajor(found[j]) })
		if len(found) > 0 {
			bin = filepath.Dir(found[0])
		} else if p, err := exec.LookPath("initdb"); err == nil {
			bin = filepath.Dir(p)
		}
	}
	if _, err := os.Stat(filepath.Join(bin, "pg_ctl")); bin == "" || err != nil {
		tb.Fatalf("no initdb/pg_ctl found (FLEETSQL_PG_BIN=%q): %s", bin, howToPGBin)
	}
	dir, err := os.MkdirTemp("", "fleetsql-pg-")
	if err != nil {
		tb.Fatal(err)
	}
	c := &pgCluster{bin: bin, dir: dir, data: filepath.Join(dir, "data")}
	tb.Cleanup(func() {
		_ = c.ctl("-m", "immediate", "stop")
		os.RemoveAll(dir)
	})
	if os.Geteuid() == 0 { // initdb refuses root: run the cluster as postgres
		u, err := user.Lookup("postgres")
		if err != nil {
			tb.Fatalf("running as root, the private cluster needs the postgres user: %v (%s)", err, howToPGBin)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			tb.Fatal(err)
		}
		c.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	if out, err := c.run("initdb", "-D", c.data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync"); err != nil {
		tb.Fatalf("initdb: %v\n%s", err, out)
	}
	if c.port, err = fleettest.FreePort(); err != nil {
		tb.Fatal(err)
	}
	if err := c.start(); err != nil {
		tb.Fatal(err)
	}
	return c
}

func pgMajor(path string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(path))))
	return n
}

// URL returns the cluster's pgx URL.
func (c *pgCluster) URL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", c.port)
}

func (c *pgCluster) run(prog string, args ...string) ([]byte, error) {
	cmd := exec.Command(filepath.Join(c.bin, prog), args...)
	cmd.Dir = c.dir
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	if c.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	}
	return cmd.CombinedOutput()
}

func (c *pgCluster) ctl(args ...string) error {
	out, err := c.run("pg_ctl", append([]string{"-D", c.data}, args...)...)
	if err != nil {
		return fmt.Errorf("pg_ctl %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

// start starts the server and waits until it accepts connections.
func (c *pgCluster) start() error {
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=off", c.port, c.dir)
	return c.ctl("-l", filepath.Join(c.dir, "log"), "-o", opts, "-w", "-t", "60", "start")
}

// crash stops the server at once, as a crash would (pg_ctl -m immediate:
// no checkpoint; the next start recovers from the WAL).
func (c *pgCluster) crash() error { return c.ctl("-m", "immediate", "-w", "stop") }
