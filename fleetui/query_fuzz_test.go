package fleetui_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/fleetui"
	"github.com/fleet-go/fleet/internal/redistest"
)

// FuzzQuery sends GET requests with any path under the dashboard and any
// query string: each gets a page (200), a redirect, 400 or 404, never a
// 500 or a panic, and a GET changes nothing stored (the keys under the
// test's prefix are the same before and after).
func FuzzQuery(f *testing.F) {
	for _, s := range []struct{ path, query string }{
		{"", ""}, {"queues/jobs", "did=requeued&n=3"}, {"queues/jobs", "n=-1&did=purged"}, {"queues/jobs/dead", "cursor=%ff&count=99999"},
		{"workers", "type=x"}, {"pools/p", "tag=a:b"}, {"streams/s", "n=abc"}, {"streams/jobs/events", ""}, {"queues/..%2f", ""}, {"tasks/x", "q=jobs"},
	} {
		f.Add(s.path, s.query)
	}
	tg := redistest.Targets(f)[0]
	b := redistest.Client(f, tg)
	prefix := redistest.Prefix(f, tg)
	fl, err := fleet.Open(f.Context(), fleet.Options{URL: tg.URL, Prefix: prefix})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = fl.Close() })
	q := fleet.NewQueue[job](fl, "jobs", fleet.QueueOptions{})
	if _, err := q.Submit(f.Context(), job{Note: "<b>x</b>"}); err != nil {
		f.Fatal(err)
	}
	before := strings.Join(redistest.Keys(f, b, prefix), " ")
	h := fleetui.Handler(fl, fleetui.Options{})
	f.Fuzz(func(t *testing.T, path, query string) {
		u := &url.URL{Path: "/fleet/" + path, RawQuery: query}
		// A live stream (streams/<type>/events) ends with its request's ctx.
		ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, "GET", u.String(), nil)
		if err != nil {
			return // not a request a client could send
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		switch c := rec.Code; {
		case c == 200, c == 400, c == 404, c >= 300 && c < 400:
		default:
			t.Fatalf("GET %s: %d\n%s", u, c, rec.Body.String())
		}
		if after := strings.Join(redistest.Keys(t, b, prefix), " "); after != before {
			t.Fatalf("GET %s changed the keys:\n%s\n%s", u, before, after)
		}
	})
}
