package fleetui_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/fleetui"
	"github.com/fleet-go/fleet/internal/redistest"
)

// howToChromium says how to get the browser that TestBrowser drives.
const howToChromium = "install Debian's chromium package (apt-get install -y chromium; .ci/run does it when it is missing), or set FLEETUI_CHROME to a Chrome or Chromium binary"

// chromePath finds a headless-capable Chrome or Chromium.
func chromePath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("FLEETUI_CHROME"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatalf("TestBrowser needs a Chromium and found none on PATH: %s", howToChromium)
	return ""
}

// artifacts returns the directory for the test's screenshots:
// $FLEETUI_ARTIFACTS, else fleetui/artifacts (ignored by git).
func artifacts(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("FLEETUI_ARTIFACTS")
	if dir == "" {
		dir = "artifacts"
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// mail is the payload of the busy queue of the browser test.
type mail struct {
	To string `json:"to"`
}

// TestBrowser drives the dashboard in a real headless Chromium: the
// overview's depth follows submits without a reload, a dead letter is
// re-queued with its button and confirmation, and a payload holding
// <script> shows as text. Screenshots go to artifacts(); with
// FLEETUI_README_SHOT=1 the overview's also replaces docs/fleetui.png.
func TestBrowser(t *testing.T) {
	chrome := chromePath(t)
	tg := redistest.Target{Name: "single-compat", URL: redistest.SingleURL(t)}
	b := newBed(t, tg, fleetui.Options{Refresh: 300 * time.Millisecond}, func(o *fleet.Options) { o.HistoryFlush = 200 * time.Millisecond })
	c := ctxFor(t)
	dir := artifacts(t)

	// The XSS payload: it would set window.__xss if it ever ran.
	const evil = `<script>window.__xss=1</script>`
	xssID := b.bury(t, evil, `<img src=x onerror="window.__xss=2">`)
	plainID := b.bury(t, "plain", "timeout")

	// A busy type beside it, for the rates, the chart and the stream.
	mq := fleet.NewQueue[mail](b.F, "mail", fleet.QueueOptions{})
	w := fleet.NewBatchWorker(b.F, fleet.WorkerOptions{Type: "mail", ID: "mailer-1", Slots: 2, Heartbeat: 200 * time.Millisecond}, mq,
		fleet.BatchFunc[struct{}, mail, mail](func(ctx context.Context, s *fleet.Slot[struct{}, mail], t *fleet.Task[mail]) error {
			_, err := s.Emit(ctx, t.Payload)
			return err
		}))
	if err := b.F.PublishCatalog(c, fleet.Describe[struct{}, mail, mail]("mail"), fleet.Describe[struct{}, out, job]("jobs")); err != nil {
		t.Fatal(err)
	}
	if err := w.Start(c); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Stop(context.Background()) })
	submitMail := func(n int) {
		for i := range n {
			if _, err := mq.Submit(c, mail{To: fmt.Sprintf("user%d@example.com", i)}); err != nil {
				t.Error(err)
			}
		}
	}
	submitMail(20)
	type region struct {
		Region string `json:"region" fleet:"index"`
	}
	proxies := fleet.NewPool[string, region](b.F, "proxies", fleet.PoolOptions{})
	for _, r := range []string{"eu", "eu", "us", "us", "us"} {
		if _, err := proxies.Put(c, "socks5://proxy."+r, region{Region: r}, 0); err != nil {
			t.Fatal(err)
		}
	}
	if cl, err := proxies.Where(fleet.Eq("region", "us")).Claim(c, fleet.ClaimOptions{Hold: time.Minute}); err != nil || cl == nil {
		t.Fatalf("claim: %v %v", cl, err)
	}

	br := startBrowser(t, chrome)
	step, do, text, eval, waitJS := br.step, br.do, br.text, br.eval, br.waitJS
	save := func(name string, png []byte) {
		t.Helper()
		if err := os.WriteFile(name, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot %s", name)
	}
	shot := func(name string) {
		t.Helper()
		png, err := chromedp.Run(step(), chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
		save(filepath.Join(dir, name+".png"), png)
	}
	pendingCell := `tr[data-queue="jobs"] td.pending`

	// 1. The overview loads.
	do("load the overview", chromedp.Navigate(b.Srv.URL+"/fleet/"), chromedp.WaitVisible(chromedp.CSS(pendingCell)))
	if depth := text(pendingCell); depth != "0" {
		t.Fatalf("pending depth of jobs %q, want 0", depth)
	}
	eval(`window.__noReload = "still here"`)

	// 2. Submits show up without a reload.
	for i := range 3 {
		if _, err := b.Q.Submit(c, job{Note: fmt.Sprintf("new %d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	waitJS("the depth becomes 3", `(document.querySelector('`+pendingCell+`') || {}).textContent === "3"`)
	if marker := eval(`String(window.__noReload)`); marker != "still here" {
		t.Fatalf("the page reloaded (marker %q)", marker)
	}
	// The chart counts every mail as the mailer sends it, from the
	// history that the mailer's Fleet adds to (every 200 ms here), and
	// the mail queue's row draws its depth.
	mails := 20
	for i := range 6 {
		submitMail(4 + 4*i)
		mails += 4 + 4*i
		waitJS("the chart counts the mails done", fmt.Sprintf(`(document.querySelector('#done-chart') || {dataset: {}}).dataset.done === "%d" && document.querySelector('tr[data-queue="mail"] svg.spark') !== null`, mails))
	}
	shot("overview")
	if os.Getenv("FLEETUI_README_SHOT") == "1" {
		png, err := chromedp.Run(step(), chromedp.Screenshot(chromedp.CSS("body")))
		if err != nil {
			t.Fatal(err)
		}
		save(filepath.Join("..", "docs", "fleetui.png"), png)
	}

	// 3. The XSS payload shows as text, in the dead letter and its error.
	do("load the queue", chromedp.Navigate(b.Srv.URL+"/fleet/queues/jobs"),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-id="`+plainID+`"] button.requeue`)))
	payload := text(`tr[data-id="` + xssID + `"] pre.payload`)
	errText := text(`tr[data-id="` + xssID + `"] td.err`)
	xss := eval(`String(window.__xss)`)
	injected := eval(`String(document.querySelectorAll('main script, main img').length)`)
	if !strings.Contains(payload, `"note": "`+evil+`"`) || errText != `<img src=x onerror="window.__xss=2">` || xss != "undefined" || injected != "0" {
		t.Fatalf("XSS payload: text %q, error %q, window.__xss %s, injected elements %s", payload, errText, xss, injected)
	}

	// 4. Re-queue a dead letter with its button and the confirmation.
	do("ask to re-queue", chromedp.Click(chromedp.CSS(`tr[data-id="`+plainID+`"] button.requeue`)),
		chromedp.WaitVisible(chromedp.CSS(`#confirm[open] #confirm-yes`)))
	if q := text(`#confirm-text`); q != "Re-queue task "+plainID+"?" {
		t.Fatalf("confirmation %q", q)
	}
	shot("queue-confirm")
	do("confirm", chromedp.Click(chromedp.CSS(`#confirm-yes`)), chromedp.WaitVisible(chromedp.CSS(`#flash`)))
	waitJS("the dead letter leaves the list", `document.querySelector('tr[data-id="`+plainID+`"]') === null && document.querySelector('tr[data-id="`+xssID+`"]') !== null`)
	shot("queue")
	dead, err := b.F.Queue("jobs").DeadLetters(c, 0, 10)
	if err != nil || len(dead) != 1 || dead[0].ID != xssID {
		t.Fatalf("dead letters after the re-queue: %+v %v", dead, err)
	}
	pending, err := b.F.Queue("jobs").Pending(c, 0, 10)
	if err != nil || len(pending) != 4 || !slices.ContainsFunc(pending, func(ti fleet.WaitingTask) bool { return ti.ID == plainID }) {
		t.Fatalf("pending after the re-queue: %+v %v", pending, err)
	}

	// 5. The stream's live tail.
	do("tail the stream", chromedp.Navigate(b.Srv.URL+"/fleet/streams/mail"), chromedp.WaitVisible(chromedp.CSS(`#tail li pre`)))
	// The tail starts with the stream's newest entries, up to 50: wait
	// for all of them before counting what comes after.
	first, err := b.F.StreamTail(c, "mail", time.Time{}, 50)
	if err != nil {
		t.Fatal(err)
	}
	before := strconv.Itoa(len(first))
	waitJS("the first entries arrive", `document.querySelectorAll('#tail li').length === `+before)
	// The mailer's stream holds bare members, so mailing user0 again
	// pushes a member that is already there (it takes the newer score),
	// and three times in a row most often twice within one second: each
	// push is still a new entry on the page.
	for i := 1; i <= 3; i++ {
		submitMail(1)
		waitJS(fmt.Sprintf("new entry %d arrives", i), fmt.Sprintf(`document.querySelectorAll('#tail li').length === %s + %d`, before, i))
	}
	shot("stream")

	// Close the browser before the server, so no request is left open.
	br.close()
}

// browser is a headless Chromium for one test, with the steps the tests
// take. The first run starts the browser; it takes no timeout of its own
// (that would stop the browser with it). Every step after is bounded and
// waits on an exact condition, never a sleep: under load the browser is
// slow, not wrong.
type browser struct {
	t     *testing.T
	ctx   context.Context
	close func() // stops the browser (also at the test's end)
}

func startBrowser(t *testing.T, chrome string) *browser {
	t.Helper()
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chrome), chromedp.NoSandbox, chromedp.Headless, chromedp.DisableGPU,
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 900))...)
	bctx, cancelBrowser := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	stop := func() { cancelBrowser(); cancelAlloc() }
	t.Cleanup(stop)
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("start %s: %v (%s)", chrome, err, howToChromium)
	}
	return &browser{t: t, ctx: bctx, close: stop}
}

// step is a ctx for one step: 90 s at most.
func (b *browser) step() context.Context {
	sctx, cancel := context.WithTimeout(b.ctx, 90*time.Second)
	b.t.Cleanup(cancel)
	return sctx
}

func (b *browser) do(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	if err := chromedp.Do(b.step(), actions...); err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
}

func (b *browser) text(sel string) string {
	b.t.Helper()
	s, err := chromedp.Run(b.step(), chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		b.t.Fatalf("text of %s: %v", sel, err)
	}
	return s
}

func (b *browser) eval(expr string) string {
	b.t.Helper()
	s, err := chromedp.Run(b.step(), chromedp.Evaluate[string](expr))
	if err != nil {
		b.t.Fatalf("evaluate %s: %v", expr, err)
	}
	return s
}

func (b *browser) waitJS(what, expr string) {
	b.t.Helper()
	if _, err := chromedp.Run(b.step(), chromedp.Poll[bool](expr,
		chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(80*time.Second))); err != nil {
		b.t.Fatalf("wait until %s: %v", what, err)
	}
}
