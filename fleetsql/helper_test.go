package fleetsql_test

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/fleetsql"
)

// The test binary runs as a relay process when helperEnv is set: TestMain
// calls helperMain instead of the tests. The parent passes what to do in
// the environment.
const (
	helperEnv = "FLEETSQL_HELPER"

	hDialect     = "FLEETSQL_H_DIALECT"     // postgresql or mysql
	hDSN         = "FLEETSQL_H_DSN"         // the database
	hRedis       = "FLEETSQL_H_REDIS"       // redis:// URL
	hPrefix      = "FLEETSQL_H_PREFIX"      // the Fleet's key prefix
	hKillAt      = "FLEETSQL_H_KILL_AT"     // a step (fleetsql.SetStepHook): SIGKILL there
	hKillAfter   = "FLEETSQL_H_KILL_AFTER"  // ... at its n-th time (default 1)
	hBatch       = "FLEETSQL_H_BATCH"       // RelayOptions.Batch
	hConcurrency = "FLEETSQL_H_CONCURRENCY" // RelayOptions.Concurrency
)

// helperMain runs a relay until SIGTERM, logging its batches as JSON on
// stderr; with hKillAt it SIGKILLs itself at that step.
func helperMain(mode string) int {
	switch mode {
	case "worker":
		return workerMain()
	case "relay":
	default:
		fmt.Fprintf(os.Stderr, "unknown helper mode %q\n", mode)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	fmt.Fprintln(os.Stderr, `{"msg":"ready"}`) // SIGTERM is ours to handle from here on
	if os.Getenv(hKillAt) != "" {
		kill := killer(func(step, _ string) { fmt.Fprintf(os.Stderr, "{\"killed_at\":%q}\n", step) })
		fleetsql.SetStepHook(func(_ *fleetsql.Outbox, step string) { kill(step, "") })
	}
	db, err := helperDB()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer db.Close()
	f, err := fleet.Open(ctx, fleet.Options{URL: os.Getenv(hRedis), Prefix: os.Getenv(hPrefix)})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer f.Close()
	fleet.NewQueue[Job](f, jobs, fleet.QueueOptions{})
	o, err := fleetsql.New(db, fleetsql.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	batch, _ := strconv.Atoi(os.Getenv(hBatch))
	conc, _ := strconv.Atoi(os.Getenv(hConcurrency))
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	err = o.Relay(ctx, f, fleetsql.RelayOptions{Batch: batch, Concurrency: conc, Logger: log,
		SafetyPoll: 200 * time.Millisecond, RetryMax: 200 * time.Millisecond})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// killer returns the kill switch of a helper process: called with each
// point (a relay's step, a worker's point of a completion) and what it
// concerns, it SIGKILLs the process at the hKillAfter-th call (default 1)
// at the point hKillAt, after telling say. Without hKillAt it does
// nothing.
func killer(say func(point, what string)) func(point, what string) {
	at := os.Getenv(hKillAt)
	after, _ := strconv.Atoi(os.Getenv(hKillAfter))
	after = max(after, 1)
	var mu sync.Mutex
	seen := 0
	return func(point, what string) {
		if at == "" || point != at {
			return
		}
		mu.Lock()
		seen++
		n := seen
		mu.Unlock()
		if n == after {
			say(point, what)
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {} // the signal is on its way
		}
	}
}

// helperDB opens a helper process's database (hDialect, hDSN).
func helperDB() (*sql.DB, error) {
	driver := "pgx"
	if os.Getenv(hDialect) == "mysql" {
		driver = "mysql"
	}
	return sql.Open(driver, os.Getenv(hDSN))
}

// helper is a relay process started by a test.
type helper struct {
	cmd    *exec.Cmd
	done   chan struct{}
	mu     sync.Mutex
	stderr bytes.Buffer
	sums   map[string]int // relayed, duplicates, dead: summed over the logged batches
	ready  chan struct{}  // closed when the process handles SIGTERM
	// events counts a worker process's lines {"msg": m, "task": id}: m ->
	// id -> lines.
	events map[string]map[string]int
}

// startHelper starts a relay process on dsn and redis (prefix) with the
// extra environment env ("NAME=value").
func startHelper(tb testing.TB, d fleetsql.Dialect, dsn, redis, prefix string, env ...string) *helper {
	return startProcess(tb, "relay", d, dsn, redis, prefix, env...)
}

// startProcess starts a helper process of mode (relay, worker).
func startProcess(tb testing.TB, mode string, d fleetsql.Dialect, dsn, redis, prefix string, env ...string) *helper {
	tb.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+mode, hDialect+"="+d.String(), hDSN+"="+dsn, hRedis+"="+redis, hPrefix+"="+prefix)
	cmd.Env = append(cmd.Env, env...)
	h := &helper{cmd: cmd, done: make(chan struct{}), ready: make(chan struct{}), sums: map[string]int{}, events: map[string]map[string]int{}}
	pipe, err := cmd.StderrPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	go func() {
		defer close(h.done)
		h.read(pipe)
		_ = cmd.Wait()
	}()
	tb.Cleanup(func() { h.stop(tb) })
	select {
	case <-h.ready:
	case <-h.done:
		tb.Fatalf("relay process ended before it was ready: %v\n%s", cmd.ProcessState, h.log())
	case <-time.After(time.Minute):
		tb.Fatalf("relay process not ready after a minute:\n%s", h.log())
	}
	return h
}

func (h *helper) read(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		h.mu.Lock()
		h.stderr.Write(line)
		h.stderr.WriteByte('\n')
		var m map[string]any
		if json.Unmarshal(line, &m) == nil && m["msg"] == "ready" {
			close(h.ready)
		}
		if id, ok := m["task"].(string); ok && m["msg"] != nil {
			msg := fmt.Sprint(m["msg"])
			if h.events[msg] == nil {
				h.events[msg] = map[string]int{}
			}
			h.events[msg][id]++
		}
		if json.Unmarshal(line, &m) == nil && m["msg"] == "fleetsql: relayed" {
			for _, k := range []string{"relayed", "duplicates", "dead"} {
				if v, ok := m[k].(float64); ok {
					h.sums[k] += int(v)
				}
			}
		}
		h.mu.Unlock()
	}
}

func (h *helper) sum(k string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.sums[k]
}

// counts returns a copy of the count of msg lines per task.
func (h *helper) counts(msg string) map[string]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	m := map[string]int{}
	for id, n := range h.events[msg] {
		m[id] = n
	}
	return m
}

func (h *helper) log() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.stderr.String()
}

// wait waits for the process to end by itself, and returns how.
func (h *helper) wait(tb testing.TB, timeout time.Duration) *os.ProcessState {
	tb.Helper()
	select {
	case <-h.done:
		return h.cmd.ProcessState
	case <-time.After(timeout):
		tb.Fatalf("relay process still running after %v:\n%s", timeout, h.log())
		return nil
	}
}

// stop ends the process with SIGTERM (SIGKILL after 10s) and fails tb if
// it did not exit cleanly by itself before.
func (h *helper) stop(tb testing.TB) {
	select {
	case <-h.done:
		return
	default:
	}
	_ = h.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-h.done:
		if st := h.cmd.ProcessState; !st.Success() {
			tb.Errorf("relay process: %v\n%s", st, h.log())
		}
	case <-time.After(10 * time.Second):
		_ = h.cmd.Process.Kill()
		<-h.done
		tb.Errorf("relay process ignored SIGTERM for 10s:\n%s", h.log())
	}
}
