// Command outbox compares fleet's transactional outbox (fleetsql.Submit
// in the caller's transaction, relayed to a queue by fleetsql's Relay)
// with River's InsertTx, on the same PostgreSQL in one run, each in a
// throwaway database of its own:
//
//   - throughput: transactional submits per second, one row per
//     transaction, from G goroutines (BEGIN, the insert, COMMIT), nothing
//     consuming; then how fast fleet's relay drains what was written;
//
//   - commit to start: the latency from a transaction's COMMIT to the
//     handler's start, p50 and p99, with one transaction at a time (a gap
//     between them), the relay and a worker (River: its client) running;
//
//   - cost to the database: the statements each task costs, counted by a
//     pgx tracer on every connection (the application's, the relay's,
//     River's), in both runs.
//
//     go run ./cmd/outbox -n 20000 -goroutines 50 -latency 1000
//
// It uses the PostgreSQL of -db (default FLEETSQL_POSTGRES_URL, else the
// local server), and FLEET_REDIS_URL or a throwaway redis-server.
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
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/fleetsql"
	"github.com/fleet-go/fleet/fleettest"
)

type tiny struct {
	N int `json:"n"`
}

// tinyArgs is River's job of the same payload.
type tinyArgs struct {
	N int `json:"n"`
}

func (tinyArgs) Kind() string { return "tiny" }

// counter is a pgx tracer that counts the statements sent.
type counter struct{ n atomic.Int64 }

func (c *counter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}
func (c *counter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

type config struct {
	admin          string
	n, goroutines  int
	latency        int
	gap            time.Duration
	riverCooldown  time.Duration
	riverPoll      time.Duration
	riverWorkers   int
	redisURL       string
	skipThroughput bool
}

func main() {
	def := os.Getenv("FLEETSQL_POSTGRES_URL")
	if def == "" {
		def = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	}
	var c config
	flag.StringVar(&c.admin, "db", def, "PostgreSQL (pgx URL) where the benchmark may create databases")
	flag.IntVar(&c.n, "n", 20000, "transactions in the throughput run")
	flag.IntVar(&c.goroutines, "goroutines", 50, "concurrent transactions in the throughput run")
	flag.IntVar(&c.latency, "latency", 1000, "transactions in the commit-to-start run")
	flag.DurationVar(&c.gap, "gap", 2*time.Millisecond, "pause between the commit-to-start run's transactions")
	flag.DurationVar(&c.riverCooldown, "river-cooldown", 0, "River's FetchCooldown (0: River's default, 100ms)")
	flag.DurationVar(&c.riverPoll, "river-poll", 0, "River's FetchPollInterval (0: River's default, 1s)")
	flag.IntVar(&c.riverWorkers, "river-workers", 100, "River's MaxWorkers (each fetch takes at most this many jobs)")
	flag.BoolVar(&c.skipThroughput, "latency-only", false, "skip the throughput runs")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	if err := run(ctx, c); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, c config) error {
	c.redisURL = os.Getenv("FLEET_REDIS_URL")
	if c.redisURL == "" {
		s, err := fleettest.StartServer(ctx, fleettest.Config{})
		if err != nil {
			return err
		}
		defer s.Stop()
		c.redisURL = s.URL()
	}
	var pgVersion string
	if err := withAdmin(ctx, c.admin, func(db *sql.DB) error {
		return db.QueryRowContext(ctx, "SHOW server_version").Scan(&pgVersion)
	}); err != nil {
		return err
	}
	fmt.Printf("PostgreSQL %s, fleet outbox vs River %s InsertTx; %d transactions from %d goroutines; commit to start over %d transactions %v apart\n",
		pgVersion, "v0.51.2", c.n, c.goroutines, c.latency, c.gap)
	if !c.skipThroughput {
		if err := fleetThroughput(ctx, c); err != nil {
			return fmt.Errorf("fleet throughput: %w", err)
		}
		if err := riverThroughput(ctx, c); err != nil {
			return fmt.Errorf("river throughput: %w", err)
		}
	}
	if err := fleetLatency(ctx, c); err != nil {
		return fmt.Errorf("fleet latency: %w", err)
	}
	if err := riverLatency(ctx, c); err != nil {
		return fmt.Errorf("river latency: %w", err)
	}
	return nil
}

func withAdmin(ctx context.Context, admin string, fn func(*sql.DB) error) error {
	db, err := sql.Open("pgx", admin)
	if err != nil {
		return err
	}
	defer db.Close()
	return fn(db)
}

var dbSeq atomic.Int64

// throwawayDB creates a database and returns its URL and a function that
// drops it.
func throwawayDB(ctx context.Context, admin, what string) (string, func(), error) {
	name := fmt.Sprintf("bench_outbox_%s_%d_%d", what, os.Getpid(), dbSeq.Add(1))
	if err := withAdmin(ctx, admin, func(db *sql.DB) error {
		_, err := db.ExecContext(ctx, "CREATE DATABASE "+name)
		return err
	}); err != nil {
		return "", nil, err
	}
	u, err := url.Parse(admin)
	if err != nil {
		return "", nil, err
	}
	u.Path = "/" + name
	return u.String(), func() {
		_ = withAdmin(context.Background(), admin, func(db *sql.DB) error {
			_, err := db.Exec("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)")
			return err
		})
	}, nil
}

// fleetSetup opens a throwaway database with a counting tracer, its
// migrated outbox, and a Fleet with the queue.
type fleetSetup struct {
	db    *sql.DB
	ob    *fleetsql.Outbox
	f     *fleet.Fleet
	q     *fleet.Queue[tiny]
	count *counter
	close func()
}

func openFleet(ctx context.Context, c config, what string, conns int) (*fleetSetup, error) {
	dsn, drop, err := throwawayDB(ctx, c.admin, what)
	if err != nil {
		return nil, err
	}
	cc, err := pgx.ParseConfig(dsn)
	if err != nil {
		drop()
		return nil, err
	}
	s := &fleetSetup{count: &counter{}}
	cc.Tracer = s.count
	s.db = stdlib.OpenDB(*cc)
	s.db.SetMaxOpenConns(conns)
	s.db.SetMaxIdleConns(conns)
	if s.ob, err = fleetsql.New(s.db, fleetsql.Options{}); err == nil {
		err = s.ob.Migrate(ctx)
	}
	if err == nil {
		s.f, err = fleet.Open(ctx, fleet.Options{URL: c.redisURL, Prefix: fmt.Sprintf("bench-outbox-%s-%d:", what, os.Getpid())})
	}
	if err != nil {
		s.db.Close()
		drop()
		return nil, err
	}
	s.q = fleet.NewQueue[tiny](s.f, "bench", fleet.QueueOptions{})
	s.close = func() {
		s.f.Close()
		s.db.Close()
		drop()
	}
	return s, nil
}

func (s *fleetSetup) submit(ctx context.Context, n int, before func()) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if _, err := fleetsql.Submit(ctx, tx, s.ob, s.q, tiny{N: n}, fleet.SubmitOptions{}); err != nil {
		tx.Rollback()
		return err
	}
	if before != nil {
		before()
	}
	return tx.Commit()
}

// spread runs fn(i) for i in [0, n) from g goroutines and returns the
// elapsed time.
func spread(n, g int, fn func(i int) error) (time.Duration, error) {
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, g)
	start := time.Now()
	for range g {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := fn(i); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return time.Since(start), <-errs
}

func fleetThroughput(ctx context.Context, c config) error {
	s, err := openFleet(ctx, c, "tput", c.goroutines+5)
	if err != nil {
		return err
	}
	defer s.close()
	if err := s.submit(ctx, -1, nil); err != nil { // warm the pool's first connection and the statement
		return err
	}
	base := s.count.n.Load()
	el, err := spread(c.n, c.goroutines, func(i int) error { return s.submit(ctx, i, nil) })
	if err != nil {
		return err
	}
	q := s.count.n.Load() - base
	fmt.Printf("fleet outbox  Submit in a tx:   %8.0f tx/s  (%d in %v)  %.2f statements/task (BEGIN, INSERT (+pg_notify at most once a ms), COMMIT)\n",
		float64(c.n)/el.Seconds(), c.n, el.Round(time.Millisecond), float64(q)/float64(c.n))

	// Then the relay drains it.
	base = s.count.n.Load()
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- s.ob.Relay(rctx, s.f, fleetsql.RelayOptions{}) }()
	for {
		var left int
		if err := s.db.QueryRowContext(ctx, "SELECT count(*) FROM fleet_outbox").Scan(&left); err != nil {
			stop()
			return err
		}
		if left == 0 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	el = time.Since(start)
	stop()
	if err := <-done; err != nil {
		return err
	}
	q = s.count.n.Load() - base
	st, err := s.q.Stats(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("fleet outbox  relay drain:      %8.0f rows/s (%d rows in %v, one relay)  %.3f statements/task (batches of %d)  queue now holds %d\n",
		float64(c.n+1)/el.Seconds(), c.n+1, el.Round(time.Millisecond), float64(q)/float64(c.n+1), fleetsql.DefaultBatch, st.Pending)
	return nil
}

// riverSetup is a throwaway database migrated for River, with a pgx pool
// that counts statements.
type riverSetup struct {
	pool  *pgxpool.Pool
	count *counter
	close func()
}

func openRiver(ctx context.Context, c config, what string, conns int) (*riverSetup, error) {
	dsn, drop, err := throwawayDB(ctx, c.admin, "river_"+what)
	if err != nil {
		return nil, err
	}
	pc, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		drop()
		return nil, err
	}
	s := &riverSetup{count: &counter{}}
	pc.ConnConfig.Tracer = s.count
	pc.MaxConns = int32(conns)
	if s.pool, err = pgxpool.NewWithConfig(ctx, pc); err != nil {
		drop()
		return nil, err
	}
	m, err := rivermigrate.New(riverpgxv5.New(s.pool), nil)
	if err == nil {
		_, err = m.Migrate(ctx, rivermigrate.DirectionUp, nil)
	}
	if err != nil {
		s.pool.Close()
		drop()
		return nil, err
	}
	s.close = func() {
		s.pool.Close()
		drop()
	}
	return s, nil
}

func riverInsert(ctx context.Context, pool *pgxpool.Pool, client *river.Client[pgx.Tx], n int, before func()) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	if _, err := client.InsertTx(ctx, tx, tinyArgs{N: n}, nil); err != nil {
		_ = tx.Rollback(ctx)
		return err
	}
	if before != nil {
		before()
	}
	return tx.Commit(ctx)
}

func riverThroughput(ctx context.Context, c config) error {
	s, err := openRiver(ctx, c, "tput", c.goroutines+5)
	if err != nil {
		return err
	}
	defer s.close()
	client, err := river.NewClient(riverpgxv5.New(s.pool), &river.Config{}) // insert-only
	if err != nil {
		return err
	}
	if err := riverInsert(ctx, s.pool, client, -1, nil); err != nil {
		return err
	}
	base := s.count.n.Load()
	el, err := spread(c.n, c.goroutines, func(i int) error { return riverInsert(ctx, s.pool, client, i, nil) })
	if err != nil {
		return err
	}
	q := s.count.n.Load() - base
	fmt.Printf("River         InsertTx:         %8.0f tx/s  (%d in %v)  %.2f statements/task\n",
		float64(c.n)/el.Seconds(), c.n, el.Round(time.Millisecond), float64(q)/float64(c.n))
	return nil
}

// latencies records, per task, the commit's and the handler's start times.
// Task -1 is the warm-up: the measured tasks start once it ran.
type latencies struct {
	mu      sync.Mutex
	commit  []time.Time
	started []time.Time
	left    sync.WaitGroup
	warm    chan struct{}
}

func newLatencies(n int) *latencies {
	l := &latencies{commit: make([]time.Time, n), started: make([]time.Time, n), warm: make(chan struct{}, 1)}
	l.left.Add(n)
	return l
}

// warmUp submits task -1 with submit and waits until it ran.
func (l *latencies) warmUp(ctx context.Context, submit func() error) error {
	if err := submit(); err != nil {
		return err
	}
	select {
	case <-l.warm:
		return nil
	case <-time.After(time.Minute):
		return errors.New("the warm-up task did not run within a minute")
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (l *latencies) committing(i int) {
	l.mu.Lock()
	l.commit[i] = time.Now()
	l.mu.Unlock()
}

func (l *latencies) start(i int) {
	if i < 0 {
		select {
		case l.warm <- struct{}{}:
		default:
		}
		return
	}
	l.mu.Lock()
	first := l.started[i].IsZero()
	if first {
		l.started[i] = time.Now()
	}
	l.mu.Unlock()
	if first {
		l.left.Done()
	}
}

func (l *latencies) wait(ctx context.Context) error {
	done := make(chan struct{})
	go func() { l.left.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return errors.New("not every task started in time")
	}
}

func (l *latencies) report(name string, statements int64, n int) {
	ds := make([]time.Duration, n)
	for i := range n {
		ds[i] = l.started[i].Sub(l.commit[i])
	}
	slices.Sort(ds)
	p := func(q float64) time.Duration { return ds[min(n-1, int(float64(n)*q))].Round(10 * time.Microsecond) }
	fmt.Printf("%-13s commit to start:  p50 %8v  p99 %8v  max %8v   %.2f statements/task end to end\n",
		name, p(0.50), p(0.99), ds[n-1].Round(10*time.Microsecond), float64(statements)/float64(n))
}

func fleetLatency(ctx context.Context, c config) error {
	s, err := openFleet(ctx, c, "lat", 20)
	if err != nil {
		return err
	}
	defer s.close()
	l := newLatencies(c.latency)
	bg, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stop(); wg.Wait() }()
	relayErr := make(chan error, 1)
	wg.Go(func() { relayErr <- s.ob.Relay(bg, s.f, fleetsql.RelayOptions{}) })
	for range 4 { // a worker: Reserve blocks until a task comes
		wg.Go(func() {
			for bg.Err() == nil {
				ts, err := s.q.Reserve(bg, 1, time.Second)
				if err != nil {
					continue
				}
				for _, t := range ts {
					l.start(t.Payload.N)
					_ = t.Ack(bg)
				}
			}
		})
	}
	if err := l.warmUp(ctx, func() error { return s.submit(ctx, -1, nil) }); err != nil {
		return err
	}
	time.Sleep(100 * time.Millisecond) // the relay's looks after the warm-up wind down
	base := s.count.n.Load()
	for i := range c.latency {
		if err := s.submit(ctx, i, func() { l.committing(i) }); err != nil {
			return err
		}
		time.Sleep(c.gap)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := l.wait(wctx); err != nil {
		return err
	}
	// Let the relay's last batches commit, then count.
	time.Sleep(200 * time.Millisecond)
	l.report("fleet outbox", s.count.n.Load()-base, c.latency)
	select {
	case err := <-relayErr:
		return err
	default:
	}
	return nil
}

type tinyWorker struct {
	river.WorkerDefaults[tinyArgs]
	l *latencies
}

func (w *tinyWorker) Work(ctx context.Context, job *river.Job[tinyArgs]) error {
	w.l.start(job.Args.N)
	return nil
}

func riverLatency(ctx context.Context, c config) error {
	s, err := openRiver(ctx, c, "lat", 20)
	if err != nil {
		return err
	}
	defer s.close()
	l := newLatencies(c.latency)
	workers := river.NewWorkers()
	river.AddWorker(workers, &tinyWorker{l: l})
	client, err := river.NewClient(riverpgxv5.New(s.pool), &river.Config{
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: c.riverWorkers}},
		Workers:           workers,
		FetchCooldown:     c.riverCooldown,
		FetchPollInterval: c.riverPoll,
	})
	if err != nil {
		return err
	}
	if err := client.Start(ctx); err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = client.Stop(sctx)
	}()
	if err := l.warmUp(ctx, func() error { return riverInsert(ctx, s.pool, client, -1, nil) }); err != nil {
		return err
	}
	time.Sleep(100 * time.Millisecond)
	base := s.count.n.Load()
	for i := range c.latency {
		if err := riverInsert(ctx, s.pool, client, i, func() { l.committing(i) }); err != nil {
			return err
		}
		time.Sleep(c.gap)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := l.wait(wctx); err != nil {
		return err
	}
	time.Sleep(200 * time.Millisecond) // River completes jobs in batches
	name := "River"
	if c.riverCooldown != 0 || c.riverPoll != 0 {
		name = fmt.Sprintf("River %v/%v", c.riverCooldown, c.riverPoll)
	}
	l.report(name, s.count.n.Load()-base, c.latency)
	return nil
}
