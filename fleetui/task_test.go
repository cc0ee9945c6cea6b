package fleetui_test

import (
	"errors"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/fleetui"
	"github.com/fleet-go/fleet/internal/redistest"
)

var rowRE = regexp.MustCompile(`<tr data-id="([^"]*)"`)

// rows lists the task ids of a list page, in order.
func rows(body string) []string {
	var out []string
	for _, m := range rowRE.FindAllStringSubmatch(body, -1) {
		out = append(out, m[1])
	}
	return out
}

// TestSearchAndTaskPage: a task is found by id and by dedup key; its page
// shows its state, payload (escaped), error and actions; unknown ids are
// 404 and bad queries 400.
func TestSearchAndTaskPage(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		b := newBed(t, tg, fleetui.Options{})
		c := ctxFor(t)
		const evil = `<script>alert("x")</script>`
		dead := b.bury(t, evil, `<img src=x onerror=alert(1)>`)
		pending, err := b.Q.SubmitWith(c, job{Note: "p"}, fleet.SubmitOptions{DedupKey: "dk-1", Metadata: map[string]string{"owner": "ops"}})
		if err != nil {
			t.Fatal(err)
		}
		for q, want := range map[string]string{pending: pending, "dk-1": pending, dead: dead} {
			code, loc := b.get2(t, "/fleet/search?q="+url.QueryEscape(q))
			if code != http.StatusSeeOther || loc != "/fleet/queues/jobs/tasks/"+want {
				t.Fatalf("search %q: %d %q", q, code, loc)
			}
		}
		for path, want := range map[string]int{
			"/fleet/search?q=nope":                                  http.StatusNotFound,
			"/fleet/search?q=":                                      http.StatusBadRequest,
			"/fleet/search?q=" + pending + "&queue=nosuch":          http.StatusBadRequest,
			"/fleet/queues/jobs/tasks/0190c6e0-0000-7000-8000-0000": http.StatusNotFound,
			"/fleet/queues/nosuch/tasks/" + pending:                 http.StatusNotFound,
		} {
			if code, _ := b.get(t, path); code != want {
				t.Errorf("GET %s: %d, want %d", path, code, want)
			}
		}
		code, body := b.get(t, "/fleet/queues/jobs/tasks/"+pending)
		if code != http.StatusOK {
			t.Fatalf("task page %d", code)
		}
		mustContain(t, "pending task page", body, `id="state" class="state-pending">pending`, `id="do-cancel"`, `id="do-delete"`, "owner", "ops", `&#34;note&#34;: &#34;p&#34;`)
		if strings.Contains(body, `id="do-run"`) || strings.Contains(body, `id="do-requeue"`) {
			t.Fatalf("pending task offers run or requeue:\n%s", body)
		}
		code, body = b.get(t, "/fleet/queues/jobs/tasks/"+dead)
		if code != http.StatusOK || strings.Contains(body, "<script>alert") || strings.Contains(body, "<img src=x") {
			t.Fatalf("dead task page %d unescaped:\n%s", code, body)
		}
		mustContain(t, "dead task page", body, `state-dead">dead`, `id="do-requeue"`, `&lt;script&gt;alert(\&#34;x\&#34;)&lt;/script&gt;`, `&lt;img src=x onerror=alert(1)&gt;`)
	})
}

// get2 fetches path and returns the status and the Location header.
func (b *bed) get2(t *testing.T, path string) (int, string) {
	t.Helper()
	res, err := b.C.Get(b.Srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	_ = res.Body.Close()
	return res.StatusCode, res.Header.Get("Location")
}

// TestTaskActions: each action changes Redis as it says, only in the
// states that allow it; a bad action is 400, a wrong state 409, an unknown
// id 404, a missing token 403, each with nothing changed.
func TestTaskActions(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		b := newBed(t, tg, fleetui.Options{})
		c := ctxFor(t)
		dead := b.bury(t, "d", "boom")
		pending, _ := b.Q.Submit(c, job{Note: "p"})
		sched, err := b.Q.SubmitWith(c, job{Note: "s"}, fleet.SubmitOptions{NotBefore: time.Now().Add(time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		tok := b.csrf(t)
		before := b.stats(t)
		if before != (fleet.QueueStats{Pending: 1, Scheduled: 1, Dead: 1}) {
			t.Fatalf("before %+v", before)
		}
		act := func(id, action string) string { return "/fleet/queues/jobs/tasks/" + id + "/" + action }
		for _, tc := range []struct {
			path string
			form url.Values
			want int
		}{
			{act(pending, "cancel"), url.Values{}, http.StatusForbidden},
			{act(pending, "cancel"), url.Values{"csrf": {"forged"}}, http.StatusForbidden},
			{act(pending, "explode"), url.Values{"csrf": {tok}}, http.StatusBadRequest},
			{act(pending, "run"), url.Values{"csrf": {tok}}, http.StatusConflict},
			{act(pending, "requeue"), url.Values{"csrf": {tok}}, http.StatusConflict},
			{act(dead, "delete"), url.Values{"csrf": {tok}}, http.StatusConflict},
			{act("0190c6e0-0000-7000-8000-000000000000", "cancel"), url.Values{"csrf": {tok}}, http.StatusNotFound},
			{"/fleet/queues/nosuch/tasks/" + pending + "/cancel", url.Values{"csrf": {tok}}, http.StatusNotFound},
		} {
			if code, _ := b.post(t, tc.path, tc.form); code != tc.want {
				t.Errorf("POST %s: %d, want %d", tc.path, code, tc.want)
			}
		}
		if st := b.stats(t); st != before {
			t.Fatalf("refused actions changed the queue: %+v", st)
		}
		// Run now: the scheduled task becomes due (its ready time is now).
		if code, loc := b.post(t, act(sched, "run"), url.Values{"csrf": {tok}}); code != http.StatusSeeOther || loc != "/fleet/queues/jobs/tasks/"+sched+"?did=run" {
			t.Fatalf("run: %d %q", code, loc)
		}
		rec, err := b.Q.Lookup(c, sched)
		if err != nil || rec.Status != fleet.TaskScheduled || rec.ReadyAt.After(time.Now().Add(time.Second)) {
			t.Fatalf("after run now: %+v %v", rec, err)
		}
		// Delete the pending task; re-queue the dead one.
		if code, _ := b.post(t, act(pending, "delete"), url.Values{"csrf": {tok}}); code != http.StatusSeeOther {
			t.Fatalf("delete: %d", code)
		}
		if _, err := b.Q.Lookup(c, pending); !errors.Is(err, fleet.ErrTaskNotFound) {
			t.Fatalf("deleted task: %v", err)
		}
		if code, _ := b.post(t, act(dead, "requeue"), url.Values{"csrf": {tok}}); code != http.StatusSeeOther {
			t.Fatalf("requeue: %d", code)
		}
		if rec, err := b.Q.Lookup(c, dead); err != nil || rec.Status != fleet.TaskPending {
			t.Fatalf("requeued: %+v %v", rec, err)
		}
		// Cancel a running task: its lease entry carries the cancel.
		ts, err := b.Q.Reserve(c, 1, 0)
		if err != nil || len(ts) != 1 {
			t.Fatalf("reserve %v %v", ts, err)
		}
		if code, _ := b.post(t, act(ts[0].ID, "cancel"), url.Values{"csrf": {tok}}); code != http.StatusSeeOther {
			t.Fatalf("cancel: %d", code)
		}
		if rec, err := b.Q.Lookup(c, ts[0].ID); err != nil || rec.Status != fleet.TaskActive || !rec.CancelRequested {
			t.Fatalf("cancelled running task: %+v %v", rec, err)
		}
	})
}

// TestTaskReadOnly: a read-only dashboard shows a task with no action and
// refuses the actions' POSTs.
func TestTaskReadOnly(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		b := newBed(t, tg, fleetui.Options{ReadOnly: true})
		dead := b.bury(t, "d", "boom")
		for _, path := range []string{"/fleet/queues/jobs/tasks/" + dead, "/fleet/queues/jobs/dead", "/fleet/queues/jobs", "/fleet/schedules"} {
			code, body := b.get(t, path)
			if code != http.StatusOK || strings.Contains(body, `method="post"`) {
				t.Fatalf("read-only %s: %d with a form:\n%s", path, code, body)
			}
		}
		for _, path := range []string{"/fleet/queues/jobs/tasks/" + dead + "/requeue", "/fleet/queues/jobs/batch", "/fleet/queues/jobs/pause"} {
			if code, _ := b.post(t, path, url.Values{"id": {dead}, "action": {"requeue"}, "list": {"dead"}}); code != http.StatusForbidden {
				t.Errorf("POST %s: %d, want 403", path, code)
			}
		}
		if st := b.stats(t); st != (fleet.QueueStats{Dead: 1}) {
			t.Fatalf("after refused posts: %+v", st)
		}
	})
}

// TestListsAndBatch: lists page by cursors that stay correct while the
// head of the queue is taken; batch actions act on the selection only;
// bad parameters are 400 with nothing changed; pause and resume.
func TestListsAndBatch(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		b := newBed(t, tg, fleetui.Options{PageSize: 2})
		c := ctxFor(t)
		var ids []string
		for _, n := range []string{"a", "b", "c", "d", "e"} {
			id, err := b.Q.Submit(c, job{Note: n})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		code, body := b.get(t, "/fleet/queues/jobs/pending")
		if code != http.StatusOK || !slices.Equal(rows(body), ids[:2]) {
			t.Fatalf("pending page 1: %d %v", code, rows(body))
		}
		next := regexp.MustCompile(`href="(\?[^"]+)" rel="next"`).FindStringSubmatch(body)
		if next == nil {
			t.Fatalf("no next link:\n%s", body)
		}
		// Two tasks are reserved meanwhile: the next page still starts after b.
		ts, err := b.Q.Reserve(c, 1, 0)
		if err != nil || len(ts) != 1 || ts[0].ID != ids[0] {
			t.Fatalf("reserve %v %v", ts, err)
		}
		code, body = b.get(t, "/fleet/queues/jobs/pending"+strings.ReplaceAll(next[1], "&amp;", "&"))
		if code != http.StatusOK || !slices.Equal(rows(body), ids[2:4]) {
			t.Fatalf("pending page 2 after a reserve: %d %v, want %v", code, rows(body), ids[2:4])
		}
		code, body = b.get(t, "/fleet/queues/jobs/running")
		if code != http.StatusOK || !slices.Equal(rows(body), ids[:1]) {
			t.Fatalf("running: %d %v", code, rows(body))
		}
		for path, want := range map[string]int{
			"/fleet/queues/jobs/pending?after=x&at=-1":       http.StatusBadRequest,
			"/fleet/queues/jobs/pending?after=x":             http.StatusBadRequest,
			"/fleet/queues/jobs/running?after=x&score=z":     http.StatusBadRequest,
			"/fleet/queues/jobs/scheduled?after=x&score=NaN": http.StatusBadRequest,
			"/fleet/queues/jobs/bogus":                       http.StatusNotFound,
			"/fleet/queues/nosuch/pending":                   http.StatusNotFound,
			"/fleet/flows/nosuch":                            http.StatusNotFound,
			"/fleet/queues/jobs/groups":                      http.StatusOK,
			"/fleet/schedules":                               http.StatusOK,
		} {
			if code, _ := b.get(t, path); code != want {
				t.Errorf("GET %s: %d, want %d", path, code, want)
			}
		}
		tok := b.csrf(t)
		before := b.stats(t)
		for _, form := range []url.Values{
			{"csrf": {tok}, "action": {"explode"}, "list": {"pending"}, "id": {ids[1]}},
			{"csrf": {tok}, "action": {"delete"}, "list": {"nope"}, "id": {ids[1]}},
			{"csrf": {tok}, "action": {"delete"}, "list": {"pending"}},
			{"csrf": {tok}, "action": {"delete"}, "list": {"pending"}, "id": {ids[1], ""}},
		} {
			if code, _ := b.post(t, "/fleet/queues/jobs/batch", form); code != http.StatusBadRequest {
				t.Errorf("batch %v: %d, want 400", form, code)
			}
		}
		if code, _ := b.post(t, "/fleet/queues/jobs/batch", url.Values{"action": {"delete"}, "list": {"pending"}, "id": {ids[1]}}); code != http.StatusForbidden {
			t.Errorf("batch without a token: %d", code)
		}
		if st := b.stats(t); st != before {
			t.Fatalf("refused batches changed the queue: %+v, was %+v", st, before)
		}
		// Delete two of the pending tasks, and the running one is skipped.
		code, loc := b.post(t, "/fleet/queues/jobs/batch", url.Values{"csrf": {tok}, "action": {"delete"}, "list": {"pending"}, "id": {ids[1], ids[3], ids[0]}})
		if code != http.StatusSeeOther || loc != "/fleet/queues/jobs/pending?did=batch-delete&n=2&skipped=1" {
			t.Fatalf("batch delete: %d %q", code, loc)
		}
		if st := b.stats(t); st != (fleet.QueueStats{Pending: 2, InFlight: 1}) {
			t.Fatalf("after batch delete: %+v", st)
		}
		// Cancel the running one from the running list.
		code, loc = b.post(t, "/fleet/queues/jobs/batch", url.Values{"csrf": {tok}, "action": {"cancel"}, "list": {"running"}, "id": {ids[0]}})
		if code != http.StatusSeeOther || loc != "/fleet/queues/jobs/running?did=batch-cancel&n=1" {
			t.Fatalf("batch cancel: %d %q", code, loc)
		}
		if rec, err := b.Q.Lookup(c, ids[0]); err != nil || rec.Status != fleet.TaskActive || !rec.CancelRequested {
			t.Fatalf("after batch cancel: %+v %v", rec, err)
		}
		// The scheduled list pages by cursor: three tasks, two a page.
		var sched []string
		for i := range 3 {
			id, err := b.Q.SubmitWith(c, job{Note: "s"}, fleet.SubmitOptions{NotBefore: time.Now().Add(time.Duration(i+1) * time.Hour)})
			if err != nil {
				t.Fatal(err)
			}
			sched = append(sched, id)
		}
		code, body = b.get(t, "/fleet/queues/jobs/scheduled")
		next = regexp.MustCompile(`href="(\?[^"]+)" rel="next"`).FindStringSubmatch(body)
		if code != http.StatusOK || !slices.Equal(rows(body), sched[:2]) || next == nil {
			t.Fatalf("scheduled page 1: %d %v", code, rows(body))
		}
		code, body = b.get(t, "/fleet/queues/jobs/scheduled"+strings.ReplaceAll(next[1], "&amp;", "&"))
		if code != http.StatusOK || !slices.Equal(rows(body), sched[2:]) {
			t.Fatalf("scheduled page 2: %d %v", code, rows(body))
		}
		// Pause and resume.
		if code, _ := b.post(t, "/fleet/queues/jobs/pause", url.Values{"csrf": {tok}}); code != http.StatusSeeOther {
			t.Fatalf("pause %d", code)
		}
		// Stats reads the flag from Redis (Paused reads a client-side cache).
		if st := b.stats(t); !st.Paused {
			t.Fatalf("after pause: %+v", st)
		}
		if code, _ := b.post(t, "/fleet/queues/jobs/resume", url.Values{"csrf": {tok}}); code != http.StatusSeeOther {
			t.Fatalf("resume %d", code)
		}
		if st := b.stats(t); st.Paused {
			t.Fatalf("after resume: %+v", st)
		}
	})
}

// TestBatchRequeueDead: a selection of dead letters is re-queued, the
// others stay.
func TestBatchRequeueDead(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		b := newBed(t, tg, fleetui.Options{})
		d1, d2, d3 := b.bury(t, "1", "x"), b.bury(t, "2", "x"), b.bury(t, "3", "x")
		code, body := b.get(t, "/fleet/queues/jobs/dead")
		if code != http.StatusOK || len(rows(body)) != 3 {
			t.Fatalf("dead list %d %v", code, rows(body))
		}
		tok := b.csrf(t)
		code, loc := b.post(t, "/fleet/queues/jobs/batch", url.Values{"csrf": {tok}, "action": {"requeue"}, "list": {"dead"}, "id": {d1, d3}})
		if code != http.StatusSeeOther || loc != "/fleet/queues/jobs/dead?did=batch-requeue&n=2" {
			t.Fatalf("batch requeue %d %q", code, loc)
		}
		if st := b.stats(t); st != (fleet.QueueStats{Pending: 2, Dead: 1}) {
			t.Fatalf("after: %+v", st)
		}
		if rec, err := b.Q.Lookup(ctxFor(t), d2); err != nil || rec.Status != fleet.TaskDead {
			t.Fatalf("d2 %+v %v", rec, err)
		}
	})
}

// TestDoneList: the done tasks whose records Retention keeps are listed
// by cursor, oldest first, with their results escaped and no selection
// (no batch action applies); a bad cursor is a 400.
func TestDoneList(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		b := newBed(t, tg, fleetui.Options{PageSize: 2})
		c := ctxFor(t)
		q := fleet.NewQueue[job](b.F, "kept", fleet.QueueOptions{Retention: time.Minute})
		for _, n := range []string{"a", "b", "c"} {
			if _, err := q.Submit(c, job{Note: n}); err != nil {
				t.Fatal(err)
			}
		}
		ts, err := q.Reserve(c, 3, 0)
		if err != nil || len(ts) != 3 {
			t.Fatalf("reserve %v %v", ts, err)
		}
		for _, tk := range ts {
			if err := tk.SetResult(map[string]string{"html": "<script>window.__xss=1</script>"}); err != nil {
				t.Fatal(err)
			}
			if err := tk.Ack(c); err != nil {
				t.Fatal(err)
			}
		}
		done, err := q.Done(c, fleet.TaskCursor{}, 10)
		if err != nil || len(done) != 3 {
			t.Fatalf("Done: %v %v", done, err)
		}
		want := []string{done[0].ID, done[1].ID, done[2].ID}
		code, body := b.get(t, "/fleet/queues/kept/done")
		next := regexp.MustCompile(`href="(\?[^"]+)" rel="next"`).FindStringSubmatch(body)
		if code != http.StatusOK || !slices.Equal(rows(body), want[:2]) || next == nil {
			t.Fatalf("done page 1: %d %v, want %v", code, rows(body), want[:2])
		}
		if strings.Contains(body, "<script>window") || !strings.Contains(body, "&lt;script&gt;window.__xss=1&lt;/script&gt;") ||
			strings.Contains(body, `type="checkbox"`) || strings.Contains(body, `id="batch-go"`) {
			t.Fatalf("done page: a result unescaped, or a selection:\n%s", body)
		}
		code, body = b.get(t, "/fleet/queues/kept/done"+strings.ReplaceAll(next[1], "&amp;", "&"))
		if code != http.StatusOK || !slices.Equal(rows(body), want[2:]) {
			t.Fatalf("done page 2: %d %v, want %v", code, rows(body), want[2:])
		}
		if code, _ := b.get(t, "/fleet/queues/kept/done?after=x&score=z"); code != http.StatusBadRequest {
			t.Fatalf("bad cursor: %d", code)
		}
	})
}

// TestTaskPageLogs: the task page shows each run's log, its lines and
// attributes escaped; a sealed entry shows as sealed while the host has
// no key for it.
func TestTaskPageLogs(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		b := newBed(t, tg, fleetui.Options{})
		c := ctxFor(t)
		const evil = `<script>alert("x")</script>`
		q := fleet.NewQueue[job](b.F, "logged", fleet.QueueOptions{Retention: time.Hour})
		id, err := q.Submit(c, job{Note: "l"})
		if err != nil {
			t.Fatal(err)
		}
		ts, err := q.Reserve(c, 1, time.Second)
		if err != nil || len(ts) != 1 {
			t.Fatalf("reserve %v %v", ts, err)
		}
		ts[0].Logger().Warn(evil, "html", `<img src=x onerror=alert(1)>`)
		ts[0].Logger().Info("second line")
		if err := ts[0].Ack(c); err != nil {
			t.Fatal(err)
		}
		code, body := b.get(t, "/fleet/queues/logged/tasks/"+id)
		if code != http.StatusOK || strings.Contains(body, "<script>alert") || strings.Contains(body, "<img src=x") {
			t.Fatalf("task page %d unescaped:\n%s", code, body)
		}
		mustContain(t, "task page's logs", body, `<div id="logs">`, "Attempt 1, ended ", `class="log-WARN"`, `&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;`,
			`html=&#34;&lt;img src=x onerror=alert(1)&gt;&#34;`, "second line")
	})
}

// TestQueuePagePolicy: the queue page shows the policy the queue stored:
// its attempts, its retry backoff as ParseBackoff reads it, its dead
// letters' bounds and its caps.
func TestQueuePagePolicy(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		b := newBed(t, tg, fleetui.Options{})
		c := ctxFor(t)
		bo, err := fleet.ParseBackoff("fixed:30s")
		if err != nil {
			t.Fatal(err)
		}
		q := fleet.NewQueue[job](b.F, "policed", fleet.QueueOptions{MaxAttempts: 5, Backoff: bo, GlobalConcurrency: 7, DeadMax: 20, DeadMaxAge: time.Hour})
		if _, err := q.Submit(c, job{Note: "x"}); err != nil {
			t.Fatal(err)
		}
		code, body := b.get(t, "/fleet/queues/policed")
		if code != http.StatusOK {
			t.Fatalf("queue page %d", code)
		}
		mustContain(t, "queue page", body, `<p id="policy">Policy: up to 5 attempts, retried after <code>fixed:30s</code> · dead letters: at most 20, kept 1h0m0s · at most 7 running</p>`)
	})
}

// TestTaskPageDebounce: a waiting task's page shows its dedup key and the
// debounce it was submitted with: the window, and the latest it starts
// (its first submit plus the max wait); a plain task's shows neither.
func TestTaskPageDebounce(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		b := newBed(t, tg, fleetui.Options{})
		c := ctxFor(t)
		id, err := b.Q.SubmitWith(c, job{Note: "d"}, fleet.SubmitOptions{DedupKey: "doc-<7>", Debounce: &fleet.Debounce{Window: 90 * time.Second, MaxWait: time.Hour}})
		if err != nil {
			t.Fatal(err)
		}
		rec, err := b.Q.Lookup(c, id)
		if err != nil || rec.SubmittedAt.IsZero() {
			t.Fatalf("Lookup %+v, %v", rec, err)
		}
		until := rec.SubmittedAt.Add(time.Hour).UTC().Format("2006-01-02 15:04:05Z")
		code, body := b.get(t, "/fleet/queues/jobs/tasks/"+id)
		if code != http.StatusOK {
			t.Fatalf("task page %d", code)
		}
		mustContain(t, "debounced task page", body, `<td id="dedup-key">doc-&lt;7&gt;</td>`,
			`<td id="debounce">window 1m30s, starts by `+until+` at the latest (max wait 1h0m0s)</td>`)
		plain, err := b.Q.Submit(c, job{Note: "p"})
		if err != nil {
			t.Fatal(err)
		}
		if code, body = b.get(t, "/fleet/queues/jobs/tasks/"+plain); code != http.StatusOK || strings.Contains(body, `id="debounce"`) || strings.Contains(body, `id="dedup-key"`) {
			t.Fatalf("plain task page %d:\n%s", code, body)
		}
	})
}
