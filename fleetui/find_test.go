package fleetui_test

import (
	"html"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/fleetui"
	"github.com/fleet-go/fleet/internal/redistest"
)

// TestFindByMetadata: the queue page links the search by metadata; the
// search lists the tasks of an indexed key and value a page at a time
// (each linked to its page, with its state) and walks to the end; a key
// the queue does not index is 400, and a queue that indexes nothing says
// so.
func TestFindByMetadata(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		b := newBed(t, tg, fleetui.Options{PageSize: 2})
		c := ctxFor(t)
		q := fleet.NewQueue[job](b.F, "tenants", fleet.QueueOptions{IndexMeta: []string{"tenant"}})
		var want []string
		for i := range 5 {
			tenant := "acme & co"
			if i == 2 {
				tenant = "globex"
			}
			id, err := q.SubmitWith(c, job{Note: "n"}, fleet.SubmitOptions{Metadata: map[string]string{"tenant": tenant}})
			if err != nil {
				t.Fatal(err)
			}
			if i != 2 {
				want = append(want, id)
			}
		}
		code, body := b.get(t, "/fleet/queues/tenants")
		if code != http.StatusOK {
			t.Fatalf("queue page %d", code)
		}
		mustContain(t, "queue page", body, `/fleet/queues/tenants/find" id="find-link"`)
		code, body = b.get(t, "/fleet/queues/tenants/find")
		if code != http.StatusOK {
			t.Fatalf("find form %d", code)
		}
		mustContain(t, "find form", body, `id="find-key"`, `<option value="tenant" selected>tenant</option>`)

		var got []string
		path := "/fleet/queues/tenants/find?" + url.Values{"key": {"tenant"}, "value": {"acme & co"}}.Encode()
		for range 10 {
			code, body = b.get(t, path)
			if code != http.StatusOK {
				t.Fatalf("find %s: %d\n%s", path, code, body)
			}
			page := rows(body)
			got = append(got, page...)
			if len(page) > 0 {
				mustContain(t, "find", body, `<td class="status">pending</td>`)
			}
			i := strings.Index(body, `rel="next" id="next"`)
			if i < 0 {
				break
			}
			href := body[strings.LastIndex(body[:i], `href="`)+6 : i-2]
			path = html.UnescapeString(href)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("found %v, want %v", got, want)
		}
		if code, _ := b.get(t, "/fleet/queues/tenants/find?key=site&value=x"); code != http.StatusBadRequest {
			t.Fatalf("a key not indexed: %d", code)
		}
		if code, _ := b.get(t, "/fleet/queues/tenants/find?key=tenant&value=x&after=nope"); code != http.StatusBadRequest {
			t.Fatalf("a bad cursor: %d", code)
		}
		if _, err := b.Q.Submit(c, job{Note: "register"}); err != nil {
			t.Fatal(err)
		}
		code, body = b.get(t, "/fleet/queues/jobs/find")
		if code != http.StatusOK {
			t.Fatalf("find on a queue that indexes nothing: %d", code)
		}
		mustContain(t, "no index", body, `id="find-none"`)
	})
}
