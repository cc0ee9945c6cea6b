package fleetui_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/fleetui"
	"github.com/fleet-go/fleet/internal/redistest"
)

// TestTaskPageSteps: a durable task's page draws its steps as a timeline,
// in order: a done step with its result, a failed one with its error, a
// sleep with its wake time; names, errors and results escaped.
func TestTaskPageSteps(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		b := newBed(t, tg, fleetui.Options{})
		c := ctxFor(t)
		const evil = `<script>alert("x")</script>`
		q := fleet.NewQueue[job](b.F, "durable", fleet.QueueOptions{})
		id, err := q.Submit(c, job{Note: "d"})
		if err != nil {
			t.Fatal(err)
		}
		ts, err := q.Reserve(c, 1, time.Second)
		if err != nil || len(ts) != 1 {
			t.Fatalf("reserve %v %v", ts, err)
		}
		if _, err := fleet.Step(c, ts[0], "login "+evil, func(context.Context) (string, error) { return evil, nil }); err != nil {
			t.Fatal(err)
		}
		if _, err := fleet.Step(c, ts[0], "fetch", func(context.Context) (int, error) { return 0, errors.New("503 " + evil) }); err == nil {
			t.Fatal("fetch did not fail")
		}
		if err := fleet.SleepUntil(c, ts[0], "cool-down", time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)); !errors.Is(err, fleet.ErrSuspended) {
			t.Fatal(err)
		}
		if _, err := fleet.WaitSignal[bool](c, ts[0], "approved", time.Hour); !errors.Is(err, fleet.ErrSuspended) {
			t.Fatal(err)
		}
		code, body := b.get(t, "/fleet/queues/durable/tasks/"+id)
		if code != http.StatusOK || strings.Contains(body, "<script>alert") {
			t.Fatalf("task page %d unescaped:\n%s", code, body)
		}
		mustContain(t, "task page's steps", body, `<ol class="timeline" id="steps">`,
			`<li class="step step-done"><span class="step-name">login &lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;</span> <span class="state-done">done</span>, 1 run,`,
			`<li class="step step-failed"><span class="step-name">fetch</span> <span class="state-failed">failed</span>, 1 run,`,
			`<div class="err">503 &lt;script&gt;`,
			`<li class="step step-sleep"><span class="step-name">cool-down</span> <span class="state-sleep">sleep</span> until `,
			`<li class="step step-wait"><span class="step-name">approved</span> <span class="state-wait">wait</span> until `)
		if i, j, k := strings.Index(body, "step-done"), strings.Index(body, "step-failed"), strings.Index(body, "step-sleep"); i < 0 || i > j || j > k {
			t.Fatalf("steps out of order: %d %d %d", i, j, k)
		}
	})
}
