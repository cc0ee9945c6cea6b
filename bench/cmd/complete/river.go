package main

import (
	"bytes"
	"context"
	"database/sql/driver"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// itemArgs is River's job of the same payload.
type itemArgs struct {
	N int `json:"n"`
}

func (itemArgs) Kind() string { return "item" }

// completeWorker runs fleet's transaction, completing the job in it.
type completeWorker struct {
	river.WorkerDefaults[itemArgs]
	pool *pgxpool.Pool
	l    *lats
}

func (w *completeWorker) Work(ctx context.Context, job *river.Job[itemArgs]) error {
	w.l.begin(job.Args.N)
	tx, err := w.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `INSERT INTO effects (task_id, n) VALUES ($1, $2)`, strconv.FormatInt(job.ID, 10), job.Args.N); err != nil {
		return err
	}
	if _, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job); err != nil {
		return err
	}
	err = tx.Commit(ctx)
	w.l.finish(job.Args.N, err)
	return err
}

func riverRun(ctx context.Context, c config) (r result, err error) {
	name, drop, err := throwaway(ctx, "pgx", c.admin, "river")
	if err != nil {
		return r, err
	}
	defer drop()
	u, err := pgURL(c.admin, name)
	var pc *pgxpool.Config
	if err == nil {
		pc, err = pgxpool.ParseConfig(u)
	}
	if err != nil {
		return r, err
	}
	count := &counter{}
	pc.ConnConfig.Tracer = count
	pc.MaxConns = int32(c.workers + 10) // the workers' transactions, and River's fetches, completer, leader, notifier
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return r, err
	}
	defer pool.Close()
	m, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err == nil {
		_, err = m.Migrate(ctx, rivermigrate.DirectionUp, nil)
	}
	if err == nil {
		_, err = pool.Exec(ctx, effectsDDL)
	}
	if err != nil {
		return r, err
	}
	l := newLats(c.n)
	workers := river.NewWorkers()
	river.AddWorker(workers, &completeWorker{pool: pool, l: l})
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: c.workers}},
		Workers:           workers,
		FetchCooldown:     c.riverCooldown,
		FetchPollInterval: c.riverPoll,
		Logger:            slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		return r, err
	}
	for i := 0; i < c.n; i += 1000 {
		var batch []river.InsertManyParams
		for j := i; j < min(c.n, i+1000); j++ {
			batch = append(batch, river.InsertManyParams{Args: itemArgs{N: j}})
		}
		if _, err := client.InsertMany(ctx, batch); err != nil {
			return r, err
		}
	}
	var conns []*pgxpool.Conn // a warm pool, as fleet's
	for range c.workers + 10 {
		if pc, err := pool.Acquire(ctx); err == nil {
			conns = append(conns, pc)
		}
	}
	for _, pc := range conns {
		pc.Release()
	}
	dbCPU := procCPU("postgres " + name + " ")
	base, cpu0, db0, start := count.n.Load(), cpuTime(), dbCPU(), time.Now()
	if err := client.Start(ctx); err != nil {
		return r, err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = client.Stop(sctx)
	}()
	if err := l.wait(ctx, c.timeout); err != nil {
		return r, err
	}
	l.figures(&r, c.n, time.Since(start), cpuTime()-cpu0)
	time.Sleep(300 * time.Millisecond) // River's completer batches
	r.stmts, r.dbCPU = float64(count.n.Load()-base)/float64(c.n), per(dbCPU()-db0, c.n)
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := client.Stop(sctx); err != nil {
		return r, fmt.Errorf("stop: %w", err)
	}
	sdb := stdlib.OpenDBFromPool(pool)
	defer sdb.Close()
	if err := checkEffects(ctx, sdb, c.n); err != nil {
		return r, err
	}
	var done int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE state = 'completed'`).Scan(&done); err != nil {
		return r, err
	}
	if done != c.n {
		return r, fmt.Errorf("RIVER WRONG: %d of %d jobs completed", done, c.n)
	}
	return r, nil
}

func per(d time.Duration, n int) time.Duration {
	return (d / time.Duration(n)).Round(100 * time.Nanosecond)
}

// cpuTime returns this process's CPU time so far, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// procCPU returns a function that sums the CPU time (Linux: /proc, in
// ticks of 10 ms) of the processes whose command line holds match: a
// PostgreSQL database's backends ("postgres <database>"), or mariadbd.
func procCPU(match string) func() time.Duration {
	return func() time.Duration {
		var ticks int64
		dirs, _ := filepath.Glob("/proc/[0-9]*")
		for _, d := range dirs {
			cmd, err := os.ReadFile(d + "/cmdline")
			if err != nil || !bytes.Contains(bytes.ReplaceAll(cmd, []byte{0}, []byte{' '}), []byte(match)) {
				continue
			}
			stat, err := os.ReadFile(d + "/stat")
			if i := bytes.LastIndexByte(stat, ')'); err == nil && i > 0 {
				f := strings.Fields(string(stat[i+1:])) // from the state, the third field
				if len(f) > 12 {
					u, _ := strconv.ParseInt(f[11], 10, 64)
					s, _ := strconv.ParseInt(f[12], 10, 64)
					ticks += u + s
				}
			}
		}
		return time.Duration(ticks) * 10 * time.Millisecond
	}
}

// countConnector wraps go-sql-driver/mysql's connector, counting the
// statements its connections send: each Exec and Query, the BEGIN (and SET
// TRANSACTION for an isolation level), the COMMIT or ROLLBACK, each prepare
// and prepared execution. Its Driver is mysql's: fleetsql finds the dialect.
type countConnector struct {
	driver.Connector
	n *atomic.Int64
}

func (c countConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &countConn{Conn: conn, n: c.n}, nil
}

type countConn struct {
	driver.Conn
	n *atomic.Int64
}

func (c *countConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	c.n.Add(1)
	if opts.Isolation != 0 {
		c.n.Add(1)
	}
	tx, err := c.Conn.(driver.ConnBeginTx).BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	return countTx{tx, c.n}, nil
}

func (c *countConn) ExecContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Result, error) {
	res, err := c.Conn.(driver.ExecerContext).ExecContext(ctx, q, args)
	if err != driver.ErrSkip {
		c.n.Add(1)
	}
	return res, err
}

func (c *countConn) QueryContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	rows, err := c.Conn.(driver.QueryerContext).QueryContext(ctx, q, args)
	if err != driver.ErrSkip {
		c.n.Add(1)
	}
	return rows, err
}

func (c *countConn) PrepareContext(ctx context.Context, q string) (driver.Stmt, error) {
	c.n.Add(1)
	s, err := c.Conn.(driver.ConnPrepareContext).PrepareContext(ctx, q)
	if err != nil {
		return nil, err
	}
	return countStmt{s, c.n}, nil
}

func (c *countConn) ResetSession(ctx context.Context) error {
	return c.Conn.(driver.SessionResetter).ResetSession(ctx)
}

func (c *countConn) IsValid() bool { return c.Conn.(driver.Validator).IsValid() }

func (c *countConn) CheckNamedValue(nv *driver.NamedValue) error {
	return c.Conn.(driver.NamedValueChecker).CheckNamedValue(nv)
}

type countTx struct {
	driver.Tx
	n *atomic.Int64
}

func (t countTx) Commit() error   { t.n.Add(1); return t.Tx.Commit() }
func (t countTx) Rollback() error { t.n.Add(1); return t.Tx.Rollback() }

// countStmt counts the executions of a prepared statement (database/sql
// calls Exec and Query on a statement without the context methods).
type countStmt struct {
	driver.Stmt
	n *atomic.Int64
}

func (s countStmt) Exec(args []driver.Value) (driver.Result, error) {
	s.n.Add(1)
	return s.Stmt.Exec(args)
}

func (s countStmt) Query(args []driver.Value) (driver.Rows, error) {
	s.n.Add(1)
	return s.Stmt.Query(args)
}
