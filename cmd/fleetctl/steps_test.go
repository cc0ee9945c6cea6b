package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/internal/redistest"
)

// TestFleetctlTaskSteps: task get shows a durable task's steps in order:
// a done step with its runs and result, a failed one with its error
// quoted so that it cannot forge a row, a sleep with its wake time; and
// --json carries them.
func TestFleetctlTaskSteps(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		ctx, f, conn, _ := openTarget(t, tg)
		q := fleet.NewQueue[job](f, "durable", fleet.QueueOptions{})
		id, err := q.Submit(ctx, job{N: 1})
		if err != nil {
			t.Fatal(err)
		}
		tasks, err := q.Reserve(ctx, 1, time.Second)
		if err != nil || len(tasks) != 1 {
			t.Fatal(tasks, err)
		}
		tk := tasks[0]
		if _, err := fleet.Step(ctx, tk, "login", func(context.Context) (string, error) { return "cookie", nil }); err != nil {
			t.Fatal(err)
		}
		if _, err := fleet.Step(ctx, tk, "fetch", func(context.Context) (int, error) { return 0, errors.New("503\nstep 9\tforged") }); err == nil {
			t.Fatal("fetch did not fail")
		}
		wake := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
		if err := fleet.SleepUntil(ctx, tk, "cool-down", wake); !errors.Is(err, fleet.ErrSuspended) {
			t.Fatal(err)
		}
		if _, err := fleet.WaitSignal[bool](ctx, tk, "approved", time.Hour); !errors.Is(err, fleet.ErrSuspended) {
			t.Fatal(err)
		}
		out, _, code := fctl(t, append(append([]string{}, conn...), "task", "get", "durable", id)...)
		if code != 0 || !strings.Contains(out, `login done, 1 run(s), `) || !strings.Contains(out, `-> "cookie"`) ||
			!strings.Contains(out, `fetch failed, 1 run(s), `) || !strings.Contains(out, `: "503\nstep 9\tforged"`) || !strings.Contains(out, "cool-down sleep until 2030-01-02T03:04:05") ||
			!strings.Contains(out, "approved wait until ") || !strings.Contains(out, " (its timeout)") ||
			strings.Count(out, "\nstep ") != 4 || strings.Index(out, "step 0") > strings.Index(out, "step 1") || strings.Index(out, "step 1") > strings.Index(out, "step 2") {
			t.Fatalf("task get (%d):\n%s", code, out)
		}
		out, _, code = fctl(t, append(append([]string{}, conn...), "--json", "task", "get", "durable", id)...)
		if code != 0 || !strings.Contains(out, `"name": "cool-down"`) || !strings.Contains(out, `"state": "sleep"`) || !strings.Contains(out, `"wake": "2030-01-02T03:04:05Z"`) {
			t.Fatalf("task get --json (%d):\n%s", code, out)
		}
	})
}

// TestFleetctlTaskSignal: task signal sends a JSON value that the task's
// wait takes; a second send of the name, an unknown task and a value that
// is not JSON are refused.
func TestFleetctlTaskSignal(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		ctx, f, conn, _ := openTarget(t, tg)
		q := fleet.NewQueue[job](f, "signaled", fleet.QueueOptions{})
		id, err := q.Submit(ctx, job{N: 1})
		if err != nil {
			t.Fatal(err)
		}
		run := func(args ...string) (string, string, int) {
			return fctl(t, append(append([]string{}, conn...), args...)...)
		}
		if out, _, code := run("task", "signal", "signaled", id, "approved", `{"by":"ops"}`); code != 0 || !strings.Contains(out, "signaled "+id+" approved") {
			t.Fatalf("signal (%d): %s", code, out)
		}
		if _, errOut, code := run("task", "signal", "signaled", id, "approved", `1`); code == 0 || !strings.Contains(errOut, "signal already sent") {
			t.Fatalf("second signal (%d): %s", code, errOut)
		}
		if _, errOut, code := run("task", "signal", "signaled", "no-such", "approved", `1`); code == 0 || !strings.Contains(errOut, "no such task") {
			t.Fatalf("unknown task (%d): %s", code, errOut)
		}
		if _, _, code := run("task", "signal", "signaled", id, "other", `not json`); code == 0 {
			t.Fatal("a value that is not JSON was sent")
		}
		tasks, err := q.Reserve(ctx, 1, time.Second)
		if err != nil || len(tasks) != 1 {
			t.Fatal(tasks, err)
		}
		v, err := fleet.WaitSignal[struct{ By string }](ctx, tasks[0], "approved", time.Hour)
		if err != nil || v.By != "ops" {
			t.Fatalf("wait: %+v, %v", v, err)
		}
	})
}
