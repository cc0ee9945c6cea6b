package fleetui_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/fleetui"
	"github.com/fleet-go/fleet/internal/redistest"
)

// TestGroupsFlowsSchedules: the groups page lists a queue's groups; a
// flow's page lists its tasks, a waiting one with what it waits for; a
// schedule is paused and resumed (unknown: 404); the overview shows each
// queue's latency.
func TestGroupsFlowsSchedules(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		b := newBed(t, tg, fleetui.Options{})
		c := ctxFor(t)
		if _, err := b.Q.SubmitWith(c, job{Note: "g"}, fleet.SubmitOptions{Group: "tenant-7"}); err != nil {
			t.Fatal(err)
		}
		code, body := b.get(t, "/fleet/queues/jobs/groups")
		if code != http.StatusOK {
			t.Fatalf("groups %d", code)
		}
		mustContain(t, "groups", body, `data-group="tenant-7"`)

		fl := fleet.NewFlow(b.F, fleet.FlowOptions{Retention: time.Minute})
		first := fleet.AddStep(fl, b.Q, job{Note: "first"}, fleet.SubmitOptions{})
		second := fleet.AddStep(fl, b.Q, job{Note: "second"}, fleet.SubmitOptions{After: fleet.Steps(first)})
		if err := fl.Submit(c); err != nil {
			t.Fatal(err)
		}
		code, body = b.get(t, "/fleet/flows/"+url.PathEscape(fl.ID()))
		if code != http.StatusOK {
			t.Fatalf("flow %d:\n%s", code, body)
		}
		mustContain(t, "flow", body, `<tr data-id="`+first.ID()+`">`, `<tr data-id="`+second.ID()+`">`,
			`<td>waiting</td>`, `/fleet/queues/jobs/tasks/`+first.ID()+`">`+first.ID()+`</a> (waiting)`)
		code, body = b.get(t, "/fleet/queues/jobs/tasks/"+second.ID())
		if code != http.StatusOK {
			t.Fatalf("waiting task %d", code)
		}
		mustContain(t, "waiting task", body, `state-waiting">waiting`, `/fleet/flows/`+fl.ID(), `id="deps"`)

		if err := b.F.AddScheduleJSON(c, "jobs", "nightly", fleet.Every(time.Hour), json.RawMessage(`{"note":"n"}`), fleet.ScheduleOptions{}); err != nil {
			t.Fatal(err)
		}
		tok := b.csrf(t)
		if code, _ := b.post(t, "/fleet/schedules/nightly/pause", url.Values{}); code != http.StatusForbidden {
			t.Fatalf("pause without a token: %d", code)
		}
		paused := func() bool {
			ss, err := b.F.Schedules(c)
			if err != nil || len(ss) != 1 {
				t.Fatalf("schedules %+v %v", ss, err)
			}
			return ss[0].Paused
		}
		if paused() {
			t.Fatal("paused by a refused POST")
		}
		if code, loc := b.post(t, "/fleet/schedules/nightly/pause", url.Values{"csrf": {tok}}); code != http.StatusSeeOther || loc != "/fleet/schedules?did=paused" || !paused() {
			t.Fatalf("pause: %d %q", code, loc)
		}
		code, body = b.get(t, "/fleet/schedules")
		if code != http.StatusOK || !strings.Contains(body, `action="/fleet/schedules/nightly/resume"`) {
			t.Fatalf("schedules page %d:\n%s", code, body)
		}
		if code, _ := b.post(t, "/fleet/schedules/nightly/resume", url.Values{"csrf": {tok}}); code != http.StatusSeeOther || paused() {
			t.Fatalf("resume: %d", code)
		}
		if code, _ := b.post(t, "/fleet/schedules/nosuch/pause", url.Values{"csrf": {tok}}); code != http.StatusNotFound {
			t.Fatalf("unknown schedule: %d", code)
		}
		code, body = b.get(t, "/fleet/")
		if code != http.StatusOK {
			t.Fatalf("overview %d", code)
		}
		mustContain(t, "overview", body, `<th class="n">Latency</th>`, `<td class="n latency">`)
	})
}
