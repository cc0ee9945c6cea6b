package main

// This file holds the worker process: what it runs (runWorker, ship), and
// the host's handle of it (startWorker, workerProc).

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/fleetsql"
)

// workerEnv holds a workerConfig (JSON) when the host runs this program as
// a worker.
const workerEnv = "FLEET_OUTBOX_EXAMPLE_WORKER"

// workerConfig is what the host tells a worker process.
type workerConfig struct {
	Name   string // the worker's id: worker-1, worker-2
	DB     string // the example's database
	Redis  string
	Prefix string // the host's key prefix
	// DieAfterCommit, when set, is the order whose shipment the worker
	// commits and then dies, before its ack.
	DieAfterCommit int64
}

func (c workerConfig) as(name string, dieAfterCommit int64) workerConfig {
	c.Name, c.DieAfterCommit = name, dieAfterCommit
	return c
}

// runWorker is a worker process: it ships orders until its stdin closes
// (the host stops it so, or dies), then stops gracefully. It tells the
// host what it does on stdout, a line a step: "handle <task>" as the
// handler starts, "commit <task>" after its COMMIT, "ack <task>" once the
// ack took effect.
func runWorker(env string) error {
	var cfg workerConfig
	if err := json.Unmarshal([]byte(env), &cfg); err != nil {
		return fmt.Errorf("%s: %w", workerEnv, err)
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); stop() }()

	db, err := sql.Open("pgx", cfg.DB)
	if err != nil {
		return err
	}
	defer db.Close()
	ob, err := fleetsql.New(db, fleetsql.Options{})
	if err != nil {
		return err
	}
	f, err := fleet.Open(ctx, fleet.Options{URL: cfg.Redis, Prefix: cfg.Prefix})
	if err != nil {
		return err
	}
	defer f.Close()

	// Reap deletes the completion rows of the tasks this process acked; it
	// runs until the worker stopped, and deletes the last ones as it ends.
	reapCtx, stopReap := context.WithCancel(context.Background())
	reaped := make(chan error, 1)
	go func() { reaped <- ob.Reap(reapCtx, fleetsql.ReapOptions{}) }()

	s := &shipper{db: db, ob: ob, name: cfg.Name, dieAfter: cfg.DieAfterCommit}
	w := fleet.NewBatchWorker(f, fleet.WorkerOptions{
		Type: "ship", ID: cfg.Name, Slots: 4,
		OnTaskEnd: func(task string, err error) {
			if err == nil {
				fmt.Println("ack", task)
			} else {
				fmt.Fprintf(os.Stderr, "%s: task %s: %v\n", cfg.Name, task, err)
			}
		},
	}, fleet.NewQueue[Ship](f, "ship", queueOptions),
		// Once: a task whose completion row exists is acked without
		// running ship again.
		fleetsql.Once(ob, fleet.BatchFunc[struct{}, struct{}, Ship](s.ship)))
	if err := w.Start(ctx); err != nil { // stops gracefully when ctx ends
		stopReap()
		return err
	}
	<-w.Stopped()
	stopReap()
	return <-reaped
}

// shipper is the handler of a worker process.
type shipper struct {
	db       *sql.DB
	ob       *fleetsql.Outbox
	name     string
	dieAfter int64
}

// ship writes the order's shipment and the task's completion in one
// transaction, and commits; the worker acks once it returns nil.
func (s *shipper) ship(ctx context.Context, _ *fleet.Slot[struct{}, struct{}], t *fleet.Task[Ship]) error {
	fmt.Println("handle", t.ID)
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	if _, err := tx.ExecContext(ctx, `INSERT INTO shipments (order_id, task_id, worker) VALUES ($1, $2, $3)`,
		t.Payload.Order, t.ID, s.name); err != nil {
		return err
	}
	// Fenced: fails (roll back) when this worker no longer holds the task.
	if err := fleetsql.Complete(ctx, tx, s.ob, t, Shipped{Order: t.Payload.Order, By: s.name}); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	fmt.Println("commit", t.ID)
	if t.Payload.Order == s.dieAfter {
		// The crash this example is about: committed, not acked. Kill
		// sends SIGKILL on Unix: no deferred call, no ack, nothing more.
		p, _ := os.FindProcess(os.Getpid()) // never fails on Unix
		if err := p.Kill(); err != nil {
			log.Fatalf("%s: kill: %v", s.name, err)
		}
		time.Sleep(time.Minute) // the signal is on its way
	}
	return nil
}

// workerProc is the host's handle of a worker process: what it said it
// did, per step and task, readable once it ended (wait, stop).
type workerProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	read  chan struct{} // closed once its stdout is read to the end
	steps map[string]map[string]int
}

// startWorker starts this program again as a worker with cfg.
func startWorker(ctx context.Context, cfg workerConfig) (*workerProc, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	env, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, self)
	cmd.Env = append(os.Environ(), workerEnv+"="+string(env))
	cmd.Stderr = os.Stderr
	p := &workerProc{cmd: cmd, read: make(chan struct{}), steps: map[string]map[string]int{}}
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		defer close(p.read)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if step, task, ok := strings.Cut(sc.Text(), " "); ok {
				if p.steps[step] == nil {
					p.steps[step] = map[string]int{}
				}
				p.steps[step][task]++
			}
		}
	}()
	return p, nil
}

// wait waits for the worker process to end by itself.
func (p *workerProc) wait() error {
	<-p.read
	return p.cmd.Wait()
}

// stop closes the worker's stdin, which stops it, and waits for it.
func (p *workerProc) stop() error {
	p.stdin.Close()
	return p.wait()
}

// count says how many times the ended worker said step of task.
func (p *workerProc) count(step, task string) int { return p.steps[step][task] }

// killed says whether err is the end of a process killed by SIGKILL.
func killed(err error) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}
