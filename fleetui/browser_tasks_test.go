package fleetui_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/fleetui"
	"github.com/fleet-go/fleet/internal/redistest"
)

// TestBrowserTasks drives the task pages in a real headless Chromium: a
// submitted task is found by its id with the search box, and its page
// follows it as it runs and ends without a reload; a running task is
// cancelled from its page; a selection of dead letters is re-queued with
// the batch action and its confirmation; an XSS payload shows as text.
// Screenshots go to artifacts() (each path is logged).
func TestBrowserTasks(t *testing.T) {
	chrome := chromePath(t)
	tg := redistest.Target{Name: "single-compat", URL: redistest.SingleURL(t)}
	b := newBed(t, tg, fleetui.Options{Refresh: 200 * time.Millisecond})
	c := ctxFor(t)
	dir := artifacts(t)

	// The worker of jobs: "slow" tasks run until release closes, "block"
	// tasks until they are cancelled.
	release := make(chan struct{})
	jq := fleet.NewQueue[job](b.F, "jobs", fleet.QueueOptions{Retention: time.Minute})
	w := fleet.NewBatchWorker(b.F, fleet.WorkerOptions{Type: "jobs", ID: "w-1", Slots: 2, Heartbeat: 200 * time.Millisecond}, jq,
		fleet.BatchFunc[struct{}, out, job](func(ctx context.Context, s *fleet.Slot[struct{}, out], tk *fleet.Task[job]) error {
			switch tk.Payload.Note {
			case "slow":
				select {
				case <-release:
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			case "block":
				<-ctx.Done()
				return ctx.Err()
			}
			return nil
		}))
	if err := w.Start(c); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Stop(context.Background()) })

	// Dead letters on a queue of their own, one with an XSS payload.
	const evil = `<script>window.__xss=1</script>`
	oq := fleet.NewQueue[job](b.F, "other", fleet.QueueOptions{})
	var deads []string
	for _, note := range []string{"d1", evil, "d3"} {
		if _, err := oq.Submit(c, job{Note: note}); err != nil {
			t.Fatal(err)
		}
		ts, err := oq.Reserve(c, 1, 0)
		if err != nil || len(ts) != 1 {
			t.Fatalf("reserve %v %v", ts, err)
		}
		if err := ts[0].DeadLetter(c, errors.New(`<img src=x onerror="window.__xss=2">`)); err != nil {
			t.Fatal(err)
		}
		deads = append(deads, ts[0].ID)
	}

	br := startBrowser(t, chrome)
	step, do, text, eval, waitJS := br.step, br.do, br.text, br.eval, br.waitJS
	shot := func(name string) {
		t.Helper()
		png, err := chromedp.Run(step(), chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
		p := filepath.Join(dir, name+".png")
		if err := os.WriteFile(p, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot %s", p)
	}
	state := func(want string) string {
		return `(document.getElementById("state") || {}).textContent === "` + want + `"`
	}

	// 1. Submit, then find the task by its id with the search box.
	slow, err := b.Q.Submit(c, job{Note: "slow"})
	if err != nil {
		t.Fatal(err)
	}
	do("load the overview", chromedp.Navigate(b.Srv.URL+"/fleet/"), chromedp.WaitVisible(chromedp.CSS(`#search`)))
	do("search", chromedp.SendKeys(chromedp.CSS(`#search`), slow), chromedp.Click(chromedp.CSS(`#search-go`)),
		chromedp.WaitVisible(chromedp.CSS(`#state`)))
	if u := eval(`location.pathname`); u != "/fleet/queues/jobs/tasks/"+slow {
		t.Fatalf("search led to %s", u)
	}
	eval(`window.__noReload = "still here"`)
	// 2. Watch it run and end, without a reload.
	waitJS("the task runs", state("active"))
	if wk := text(`#worker`); wk != "jobs|w-1" {
		t.Fatalf("worker %q", wk)
	}
	shot("task-running")
	if os.Getenv("FLEETUI_README_SHOT") == "1" {
		png, err := chromedp.Run(step(), chromedp.Screenshot(chromedp.CSS("body")))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join("..", "docs", "fleetui-task.png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The running list shows a task that starts while it is open, without
	// a reload, with its worker.
	do("the running list", chromedp.Navigate(b.Srv.URL+"/fleet/queues/jobs/running"), chromedp.WaitVisible(chromedp.CSS(`tr[data-id="`+slow+`"]`)))
	eval(`window.__noReload = "still here"`)
	slow2, err := b.Q.Submit(c, job{Note: "slow"})
	if err != nil {
		t.Fatal(err)
	}
	waitJS("the second task shows as running", `document.querySelector('tr[data-id="`+slow2+`"]') !== null`)
	if marker := eval(`String(window.__noReload)`); marker != "still here" {
		t.Fatalf("the running list reloaded (marker %q)", marker)
	}
	if wk := text(`tr[data-id="` + slow2 + `"] td.worker`); wk != "jobs|w-1" {
		t.Fatalf("running list worker %q", wk)
	}
	shot("running-list")
	do("back to the task", chromedp.Navigate(b.Srv.URL+"/fleet/queues/jobs/tasks/"+slow), chromedp.WaitVisible(chromedp.CSS(`#state`)))
	eval(`window.__noReload = "still here"`)
	close(release)
	waitJS("the task ends", state("done"))
	if marker := eval(`String(window.__noReload)`); marker != "still here" {
		t.Fatalf("the page reloaded (marker %q)", marker)
	}
	shot("task-done")

	// 3. Cancel a running task from its page.
	block, err := b.Q.Submit(c, job{Note: "block"})
	if err != nil {
		t.Fatal(err)
	}
	do("load the blocked task", chromedp.Navigate(b.Srv.URL+"/fleet/queues/jobs/tasks/"+block), chromedp.WaitVisible(chromedp.CSS(`#state`)))
	waitJS("it runs", state("active")+` && document.getElementById("do-cancel") !== null`)
	do("ask to cancel", chromedp.Click(chromedp.CSS(`#do-cancel`)), chromedp.WaitVisible(chromedp.CSS(`#confirm[open] #confirm-yes`)))
	shot("task-cancel-confirm")
	do("confirm", chromedp.Click(chromedp.CSS(`#confirm-yes`)), chromedp.WaitVisible(chromedp.CSS(`#flash`)))
	waitJS("the task is cancelled", state("canceled"))
	shot("task-canceled")
	if rec, err := b.Q.Lookup(c, block); err != nil || rec.Status != fleet.TaskCanceled {
		t.Fatalf("after cancel: %+v %v", rec, err)
	}

	// 4. The XSS payload shows as text; re-queue a selection of dead letters.
	do("the dead letters", chromedp.Navigate(b.Srv.URL+"/fleet/queues/other/dead"), chromedp.WaitVisible(chromedp.CSS(`#batch-go`)))
	payload := text(`tr[data-id="` + deads[1] + `"] pre.payload`)
	errText := text(`tr[data-id="` + deads[1] + `"] td.err`)
	if !strings.Contains(payload, `"note": "`+evil+`"`) || errText != `<img src=x onerror="window.__xss=2">` ||
		eval(`String(window.__xss)`) != "undefined" || eval(`String(document.querySelectorAll('main script, main img').length)`) != "0" {
		t.Fatalf("XSS payload: text %q, error %q", payload, errText)
	}
	do("select two", chromedp.Click(chromedp.CSS(`tr[data-id="`+deads[0]+`"] input[type=checkbox]`)),
		chromedp.Click(chromedp.CSS(`tr[data-id="`+deads[2]+`"] input[type=checkbox]`)),
		chromedp.Click(chromedp.CSS(`#batch-go`)), chromedp.WaitVisible(chromedp.CSS(`#confirm[open] #confirm-yes`)))
	shot("dead-batch-confirm")
	do("confirm", chromedp.Click(chromedp.CSS(`#confirm-yes`)), chromedp.WaitVisible(chromedp.CSS(`#flash`)))
	if f := text(`#flash`); !strings.Contains(f, "Re-queued 2 dead letters.") {
		t.Fatalf("flash %q", f)
	}
	shot("dead-batch-done")
	dl, err := oq.DeadLetters(c, 0, 10)
	if err != nil || len(dl) != 1 || dl[0].ID != deads[1] {
		t.Fatalf("dead letters after: %+v %v", dl, err)
	}
	pend, err := oq.Pending(c, 0, 10)
	if err != nil || len(pend) != 2 || !slices.ContainsFunc(pend, func(x fleet.WaitingTask) bool { return x.ID == deads[0] }) {
		t.Fatalf("pending after: %+v %v", pend, err)
	}
	do("the XSS task's page", chromedp.Navigate(b.Srv.URL+"/fleet/queues/other/tasks/"+deads[1]), chromedp.WaitVisible(chromedp.CSS(`#payload`)))
	if p := text(`#payload`); !strings.Contains(p, evil) || eval(`String(window.__xss)`) != "undefined" {
		t.Fatalf("task page payload %q", p)
	}
	shot("task-xss")
	br.close()
}
