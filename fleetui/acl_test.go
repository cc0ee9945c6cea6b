package fleetui_test

import (
	"context"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/fleetui"
	"github.com/fleet-go/fleet/internal/redistest"
)

// aclReader makes a user of fleet.ACLRules' reader role for prefix on
// every node of tg, deleted when the test ends.
func aclReader(t *testing.T, raw rueidis.Client, prefix string) (user, pass string) {
	t.Helper()
	rules, err := fleet.ACLRules(prefix, fleet.ACLReader)
	if err != nil {
		t.Fatal(err)
	}
	user, pass = "acl-ui-"+strings.TrimSuffix(prefix, ":"), "pw"
	c := context.Background()
	for addr, n := range raw.Nodes() {
		args := append([]string{"SETUSER", user, "on", ">" + pass}, rules...)
		if err := n.Do(c, n.B().Arbitrary("ACL").Args(args...).Build()).Error(); err != nil {
			t.Fatalf("ACL SETUSER on %s: %v", addr, err)
		}
	}
	t.Cleanup(func() {
		for _, n := range raw.Nodes() {
			_ = n.Do(c, n.B().Arbitrary("ACL", "DELUSER").Args(user).Build()).Error()
		}
	})
	return user, pass
}

// The dashboard works read-only on a Fleet whose user has the reader's ACL
// rules: every page answers 200 with what the tenant holds. Served without
// ReadOnly, its mutations are refused by Redis (NOPERM), and nothing
// changes.
func TestDashboardACLReader(t *testing.T) {
	t.Parallel()
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		c := ctxFor(t)
		raw := redistest.Client(t, tg)
		prefix := redistest.Prefix(t, tg)
		opts := fleet.Options{URL: tg.URL, Prefix: prefix, Layout: fleet.LayoutCompat}
		if tg.Tagged {
			opts.Layout = fleet.LayoutTagged
		}
		// The tenant's data, written by the default user.
		admin, err := fleet.Open(c, opts)
		if err != nil {
			t.Fatal(err)
		}
		defer admin.Close()
		q := fleet.NewQueue[job](admin, "jobs", fleet.QueueOptions{})
		id, err := q.Submit(c, job{Note: "acl-note"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fleet.NewPool[string, struct{}](admin, "cookies", fleet.PoolOptions{}).Put(c, "x", struct{}{}, time.Hour); err != nil {
			t.Fatal(err)
		}
		if _, err := fleet.NewStream[out](admin, "emitter", fleet.StreamOptions{}).Push(c, out{N: 1}); err != nil {
			t.Fatal(err)
		}
		if err := admin.PublishCatalog(c, fleet.CatalogEntry{Type: "emitter"}); err != nil {
			t.Fatal(err)
		}
		// The reader's Fleet: it may not write the layout marker.
		opts.Username, opts.Password = aclReader(t, raw, prefix)
		opts.NoMarkerWrite = true
		f, err := fleet.Open(c, opts)
		if err != nil {
			t.Fatalf("open as reader: %v", err)
		}
		defer f.Close()

		for _, readOnly := range []bool{true, false} {
			mux := http.NewServeMux()
			mux.Handle("/fleet/", fleetui.Handler(f, fleetui.Options{ReadOnly: readOnly}))
			srv := httptest.NewServer(mux)
			defer srv.Close()
			jar, _ := cookiejar.New(nil)
			b := &bed{F: f, Raw: raw, Prefix: prefix, Srv: srv, Q: q, C: &http.Client{Jar: jar, Timeout: 30 * time.Second,
				CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
			pages := map[string]string{
				"/fleet/":                        "jobs",
				"/fleet/queues/jobs":             "jobs",
				"/fleet/queues/jobs/pending":     id,
				"/fleet/queues/jobs/dead":        "jobs",
				"/fleet/queues/jobs/tasks/" + id: "acl-note",
				"/fleet/queues/jobs/groups":      "jobs",
				"/fleet/search?q=" + id:          id,
				"/fleet/workers":                 "",
				"/fleet/pools":                   "cookies",
				"/fleet/pools/cookies":           "cookies",
				"/fleet/streams":                 "emitter",
				"/fleet/streams/emitter":         "emitter",
				"/fleet/schedules":               "",
				"/fleet/catalog":                 "emitter",
			}
			for path, want := range pages {
				code, body := b.get(t, path)
				if code != http.StatusOK && !(path == "/fleet/search?q="+id && code == http.StatusSeeOther) {
					t.Errorf("GET %s as reader: %d\n%s", path, code, body)
				} else if code == http.StatusOK && !strings.Contains(body, want) {
					t.Errorf("GET %s as reader lacks %q", path, want)
				}
			}
			if readOnly {
				if code, _ := b.post(t, "/fleet/queues/jobs/pause", url.Values{}); code != http.StatusForbidden {
					t.Errorf("POST pause on a read-only dashboard: %d, want 403", code)
				}
				continue
			}
			// Mutations shown: Redis refuses them, and nothing changes.
			code, _ := b.post(t, "/fleet/queues/jobs/pause", url.Values{"csrf": {b.csrf(t)}})
			if code == http.StatusSeeOther || code < 400 {
				t.Errorf("POST pause as reader: %d, want an error", code)
			}
			if paused, err := admin.Queue("jobs").Paused(c); err != nil || paused {
				t.Errorf("queue paused = %v, %v after a reader's pause", paused, err)
			}
			if st, err := admin.Queue("jobs").Stats(c); err != nil || st.Pending != 1 {
				t.Errorf("queue stats %+v, %v; want the one task pending", st, err)
			}
		}
	})
}
