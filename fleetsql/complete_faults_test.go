package fleetsql_test

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/fleetsql"
	"github.com/fleet-go/fleet/fleettest"
)

// A worker process's settings (besides hDialect, hDSN, hRedis, hPrefix,
// and hKillAt / hKillAfter, whose steps here are "before-commit",
// "after-commit" and "after-ack").
const (
	hSlots = "FLEETSQL_H_SLOTS" // WorkerOptions.Slots (default 4)
	hLease = "FLEETSQL_H_LEASE" // the queue's lease (default 1s)
)

// shipQueue is the queue of the completion tests' worker processes: a
// short lease, so that a killed worker's tasks come back soon, and
// attempts enough for every kill of a fault run.
func shipQueue(f *fleet.Fleet, lease time.Duration) *fleet.Queue[Ship] {
	return fleet.NewQueue[Ship](f, ships, fleet.QueueOptions{Lease: lease, MaxAttempts: 1000,
		BackoffBase: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond, Retention: time.Hour})
}

// workerMain runs a worker of shipQueue until SIGTERM: each task writes
// its shipment and completes in one transaction (Once, Complete), Reap and
// a sweeper run beside it. It logs {"msg":"ran","task":id} when a handler
// starts and {"msg":"acked","task":id} for each ack the Observer sees; with
// hKillAt it SIGKILLs itself at that point of its hKillAfter-th task.
func workerMain() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	var mu sync.Mutex
	say := func(msg, id string) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(os.Stderr, "{\"msg\":%q,\"task\":%q}\n", msg, id)
	}
	fmt.Fprintln(os.Stderr, `{"msg":"ready"}`)
	kill := killer(func(point, id string) { say("killed at "+point, id) })
	db, err := helperDB()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer db.Close()
	obs := &fleet.Observer{TaskEnded: func(_ context.Context, e fleet.TaskEndEvent) {
		if e.Outcome == fleet.TaskProcessed {
			say("acked", e.ID)
		}
	}}
	f, err := fleet.Open(ctx, fleet.Options{URL: os.Getenv(hRedis), Prefix: os.Getenv(hPrefix), Observer: obs})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer f.Close()
	lease, _ := time.ParseDuration(os.Getenv(hLease))
	if lease == 0 {
		lease = time.Second
	}
	slots, _ := strconv.Atoi(os.Getenv(hSlots))
	if slots == 0 {
		slots = 4
	}
	q := shipQueue(f, lease)
	o, err := fleetsql.New(db, fleetsql.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	var bg sync.WaitGroup
	defer bg.Wait()
	bg.Go(func() { _ = o.Reap(ctx, fleetsql.ReapOptions{FlushEvery: 10 * time.Millisecond}) })
	bg.Go(func() { _ = f.RunSweeper(ctx, fleet.SweeperOptions{Interval: 100 * time.Millisecond}) })
	handler := fleet.BatchFunc[struct{}, struct{}, Ship](func(ctx context.Context, _ *fleet.Slot[struct{}, struct{}], t *fleet.Task[Ship]) error {
		say("ran", t.ID)
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback() }()
		if _, err := tx.ExecContext(ctx, insertShipment(o), t.ID, t.Payload.Order); err != nil {
			return err
		}
		if err := fleetsql.Complete(ctx, tx, o, t, Shipped{Order: t.Payload.Order, By: strconv.Itoa(os.Getpid())}); err != nil {
			return err
		}
		kill("before-commit", t.ID)
		if err := tx.Commit(); err != nil {
			return err
		}
		kill("after-commit", t.ID)
		t.AfterAck(func() { kill("after-ack", t.ID) })
		return nil
	})
	w := fleet.NewBatchWorker(f, fleet.WorkerOptions{Type: "shipper", Slots: slots}, q, fleetsql.Once(o, handler))
	if err := w.Start(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := w.Stop(sctx); err != nil {
		fmt.Fprintln(os.Stderr, "stop:", err)
	}
	return 0
}

func insertShipment(o *fleetsql.Outbox) string {
	if o.Dialect() == fleetsql.MySQL {
		return `INSERT INTO shipments (task_id, order_no) VALUES (?, ?)`
	}
	return `INSERT INTO shipments (task_id, order_no) VALUES ($1, $2)`
}

// submitShips submits n tasks of orders [0, n) and returns their ids.
func submitShips(tb testing.TB, q *fleet.Queue[Ship], n int) []string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ps := make([]Ship, n)
	for i := range ps {
		ps[i] = Ship{Order: i}
	}
	var ids []string
	for len(ps) > 0 {
		k := min(len(ps), 1000)
		got, err := q.SubmitMany(ctx, ps[:k])
		if err != nil {
			tb.Fatal(err)
		}
		ids = append(ids, got...)
		ps = ps[k:]
	}
	return ids
}

// settleShips waits until q has nothing left (no task pending, scheduled,
// in flight or dead), then checks that each of ids made exactly one
// shipment and is done with a recorded result, and that no worker process
// logged two acks of a task.
func settleShips(tb testing.TB, db *sql.DB, q *fleet.Queue[Ship], ids []string, procs []*helper, timeout time.Duration) {
	tb.Helper()
	ctx := context.Background()
	waitFor(tb, timeout, "every task done", func() bool {
		st, err := q.Stats(ctx)
		return err == nil && st.Pending+st.InFlight+st.Scheduled+st.Dead == 0
	})
	got := shipments(tb, db)
	var missing, doubled []string
	for _, id := range ids {
		switch got[id] {
		case 1:
		case 0:
			missing = append(missing, id)
		default:
			doubled = append(doubled, id)
		}
	}
	acks := map[string]int{}
	for _, p := range procs {
		for id, n := range p.counts("acked") {
			acks[id] += n
		}
	}
	var ackedTwice []string
	for id, n := range acks {
		if n > 1 {
			ackedTwice = append(ackedTwice, id)
		}
	}
	if len(missing)+len(doubled)+len(ackedTwice) > 0 || len(got) != len(ids) {
		tb.Fatalf("of %d tasks: %d without a shipment %v, %d shipped twice or more %v, %d acked twice %v; %d tasks shipped in all",
			len(ids), len(missing), missing[:min(5, len(missing))], len(doubled), doubled[:min(5, len(doubled))], len(ackedTwice), ackedTwice[:min(5, len(ackedTwice))], len(got))
	}
	st, err := q.Stats(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	if st.Dead != 0 {
		tb.Fatalf("%d tasks dead-lettered", st.Dead)
	}
}

// A worker process SIGKILLed at each point of a completion (inside the
// transaction before its COMMIT, after the COMMIT and before the ack,
// after the ack) loses nothing and doubles nothing: the next worker
// process runs the task again when the kill came before the commit (the
// transaction rolled back), acks it without running the handler when it
// came after (the row is there), and never sees it when it came after the
// ack. Each task has exactly one shipment and one ack.
func TestCompleteKilledAtEachPoint(t *testing.T) {
	for _, d := range dialects {
		for _, c := range []struct {
			point    string
			reran    bool // the next worker runs the killed task's handler
			foundRow bool // the killed task's row stays for the next worker
		}{
			{"before-commit", true, false},
			{"after-commit", false, true},
			{"after-ack", false, false},
		} {
			t.Run(d.String()+"/"+c.point, func(t *testing.T) {
				t.Parallel()
				const n = 20
				o, db, dsn := newOutbox(t, d)
				makeShipments(t, db, d)
				redis := sharedRedis(t).URL()
				f, prefix := openFleet(t, redis)
				q := shipQueue(f, time.Second)
				ids := submitShips(t, q, n)

				a := startProcess(t, "worker", d, dsn, redis, prefix, hKillAt+"="+c.point, hKillAfter+"=5", hSlots+"=1")
				a.wait(t, time.Minute)
				var killed string
				for id := range a.counts("killed at " + c.point) {
					killed = id
				}
				if killed == "" {
					t.Fatalf("worker A was not killed at %s:\n%s", c.point, a.log())
				}
				if _, _, _, ok := doneRow(t, db, o, killed); c.point != "after-ack" && ok != c.foundRow {
					t.Fatalf("after a kill %s, the killed task's row exists: %v, want %v", c.point, ok, c.foundRow)
				}
				b := startProcess(t, "worker", d, dsn, redis, prefix, hSlots+"=2")
				settleShips(t, db, q, ids, []*helper{a, b}, time.Minute)
				b.stop(t)
				ranB := b.counts("ran")[killed]
				if c.reran != (ranB == 1) || ranB > 1 {
					t.Errorf("worker B ran the task killed %s %d times, want reran=%v", c.point, ranB, c.reran)
				}
				if a.counts("acked")[killed]+b.counts("acked")[killed] != map[bool]int{true: 1, false: 0}[c.point != "after-ack"] {
					t.Errorf("acks of the killed task logged: A %d, B %d", a.counts("acked")[killed], b.counts("acked")[killed])
				}
				rec, err := q.Lookup(context.Background(), killed)
				if err != nil || rec.Status != fleet.TaskDone {
					t.Fatalf("the killed task: %+v, %v", rec, err)
				}
				// B acked what it acked, and its Reap deleted those rows at
				// its stop; A's last flush may have missed a row or two of
				// the tasks it acked before it died (they wait for the
				// retention), but no row of a task B acked is left.
				for id := range b.counts("acked") {
					if _, _, _, ok := doneRow(t, db, o, id); ok {
						t.Errorf("the row of task %s, acked by B, outlived B's Reap", id)
					}
				}
			})
		}
	}
}

// The connection breaks at COMMIT, two ways: the COMMIT reached the
// server and committed, but its reply never came (the handler cannot know
// it committed); or it never reached the server (the transaction rolls
// back). The task's next delivery decides by the row: acked without a run
// in the first case, run again in the second. One shipment each.
func TestCompleteConnectionCutAtCommit(t *testing.T) {
	for _, d := range dialects {
		for _, reached := range []bool{true, false} {
			name := d.String() + "/commit-lost"
			if reached {
				name = d.String() + "/commit-reached"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				o, direct, dsn := newOutbox(t, d)
				makeShipments(t, direct, d)
				target := "127.0.0.1:5432"
				if d == fleetsql.MySQL {
					target = "127.0.0.1:3306"
				}
				p, err := fleettest.StartProxy(target)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(p.Close)
				db := viaProxy(t, d, dsn, p.Addr)
				ob, err := fleetsql.New(db, fleetsql.Options{})
				if err != nil {
					t.Fatal(err)
				}
				f, _ := openFleet(t, sharedRedis(t).URL())
				q := shipQueue(f, 2*time.Second)
				id := submitShips(t, q, 1)[0]
				var runs int
				var mu sync.Mutex
				handler := fleet.BatchFunc[struct{}, struct{}, Ship](func(ctx context.Context, _ *fleet.Slot[struct{}, struct{}], t2 *fleet.Task[Ship]) error {
					mu.Lock()
					runs++
					first := runs == 1
					mu.Unlock()
					return ship(ctx, db, ob, t2, "w", func(*sql.Tx) {
						if !first {
							return
						}
						if reached {
							// The COMMIT goes through; its reply is held, then
							// the connection is cut once the row is seen
							// committed from outside.
							p.HoldReplies()
							go func() {
								for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
									if rowCommitted(direct, o, id) {
										break
									}
								}
								p.Cut()
								p.Thaw()
							}()
							return
						}
						p.Cut() // the COMMIT goes nowhere
					})
				})
				startShipper(t, f, q, ob, handler)
				waitDone(t, q, id)
				mu.Lock()
				defer mu.Unlock()
				if want := map[bool]int{true: 1, false: 2}[reached]; runs != want {
					t.Errorf("the handler ran %d times, want %d", runs, want)
				}
				if got := shipments(t, direct); got[id] != 1 {
					t.Errorf("shipments: %v", got)
				}
			})
		}
	}
}

// viaProxy opens dsn's database through the proxy at addr.
func viaProxy(tb testing.TB, d fleetsql.Dialect, dsn, addr string) *sql.DB {
	tb.Helper()
	driver := "pgx"
	if d == fleetsql.MySQL {
		driver = "mysql"
		cfg, err := mysqlParse(dsn)
		if err != nil {
			tb.Fatal(err)
		}
		cfg.Addr = addr
		dsn = cfg.FormatDSN()
	} else {
		dsn = replaceHost(tb, dsn, addr)
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	return db
}

func mysqlParse(dsn string) (*mysql.Config, error) { return mysql.ParseDSN(dsn) }

// replaceHost points the pgx URL dsn at addr.
func replaceHost(tb testing.TB, dsn, addr string) string {
	tb.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		tb.Fatal(err)
	}
	u.Host = addr
	return u.String()
}

// rowCommitted reports whether task id's completion row is committed, as
// seen from db (errors count as no).
func rowCommitted(db *sql.DB, o *fleetsql.Outbox, id string) bool {
	q := `SELECT 1 FROM "` + o.DoneTable() + `" WHERE task_id = $1`
	if o.Dialect() == fleetsql.MySQL {
		q = "SELECT 1 FROM `" + o.DoneTable() + "` WHERE task_id = ?"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var one int
	return db.QueryRowContext(ctx, q, id).Scan(&one) == nil
}
