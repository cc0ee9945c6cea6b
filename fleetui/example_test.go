package fleetui_test

import (
	"context"
	"crypto/subtle"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/fleetui"
	"github.com/fleet-go/fleet/internal/redistest"
)

// exampleFleet opens a Fleet for an Example on the test binary's Redis,
// under a prefix of its own. In your code:
// fleet.Open(ctx, fleet.Options{URL: "redis://127.0.0.1:6379"}).
func exampleFleet(name string) (*fleet.Fleet, func()) {
	url, err := redistest.SingleURLOrErr()
	if err != nil {
		log.Fatal(err)
	}
	prefix := "example-fleetui-" + name + ":"
	redistest.DeletePrefix(url, prefix)
	f, err := fleet.Open(context.Background(), fleet.Options{URL: url, Prefix: prefix})
	if err != nil {
		log.Fatal(err)
	}
	return f, func() { f.Close(); redistest.DeletePrefix(url, prefix) }
}

// Mount the dashboard on the host's own mux, under /fleet/.
func Example() {
	f, done := exampleFleet("mount")
	defer done()
	q := fleet.NewQueue[map[string]string](f, "fetch", fleet.QueueOptions{})
	if _, err := q.Submit(context.Background(), map[string]string{"url": "https://example.com"}); err != nil {
		log.Fatal(err)
	}

	mux := http.NewServeMux()
	mux.Handle("/fleet/", fleetui.Handler(f, fleetui.Options{}))
	srv := httptest.NewServer(mux) // in your code: http.ListenAndServe(addr, mux)
	defer srv.Close()

	res, err := http.Get(srv.URL + "/fleet/")
	if err != nil {
		log.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	fmt.Println(res.Status)
	fmt.Println(strings.Contains(string(body), `<td class="n pending">1</td>`))
	// Output:
	// 200 OK
	// true
}

// The dashboard can re-queue and purge, so put it behind the host's
// authentication. Here, HTTP basic auth; a session check, an OAuth proxy's
// header or mTLS work the same way. ReadOnly hides the mutations for a
// dashboard that many may see.
func Example_auth() {
	f, done := exampleFleet("auth")
	defer done()

	requireUser := func(user, pass string, next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			u, p, ok := r.BasicAuth()
			if !ok || subtle.ConstantTimeCompare([]byte(u), []byte(user)) != 1 ||
				subtle.ConstantTimeCompare([]byte(p), []byte(pass)) != 1 {
				w.Header().Set("WWW-Authenticate", `Basic realm="fleet"`)
				http.Error(w, "unauthorized", http.StatusUnauthorized)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
	mux := http.NewServeMux()
	mux.Handle("/fleet/", requireUser("ops", "s3cret", fleetui.Handler(f, fleetui.Options{})))
	mux.Handle("/status/", fleetui.Handler(f, fleetui.Options{Prefix: "/status/", ReadOnly: true}))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	for _, path := range []string{"/fleet/", "/status/"} {
		res, err := http.Get(srv.URL + path)
		if err != nil {
			log.Fatal(err)
		}
		res.Body.Close()
		fmt.Println(path, res.StatusCode)
	}
	req, _ := http.NewRequest("GET", srv.URL+"/fleet/", nil)
	req.SetBasicAuth("ops", "s3cret")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		log.Fatal(err)
	}
	res.Body.Close()
	fmt.Println("/fleet/ as ops", res.StatusCode)
	// Output:
	// /fleet/ 401
	// /status/ 200
	// /fleet/ as ops 200
}
