package main

import (
	"bytes"
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/internal/redistest"
)

// TestFleetctlAdmin runs the built binary's admin commands: removals ask
// for --yes (no terminal to ask on) and change nothing without it, unknown
// names exit 4, config get/set/patch round-trip, and --json errors are JSON.
func TestFleetctlAdmin(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		ctx, f, conn, prefix := openTarget(t, tg)
		p := fleet.NewPool[string, tags](f, "cookies", fleet.PoolOptions{})
		if _, err := p.Put(ctx, "c", tags{Region: "eu"}, 0); err != nil {
			t.Fatal(err)
		}
		if err := f.PushConfig(ctx, "scraper", "h1", map[string]int{"depth": 2}, 1); err != nil {
			t.Fatal(err)
		}
		raw := redistest.Client(t, tg)
		state := prefix + "wkr:scraper:h1:state"
		if tg.Tagged {
			state = prefix + "wkr:{scraper:h1}:state"
		}
		for _, cmd := range [][]string{
			{"HSET", state, "state", "IDLE", "last_seen", "1700000000"},
			{"SADD", prefix + "wkrs:scraper", "h1"},
			{"SADD", prefix + "wkrs:all", "scraper|h1"},
		} {
			if err := raw.Do(ctx, raw.B().Arbitrary(cmd...).Build()).Error(); err != nil {
				t.Fatal(err)
			}
		}
		run := func(args ...string) (string, string, int) {
			t.Helper()
			return fctl(t, append(append([]string{}, conn...), args...)...)
		}
		jsonErr := func(errOut string) (e struct {
			Error string `json:"error"`
			Code  int    `json:"code"`
		}) {
			t.Helper()
			if err := json.Unmarshal([]byte(errOut), &e); err != nil {
				t.Fatalf("--json error %q: %v", errOut, err)
			}
			return e
		}

		// An idle-looking worker that stopped beating is told apart.
		out, _, code := run("--json", "workers")
		var ws []struct {
			fleet.WorkerInfo
			Exited bool `json:"exited"`
		}
		if err := json.Unmarshal([]byte(out), &ws); code != 0 || err != nil || len(ws) != 1 || !ws[0].Exited || ws[0].State != "IDLE" {
			t.Fatalf("workers: %d %q %v", code, out, err)
		}

		// config get, patch, set.
		type cfgOut struct {
			Gen    int64          `json:"gen"`
			Config map[string]any `json:"config"`
		}
		config := func(args ...string) cfgOut {
			t.Helper()
			out, errOut, code := run(append([]string{"--json", "config"}, args...)...)
			var c cfgOut
			if err := json.Unmarshal([]byte(out), &c); code != 0 || err != nil {
				t.Fatalf("config %q: %d %q %q %v", args, code, out, errOut, err)
			}
			return c
		}
		if c := config("get", "scraper", "h1"); c.Gen != 1 || c.Config["depth"] != 2.0 {
			t.Fatalf("config get: %+v", c)
		}
		if c := config("patch", "scraper", "h1", `{"proxy":"p1"}`); c.Gen != 2 {
			t.Fatalf("config patch: %+v", c)
		}
		if c := config("set", "scraper", "h1", `{"depth":4}`); c.Gen != 3 {
			t.Fatalf("config set: %+v", c)
		}
		cfg, gen, err := f.WorkerConfig(ctx, "scraper", "h1")
		if err != nil || gen != 3 || string(cfg) != `{"depth":4}` {
			t.Fatalf("stored config %s gen %d, %v", cfg, gen, err)
		}
		_, errOut, code := run("--json", "config", "patch", "scraper", "h1", `{not json`)
		if e := jsonErr(errOut); code != 2 || e.Code != 2 || !strings.Contains(e.Error, "not JSON") {
			t.Fatalf("config patch of bad JSON: %d %q", code, errOut)
		}
		if _, _, code = run("config", "get", "scraper", "h2"); code != 4 {
			t.Fatalf("config get of a worker without config: exit %d", code)
		}

		// task get and cancel.
		q := fleet.NewQueue[job](f, "jobs", fleet.QueueOptions{})
		id, err := q.Submit(ctx, job{N: 1})
		if err != nil {
			t.Fatal(err)
		}
		out, _, code = run("--json", "task", "get", "jobs", id)
		var rec fleet.TaskRecord
		var payload bytes.Buffer
		err = json.Unmarshal([]byte(out), &rec)
		if err == nil {
			err = json.Compact(&payload, rec.Payload)
		}
		if code != 0 || rec.ID != id || rec.Status != fleet.TaskPending || payload.String() != `{"n":1}` {
			t.Fatalf("task get: %d %q %v", code, out, err)
		}
		if _, _, code = run("task", "cancel", "jobs", id); code != 0 {
			t.Fatalf("task cancel: exit %d", code)
		}
		if n, _ := q.Stats(ctx); n.Pending != 0 {
			t.Fatalf("%d pending after the cancel", n.Pending)
		}
		for _, args := range [][]string{{"task", "get", "jobs", id}, {"task", "cancel", "jobs", "nope"}} {
			if _, _, code := run(args...); code != 4 {
				t.Fatalf("%q: exit %d, want 4", args, code)
			}
		}
		// A running task (reserved here, no worker to hear the cancel):
		// task get then says the cancel waits for its holder.
		running, err := q.Submit(ctx, job{N: 2})
		if err != nil {
			t.Fatal(err)
		}
		if ts, err := q.Reserve(ctx, 1, 0); err != nil || len(ts) != 1 || ts[0].ID != running {
			t.Fatalf("reserve: %d tasks, %v", len(ts), err)
		}
		if _, _, code = run("task", "cancel", "jobs", running); code != 0 {
			t.Fatalf("task cancel of a running task: exit %d", code)
		}
		out, _, code = run("task", "get", "jobs", running)
		if code != 0 || !strings.Contains(out, "status") || !strings.Contains(out, "active") || !strings.Contains(out, "cancel") || !strings.Contains(out, "requested, not yet acted on") {
			t.Fatalf("task get of a cancelled running task: %d %q", code, out)
		}
		out, _, code = run("--json", "task", "get", "jobs", running)
		if err := json.Unmarshal([]byte(out), &rec); code != 0 || err != nil || rec.Status != fleet.TaskActive || !rec.CancelRequested {
			t.Fatalf("task get --json of a cancelled running task: %d %q %v", code, out, err)
		}
		// A running task's progress, and a task waiting for it.
		root, err := q.SubmitWith(ctx, job{N: 3}, fleet.SubmitOptions{Track: true})
		if err != nil {
			t.Fatal(err)
		}
		waiting, err := q.SubmitWith(ctx, job{N: 4}, fleet.SubmitOptions{After: fleet.DependOn(q, root)})
		if err != nil {
			t.Fatal(err)
		}
		ts, err := q.Reserve(ctx, 1, 0)
		if err != nil || len(ts) != 1 || ts[0].ID != root {
			t.Fatalf("reserve: %v %v", ts, err)
		}
		if err := ts[0].Progress(ctx, map[string]int{"done": 3}); err != nil {
			t.Fatal(err)
		}
		out, _, code = run("task", "get", "jobs", root)
		if code != 0 || !regexp.MustCompile(`progress +\{"done":3\}`).MatchString(out) {
			t.Fatalf("task get of a task with progress: %d %q", code, out)
		}
		out, _, code = run("task", "get", "jobs", waiting)
		if code != 0 || !strings.Contains(out, "waiting") || !regexp.MustCompile(`waits for +jobs `+root+` \(waiting, policy fail\)`).MatchString(out) {
			t.Fatalf("task get of a waiting task: %d %q", code, out)
		}

		// Unknown names: 4, and a JSON error with --json.
		_, errOut, code = run("--json", "queues", "nosuch")
		if e := jsonErr(errOut); code != 4 || e.Code != 4 || !strings.Contains(e.Error, "nosuch") {
			t.Fatalf("queues nosuch: %d %q", code, errOut)
		}
		for _, args := range [][]string{{"remove-worker", "scraper", "nope", "--yes"}, {"remove-pool", "nosuch", "--yes"}} {
			if _, _, code := run(args...); code != 4 {
				t.Fatalf("%q: exit %d, want 4", args, code)
			}
		}
		_, errOut, code = run("--json", "nosuchcommand")
		if e := jsonErr(errOut); code != 2 || e.Code != 2 {
			t.Fatalf("unknown command with --json: %d %q", code, errOut)
		}

		// Without --yes (and no terminal), nothing is removed.
		for _, args := range [][]string{{"remove-worker", "scraper", "h1"}, {"remove-pool", "cookies"}, {"remove-type", "scraper"}} {
			_, errOut, code := run(args...)
			if code != 2 || !strings.Contains(errOut, "--yes") {
				t.Fatalf("%q without --yes: %d %q", args, code, errOut)
			}
		}
		if n, _ := p.Size(ctx); n != 1 {
			t.Fatalf("pool holds %d items after a refused drop", n)
		}
		if ws, _ := f.Workers(ctx, fleet.WorkersFilter{}); len(ws) != 1 {
			t.Fatalf("%d workers after a refused removal", len(ws))
		}

		// With --yes.
		out, _, code = run("--json", "--yes", "remove-pool", "cookies")
		var r fleet.RemoveReport
		if err := json.Unmarshal([]byte(out), &r); code != 0 || err != nil || r.Items != 1 {
			t.Fatalf("remove-pool: %d %q %v", code, out, err)
		}
		out, _, code = run("--json", "remove-worker", "scraper", "h1", "--yes")
		if err := json.Unmarshal([]byte(out), &r); code != 0 || err != nil || r.Workers != 1 {
			t.Fatalf("remove-worker: %d %q %v", code, out, err)
		}
		if ws, _ := f.Workers(ctx, fleet.WorkersFilter{}); len(ws) != 0 {
			t.Fatalf("workers left: %+v", ws)
		}
		if _, _, code = run("--yes", "remove-type", "scraper"); code != 0 {
			t.Fatalf("remove-type: exit %d", code)
		}
	})
}
