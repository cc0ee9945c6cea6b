package fleetsql_test

import (
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/fleetsql"
)

// Three relay processes over 10,000 rows, committed while they run (ten
// rows a transaction, from 4 goroutines), with a worker acking the tasks
// as they come: each row becomes exactly one task, and the outbox is
// empty after.
func TestConcurrentRelayProcesses(t *testing.T) {
	forEach(t, func(t *testing.T, d fleetsql.Dialect) {
		const rows, writers = 10_000, 4
		o, db, dsn := newOutbox(t, d)
		redis := sharedRedis(t).URL()
		f, prefix := openFleet(t, redis)
		q := fleet.NewQueue[Job](f, jobs, fleet.QueueOptions{})
		hs := make([]*helper, 3)
		for i := range hs {
			hs[i] = startHelper(t, d, dsn, redis, prefix)
		}
		var wg sync.WaitGroup
		for w := range writers {
			wg.Go(func() { submitRows(t, db, o, q, w*rows/writers, (w+1)*rows/writers, 10) })
		}
		l := newLedger()
		done := make(chan struct{})
		var drained sync.WaitGroup
		drained.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				l.drain(t, q, 100*time.Millisecond)
			}
		})
		wg.Wait()
		waitFor(t, 3*time.Minute, "an empty outbox", func() bool { return count(t, db, o, o.Table()) == 0 })
		waitFor(t, time.Minute, strconv.Itoa(rows)+" tasks", func() bool { return l.total() >= rows })
		close(done)
		drained.Wait()
		l.drain(t, q, 300*time.Millisecond) // anything late would be a double
		l.exactlyOnce(t, rows)
		assertEmpty(t, db, o, q)
		total := 0
		for i, h := range hs {
			h.stop(t)
			t.Logf("relay %d: relayed %d, duplicates %d", i, h.sum("relayed"), h.sum("duplicates"))
			total += h.sum("relayed")
			if w := grepWarn(h.log()); w != "" {
				t.Errorf("relay %d warned with no fault injected:\n%s", i, w)
			}
			if h.sum("duplicates")+h.sum("dead") != 0 {
				t.Errorf("relay %d: %d duplicates, %d dead rows: replicas took the same rows", i, h.sum("duplicates"), h.sum("dead"))
			}
		}
		if total != rows {
			t.Errorf("the relays logged %d relayed rows, want %d", total, rows)
		}
	})
}

// A relay process SIGKILLed at each step of a batch loses nothing and
// doubles nothing: the next relay finds the rows that were not deleted
// and committed, and their submits are no-ops (duplicates), even for
// tasks acked in between, which the unique window still holds.
func TestRelayKilledAtEachStep(t *testing.T) {
	for _, d := range dialects {
		for _, c := range []struct {
			step      string
			submitted int // tasks the killed relay had made
			left      int // rows it left behind
		}{
			{"selected", 0, 40},   // after the SELECT ... FOR UPDATE SKIP LOCKED
			{"submit", 1, 40},     // after the first row's submit
			{"submitted", 40, 40}, // after every submit, before the DELETE
			{"deleted", 40, 40},   // after the DELETE, before the COMMIT
			{"committed", 40, 0},  // after the COMMIT
		} {
			t.Run(d.String()+"/"+c.step, func(t *testing.T) {
				t.Parallel()
				const rows = 40
				o, db, dsn := newOutbox(t, d)
				redis := sharedRedis(t).URL()
				f, prefix := openFleet(t, redis)
				q := fleet.NewQueue[Job](f, jobs, fleet.QueueOptions{})
				submitRows(t, db, o, q, 0, rows, rows)

				a := startHelper(t, d, dsn, redis, prefix, hKillAt+"="+c.step, hBatch+"=100", hConcurrency+"=1")
				st := a.wait(t, time.Minute)
				if ws, ok := st.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
					t.Fatalf("relay A was not killed at %q: %v\n%s", c.step, st, a.log())
				}
				// What A left: its tasks, acked now so that only the window
				// holds their keys; and its rows, once the database has
				// rolled back its transaction.
				l := newLedger()
				l.drain(t, q, 200*time.Millisecond)
				if l.total() != c.submitted {
					t.Fatalf("relay A killed at %q made %d tasks, want %d", c.step, l.total(), c.submitted)
				}
				waitFor(t, 30*time.Second, "A's rows unlocked", func() bool { return count(t, db, o, o.Table()) == c.left })

				b := startHelper(t, d, dsn, redis, prefix)
				waitFor(t, time.Minute, "an empty outbox", func() bool { return count(t, db, o, o.Table()) == 0 })
				l.drain(t, q, 300*time.Millisecond)
				b.stop(t)
				l.exactlyOnce(t, rows)
				assertEmpty(t, db, o, q)
				if dup := b.sum("duplicates"); dup != min(c.submitted, c.left) {
					t.Errorf("relay B found %d duplicates, want %d (the rows A submitted and left)", dup, min(c.submitted, c.left))
				}
			})
		}
	}
}

func grepWarn(log string) string {
	var out []string
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, `"WARN"`) {
			out = append(out, l)
		}
	}
	return strings.Join(out[:min(len(out), 5)], "\n")
}
