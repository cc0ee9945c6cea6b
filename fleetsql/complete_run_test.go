package fleetsql_test

import (
	"context"
	"database/sql"
	"flag"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/fleet-go/fleet/fleetsql"
	"github.com/fleet-go/fleet/fleettest"
)

var runTasks = flag.Int("complete.tasks", 10_000, "tasks of TestCompleteFaultRun")

// The fault run: 10,000 tasks (-complete.tasks) through three worker
// processes that complete each in SQL (Once, Complete), under every fault
// at once: each process SIGKILLs itself at a point of a completion (before
// its COMMIT, after it, after the ack: a point and a task count drawn at
// its start) or is SIGKILLed from outside at a random moment, and is
// replaced; redis-server (AOF, appendfsync always) is SIGKILLed and
// started again; on PostgreSQL, the server crashes (pg_ctl stop -m
// immediate, a private cluster) and restarts. In the end every task has
// exactly one shipment (effects once), no process logged two acks of a
// task, and the queue is empty with no dead letter (lost: 0).
func TestCompleteFaultRun(t *testing.T) {
	for _, d := range dialects {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			var pg *pgCluster
			var db *sql.DB
			var o *fleetsql.Outbox
			var dsn string
			if d == fleetsql.PostgreSQL {
				pg = startPG(t)
				dsn = pg.URL()
				var err error
				if db, err = sql.Open("pgx", dsn); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { db.Close() })
				if o, err = fleetsql.New(db, fleetsql.Options{}); err != nil {
					t.Fatal(err)
				}
				if err := o.Migrate(ctx); err != nil {
					t.Fatal(err)
				}
			} else {
				o, db, dsn = newOutbox(t, d)
			}
			makeShipments(t, db, d)
			srv, err := fleettest.StartServer(ctx, fleettest.Config{AppendOnly: true})
			if err != nil {
				t.Fatalf("redis-server: %v (apt-get install -y redis-server)", err)
			}
			t.Cleanup(srv.Stop)
			f, prefix := openFleet(t, srv.URL())
			q := shipQueue(f, time.Second)
			ids := submitShips(t, q, *runTasks)

			// Three worker processes, each replaced when it dies.
			rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
			points := []string{"before-commit", "after-commit", "after-ack", ""}
			var mu sync.Mutex
			var all []*helper
			kills := map[string]int{}
			start := func() *helper {
				point := points[rng.IntN(len(points))]
				h := startProcess(t, "worker", d, dsn, srv.URL(), prefix, hKillAt+"="+point,
					hKillAfter+"="+strconv.Itoa(100+rng.IntN(500)), hSlots+"=4")
				mu.Lock()
				all = append(all, h)
				mu.Unlock()
				return h
			}
			procs := make([]*helper, 3)
			for i := range procs {
				procs[i] = start()
			}
			done := func() int { return len(shipments(t, db)) }
			stop := make(chan struct{})
			supervised := make(chan struct{})
			go func() {
				defer close(supervised)
				tick := time.NewTicker(50 * time.Millisecond)
				defer tick.Stop()
				outside := time.Now().Add(time.Second)
				for {
					select {
					case <-stop:
						return
					case <-tick.C:
					}
					for i, h := range procs {
						select {
						case <-h.done:
							mu.Lock()
							kills[h.killedAt()]++
							mu.Unlock()
							procs[i] = start()
						default:
						}
					}
					if time.Now().After(outside) {
						// A kill from outside, at whatever the process was doing.
						_ = procs[rng.IntN(len(procs))].cmd.Process.Kill()
						outside = time.Now().Add(time.Duration(1500+rng.IntN(2500)) * time.Millisecond)
					}
				}
			}()
			n := len(ids)
			waitFor(t, 5*time.Minute, "a third of the tasks", func() bool { return done() >= n/3 })
			srv.Kill()
			time.Sleep(500 * time.Millisecond)
			rctx, rcancel := context.WithTimeout(context.Background(), time.Minute)
			defer rcancel()
			if err := srv.Restart(rctx); err != nil {
				t.Fatal(err)
			}
			if pg != nil {
				waitFor(t, 5*time.Minute, "two thirds of the tasks", func() bool { return done() >= 2*n/3 })
				if err := pg.crash(); err != nil {
					t.Fatal(err)
				}
				time.Sleep(500 * time.Millisecond)
				if err := pg.start(); err != nil {
					t.Fatal(err)
				}
			}
			waitFor(t, 5*time.Minute, "every task shipped", func() bool { return done() >= n })
			close(stop)
			<-supervised
			mu.Lock()
			procsAll := append([]*helper(nil), all...)
			mu.Unlock()
			settleShips(t, db, q, ids, procsAll, 5*time.Minute)
			for _, h := range procs {
				h.stop(t)
			}
			ran := 0
			for _, h := range procsAll {
				for _, c := range h.counts("ran") {
					ran += c
				}
			}
			t.Logf("%d tasks, %d worker processes (how each ended: %v), %d handler runs (%d more than the tasks: runs whose transaction a kill or a fault rolled back), effects: exactly once each; %d completion rows left for the retention (acked by a process killed before its Reap deleted them)",
				n, len(procsAll), kills, ran, ran-n, count(t, db, o, o.DoneTable()))
		})
	}
}

// killedAt returns the point a worker process killed itself at, "outside"
// when it was killed otherwise, "exit" when it exited by itself.
func (h *helper) killedAt() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	for msg := range h.events {
		if len(msg) > 10 && msg[:10] == "killed at " {
			return msg[10:]
		}
	}
	if st := h.cmd.ProcessState; st != nil && !st.Exited() {
		return "outside"
	}
	return "exit"
}
