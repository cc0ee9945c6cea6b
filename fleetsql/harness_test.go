package fleetsql_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/redis/rueidis"
	"go.uber.org/goleak"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/fleetsql"
	"github.com/fleet-go/fleet/fleettest"
)

// The databases the tests create their own databases in. Each test makes
// one of its own (a unique name) and drops it at its end.
const (
	envPostgres = "FLEETSQL_POSTGRES_URL"
	envMySQL    = "FLEETSQL_MYSQL_URL"

	defaultPostgres = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	defaultMySQL    = "root@tcp(127.0.0.1:3306)/"

	howToPostgres = "fleetsql's tests need PostgreSQL (15 is tested) that lets them create databases: set " + envPostgres +
		" (a pgx URL, default " + defaultPostgres + "), or install and start one: apt-get install -y postgresql && " +
		"pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start, with trust auth for postgres on 127.0.0.1 (.ci/run does all this)"
	howToMySQL = "fleetsql's tests need MariaDB 10.6+ (10.11 is tested) or MySQL 8 that lets them create databases: set " + envMySQL +
		" (a go-sql-driver DSN, default " + defaultMySQL + "), or install and start one: apt-get install -y mariadb-server && " +
		"start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd -- --user=mysql (.ci/run does all this)"
)

var dialects = []fleetsql.Dialect{fleetsql.PostgreSQL, fleetsql.MySQL}

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

var dbSeq atomic.Int64

// testDB creates a database of its own for tb on the server of dialect d,
// and returns it open (with its DSN, for helper processes). Both are gone
// after tb. A server that cannot be reached fails tb with how to get one.
func testDB(tb testing.TB, d fleetsql.Dialect) (*sql.DB, string) {
	tb.Helper()
	name := fmt.Sprintf("fleetsql_%d_%s_%d", os.Getpid(), strconv.FormatInt(time.Now().UnixNano()%1e9, 36), dbSeq.Add(1))
	driver, admin, howTo := "pgx", env(envPostgres, defaultPostgres), howToPostgres
	if d == fleetsql.MySQL {
		driver, admin, howTo = "mysql", env(envMySQL, defaultMySQL), howToMySQL
	}
	adm, err := sql.Open(driver, admin)
	if err != nil {
		tb.Fatalf("%v: %s", err, howTo)
	}
	defer adm.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := adm.PingContext(ctx); err != nil {
		tb.Fatalf("cannot reach %s at %s: %v\n%s", d, admin, err, howTo)
	}
	if _, err := adm.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		tb.Fatalf("create database %s: %v\n%s", name, err, howTo)
	}
	tb.Cleanup(func() { dropDB(tb, driver, admin, name) })
	dsn := withDB(tb, d, admin, name)
	db, err := sql.Open(driver, dsn)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	return db, dsn
}

func dropDB(tb testing.TB, driver, admin, name string) {
	adm, err := sql.Open(driver, admin)
	if err != nil {
		tb.Errorf("drop database %s: %v", name, err)
		return
	}
	defer adm.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stmt := "DROP DATABASE IF EXISTS " + name
	if driver == "pgx" {
		stmt += " WITH (FORCE)"
	}
	if _, err := adm.ExecContext(ctx, stmt); err != nil {
		tb.Errorf("drop database %s: %v", name, err)
	}
}

// withDB returns the admin DSN pointed at database name.
func withDB(tb testing.TB, d fleetsql.Dialect, admin, name string) string {
	if d == fleetsql.MySQL {
		cfg, err := mysql.ParseDSN(admin)
		if err != nil {
			tb.Fatalf("%s: %v", envMySQL, err)
		}
		cfg.DBName = name
		return cfg.FormatDSN()
	}
	if _, err := url.Parse(admin); err != nil {
		tb.Fatalf("%s: %v", envPostgres, err)
	}
	return withDBURL(admin, name)
}

// withDBURL returns a pgx connection string pointed at database name.
func withDBURL(admin, name string) string {
	if strings.HasPrefix(admin, "postgres://") || strings.HasPrefix(admin, "postgresql://") {
		if u, err := url.Parse(admin); err == nil {
			u.Path = "/" + name
			return u.String()
		}
	}
	return admin + " dbname=" + name // keyword/value: the last one wins
}

// newOutbox returns a migrated outbox in a database of tb's own.
func newOutbox(tb testing.TB, d fleetsql.Dialect) (*fleetsql.Outbox, *sql.DB, string) {
	tb.Helper()
	db, dsn := testDB(tb, d)
	o, err := fleetsql.New(db, fleetsql.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := o.Migrate(ctx); err != nil {
		tb.Fatal(err)
	}
	return o, db, dsn
}

// The Redis most tests share: fleettest.Start (FLEET_REDIS_URL, else a
// redis-server from PATH), once per test binary; each test has a key
// prefix of its own, deleted after it.
var shared struct {
	once sync.Once
	r    *fleettest.Redis
	err  error
}

func sharedRedis(tb testing.TB) *fleettest.Redis {
	tb.Helper()
	shared.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		shared.r, shared.err = fleettest.Start(ctx)
	})
	if shared.err != nil {
		tb.Fatalf("no Redis: %v (install redis-server: apt-get install -y redis-server, or set FLEET_REDIS_URL)", shared.err)
	}
	return shared.r
}

var prefixSeq atomic.Int64

// openFleet opens a Fleet on url under a prefix of its own, closed and
// its keys deleted after tb.
func openFleet(tb testing.TB, url string) (*fleet.Fleet, string) {
	tb.Helper()
	prefix := fmt.Sprintf("fsql%d-%d:", os.Getpid(), prefixSeq.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f, err := fleet.Open(ctx, fleet.Options{URL: url, Prefix: prefix})
	if err != nil {
		tb.Fatalf("open fleet on %s: %v", url, err)
	}
	tb.Cleanup(func() {
		deletePrefix(tb, f.Client(), prefix)
		f.Close()
	})
	return f, prefix
}

func deletePrefix(tb testing.TB, c rueidis.Client, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var cursor uint64
	for {
		e, err := c.Do(ctx, c.B().Scan().Cursor(cursor).Match(prefix+"*").Count(1000).Build()).AsScanEntry()
		if err != nil {
			return // the server may be gone (a fault test stopped it)
		}
		if len(e.Elements) > 0 {
			_ = c.Do(ctx, c.B().Del().Key(e.Elements...).Build()).Error()
		}
		if cursor = e.Cursor; cursor == 0 {
			return
		}
	}
}

// Job is the tests' payload: N names the row that made it.
type Job struct {
	N    int    `json:"n" validate:"gte=0"`
	Note string `json:"note,omitempty" validate:"max=20"`
}

const jobs = "jobs"

// submitRows writes rows n in [from, to) in transactions of per rows each,
// committed.
func submitRows(tb testing.TB, db *sql.DB, o *fleetsql.Outbox, q *fleet.Queue[Job], from, to, per int) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for n := from; n < to; {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			tb.Fatal(err)
		}
		for i := 0; i < per && n < to; i, n = i+1, n+1 {
			if _, err := fleetsql.Submit(ctx, tx, o, q, Job{N: n}, fleet.SubmitOptions{}); err != nil {
				tx.Rollback()
				tb.Fatal(err)
			}
		}
		if err := tx.Commit(); err != nil {
			tb.Fatal(err)
		}
	}
}

// count returns the rows of table t.
func count(tb testing.TB, db *sql.DB, o *fleetsql.Outbox, table string) int {
	tb.Helper()
	q := `"` + table + `"`
	if o.Dialect() == fleetsql.MySQL {
		q = "`" + table + "`"
	}
	var n int
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+q).Scan(&n); err != nil {
		tb.Fatal(err)
	}
	return n
}

// ledger counts the tasks taken from a queue by Job.N: the distinct task
// ids each N had (a redelivery keeps its id; a second task for a row
// would have another), and the dedup key each carried.
type ledger struct {
	mu   sync.Mutex
	ids  map[int]map[string]bool
	keys map[int]string
}

func newLedger() *ledger { return &ledger{ids: map[int]map[string]bool{}, keys: map[int]string{}} }

// drain reserves and acks q's tasks into l until no task came for quiet.
// Redis errors (a fault test's) are retried, and do not count as quiet.
func (l *ledger) drain(tb testing.TB, q *fleet.Queue[Job], quiet time.Duration) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	last := time.Now()
	for time.Since(last) < quiet {
		ts, err := q.Reserve(ctx, 100, 50*time.Millisecond)
		if err != nil {
			if ctx.Err() != nil {
				tb.Fatalf("reserve: %v", err)
			}
			time.Sleep(50 * time.Millisecond)
			last = time.Now()
			continue
		}
		if len(ts) > 0 {
			last = time.Now()
		}
		for _, t := range ts {
			l.add(t)
			for {
				err := t.Ack(ctx)
				if err == nil || errors.Is(err, fleet.ErrLeaseLost) {
					break
				}
				if ctx.Err() != nil {
					tb.Fatalf("ack: %v", err)
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
	}
}

func (l *ledger) add(t *fleet.Task[Job]) {
	var b struct {
		Dedup string `json:"dedup"`
	}
	_ = json.Unmarshal([]byte(t.Body()), &b)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ids[t.Payload.N] == nil {
		l.ids[t.Payload.N] = map[string]bool{}
	}
	l.ids[t.Payload.N][t.ID] = true
	l.keys[t.Payload.N] = b.Dedup
}

// total returns how many distinct tasks l saw.
func (l *ledger) total() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, ids := range l.ids {
		n += len(ids)
	}
	return n
}

// tasks returns how many distinct tasks row n made.
func (l *ledger) tasks(n int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.ids[n])
}

// exactlyOnce fails tb unless every n in [0, rows) made one task, and
// nothing else made any.
func (l *ledger) exactlyOnce(tb testing.TB, rows int) {
	tb.Helper()
	all := make([]int, rows)
	for n := range all {
		all[n] = n
	}
	l.check(tb, all, nil)
}

// check fails tb unless every row of committed made exactly one task,
// every row of maybe (a commit that failed: it may have happened) at most
// one, and no other row any.
func (l *ledger) check(tb testing.TB, committed, maybe []int) {
	tb.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var missing, doubled, stray []int
	known := map[int]bool{}
	for _, n := range committed {
		known[n] = true
		switch c := len(l.ids[n]); {
		case c == 0:
			missing = append(missing, n)
		case c > 1:
			doubled = append(doubled, n)
		}
	}
	for _, n := range maybe {
		known[n] = true
		if len(l.ids[n]) > 1 {
			doubled = append(doubled, n)
		}
	}
	for n := range l.ids {
		if !known[n] {
			stray = append(stray, n)
		}
		if k := l.keys[n]; k != "" && !strings.HasPrefix(k, fleetsql.KeyPrefix) {
			tb.Errorf("task of row %d has dedup key %q, not %s<row id>", n, k, fleetsql.KeyPrefix)
		}
	}
	if len(missing)+len(doubled)+len(stray) > 0 {
		tb.Fatalf("of %d committed rows (and %d that may have committed): %d missing (%v), %d doubled (%v), %d stray (%v)",
			len(committed), len(maybe), len(missing), head(missing), len(doubled), head(doubled), len(stray), head(stray))
	}
}

func head(s []int) []int { return s[:min(len(s), 20)] }

// assertEmpty fails tb unless the outbox, its dead rows and the queue are
// all empty.
func assertEmpty(tb testing.TB, db *sql.DB, o *fleetsql.Outbox, q *fleet.Queue[Job]) {
	tb.Helper()
	if n := count(tb, db, o, o.Table()); n != 0 {
		tb.Errorf("%d rows left in %s", n, o.Table())
	}
	if n := count(tb, db, o, o.DeadTable()); n != 0 {
		tb.Errorf("%d rows in %s", n, o.DeadTable())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := q.Stats(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	if st.Pending+st.InFlight+st.Scheduled+st.Dead != 0 {
		tb.Errorf("queue not empty: %+v", st)
	}
}

// waitFor polls cond every 20ms until it holds or timeout passes.
func waitFor(tb testing.TB, timeout time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// runRelay runs o.Relay in the background until the test ends.
func runRelay(tb testing.TB, o *fleetsql.Outbox, f *fleet.Fleet, opts fleetsql.RelayOptions) {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- o.Relay(ctx, f, opts) }()
	tb.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			tb.Errorf("relay: %v", err)
		}
	})
}

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		os.Exit(helperMain(mode))
	}
	code := m.Run()
	if shared.r != nil {
		shared.r.Close()
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goroutines outlived the tests: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}
