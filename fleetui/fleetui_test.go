package fleetui_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/fleetui"
	"github.com/fleet-go/fleet/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// job is the payload of the test queue.
type job struct {
	Note string `json:"note"`
}

// out is the output of the test stream.
type out struct {
	N int `json:"n"`
}

// bed is one test's Fleet, with the dashboard served over HTTP and a
// client that keeps cookies.
type bed struct {
	F      *fleet.Fleet
	Raw    rueidis.Client
	Prefix string
	Srv    *httptest.Server
	C      *http.Client
	Q      *fleet.Queue[job]
}

func ctxFor(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return c
}

// newBed opens a Fleet on tg under a fresh prefix (mods change its
// options) and mounts the dashboard at /fleet/ of a test server.
func newBed(t *testing.T, tg redistest.Target, opts fleetui.Options, mods ...func(*fleet.Options)) *bed {
	t.Helper()
	b := &bed{Raw: redistest.Client(t, tg), Prefix: redistest.Prefix(t, tg)}
	fo := fleet.Options{URL: tg.URL, Prefix: b.Prefix, Layout: fleet.LayoutCompat}
	if tg.Tagged {
		fo.Layout = fleet.LayoutTagged
	}
	for _, m := range mods {
		m(&fo)
	}
	f, err := fleet.Open(ctxFor(t), fo)
	if err != nil {
		t.Fatalf("open %s: %v", tg.Name, err)
	}
	t.Cleanup(func() { _ = f.Close() })
	b.F = f
	b.Q = fleet.NewQueue[job](f, "jobs", fleet.QueueOptions{})
	mux := http.NewServeMux()
	mux.Handle("/fleet/", fleetui.Handler(f, opts))
	b.Srv = httptest.NewServer(mux)
	t.Cleanup(b.Srv.Close)
	jar, _ := cookiejar.New(nil)
	b.C = &http.Client{Jar: jar, Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return b
}

// get fetches path and returns the status and body.
func (b *bed) get(t *testing.T, path string) (int, string) {
	t.Helper()
	res, err := b.C.Get(b.Srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, string(body)
}

// post sends a form and returns the status and the Location header.
func (b *bed) post(t *testing.T, path string, form url.Values) (int, string) {
	t.Helper()
	res, err := b.C.PostForm(b.Srv.URL+path, form)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	_, _ = io.Copy(io.Discard, res.Body)
	return res.StatusCode, res.Header.Get("Location")
}

// bury submits a task with note, then reserves the task at the head of
// the queue (that one when the queue was empty) and sends it to the dead
// letters with cause; it returns the buried task's id.
func (b *bed) bury(t *testing.T, note, cause string) string {
	t.Helper()
	c := ctxFor(t)
	if _, err := b.Q.Submit(c, job{Note: note}); err != nil {
		t.Fatal(err)
	}
	ts, err := b.Q.Reserve(c, 1, 0)
	if err != nil || len(ts) != 1 {
		t.Fatalf("reserve: %v %v", ts, err)
	}
	if err := ts[0].DeadLetter(c, errors.New(cause)); err != nil {
		t.Fatal(err)
	}
	return ts[0].ID
}

func (b *bed) stats(t *testing.T) fleet.QueueStats {
	t.Helper()
	st, err := b.F.Queue("jobs").Stats(ctxFor(t))
	if err != nil {
		t.Fatal(err)
	}
	// The counts are compared whole; the latency, a wall-clock reading, is
	// checked for its bounds and left out.
	if st.Latency < 0 || st.Latency >= time.Minute || (st.Pending == 0 && st.Latency != 0) {
		t.Errorf("latency %v of %+v", st.Latency, st)
	}
	st.Latency = 0
	return st
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// csrf loads the queue page and returns the token of its forms.
func (b *bed) csrf(t *testing.T) string {
	t.Helper()
	code, body := b.get(t, "/fleet/queues/jobs")
	m := csrfRE.FindStringSubmatch(body)
	if code != http.StatusOK || m == nil {
		t.Fatalf("queue page %d without a CSRF token:\n%s", code, body)
	}
	return m[1]
}

func mustContain(t *testing.T, what, body string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(body, w) {
			t.Fatalf("%s lacks %q:\n%s", what, w, body)
		}
	}
}

func TestPages(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		b := newBed(t, tg, fleetui.Options{})
		c := ctxFor(t)
		dead := b.bury(t, "dead one", "boom")
		if _, err := b.Q.Submit(c, job{Note: "waiting"}); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Q.SubmitWith(c, job{Note: "later"}, fleet.SubmitOptions{NotBefore: time.Now().Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
		type tags struct {
			Site string `json:"site" fleet:"index"`
		}
		p := fleet.NewPool[string, tags](b.F, "cookies", fleet.PoolOptions{})
		for _, s := range []string{"a", "a", "b"} {
			if _, err := p.Put(c, "v", tags{Site: s}, 0); err != nil {
				t.Fatal(err)
			}
		}
		if cl, err := p.Where(fleet.Eq("site", "b")).Claim(c, fleet.ClaimOptions{Hold: time.Minute}); err != nil || cl == nil {
			t.Fatalf("claim: %v %v", cl, err)
		}
		if err := b.F.PublishCatalog(c, fleet.Describe[job, out, job]("jobs")); err != nil {
			t.Fatal(err)
		}
		w := fleet.NewBatchWorker(b.F, fleet.WorkerOptions{Type: "jobs", ID: "w1", Slots: 1, Heartbeat: time.Hour}, b.Q,
			fleet.BatchFunc[job, out, job](func(ctx context.Context, s *fleet.Slot[job, out], t *fleet.Task[job]) error { return nil }))
		if err := w.Start(c); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = w.Stop(context.Background()) })

		code, body := b.get(t, "/fleet/")
		if code != http.StatusOK {
			t.Fatalf("overview %d:\n%s", code, body)
		}
		// The worker may take the pending task at any time: the row shows
		// 0 pending and 0 or 1 in flight then, so assert the stable parts.
		mustContain(t, "overview", body, `<tr data-queue="jobs">`, `<td class="n scheduled">1</td><td class="n dead">1</td>`,
			`href="/fleet/pools/cookies">cookies</a></td><td class="n">3</td><td class="n">1</td>`,
			`href="/fleet/workers/jobs">jobs</a></td><td class="n">1</td>`)
		code, body = b.get(t, "/fleet/queues/jobs")
		if code != http.StatusOK {
			t.Fatalf("queue %d:\n%s", code, body)
		}
		mustContain(t, "queue", body, `<tr data-id="`+dead+`">`, "boom", "&#34;note&#34;: &#34;dead one&#34;", "&#34;note&#34;: &#34;later&#34;",
			`action="/fleet/queues/jobs/requeue"`, `id="requeue-all"`, `id="purge"`, `data-confirm="Re-queue task `+dead+`?"`)
		code, body = b.get(t, "/fleet/pools/cookies")
		if code != http.StatusOK {
			t.Fatalf("pool %d:\n%s", code, body)
		}
		mustContain(t, "pool", body, `<td class="items">3</td><th>Claimed</th><td class="claimed">1</td>`,
			`<td>site</td><td><code>&#34;a&#34;</code></td><td class="n">2</td><td class="n">0</td>`,
			`<td>site</td><td><code>&#34;b&#34;</code></td><td class="n">1</td><td class="n">1</td>`)
		code, body = b.get(t, "/fleet/workers/jobs")
		if code != http.StatusOK {
			t.Fatalf("workers %d:\n%s", code, body)
		}
		mustContain(t, "workers", body, `href="/fleet/workers/jobs/w1">w1</a>`)
		if code, body = b.get(t, "/fleet/workers/jobs/w1"); code != http.StatusOK {
			t.Fatalf("worker %d:\n%s", code, body)
		}
		mustContain(t, "worker", body, "<h2>Slots</h2>")
		if code, body = b.get(t, "/fleet/workers"); code != http.StatusOK {
			t.Fatalf("worker types %d:\n%s", code, body)
		}
		if code, body = b.get(t, "/fleet/pools"); code != http.StatusOK {
			t.Fatalf("pools %d:\n%s", code, body)
		}
		code, body = b.get(t, "/fleet/catalog")
		if code != http.StatusOK {
			t.Fatalf("catalog %d:\n%s", code, body)
		}
		mustContain(t, "catalog", body, `<h2>jobs</h2>`, "&#34;note&#34;")
		code, body = b.get(t, "/fleet/streams")
		if code != http.StatusOK {
			t.Fatalf("streams %d:\n%s", code, body)
		}
		mustContain(t, "streams", body, `href="/fleet/streams/jobs">jobs</a>`)
		if code, body = b.get(t, "/fleet/streams/jobs"); code != http.StatusOK {
			t.Fatalf("stream %d:\n%s", code, body)
		}
		mustContain(t, "stream", body, `data-src="/fleet/streams/jobs/events"`)
		code, body = b.get(t, "/fleet/assets/app.js")
		if code != http.StatusOK || !strings.Contains(body, "EventSource") {
			t.Fatalf("app.js %d", code)
		}
	})
}

func TestNotFoundAndBadPage(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		b := newBed(t, tg, fleetui.Options{})
		b.bury(t, "x", "y")
		for path, want := range map[string]int{
			"/fleet/queues/nope":              404,
			"/fleet/queues/a%7Bb%7D":          404,
			"/fleet/pools/nope":               404,
			"/fleet/workers/nope":             404,
			"/fleet/workers/nope/w1":          404,
			"/fleet/streams/nope":             404,
			"/fleet/streams/a%7Bb%7D/events":  404,
			"/fleet/nowhere":                  404,
			"/fleet/queues/jobs?dead=0":       400,
			"/fleet/queues/jobs?dead=x":       400,
			"/fleet/queues/jobs?pending=-1":   400,
			"/fleet/queues/jobs?scheduled=":   400,
			"/fleet/queues/jobs?dead=9999999": 400,
			"/fleet/queues/jobs?dead=2":       200,
		} {
			if code, body := b.get(t, path); code != want {
				t.Errorf("GET %s: %d, want %d\n%s", path, code, want, body)
			}
		}
		// A mutation on an unknown queue is 404 too, with a valid token.
		if code, _ := b.post(t, "/fleet/queues/nope/purge", url.Values{"csrf": {b.csrf(t)}}); code != 404 {
			t.Errorf("purge unknown queue: %d", code)
		}
	})
}

func TestMutationsNeedCSRF(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		b := newBed(t, tg, fleetui.Options{})
		id := b.bury(t, "x", "y")
		token := b.csrf(t)
		// Another session's token does not fit this session's cookie.
		jar, _ := cookiejar.New(nil)
		stranger := &http.Client{Jar: jar, Timeout: 30 * time.Second,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		if res, err := stranger.Get(b.Srv.URL + "/fleet/queues/jobs"); err == nil {
			res.Body.Close()
		}
		for _, path := range []string{"/fleet/queues/jobs/requeue", "/fleet/queues/jobs/requeue-all", "/fleet/queues/jobs/purge"} {
			for name, form := range map[string]url.Values{
				"no token":    {"id": {id}},
				"empty token": {"id": {id}, "csrf": {""}},
				"bad token":   {"id": {id}, "csrf": {token + "x"}},
			} {
				if code, _ := b.post(t, path, form); code != http.StatusForbidden {
					t.Errorf("POST %s with %s: %d, want 403", path, name, code)
				}
			}
			res, err := stranger.PostForm(b.Srv.URL+path, url.Values{"id": {id}, "csrf": {token}})
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if res.StatusCode != http.StatusForbidden {
				t.Errorf("POST %s with another session's token: %d, want 403", path, res.StatusCode)
			}
			// No cookie at all.
			res, err = http.PostForm(b.Srv.URL+path, url.Values{"id": {id}, "csrf": {token}})
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if res.StatusCode != http.StatusForbidden {
				t.Errorf("POST %s without a cookie: %d, want 403", path, res.StatusCode)
			}
		}
		if st := b.stats(t); st != (fleet.QueueStats{Dead: 1}) {
			t.Fatalf("after refused posts: %+v", st)
		}
		if code, loc := b.post(t, "/fleet/queues/jobs/requeue", url.Values{"id": {id}, "csrf": {token}}); code != http.StatusSeeOther || loc != "/fleet/queues/jobs?did=requeued#dead" {
			t.Fatalf("requeue: %d %q", code, loc)
		}
		if st := b.stats(t); st != (fleet.QueueStats{Pending: 1}) {
			t.Fatalf("after requeue: %+v", st)
		}
		// Requeue again: no longer dead.
		if code, _ := b.post(t, "/fleet/queues/jobs/requeue", url.Values{"id": {id}, "csrf": {token}}); code != http.StatusConflict {
			t.Fatalf("requeue again: %d", code)
		}
		b.bury(t, "a", "b")
		b.bury(t, "c", "d")
		if code, loc := b.post(t, "/fleet/queues/jobs/requeue-all", url.Values{"csrf": {token}}); code != http.StatusSeeOther || loc != "/fleet/queues/jobs?did=requeued-all&n=2#dead" {
			t.Fatalf("requeue all: %d %q", code, loc)
		}
		if st := b.stats(t); st != (fleet.QueueStats{Pending: 3}) {
			t.Fatalf("after requeue all: %+v", st)
		}
		b.bury(t, "e", "f")
		if code, loc := b.post(t, "/fleet/queues/jobs/purge", url.Values{"csrf": {token}}); code != http.StatusSeeOther || loc != "/fleet/queues/jobs?did=purged&n=1#dead" {
			t.Fatalf("purge: %d %q", code, loc)
		}
		if st := b.stats(t); st != (fleet.QueueStats{Pending: 3}) {
			t.Fatalf("after purge: %+v", st)
		}
	})
}

func TestReadOnly(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		b := newBed(t, tg, fleetui.Options{ReadOnly: true})
		id := b.bury(t, "x", "y")
		code, body := b.get(t, "/fleet/queues/jobs")
		if code != http.StatusOK || strings.Contains(body, `method="post"`) || !strings.Contains(body, id) {
			t.Fatalf("read-only queue page %d shows forms or lacks the dead letter:\n%s", code, body)
		}
		// Even with a valid token (from a handler that is not read-only
		// but shares the key) a read-only handler refuses.
		for _, path := range []string{"/fleet/queues/jobs/requeue", "/fleet/queues/jobs/requeue-all", "/fleet/queues/jobs/purge"} {
			if code, _ := b.post(t, path, url.Values{"id": {id}}); code != http.StatusForbidden {
				t.Errorf("POST %s: %d, want 403", path, code)
			}
		}
		if st := b.stats(t); st != (fleet.QueueStats{Dead: 1}) {
			t.Fatalf("after refused posts: %+v", st)
		}
	})
}

func TestPayloadsAreEscaped(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		b := newBed(t, tg, fleetui.Options{})
		const evil = `<script>alert("x")</script>`
		b.bury(t, evil, `<img src=x onerror=alert(1)>`)
		if _, err := b.Q.Submit(ctxFor(t), job{Note: evil}); err != nil {
			t.Fatal(err)
		}
		if err := b.F.PublishCatalog(ctxFor(t), fleet.Describe[job, out, job]("jobs")); err != nil {
			t.Fatal(err)
		}
		code, body := b.get(t, "/fleet/queues/jobs")
		if code != http.StatusOK {
			t.Fatalf("queue %d", code)
		}
		if strings.Contains(body, "<script>alert") || strings.Contains(body, "<img src=x") {
			t.Fatalf("a payload reached the page unescaped:\n%s", body)
		}
		mustContain(t, "queue", body, `&lt;script&gt;alert(\&#34;x\&#34;)&lt;/script&gt;`, `&lt;img src=x onerror=alert(1)&gt;`)
		if strings.Count(body, "&lt;script&gt;") != 2 {
			t.Fatalf("want the payload twice (pending and dead):\n%s", body)
		}
	})
}

func TestStreamEvents(t *testing.T) {
	tg := redistest.Target{Name: "single-compat", URL: redistest.SingleURL(t)}
	b := newBed(t, tg, fleetui.Options{})
	// A server of its own that reports when each events handler returns.
	ended := make(chan string, 4)
	ui := fleetui.Handler(b.F, fleetui.Options{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ui.ServeHTTP(w, r)
		if strings.HasSuffix(r.URL.Path, "/events") {
			ended <- r.Header.Get("Last-Event-ID")
		}
	}))
	t.Cleanup(srv.Close)
	s := fleet.NewStream[out](b.F, "jobs", fleet.StreamOptions{})
	c := ctxFor(t)
	first, err := s.Push(c, out{N: 1})
	if err != nil {
		t.Fatal(err)
	}
	open := func(lastID string) (*bufio.Scanner, context.CancelFunc) {
		t.Helper()
		rctx, cancel := context.WithCancel(c)
		req, _ := http.NewRequestWithContext(rctx, "GET", srv.URL+"/fleet/streams/jobs/events", nil)
		if lastID != "" {
			req.Header.Set("Last-Event-ID", lastID)
		}
		res, err := b.C.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { res.Body.Close() })
		if ct := res.Header.Get("Content-Type"); res.StatusCode != 200 || ct != "text/event-stream" {
			t.Fatalf("events: %d %q", res.StatusCode, ct)
		}
		return bufio.NewScanner(res.Body), cancel
	}
	// next returns the id and data lines of the next entry event.
	next := func(sc *bufio.Scanner) (id, data string) {
		t.Helper()
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "id: "); ok {
				id = v
			}
			if v, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				return id, v
			}
		}
		t.Fatalf("stream ended: %v", sc.Err())
		return "", ""
	}
	sc, cancel := open("")
	firstEventID, d := next(sc)
	if !strings.Contains(d, `"id":"`+first+`"`) || !strings.Contains(d, `"data":"{\n  \"n\": 1\n}"`) {
		t.Fatalf("first entry: %s", d)
	}
	second, err := s.Push(c, out{N: 2})
	if err != nil {
		t.Fatal(err)
	}
	if _, d := next(sc); !strings.Contains(d, `"id":"`+second+`"`) {
		t.Fatalf("second entry: %s", d)
	}
	// Ending the request ends the handler, well before its 30 s life.
	cancel()
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the events handler still runs 10 s after its request ended")
	}
	// A reconnect resumes at the Last-Event-ID: the entries of that
	// millisecond and after, the first one included.
	sc, cancel = open(firstEventID)
	defer cancel()
	if _, d := next(sc); !strings.Contains(d, `"id":"`+first+`"`) {
		t.Fatalf("resumed at %s: %s", firstEventID, d)
	}
	if _, d := next(sc); !strings.Contains(d, `"id":"`+second+`"`) {
		t.Fatalf("resumed, second: %s", d)
	}
	cancel()
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the resumed events handler still runs 10 s after its request ended")
	}
	// A bad Last-Event-ID is 400.
	req, _ := http.NewRequestWithContext(c, "GET", srv.URL+"/fleet/streams/jobs/events", nil)
	req.Header.Set("Last-Event-ID", "soon")
	res, err := b.C.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	<-ended
	if res.StatusCode != http.StatusBadRequest {
		t.Fatalf("bad Last-Event-ID: %d", res.StatusCode)
	}
}

func TestBadOptions(t *testing.T) {
	for name, tc := range map[string]struct {
		f    bool
		opts fleetui.Options
		want string
	}{
		"nil fleet": {false, fleetui.Options{}, "needs a *fleet.Fleet"},
		"prefix":    {true, fleetui.Options{Prefix: "fleet"}, "Options.Prefix"},
		"short key": {true, fleetui.Options{CSRFKey: []byte("short")}, "Options.CSRFKey"},
		"page size": {true, fleetui.Options{PageSize: fleetui.MaxPageSize + 1}, "Options.PageSize"},
		"refresh":   {true, fleetui.Options{Refresh: time.Millisecond}, "Options.Refresh"},
	} {
		var f *fleet.Fleet
		if tc.f {
			f = &fleet.Fleet{}
		}
		rec := httptest.NewRecorder()
		fleetui.Handler(f, tc.opts).ServeHTTP(rec, httptest.NewRequest("GET", "/fleet/", nil))
		if rec.Code != http.StatusInternalServerError || !strings.Contains(rec.Body.String(), tc.want) {
			t.Errorf("%s: %d %q", name, rec.Code, rec.Body.String())
		}
	}
}

// TestWorkersPageChunk: the workers list shows a chunk worker's
// ChunkOptions beside its id, and nothing for another worker.
func TestWorkersPageChunk(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		b := newBed(t, tg, fleetui.Options{})
		c := ctxFor(t)
		q := fleet.NewQueue[job](b.F, "chunked", fleet.QueueOptions{})
		cw := fleet.NewChunkWorker(b.F, fleet.WorkerOptions{Type: "chunked", ID: "c1", Slots: 1, Heartbeat: time.Hour}, q,
			fleet.ChunkOptions{MinSize: 5, MaxSize: 20, MaxWait: 1500 * time.Millisecond},
			fleet.ChunkFunc[job, out, job](func(context.Context, *fleet.Slot[job, out], *fleet.Chunk[job]) error { return nil }))
		bw := fleet.NewBatchWorker(b.F, fleet.WorkerOptions{Type: "chunked", ID: "b1", Slots: 1, Heartbeat: time.Hour}, q,
			fleet.BatchFunc[job, out, job](func(context.Context, *fleet.Slot[job, out], *fleet.Task[job]) error { return nil }))
		for _, w := range []*fleet.Worker{cw, bw} {
			if err := w.Start(c); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = w.Stop(context.Background()) })
		}
		code, body := b.get(t, "/fleet/workers/chunked")
		if code != http.StatusOK {
			t.Fatalf("workers %d:\n%s", code, body)
		}
		mustContain(t, "workers", body, `href="/fleet/workers/chunked/c1">c1</a> <span class="chunk" title="ChunkOptions: MinSize-MaxSize, MaxWait">chunks of 5–20, wait 1.5s</span></td>`,
			`href="/fleet/workers/chunked/b1">b1</a></td>`)
	})
}
