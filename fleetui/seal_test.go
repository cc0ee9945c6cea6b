package fleetui_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/fleetui"
	"github.com/fleet-go/fleet/internal/redistest"
)

// TestSealedPages: the dashboard shows a sealed queue's payload as sealed,
// naming its key, on the task page and the pending list, while its host
// has no Sealer for the queue; once the host makes the queue with its
// Sealer, the same pages show the payload.
func TestSealedPages(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		b := newBed(t, tg, fleetui.Options{})
		c := ctxFor(t)
		kr, err := fleet.NewKeyring(fleet.Key{ID: "k9", Secret: []byte("0123456789abcdef0123456789abcdef")})
		if err != nil {
			t.Fatal(err)
		}
		layout := fleet.LayoutCompat
		if tg.Tagged {
			layout = fleet.LayoutTagged
		}
		sub, err := fleet.Open(c, fleet.Options{URL: tg.URL, Prefix: b.Prefix, Layout: layout})
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		id, err := fleet.NewQueue[job](sub, "vault", fleet.QueueOptions{Sealer: kr}).Submit(c, job{Note: "hush-77"})
		if err != nil {
			t.Fatal(err)
		}
		page := "/fleet/queues/vault/tasks/" + id
		for _, path := range []string{page, "/fleet/queues/vault"} {
			code, body := b.get(t, path)
			if code != http.StatusOK || strings.Contains(body, "hush-77") || !strings.Contains(body, "sealed (key k9)") {
				t.Fatalf("GET %s without the Sealer: %d\n%s", path, code, body)
			}
		}
		fleet.NewQueue[job](b.F, "vault", fleet.QueueOptions{Sealer: kr, Lease: time.Minute})
		for _, path := range []string{page, "/fleet/queues/vault"} {
			code, body := b.get(t, path)
			if code != http.StatusOK || !strings.Contains(body, "hush-77") || strings.Contains(body, "sealed (key") {
				t.Fatalf("GET %s with the Sealer: %d\n%s", path, code, body)
			}
		}
	})
}
