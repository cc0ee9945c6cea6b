// Command complete compares completing a task in the application's SQL
// transaction, fleet's fleetsql.Complete against River's JobCompleteTx, on
// the same PostgreSQL in one run, each system in a throwaway database.
// Every system works N pre-submitted tasks, and each handler runs one
// transaction: BEGIN, an INSERT of the task's effect row, the completion,
// COMMIT. The systems:
//
//   - fleet: fleet.NewBatchWorker, its handler wrapped by fleetsql.Once
//     (a SELECT of the completion row before each delivery), calling
//     fleetsql.Complete (the row, then a lease extension in Redis), with
//     ob.Reap deleting the rows of acked tasks;
//   - fleet plain: the same transaction without Complete and Once, then a
//     plain ack (not exactly-once): the baseline of Complete's cost;
//   - River v0.51.2: its Work calls river.JobCompleteTx in the transaction;
//   - fleet and fleet plain on MariaDB (River has no MySQL driver).
//
// Two phases: throughput with -workers handlers (fleet's slots, River's
// MaxWorkers), then latency with one handler (-serial tasks). Measured:
// tasks/s from the worker's start until all N are acked (River: until all
// N completing transactions committed); statements per task (PostgreSQL:
// a pgx tracer on every connection; MariaDB: a counting wrapper of the
// driver's connections; BEGIN and COMMIT count, as do every background
// statement); Redis scripts and commands (in scripts too) per task; the
// CPU per task of this process, of the database (PostgreSQL: the backends
// of the run's database; MariaDB: the whole mariadbd) and of Redis; and
// the latency from the handler's start to the ack (fleet: OnTaskEnd;
// River: its COMMIT). After each run every task's effect row must exist
// exactly once, and fleet's completion table must be empty.
//
//	GOWORK=off go run ./cmd/complete -n 20000 -workers 50 -rounds 3
//
// PostgreSQL: -db (FLEETSQL_POSTGRES_URL, else the local server); MariaDB:
// -mysql (FLEETSQL_MYSQL_URL, else root@tcp(127.0.0.1:3306)/), skipped if
// it does not answer; Redis: FLEET_REDIS_URL or a throwaway redis-server.
package main

import (
	"cmp"
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"flag"
	"fmt"
	"log"
	"net/url"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/fleetsql"
	"github.com/fleet-go/fleet/fleettest"
	"github.com/fleet-go/fleet/internal/costmeter"
)

type item struct {
	N int `json:"n"`
}

// counter is a pgx tracer that counts the statements sent.
type counter struct{ n atomic.Int64 }

func (c *counter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}
func (c *counter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

type config struct {
	admin, mysql, systems, redisURL string
	n, serial, workers, rounds      int
	riverCooldown, riverPoll        time.Duration
	timeout                         time.Duration
	verbose                         bool
}

const (
	sysFleet = iota
	sysPlain
	sysRiver
	sysMy
	sysMyPlain
	nSys
)

var names = [nSys]string{"fleet", "fleet plain", "River", "fleet MariaDB", "fleet MariaDB plain"}
var keys = [nSys]string{"fleet", "plain", "river", "maria", "maria-plain"}

// result is one run's figures, per task but the rate and latencies.
type result struct {
	rate, stmts, scripts, redis float64
	cpu, dbCPU, redisCPU        time.Duration
	p50, p99                    time.Duration
	failed                      int64
	breakdown                   string
}

func main() {
	def, my := os.Getenv("FLEETSQL_POSTGRES_URL"), os.Getenv("FLEETSQL_MYSQL_URL")
	if def == "" {
		def = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	}
	if my == "" {
		my = "root@tcp(127.0.0.1:3306)/"
	}
	var c config
	flag.StringVar(&c.admin, "db", def, "PostgreSQL (pgx URL) where the benchmark may create databases")
	flag.StringVar(&c.mysql, "mysql", my, "MariaDB DSN (go-sql-driver/mysql) where the benchmark may create databases; empty: skip")
	flag.IntVar(&c.n, "n", 20000, "tasks per run of the throughput phase (0: skip it)")
	flag.IntVar(&c.serial, "serial", 2000, "tasks per run of the latency phase, one handler (0: skip it)")
	flag.IntVar(&c.workers, "workers", 50, "handlers of the throughput phase: fleet's WorkerOptions.Slots, River's MaxWorkers")
	flag.IntVar(&c.rounds, "rounds", 3, "rounds; each runs every system, in reverse order every other round")
	flag.DurationVar(&c.riverCooldown, "river-cooldown", time.Millisecond, "River's FetchCooldown (default 100ms, minimum 1ms)")
	flag.DurationVar(&c.riverPoll, "river-poll", 10*time.Millisecond, "River's FetchPollInterval (default 1s)")
	flag.DurationVar(&c.timeout, "timeout", 3*time.Minute, "longest a run may take")
	flag.StringVar(&c.systems, "systems", strings.Join(keys[:], ","), "systems to run")
	flag.BoolVar(&c.verbose, "v", false, "print each fleet run's Redis commands per task")
	cpuprofile := flag.String("cpuprofile", "", "write this process's CPU profile here (with -systems, of one system)")
	flag.Parse()
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			log.Fatal(err)
		}
		defer pprof.StopCPUProfile()
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	if err := run(ctx, c); err != nil {
		pprof.StopCPUProfile()
		log.Fatal(err)
	}
}

func run(ctx context.Context, c config) error {
	var on []int
	for k := range strings.SplitSeq(c.systems, ",") {
		i := slices.Index(keys[:], strings.TrimSpace(k))
		if i < 0 {
			return fmt.Errorf("-systems: unknown system %q, want some of %s", k, strings.Join(keys[:], ","))
		}
		on = append(on, i)
	}
	c.redisURL = os.Getenv("FLEET_REDIS_URL")
	if c.redisURL == "" {
		s, err := fleettest.StartServer(ctx, fleettest.Config{})
		if err != nil {
			return err
		}
		defer s.Stop()
		c.redisURL = s.URL()
	}
	var pgVersion, myVersion string
	if err := withDB(ctx, "pgx", c.admin, func(db *sql.DB) error {
		return db.QueryRowContext(ctx, "SHOW server_version").Scan(&pgVersion)
	}); err != nil {
		return err
	}
	if err := withDB(ctx, "mysql", c.mysql, func(db *sql.DB) error {
		return db.QueryRowContext(ctx, "SELECT VERSION()").Scan(&myVersion)
	}); err != nil {
		fmt.Printf("MariaDB skipped: %v\n", err)
		on = slices.DeleteFunc(on, func(s int) bool { return s == sysMy || s == sysMyPlain })
	}
	fmt.Printf("PostgreSQL %s, MariaDB %s; River v0.51.2 with FetchCooldown %v, FetchPollInterval %v\n",
		pgVersion, myVersion, c.riverCooldown, c.riverPoll)
	var phases []config
	if c.n > 0 {
		phases = append(phases, c)
	}
	if c.serial > 0 {
		one := c
		one.n, one.workers = c.serial, 1
		phases = append(phases, one)
	}
	res := make([][nSys][]result, len(phases))
	for round := range c.rounds {
		order := slices.Clone(on)
		if round%2 == 1 {
			slices.Reverse(order)
		}
		for ph, pc := range phases {
			fmt.Printf("-- round %d, %d tasks, %d handlers\n", round+1, pc.n, pc.workers)
			for _, sys := range order {
				// Let the last run's writes settle (a checkpoint, the dropped database).
				_ = withDB(ctx, "pgx", c.admin, func(db *sql.DB) error { _, err := db.ExecContext(ctx, "CHECKPOINT"); return err })
				time.Sleep(time.Second)
				run := riverRun
				if sys != sysRiver {
					run = func(ctx context.Context, c config) (result, error) { return fleetRun(ctx, c, sys) }
				}
				r, err := run(ctx, pc)
				if err != nil {
					return fmt.Errorf("%s, round %d: %w", names[sys], round+1, err)
				}
				fmt.Printf("%-19s %5.0f tasks/s %5.2f statements, Redis %4.2f scripts %5.2f commands; CPU client %6v DB %6v Redis %6v; handler to ack p50 %7v p99 %7v; %d failed\n",
					names[sys], r.rate, r.stmts, r.scripts, r.redis, r.cpu, r.dbCPU, r.redisCPU, r.p50, r.p99, r.failed)
				if c.verbose && r.breakdown != "" {
					fmt.Printf("%19s Redis per task: %s\n", "", r.breakdown)
				}
				res[ph][sys] = append(res[ph][sys], r)
			}
		}
	}
	for ph, pc := range phases {
		fmt.Printf("\n-- medians of %d rounds, %d tasks, %d handlers\n", c.rounds, pc.n, pc.workers)
		report(res[ph], on)
	}
	return nil
}

// report prints one phase's table, then Complete's cost over a plain ack.
func report(res [nSys][]result, on []int) {
	fmt.Printf("| system | tasks/s by round | median | ÷ River | statements/task | Redis scripts/task | commands/task | CPU/task: client | DB | Redis | handler to ack p50 | p99 |\n")
	fmt.Printf("|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	rate := func(sys int) float64 { return median(pick(res[sys], func(r result) float64 { return r.rate })) }
	dur := func(rs []result, f func(r result) time.Duration) time.Duration { return median(pick(rs, f)) }
	for _, sys := range on {
		rs := res[sys]
		by := pick(rs, func(r result) string { return strconv.Itoa(int(r.rate + 0.5)) })
		ratio := "–"
		if len(res[sysRiver]) > 0 {
			ratio = fmt.Sprintf("%.2f", rate(sys)/rate(sysRiver))
		}
		fmt.Printf("| %s | %s | %.0f | %s | %.2f | %.2f | %.2f | %v | %v | %v | %v | %v |\n", names[sys], strings.Join(by, ", "), rate(sys), ratio,
			median(pick(rs, func(r result) float64 { return r.stmts })), median(pick(rs, func(r result) float64 { return r.scripts })),
			median(pick(rs, func(r result) float64 { return r.redis })), dur(rs, func(r result) time.Duration { return r.cpu }),
			dur(rs, func(r result) time.Duration { return r.dbCPU }), dur(rs, func(r result) time.Duration { return r.redisCPU }),
			dur(rs, func(r result) time.Duration { return r.p50 }), dur(rs, func(r result) time.Duration { return r.p99 }))
	}
	for _, pair := range [][2]int{{sysFleet, sysPlain}, {sysMy, sysMyPlain}} {
		a, b := res[pair[0]], res[pair[1]]
		if len(a) == 0 || len(b) == 0 {
			continue
		}
		var d50, d99 []time.Duration
		var tr []float64
		for i := range a {
			d50, d99, tr = append(d50, a[i].p50-b[i].p50), append(d99, a[i].p99-b[i].p99), append(tr, a[i].rate/b[i].rate)
		}
		fmt.Printf("%s over %s: handler to ack p50 %+v (by round %v), p99 %+v (%v); throughput %.2fx (%.2f)\n",
			names[pair[0]], names[pair[1]], median(d50), d50, median(d99), d99, median(tr), tr)
	}
}

func pick[T any](rs []result, f func(result) T) []T {
	var out []T
	for _, r := range rs {
		out = append(out, f(r))
	}
	return out
}

func median[T float64 | time.Duration](xs []T) T {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

func withDB(ctx context.Context, driver, dsn string, fn func(*sql.DB) error) error {
	if dsn == "" {
		return errors.New("no DSN")
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	return fn(db)
}

var seq atomic.Int64

// throwaway creates a database on the server of driver and dsn, and
// returns its name and a function that drops it.
func throwaway(ctx context.Context, driver, dsn, what string) (string, func(), error) {
	name := fmt.Sprintf("bench_complete_%s_%d_%d", what, os.Getpid(), seq.Add(1))
	if err := withDB(ctx, driver, dsn, func(db *sql.DB) error { _, err := db.ExecContext(ctx, "CREATE DATABASE "+name); return err }); err != nil {
		return "", nil, err
	}
	force := map[string]string{"pgx": " WITH (FORCE)"}[driver]
	return name, func() {
		_ = withDB(context.Background(), driver, dsn, func(db *sql.DB) error {
			_, err := db.Exec("DROP DATABASE IF EXISTS " + name + force)
			return err
		})
	}, nil
}

// pgURL is admin's URL for database name.
func pgURL(admin, name string) (string, error) {
	u, err := url.Parse(admin)
	if err != nil {
		return "", err
	}
	u.Path = "/" + name
	return u.String(), nil
}

// openDB opens a throwaway database (MariaDB with interpolateParams=true),
// with a statement counter on every connection, and a function that reads
// the database's CPU time.
func openDB(ctx context.Context, c config, my bool, what string) (db *sql.DB, stmts func() int64, dbCPU func() time.Duration, drop func(), err error) {
	drv, dsn := "pgx", c.admin
	if my {
		drv, dsn = "mysql", c.mysql
	}
	name, drop, err := throwaway(ctx, drv, dsn, what)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	if my {
		cfg, err := mysql.ParseDSN(c.mysql)
		if err == nil {
			cfg.DBName, cfg.InterpolateParams = name, true
			var conn driver.Connector
			if conn, err = mysql.NewConnector(cfg); err == nil {
				n := &atomic.Int64{}
				return sql.OpenDB(countConnector{Connector: conn, n: n}), n.Load, procCPU("mariadbd"), drop, nil
			}
		}
		drop()
		return nil, nil, nil, nil, err
	}
	u, err := pgURL(c.admin, name)
	var cc *pgx.ConnConfig
	if err == nil {
		cc, err = pgx.ParseConfig(u)
	}
	if err != nil {
		drop()
		return nil, nil, nil, nil, err
	}
	n := &counter{}
	cc.Tracer = n
	return stdlib.OpenDB(*cc), n.n.Load, procCPU("postgres " + name + " "), drop, nil
}

// The effect table: no key on task_id or n, so that a duplicate shows.
const effectsDDL = `CREATE TABLE effects (task_id VARCHAR(64) NOT NULL, n INT NOT NULL)`

// checkEffects fails unless each of the n tasks wrote its effect row
// exactly once.
func checkEffects(ctx context.Context, db *sql.DB, n int) error {
	var rows, ns, ids, lo, hi int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*), COUNT(DISTINCT n), COUNT(DISTINCT task_id), COALESCE(MIN(n), -1), COALESCE(MAX(n), -1) FROM effects`).
		Scan(&rows, &ns, &ids, &lo, &hi); err != nil {
		return err
	}
	if rows != n || ns != n || ids != n || lo != 0 || hi != n-1 {
		return fmt.Errorf("EFFECTS WRONG: %d effect rows for %d tasks (%d distinct payloads, %d distinct task ids, payloads %d..%d): not exactly once", rows, n, ns, ids, lo, hi)
	}
	return nil
}

// lats records, per task, the handler's first start and its ack.
type lats struct {
	mu         sync.Mutex
	start, end []time.Time
	left       atomic.Int64
	all        chan struct{}
	fails      int64
	firstErr   error
}

func newLats(n int) *lats {
	l := &lats{start: make([]time.Time, n), end: make([]time.Time, n), all: make(chan struct{})}
	l.left.Store(int64(n))
	return l
}

func (l *lats) begin(i int) {
	l.mu.Lock()
	if l.start[i].IsZero() {
		l.start[i] = time.Now()
	}
	l.mu.Unlock()
}

func (l *lats) finish(i int, err error) {
	l.mu.Lock()
	first := err == nil && l.end[i].IsZero()
	if first {
		l.end[i] = time.Now()
	} else if err != nil {
		l.fails++
		l.firstErr = cmp.Or(l.firstErr, err)
	}
	l.mu.Unlock()
	if first && l.left.Add(-1) == 0 {
		close(l.all)
	}
}

func (l *lats) wait(ctx context.Context, timeout time.Duration) error {
	select {
	case <-l.all:
		return nil
	case <-time.After(timeout):
	case <-ctx.Done():
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return fmt.Errorf("only %d of %d tasks completed in %v (%d failed deliveries, the first: %v)", int64(len(l.end))-l.left.Load(), len(l.end), timeout, l.fails, l.firstErr)
}

// figures sets r's rate, latencies and client CPU, for n tasks.
func (l *lats) figures(r *result, n int, el, cpu time.Duration) {
	r.rate, r.cpu, r.failed = float64(n)/el.Seconds(), per(cpu, n), l.fails
	ds := make([]time.Duration, n)
	for i := range ds {
		ds[i] = l.end[i].Sub(l.start[i])
	}
	slices.Sort(ds)
	r.p50, r.p99 = ds[n/2].Round(10*time.Microsecond), ds[min(n-1, n*99/100)].Round(10*time.Microsecond)
}

func fleetRun(ctx context.Context, c config, sys int) (r result, err error) {
	my, complete := sys == sysMy || sys == sysMyPlain, sys == sysFleet || sys == sysMy
	db, stmts, dbCPU, drop, err := openDB(ctx, c, my, strings.ReplaceAll(keys[sys], "-", "_"))
	if err != nil {
		return r, err
	}
	defer drop()
	defer db.Close()
	db.SetMaxOpenConns(c.workers + 5)
	db.SetMaxIdleConns(c.workers + 5)
	ob, err := fleetsql.New(db, fleetsql.Options{})
	if err == nil {
		err = ob.Migrate(ctx)
	}
	if err == nil {
		_, err = db.ExecContext(ctx, effectsDDL)
	}
	if err != nil {
		return r, err
	}
	prefix := fmt.Sprintf("bench-complete-%d-%d:", os.Getpid(), seq.Add(1))
	f, err := fleet.Open(ctx, fleet.Options{URL: c.redisURL, Prefix: prefix})
	if err != nil {
		return r, err
	}
	defer func() { deletePrefix(f, prefix); f.Close() }()
	q := fleet.NewQueue[item](f, "bench", fleet.QueueOptions{})
	index := make(map[string]int, c.n) // task id -> payload; read-only once the worker runs
	for i := 0; i < c.n; i += 1000 {
		var batch []item
		for j := i; j < min(c.n, i+1000); j++ {
			batch = append(batch, item{N: j})
		}
		ids, err := q.SubmitMany(ctx, batch)
		if err != nil {
			return r, err
		}
		for j, id := range ids {
			index[id] = i + j
		}
	}
	ins := `INSERT INTO effects (task_id, n) VALUES ($1, $2)`
	if my {
		ins = `INSERT INTO effects (task_id, n) VALUES (?, ?)`
	}
	// The application's handler: BEGIN, its effect row, (Complete,) COMMIT.
	var h fleet.BatchAutomation[struct{}, struct{}, item] = fleet.BatchFunc[struct{}, struct{}, item](
		func(ctx context.Context, _ *fleet.Slot[struct{}, struct{}], t *fleet.Task[item]) error {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			defer func() { _ = tx.Rollback() }()
			if _, err := tx.ExecContext(ctx, ins, t.ID, t.Payload.N); err != nil {
				return err
			}
			if complete {
				if err := fleetsql.Complete(ctx, tx, ob, t, nil); err != nil {
					return err
				}
			}
			return tx.Commit()
		})
	if complete {
		h = fleetsql.Once(ob, h)
	}
	l := newLats(c.n)
	timed := fleet.BatchFunc[struct{}, struct{}, item](func(ctx context.Context, s *fleet.Slot[struct{}, struct{}], t *fleet.Task[item]) error {
		l.begin(t.Payload.N)
		return h.Handle(ctx, s, t)
	})
	w := fleet.NewBatchWorker(f, fleet.WorkerOptions{Type: "complete", Slots: c.workers,
		OnTaskEnd: func(id string, err error) { l.finish(index[id], err) }}, q, timed)
	bg, stop := context.WithCancel(ctx)
	defer stop()
	reaped := make(chan error, 1)
	if complete {
		go func() { reaped <- ob.Reap(bg, fleetsql.ReapOptions{}) }()
		time.Sleep(50 * time.Millisecond) // its first look at the old rows
	} else {
		reaped <- nil
	}
	warm(ctx, db, c.workers+5)
	meter, err := costmeter.Start(ctx, f.Client())
	if err != nil {
		return r, err
	}
	base, cpu0, db0, start := stmts(), cpuTime(), dbCPU(), time.Now()
	if err := w.Start(bg); err != nil {
		return r, err
	}
	if err := l.wait(ctx, c.timeout); err != nil {
		_ = w.Stop(ctx)
		return r, err
	}
	l.figures(&r, c.n, time.Since(start), cpuTime()-cpu0)
	time.Sleep(300 * time.Millisecond) // Reap's last deletes (every 100 ms)
	r.stmts, r.dbCPU = float64(stmts()-base)/float64(c.n), per(dbCPU()-db0, c.n)
	cost, err := meter.Stop(ctx)
	if err != nil {
		return r, err
	}
	r.scripts, r.redis = float64(cost.Scripts())/float64(c.n), float64(cost.Commands())/float64(c.n)
	r.redisCPU, r.breakdown = per(cost.CPU, c.n), cost.Breakdown(c.n)
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := w.Stop(sctx); err != nil {
		return r, fmt.Errorf("stop: %w", err)
	}
	stop()
	if err := <-reaped; err != nil {
		return r, fmt.Errorf("Reap: %w", err)
	}
	if err := checkEffects(ctx, db, c.n); err != nil || !complete {
		return r, err
	}
	var left int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+ob.DoneTable()).Scan(&left); err != nil {
		return r, err
	}
	if left != 0 {
		return r, fmt.Errorf("REAP INCOMPLETE: %d completion rows left in %s after Reap ended (Pending %d)", left, ob.DoneTable(), ob.Pending())
	}
	return r, nil
}

// warm opens k connections of db's pool, so that no run pays for its
// connections in its measure: an application's pool is warm.
func warm(ctx context.Context, db *sql.DB, k int) {
	var conns []*sql.Conn
	for range k {
		if c, err := db.Conn(ctx); err == nil {
			conns = append(conns, c)
		}
	}
	for _, c := range conns {
		_ = c.Close()
	}
}

// deletePrefix deletes the keys a run left under prefix.
func deletePrefix(f *fleet.Fleet, prefix string) {
	c := f.Client()
	ctx := context.Background()
	var cursor uint64
	for {
		e, err := c.Do(ctx, c.B().Scan().Cursor(cursor).Match(prefix+"*").Count(1000).Build()).AsScanEntry()
		if err != nil {
			return
		}
		if len(e.Elements) > 0 {
			_ = c.Do(ctx, c.B().Del().Key(e.Elements...).Build()).Error()
		}
		if cursor = e.Cursor; cursor == 0 {
			return
		}
	}
}
