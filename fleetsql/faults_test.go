package fleetsql_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/fleetsql"
	"github.com/fleet-go/fleet/fleettest"
)

// writer commits one row a transaction, with Job.N counting up, until
// finish; it goes on past errors (a fault test's), and keeps which rows
// committed and which may have (their COMMIT failed: it may have happened
// before the connection broke).
type writer struct {
	mu        sync.Mutex
	committed []int
	maybe     []int
	stop      chan struct{}
	done      chan struct{}
}

func startWriter(tb testing.TB, db *sql.DB, o *fleetsql.Outbox, q *fleet.Queue[Job]) *writer {
	w := &writer{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for n := 0; ; n++ {
			select {
			case <-w.stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
			committed, maybe := w.one(db, o, q, n)
			w.mu.Lock()
			if committed {
				w.committed = append(w.committed, n)
			} else if maybe {
				w.maybe = append(w.maybe, n)
			}
			w.mu.Unlock()
			if !committed {
				time.Sleep(20 * time.Millisecond)
			}
		}
	}()
	tb.Cleanup(func() { w.finish() })
	return w
}

func (w *writer) one(db *sql.DB, o *fleetsql.Outbox, q *fleet.Queue[Job], n int) (committed, maybe bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return false, false
	}
	if _, err := fleetsql.Submit(ctx, tx, o, q, Job{N: n}, fleet.SubmitOptions{}); err != nil {
		tx.Rollback()
		return false, false
	}
	if err := tx.Commit(); err != nil {
		return false, true
	}
	return true, false
}

// count returns how many rows committed so far.
func (w *writer) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.committed)
}

// finish stops the writer and returns the rows that committed and those
// that may have.
func (w *writer) finish() (committed, maybe []int) {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.committed, w.maybe
}

// consumer drains a queue into a ledger in the background until stopped.
func startConsumer(tb testing.TB, q *fleet.Queue[Job]) (l *ledger, stop func()) {
	l = newLedger()
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			l.drain(tb, q, 100*time.Millisecond)
		}
	})
	var once sync.Once
	stop = func() { once.Do(func() { close(done); wg.Wait() }) }
	tb.Cleanup(stop)
	return l, stop
}

// settle waits for the outbox to empty and every committed row's task to
// be taken, then checks the evidence: each committed row made exactly one
// task, each row that may have committed at most one, nothing else any;
// the outbox, its dead rows and the queue are empty.
func settle(t *testing.T, db *sql.DB, o *fleetsql.Outbox, q *fleet.Queue[Job], w *writer, l *ledger, stop func()) {
	t.Helper()
	committed, maybe := w.finish()
	waitFor(t, 2*time.Minute, "an empty outbox", func() bool { return countOr(db, o, -1) == 0 })
	waitFor(t, time.Minute, "a task for every committed row", func() bool {
		for _, n := range committed {
			if l.tasks(n) == 0 {
				return false
			}
		}
		return true
	})
	stop()
	l.drain(t, q, 300*time.Millisecond) // a late task would be a double
	t.Logf("%d rows committed, %d commits failed (may have committed), %d tasks", len(committed), len(maybe), l.total())
	l.check(t, committed, maybe)
	assertEmpty(t, db, o, q)
}

// countOr counts the outbox's rows, or returns or when the database does
// not answer.
func countOr(db *sql.DB, o *fleetsql.Outbox, or int) int {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var n int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+quoted(o, o.Table())).Scan(&n); err != nil {
		return or
	}
	return n
}

// logSums counts what a relay logged (as JSON), for evidence that a fault
// made it resubmit rows.
type logSums struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *logSums) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func (s *logSums) logger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(s, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// sum adds field k over the "relayed" lines; warns counts the warnings
// (failed batches, lost LISTEN connections).
func (s *logSums) sum(k string) (sum, warns int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, line := range strings.Split(s.buf.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) != nil {
			continue
		}
		if m["msg"] == "fleetsql: relayed" {
			v, _ := m[k].(float64)
			sum += int(v)
		}
		if m["level"] == "WARN" {
			warns++
		}
	}
	return sum, warns
}

// PostgreSQL crashes (pg_ctl stop -m immediate) and comes back twice
// while rows are committed and relayed: once wherever the relay is, once
// in the middle of a batch, after its submits and before its DELETE. The
// relay backs off and listens again; the batch's rows are submitted again
// (duplicates); nothing is lost or doubled. A row committed after the
// restarts reaches the queue through NOTIFY (the relay's own looks are a
// minute apart). Not parallel: it sets the package's step hook.
func TestPostgresRestarted(t *testing.T) {
	pg := startPG(t)
	db, err := sql.Open("pgx", pg.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	o, err := fleetsql.New(db, fleetsql.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := o.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	f, _ := openFleet(t, sharedRedis(t).URL())
	q := fleet.NewQueue[Job](f, jobs, fleet.QueueOptions{})
	var logs logSums
	// Looks a minute apart, the safety poll an hour: only notifications,
	// and the look at each LISTEN, find rows in time.
	runRelay(t, o, f, fleetsql.RelayOptions{PollMin: time.Minute, PollMax: time.Minute, SafetyPoll: time.Hour,
		RetryMax: 200 * time.Millisecond, Logger: logs.logger()})
	l, stop := startConsumer(t, q)
	w := startWriter(t, db, o, q)
	waitFor(t, time.Minute, "100 rows", func() bool { return w.count() >= 100 })
	if err := pg.crash(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	if err := pg.start(); err != nil {
		t.Fatal(err)
	}
	before := w.count()
	waitFor(t, time.Minute, "100 more rows", func() bool { return w.count() >= before+100 })

	crashed := make(chan error, 1)
	var once sync.Once
	fleetsql.SetStepHook(func(ob *fleetsql.Outbox, step string) {
		if ob != o || step != "submitted" {
			return
		}
		once.Do(func() {
			err := pg.crash()
			if err == nil {
				err = pg.start()
			}
			crashed <- err
		})
	})
	t.Cleanup(func() { fleetsql.SetStepHook(nil) })
	select {
	case err := <-crashed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("no batch reached its DELETE within a minute")
	}
	before = w.count()
	waitFor(t, time.Minute, "100 more rows", func() bool { return w.count() >= before+100 })
	settle(t, db, o, q, w, l, stop)
	dups, warns := logs.sum("duplicates")
	t.Logf("the relay resubmitted %d rows as duplicates, after %d warnings", dups, warns)
	if dups == 0 || warns == 0 {
		t.Errorf("the batch cut before its DELETE left no duplicates (%d) or warnings (%d)", dups, warns)
	}

	// Listening again: a row committed now reaches the queue at once.
	const n = 1 << 20
	start := time.Now()
	submitRows(t, db, o, q, n, n+1, 1)
	ts, err := q.Reserve(context.Background(), 1, 10*time.Second)
	if err != nil || len(ts) != 1 || ts[0].Payload.N != n {
		t.Fatalf("after the restart: %v, %v", ts, err)
	}
	if el := time.Since(start); el > 3*time.Second {
		t.Errorf("a row took %v after the restart: the relay did not LISTEN again", el)
	}
	_ = ts[0].Ack(context.Background())
}

// redis-server (appendonly, appendfsync always) is SIGKILLed and started
// again while rows are relayed and acked: the rows it never answered stay
// in the outbox and are relayed when it is back, once.
func TestRedisRestartedAOF(t *testing.T) {
	forEach(t, func(t *testing.T, d fleetsql.Dialect) {
		o, db, _ := newOutbox(t, d)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		srv, err := fleettest.StartServer(ctx, fleettest.Config{AppendOnly: true})
		if err != nil {
			t.Fatalf("redis-server: %v (apt-get install -y redis-server)", err)
		}
		t.Cleanup(srv.Stop)
		f, _ := openFleet(t, srv.URL())
		q := fleet.NewQueue[Job](f, jobs, fleet.QueueOptions{})
		var logs logSums
		runRelay(t, o, f, fleetsql.RelayOptions{SubmitTimeout: 500 * time.Millisecond, RetryMax: 200 * time.Millisecond, Logger: logs.logger()})
		l, stop := startConsumer(t, q)
		w := startWriter(t, db, o, q)
		waitFor(t, time.Minute, "100 rows", func() bool { return w.count() >= 100 })
		srv.Kill()
		time.Sleep(time.Second) // rows pile up in the outbox
		if err := srv.Restart(ctx); err != nil {
			t.Fatal(err)
		}
		before := w.count()
		waitFor(t, time.Minute, "100 more rows", func() bool { return w.count() >= before+100 })
		settle(t, db, o, q, w, l, stop)
		if _, warns := logs.sum(""); warns == 0 {
			t.Errorf("the relay saw no failed batch: was Redis down under it?")
		}
	})
}

// The relay's connections to Redis are cut, frozen, and made to lose
// their replies (the commands run, the answers never come: the relay
// cannot know whether its submits happened) while it runs: the rows whose
// submit was not answered are submitted again, as duplicates, and each
// row still makes one task.
func TestRedisCut(t *testing.T) {
	forEach(t, func(t *testing.T, d fleetsql.Dialect) {
		o, db, _ := newOutbox(t, d)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		srv, err := fleettest.StartServer(ctx, fleettest.Config{})
		if err != nil {
			t.Fatalf("redis-server: %v (apt-get install -y redis-server)", err)
		}
		t.Cleanup(srv.Stop)
		p, err := fleettest.StartProxy(srv.Addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		direct, prefix := openFleet(t, srv.URL())
		q := fleet.NewQueue[Job](direct, jobs, fleet.QueueOptions{})
		rf, err := fleet.Open(ctx, fleet.Options{URL: p.URL(), Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rf.Close() })
		fleet.NewQueue[Job](rf, jobs, fleet.QueueOptions{})
		var logs logSums
		runRelay(t, o, rf, fleetsql.RelayOptions{SubmitTimeout: 200 * time.Millisecond, RetryMax: 100 * time.Millisecond, Logger: logs.logger()})
		l, stop := startConsumer(t, q)
		w := startWriter(t, db, o, q)
		at := func(rows int) { waitFor(t, time.Minute, "rows", func() bool { return w.count() >= rows }) }
		at(50)
		p.Cut()
		at(100)
		p.HoldReplies() // submits run; their answers are lost with the cut below
		time.Sleep(time.Second)
		p.Cut()
		p.Thaw()
		at(150)
		p.Freeze()
		time.Sleep(time.Second)
		p.Thaw()
		at(200)
		p.Cut()
		at(250)
		settle(t, db, o, q, w, l, stop)
		dups, warns := logs.sum("duplicates")
		t.Logf("the relay resubmitted %d rows as duplicates, after %d failed batches", dups, warns)
		if warns == 0 {
			t.Errorf("the relay saw no failed batch: were its connections cut?")
		}
	})
}

// A Redis that answers nothing (a frozen connection) holds a batch's rows
// locked for at most BatchTimeout: its submits end at three quarters of it
// whatever SubmitTimeout says, the batch commits, and another relay could
// take the rows. Once Redis answers, each row makes one task.
func TestRedisStallBounded(t *testing.T) {
	forEach(t, func(t *testing.T, d fleetsql.Dialect) {
		const rows = 5
		o, db, _ := newOutbox(t, d)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		srv, err := fleettest.StartServer(ctx, fleettest.Config{})
		if err != nil {
			t.Fatalf("redis-server: %v (apt-get install -y redis-server)", err)
		}
		t.Cleanup(srv.Stop)
		p, err := fleettest.StartProxy(srv.Addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		direct, prefix := openFleet(t, srv.URL())
		q := fleet.NewQueue[Job](direct, jobs, fleet.QueueOptions{})
		rf, err := fleet.Open(ctx, fleet.Options{URL: p.URL(), Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rf.Close() })
		fleet.NewQueue[Job](rf, jobs, fleet.QueueOptions{})
		submitRows(t, db, o, q, 0, rows, rows)
		free := func() int { // rows no transaction holds
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback()
			rs, err := tx.QueryContext(ctx, "SELECT id FROM "+quoted(o, o.Table())+" FOR UPDATE SKIP LOCKED")
			if err != nil {
				t.Fatal(err)
			}
			defer rs.Close()
			n := 0
			for rs.Next() {
				n++
			}
			return n
		}
		p.Freeze()
		const batch = 2 * time.Second
		runRelay(t, o, rf, fleetsql.RelayOptions{BatchTimeout: batch, SubmitTimeout: time.Minute, RetryMax: 5 * time.Second})
		waitFor(t, 10*time.Second, "the relay to take the rows", func() bool { return free() == 0 })
		taken := time.Now()
		waitFor(t, 10*time.Second, "the rows to come free", func() bool { return free() == rows })
		if held := time.Since(taken); held > batch+2*time.Second {
			t.Errorf("a frozen Redis kept the rows locked %v, past BatchTimeout %v", held, batch)
		}
		p.Thaw()
		waitFor(t, time.Minute, "an empty outbox", func() bool { return countOr(db, o, -1) == 0 })
		l := newLedger()
		l.drain(t, q, 300*time.Millisecond)
		l.exactlyOnce(t, rows)
		assertEmpty(t, db, o, q)
	})
}
