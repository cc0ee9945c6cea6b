package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/internal/redistest"
)

// TestFleetctlPolicy: policy shows what a queue stored, its retry backoff
// spelled as ParseBackoff reads it, in a table and as JSON; an unknown
// queue is not found (exit 4), and a missing name a usage error.
func TestFleetctlPolicy(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		ctx, f, conn, _ := openTarget(t, tg)
		b, err := fleet.ParseBackoff("linear:5s:1m")
		if err != nil {
			t.Fatal(err)
		}
		q := fleet.NewQueue[job](f, "polled", fleet.QueueOptions{MaxAttempts: 4, Backoff: b, GlobalConcurrency: 3,
			Groups: fleet.GroupLimits{Concurrency: 2}, IndexMeta: []string{"tenant"}, DeadMax: 50, DeadMaxAge: time.Hour})
		if _, err := q.Submit(ctx, job{N: 1}); err != nil {
			t.Fatal(err)
		}
		out, errOut, code := fctl(t, append(conn, "policy", "polled")...)
		if code != 0 {
			t.Fatalf("policy: exit %d: %s", code, errOut)
		}
		for _, line := range []string{"max attempts        4", "backoff             linear:5s:1m0s", "dead letters        at most 50, kept 1h0m0s",
			"global concurrency  3", "group concurrency   2", "indexed metadata    tenant"} {
			if !strings.Contains(out, line+"\n") {
				t.Fatalf("policy table lacks %q:\n%s", line, out)
			}
		}
		out, _, code = fctl(t, append(append([]string{"--json"}, conn...), "policy", "polled")...)
		var p fleet.QueuePolicy
		if err := json.Unmarshal([]byte(out), &p); code != 0 || err != nil || p.MaxAttempts != 4 || p.Backoff != fleet.BackoffLinear ||
			p.RetryBackoff().String() != "linear:5s:1m0s" || p.GlobalConcurrency != 3 {
			t.Fatalf("policy --json (exit %d, %v): %s", code, err, out)
		}
		// A queue that declares no Backoff shows the default.
		if _, err := fleet.NewQueue[job](f, "plainq", fleet.QueueOptions{}).Submit(ctx, job{N: 1}); err != nil {
			t.Fatal(err)
		}
		out, _, code = fctl(t, append(conn, "policy", "plainq")...)
		if code != 0 || !strings.Contains(out, "backoff       exponential:1s:10m0s (the default") {
			t.Fatalf("policy of a plain queue (exit %d):\n%s", code, out)
		}
		if _, errOut, code := fctl(t, append(conn, "policy", "nosuch")...); code != 4 || !strings.Contains(errOut, "no policy is stored") {
			t.Fatalf("policy of an unknown queue: exit %d: %s", code, errOut)
		}
		if _, errOut, code := fctl(t, append(conn, "policy")...); code != 2 || !strings.Contains(errOut, "takes one queue name") {
			t.Fatalf("policy without a queue: exit %d: %s", code, errOut)
		}
	})
}

// TestFleetctlTaskDebounce: task get shows a waiting task's dedup key and
// the debounce it was submitted with: its window, and the latest it
// starts (its first submit, the time of its UUIDv7 id, plus the max
// wait), in the table and as JSON; a later submit of the burst keeps that
// deadline; a plain task shows neither.
func TestFleetctlTaskDebounce(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		ctx, f, conn, _ := openTarget(t, tg)
		q := fleet.NewQueue[job](f, "bounced", fleet.QueueOptions{})
		o := fleet.SubmitOptions{DedupKey: "doc-7", Debounce: &fleet.Debounce{Window: time.Hour, MaxWait: 3 * time.Hour}}
		id, err := q.SubmitWith(ctx, job{N: 1}, o)
		if err != nil {
			t.Fatal(err)
		}
		o.Debounce = &fleet.Debounce{Window: 2 * time.Hour, MaxWait: 3 * time.Hour}
		if again, err := q.SubmitWith(ctx, job{N: 2}, o); err != nil || again != id {
			t.Fatalf("second submit of the burst: %q, %v (want %s)", again, err, id)
		}
		u := uuid.MustParse(id)
		sec, nsec := u.Time().UnixTime()
		until := time.Unix(sec, nsec).Add(3 * time.Hour).UTC()
		out, errOut, code := fctl(t, append(conn, "task", "get", "bounced", id)...)
		if code != 0 {
			t.Fatalf("task get: exit %d: %s", code, errOut)
		}
		for _, line := range []string{"status     scheduled", "dedup key  doc-7",
			"debounce   window 2h0m0s, starts by " + until.Format(time.RFC3339) + " at the latest (max wait 3h0m0s)", `payload    {"n":2}`} {
			if !strings.Contains(out, line+"\n") {
				t.Fatalf("task get lacks %q:\n%s", line, out)
			}
		}
		out, _, code = fctl(t, append(append([]string{"--json"}, conn...), "task", "get", "bounced", id)...)
		var r fleet.TaskRecord
		if err := json.Unmarshal([]byte(out), &r); code != 0 || err != nil || r.DedupKey != "doc-7" || r.Debounce == nil ||
			*r.Debounce != (fleet.Debounce{Window: 2 * time.Hour, MaxWait: 3 * time.Hour}) || !r.DebounceUntil.Equal(until.Truncate(time.Millisecond)) {
			t.Fatalf("task get --json (exit %d, %v): %s", code, err, out)
		}
		plain, err := q.Submit(ctx, job{N: 3})
		if err != nil {
			t.Fatal(err)
		}
		out, _, code = fctl(t, append(conn, "task", "get", "bounced", plain)...)
		if code != 0 || strings.Contains(out, "debounce") || strings.Contains(out, "dedup key") {
			t.Fatalf("task get of a plain task (exit %d):\n%s", code, out)
		}
	})
}

// TestFleetctlWorkersChunk: workers shows a chunk worker's ChunkOptions
// (CHUNK: "<min>-<max> wait <max wait>") and "-" for another worker, in
// the table and as JSON.
func TestFleetctlWorkersChunk(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		ctx, f, conn, _ := openTarget(t, tg)
		q := fleet.NewQueue[job](f, "chunked", fleet.QueueOptions{})
		co := fleet.ChunkOptions{MinSize: 5, MaxSize: 20, MaxWait: 1500 * time.Millisecond}
		cw := fleet.NewChunkWorker(f, fleet.WorkerOptions{Type: "chunked", ID: "c1", Slots: 1}, q, co,
			fleet.ChunkFunc[struct{}, struct{}, job](func(context.Context, *fleet.Slot[struct{}, struct{}], *fleet.Chunk[job]) error { return nil }))
		bw := fleet.NewBatchWorker(f, fleet.WorkerOptions{Type: "chunked", ID: "b1", Slots: 1}, q,
			fleet.BatchFunc[struct{}, struct{}, job](func(context.Context, *fleet.Slot[struct{}, struct{}], *fleet.Task[job]) error { return nil }))
		for _, w := range []*fleet.Worker{cw, bw} {
			if err := w.Start(ctx); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = w.Stop(context.Background()) })
		}
		out, errOut, code := fctl(t, append(conn, "workers", "--type", "chunked")...)
		if code != 0 {
			t.Fatalf("workers: exit %d: %s", code, errOut)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 3 || !strings.Contains(lines[0], " CHUNK ") || !strings.HasPrefix(lines[1], "chunked  b1  ") || !strings.HasPrefix(lines[2], "chunked  c1  ") ||
			!strings.HasSuffix(strings.TrimSpace(lines[1]), " -") || !strings.HasSuffix(strings.TrimSpace(lines[2]), " 5-20 wait 1.5s") {
			t.Fatalf("workers table:\n%s", out)
		}
		out, _, code = fctl(t, append(append([]string{"--json"}, conn...), "workers", "--type", "chunked")...)
		var ws []fleet.WorkerInfo
		if err := json.Unmarshal([]byte(out), &ws); code != 0 || err != nil || len(ws) != 2 || ws[0].Chunk != nil || ws[1].Chunk == nil || *ws[1].Chunk != co {
			t.Fatalf("workers --json (exit %d, %v): %s", code, err, out)
		}
	})
}
