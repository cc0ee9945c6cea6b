package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

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
