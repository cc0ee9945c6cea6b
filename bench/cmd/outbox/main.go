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
	rounds         int
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
	flag.IntVar(&c.rounds, "rounds", 3, "rounds of each run, alternating which system goes first")
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
	// Rounds alternate which system goes first, and the medians are what
	// to compare: the machine's load moves from one run to the next.
	var tput [2][]float64
	var p50s, p99s [2][]time.Duration
	settle := func() { // let earlier runs' writes settle (a checkpoint, dropped databases)
		_ = withAdmin(ctx, c.admin, func(db *sql.DB) error { _, err := db.ExecContext(ctx, "CHECKPOINT"); return err })
		time.Sleep(time.Second)
	}
	for round := range c.rounds {
		order := []int{0, 1}
		if round%2 == 1 {
			order = []int{1, 0}
		}
		fmt.Printf("-- round %d\n", round+1)
		for _, sys := range order {
			if c.skipThroughput {
				break
			}
			settle()
			rate, err := [2]func(context.Context, config) (float64, error){fleetThroughput, riverThroughput}[sys](ctx, c)
			if err != nil {
				return fmt.Errorf("%s throughput: %w", names[sys], err)
			}
			tput[sys] = append(tput[sys], rate)
		}
		for _, sys := range order {
			settle()
			p50, p99, err := [2]func(context.Context, config) (time.Duration, time.Duration, error){fleetLatency, riverLatency}[sys](ctx, c)
			if err != nil {
				return fmt.Errorf("%s latency: %w", names[sys], err)
			}
			p50s[sys], p99s[sys] = append(p50s[sys], p50), append(p99s[sys], p99)
		}
	}
	fmt.Printf("-- medians of %d rounds\n", c.rounds)
	for sys := range 2 {
		if !c.skipThroughput {
			fmt.Printf("%-13s %8.0f tx/s   ", names[sys], median(tput[sys]))
		} else {
			fmt.Printf("%-13s ", names[sys])
		}
		fmt.Printf("commit to start p50 %v, p99 %v\n", median(p50s[sys]), median(p99s[sys]))
	}
	if !c.skipThroughput {
		fmt.Printf("fleet/River throughput: %.2fx\n", median(tput[0])/median(tput[1]))
	}
	return nil
}

var names = [2]string{"fleet outbox", "River"}

func median[T float64 | time.Duration](xs []T) T {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
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
	db     *sql.DB
	ob     *fleetsql.Outbox
	f      *fleet.Fleet
	q      *fleet.Queue[tiny]
	count  *counter
	prefix string
	close  func()
}

func openFleet(ctx context.Context, c config, what string, conns int, obs *fleet.Observer) (*fleetSetup, error) {
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
		s.prefix = fmt.Sprintf("bench-outbox-%s-%d-%d:", what, os.Getpid(), dbSeq.Add(1))
		s.f, err = fleet.Open(ctx, fleet.Options{URL: c.redisURL, Prefix: s.prefix, Observer: obs})
	}
	if err != nil {
		s.db.Close()
		drop()
		return nil, err
	}
	s.q = fleet.NewQueue[tiny](s.f, "bench", fleet.QueueOptions{})
	s.close = func() {
		deletePrefix(s.f, s.prefix)
		s.f.Close()
		s.db.Close()
		drop()
	}
	return s, nil
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

func fleetThroughput(ctx context.Context, c config) (float64, error) {
	s, err := openFleet(ctx, c, "tput", c.goroutines+5, nil)
	if err != nil {
		return 0, err
	}
	defer s.close()
	if err := s.submit(ctx, -1, nil); err != nil { // warm the pool's first connection and the statement
		return 0, err
	}
	base := s.count.n.Load()
	el, err := spread(c.n, c.goroutines, func(i int) error { return s.submit(ctx, i, nil) })
	if err != nil {
		return 0, err
	}
	q := s.count.n.Load() - base
	rate := float64(c.n) / el.Seconds()
	fmt.Printf("fleet outbox  Submit in a tx:   %8.0f tx/s  (%d in %v)  %.2f statements/task (BEGIN, INSERT (+pg_notify at most once a ms), COMMIT)\n",
		rate, c.n, el.Round(time.Millisecond), float64(q)/float64(c.n))

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
			return 0, err
		}
		if left == 0 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	el = time.Since(start)
	stop()
	if err := <-done; err != nil {
		return 0, err
	}
	q = s.count.n.Load() - base
	st, err := s.q.Stats(ctx)
	if err != nil {
		return 0, err
	}
	fmt.Printf("fleet outbox  relay drain:      %8.0f rows/s (%d rows in %v, one relay)  %.3f statements/task (batches of %d)  queue now holds %d\n",
		float64(c.n+1)/el.Seconds(), c.n+1, el.Round(time.Millisecond), float64(q)/float64(c.n+1), fleetsql.DefaultBatch, st.Pending)
	return rate, nil
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

func riverThroughput(ctx context.Context, c config) (float64, error) {
	s, err := openRiver(ctx, c, "tput", c.goroutines+5)
	if err != nil {
		return 0, err
	}
	defer s.close()
	client, err := river.NewClient(riverpgxv5.New(s.pool), &river.Config{}) // insert-only
	if err != nil {
		return 0, err
	}
	if err := riverInsert(ctx, s.pool, client, -1, nil); err != nil {
		return 0, err
	}
	base := s.count.n.Load()
	el, err := spread(c.n, c.goroutines, func(i int) error { return riverInsert(ctx, s.pool, client, i, nil) })
	if err != nil {
		return 0, err
	}
	q := s.count.n.Load() - base
	rate := float64(c.n) / el.Seconds()
	fmt.Printf("River         InsertTx:         %8.0f tx/s  (%d in %v)  %.2f statements/task\n",
		rate, c.n, el.Round(time.Millisecond), float64(q)/float64(c.n))
	return rate, nil
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

func (l *latencies) report(name string, statements int64, n int) (p50, p99 time.Duration) {
	ds := make([]time.Duration, n)
	for i := range n {
		ds[i] = l.started[i].Sub(l.commit[i])
	}
	slices.Sort(ds)
	p := func(q float64) time.Duration { return ds[min(n-1, int(float64(n)*q))].Round(10 * time.Microsecond) }
	fmt.Printf("%-13s commit to start:  p50 %8v  p99 %8v  max %8v   %.2f statements/task end to end\n",
		name, p(0.50), p(0.99), ds[n-1].Round(10*time.Microsecond), float64(statements)/float64(n))
	return p(0.50), p(0.99)
}

func fleetLatency(ctx context.Context, c config) (p50, p99 time.Duration, err error) {
	// The relay's submits are timed too (an Observer), to split the
	// latency into the outbox's part (commit to the task in Redis) and the
	// queue's (to the handler's start).
	var smu sync.Mutex
	submitted := map[string]time.Time{}
	obs := &fleet.Observer{Submit: func(_ context.Context, e fleet.SubmitEvent) (map[string]string, func(int, error)) {
		return nil, func(written int, err error) {
			if written == 1 && err == nil {
				now := time.Now()
				smu.Lock()
				submitted[e.IDs[0]] = now
				smu.Unlock()
			}
		}
	}}
	s, err := openFleet(ctx, c, "lat", 20, obs)
	if err != nil {
		return 0, 0, err
	}
	defer s.close()
	l := newLatencies(c.latency)
	ids := make([]string, c.latency)
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
					if t.Payload.N >= 0 {
						smu.Lock()
						ids[t.Payload.N] = t.ID
						smu.Unlock()
					}
					_ = t.Ack(bg)
				}
			}
		})
	}
	if err := l.warmUp(ctx, func() error { return s.submit(ctx, -1, nil) }); err != nil {
		return 0, 0, err
	}
	time.Sleep(100 * time.Millisecond) // the relay's looks after the warm-up wind down
	base := s.count.n.Load()
	for i := range c.latency {
		if err := s.submit(ctx, i, func() { l.committing(i) }); err != nil {
			return 0, 0, err
		}
		time.Sleep(c.gap)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := l.wait(wctx); err != nil {
		return 0, 0, err
	}
	// Let the relay's last batches commit, then count.
	time.Sleep(200 * time.Millisecond)
	p50, p99 = l.report("fleet outbox", s.count.n.Load()-base, c.latency)
	smu.Lock()
	var outbox, queue []time.Duration
	for i, id := range ids {
		if at, ok := submitted[id]; ok {
			outbox = append(outbox, at.Sub(l.commit[i]))
			queue = append(queue, l.started[i].Sub(at))
		}
	}
	smu.Unlock()
	if len(outbox) > 0 {
		fmt.Printf("              of which commit to the task in Redis p50 %v, then to the handler's start p50 %v\n",
			median(outbox).Round(10*time.Microsecond), median(queue).Round(10*time.Microsecond))
	}
	select {
	case err := <-relayErr:
		return 0, 0, err
	default:
	}
	return p50, p99, nil
}

type tinyWorker struct {
	river.WorkerDefaults[tinyArgs]
	l *latencies
}

func (w *tinyWorker) Work(ctx context.Context, job *river.Job[tinyArgs]) error {
	w.l.start(job.Args.N)
	return nil
}

func riverLatency(ctx context.Context, c config) (p50, p99 time.Duration, err error) {
	s, err := openRiver(ctx, c, "lat", 20)
	if err != nil {
		return 0, 0, err
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
		return 0, 0, err
	}
	if err := client.Start(ctx); err != nil {
		return 0, 0, err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = client.Stop(sctx)
	}()
	if err := l.warmUp(ctx, func() error { return riverInsert(ctx, s.pool, client, -1, nil) }); err != nil {
		return 0, 0, err
	}
	time.Sleep(100 * time.Millisecond)
	base := s.count.n.Load()
	for i := range c.latency {
		if err := riverInsert(ctx, s.pool, client, i, func() { l.committing(i) }); err != nil {
			return 0, 0, err
		}
		time.Sleep(c.gap)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := l.wait(wctx); err != nil {
		return 0, 0, err
	}
	time.Sleep(200 * time.Millisecond) // River completes jobs in batches
	name := "River"
	if c.riverCooldown != 0 || c.riverPoll != 0 {
		name = fmt.Sprintf("River %v/%v", c.riverCooldown, c.riverPoll)
	}
	p50, p99 = l.report(name, s.count.n.Load()-base, c.latency)
	return p50, p99, nil
}
