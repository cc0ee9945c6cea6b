package fleetui_test

import (
	"regexp"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/fleetui"
	"github.com/fleet-go/fleet/internal/redistest"
)

// A queue's page shows its latency and its groups (pending, running,
// limits, state, latency); the overview shows each queue's latency.
func TestQueueGroupsAndLatency(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		b := newBed(t, tg, fleetui.Options{})
		c := ctxFor(t)
		q := fleet.NewQueue[job](b.F, "fair", fleet.QueueOptions{Groups: fleet.GroupLimits{Concurrency: 2}})
		for _, g := range []string{"acme", "acme", "acme", "globex"} {
			if _, err := q.SubmitWith(c, job{Note: g}, fleet.SubmitOptions{Group: g}); err != nil {
				t.Fatal(err)
			}
		}
		if err := q.SetGroupLimit(c, "initech", fleet.GroupLimits{Concurrency: 1, Rate: fleet.LimitOptions{Rate: 5, Per: time.Second}}); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Q.Submit(c, job{Note: "plain"}); err != nil {
			t.Fatal(err)
		}
		code, body := b.get(t, "/fleet/queues/fair")
		if code != 200 {
			t.Fatalf("queue page: %d", code)
		}
		mustContain(t, "queue page", body,
			`<section id="groups">`,
			`<tr data-group="acme"><td>acme</td><td class="n">3</td><td class="n">0</td><td class="n">2</td><td class="n">–</td><td class="state">ready</td>`,
			`<tr data-group="globex"><td>globex</td><td class="n">1</td><td class="n">0</td><td class="n">2</td>`,
			`<tr data-group="initech"><td>initech <small>own limits</small></td><td class="n">0</td><td class="n">0</td><td class="n">1</td><td class="n">5 per 1s</td><td class="state">idle</td><td class="n">–</td>`)
		if !regexp.MustCompile(`<td class="latency"[^>]*>[0-9.]+(ms|µs|s)</td>`).MatchString(body) {
			t.Fatalf("queue page shows no latency for its waiting tasks:\n%s", body)
		}
		// A queue without groups has no groups section.
		if _, body := b.get(t, "/fleet/queues/jobs"); regexp.MustCompile(`id="groups"`).MatchString(body) {
			t.Fatalf("the groups section shows on a queue without groups:\n%s", body)
		}
		_, body = b.get(t, "/fleet/")
		if !regexp.MustCompile(`<tr data-queue="jobs">.*<td class="n latency">[0-9.]+(ms|µs|s)</td>`).MatchString(body) {
			t.Fatalf("the overview shows no latency for jobs:\n%s", body)
		}
	})
}
