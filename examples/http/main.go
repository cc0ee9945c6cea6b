// Command http is a host's HTTP surface over fleet, with net/http only:
//
//	POST  /api/v1/automations/{type}/tasks     submit a task (validated)
//	GET   /api/v1/catalog                      the published catalog
//	PATCH /api/v1/workers/{type}/{id}/config   JSON merge patch of a config
//	GET   /api/v1/workers[?active=30s]         registered workers
//	      /fleet/                              the dashboard (package fleetui)
//
// The same process runs the sweeper and one batch worker.
//
//	go run ./examples/http -addr 127.0.0.1:8080
//	go run ./examples/http -selftest     # free port, calls each endpoint, exits
//
// With -selftest it prints each call's status and body, then
// "done=N failed=M" (checks passed and failed). It uses FLEET_REDIS_URL, or
// starts a throwaway redis-server.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/examples/internal/exredis"
	"github.com/fleet-go/fleet/fleetui"
)

// Fetch is the task payload of the "fetch" automation.
type Fetch struct {
	URL     string `json:"url" validate:"required,url"`
	Retries int    `json:"retries" validate:"gte=0,lte=5"`
}

// Config is the "fetch" automation's config.
type Config struct {
	UserAgent string `json:"user_agent" validate:"required"`
	Timeouts  struct {
		ConnectMS int `json:"connect_ms" validate:"gte=0"`
	} `json:"timeouts"`
}

// Page is the "fetch" automation's output.
type Page struct {
	URL    string `json:"url"`
	Status int    `json:"status"`
}

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "listen address")
	selftest := flag.Bool("selftest", false, "listen on a free port, call each endpoint, print the results and exit")
	timeout := flag.Duration("timeout", 0, "stop after this long (0: run until interrupted; selftest: 30s)")
	flag.Parse()
	if *selftest && *timeout == 0 {
		*timeout = 30 * time.Second
	}
	if err := run(*addr, *selftest, *timeout); err != nil {
		log.Fatal(err)
	}
}

func run(addr string, selftest bool, timeout time.Duration) error {
	ctx, cancel := context.WithCancel(context.Background())
	if timeout > 0 {
		ctx, cancel = context.WithTimeout(context.Background(), timeout)
	}
	defer cancel()
	url, stop, err := exredis.URL(ctx)
	if err != nil {
		return err
	}
	defer stop()
	f, err := fleet.Open(ctx, fleet.Options{URL: url, Prefix: fmt.Sprintf("example-http-%d:", os.Getpid())})
	if err != nil {
		return err
	}
	defer f.Close()

	// A task is a URL and a few knobs: 16 KiB of JSON is plenty, and a
	// bigger body is answered 413 (fleet.ErrPayloadTooLarge).
	q := fleet.NewQueue[Fetch](f, "fetch", fleet.QueueOptions{MaxPayloadBytes: 16 << 10})
	w := fleet.NewBatchWorker(f, fleet.WorkerOptions{Type: "fetch", ID: "web-1", Slots: 4, Heartbeat: time.Second,
		Config: map[string]any{"user_agent": "fleet-example/1", "timeouts": map[string]any{"connect_ms": 500}}}, q,
		fleet.BatchFunc[Config, Page, Fetch](func(ctx context.Context, s *fleet.Slot[Config, Page], t *fleet.Task[Fetch]) error {
			_, err := s.Emit(ctx, Page{URL: t.Payload.URL, Status: 200})
			return err
		}))
	if err := f.PublishCatalog(ctx, w.Catalog()); err != nil {
		return err
	}
	if err := w.Start(ctx); err != nil {
		return err
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = f.RunSweeper(ctx, fleet.SweeperOptions{}) }()

	if selftest {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: routes(f), ReadHeaderTimeout: 5 * time.Second}
	wg.Add(1)
	go func() { defer wg.Done(); _ = srv.Serve(ln) }()
	fmt.Fprintf(os.Stderr, "listening on http://%s\n", ln.Addr())

	var testErr error
	if selftest {
		testErr = selfTest(ctx, "http://"+ln.Addr().String(), w)
		cancel()
	} else {
		<-ctx.Done()
	}
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer scancel()
	_ = srv.Shutdown(sctx)
	_ = w.Stop(sctx)
	cancel()
	wg.Wait()
	return testErr
}

func routes(f *fleet.Fleet) http.Handler {
	mux := http.NewServeMux()
	// The dashboard. It can re-queue and purge dead letters: a real host
	// wraps it in its own authentication (see fleetui's Example_auth).
	mux.Handle("/fleet/", fleetui.Handler(f, fleetui.Options{}))
	mux.HandleFunc("POST /api/v1/automations/{type}/tasks", func(rw http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(rw, r.Body, 1<<20))
		if err != nil {
			writeErr(rw, http.StatusRequestEntityTooLarge, err)
			return
		}
		id, err := f.SubmitJSON(r.Context(), r.PathValue("type"), body)
		if err != nil {
			writeErr(rw, status(err), err)
			return
		}
		writeJSON(rw, http.StatusCreated, map[string]string{"id": id})
	})
	mux.HandleFunc("GET /api/v1/catalog", func(rw http.ResponseWriter, r *http.Request) {
		c, err := f.Catalog(r.Context())
		if err != nil {
			writeErr(rw, status(err), err)
			return
		}
		writeJSON(rw, http.StatusOK, c)
	})
	mux.HandleFunc("PATCH /api/v1/workers/{type}/{id}/config", func(rw http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(rw, r.Body, 1<<20))
		if err != nil {
			writeErr(rw, http.StatusRequestEntityTooLarge, err)
			return
		}
		gen, err := f.UpdateConfig(r.Context(), r.PathValue("type"), r.PathValue("id"), body)
		if err != nil {
			writeErr(rw, status(err), err)
			return
		}
		writeJSON(rw, http.StatusOK, map[string]int64{"gen": gen})
	})
	mux.HandleFunc("GET /api/v1/workers", func(rw http.ResponseWriter, r *http.Request) {
		var active time.Duration
		if a := r.URL.Query().Get("active"); a != "" {
			var err error
			if active, err = time.ParseDuration(a); err != nil || active <= 0 {
				writeErr(rw, http.StatusBadRequest, fmt.Errorf("active=%q is not a positive duration", a))
				return
			}
		}
		ws, err := f.Workers(r.Context(), fleet.WorkersFilter{Type: r.URL.Query().Get("type"), ActiveWithin: active})
		if err != nil {
			writeErr(rw, status(err), err)
			return
		}
		type row struct {
			fleet.WorkerInfo
			LastSeen int64 `json:"last_seen"`
		}
		out := []row{}
		for _, w := range ws {
			out = append(out, row{WorkerInfo: w, LastSeen: w.LastSeen.Unix()})
		}
		writeJSON(rw, http.StatusOK, out)
	})
	return mux
}

// status maps fleet's errors to HTTP statuses.
func status(err error) int {
	switch {
	case errors.Is(err, fleet.ErrQueueNotFound), errors.Is(err, fleet.ErrInvalidName):
		return http.StatusNotFound
	case errors.Is(err, fleet.ErrInvalidJSON):
		return http.StatusBadRequest
	case errors.Is(err, fleet.ErrPayloadTooLarge):
		return http.StatusRequestEntityTooLarge
	case errors.Is(err, fleet.ErrInvalidPayload), errors.Is(err, fleet.ErrInvalidConfig):
		return http.StatusUnprocessableEntity
	case errors.Is(err, fleet.ErrWrongType), errors.Is(err, fleet.ErrStaleGen):
		return http.StatusConflict
	case errors.Is(err, fleet.ErrUnavailable):
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

func writeJSON(rw http.ResponseWriter, code int, v any) {
	rw.Header().Set("Content-Type", "application/json")
	rw.WriteHeader(code)
	_ = json.NewEncoder(rw).Encode(v)
}

func writeErr(rw http.ResponseWriter, code int, err error) {
	writeJSON(rw, code, map[string]string{"error": err.Error()})
}

// selfTest calls each endpoint and checks the status.
func selfTest(ctx context.Context, base string, w *fleet.Worker) error {
	done, failed := 0, 0
	call := func(method, path, body string, want int, check func(string) bool) string {
		req, _ := http.NewRequestWithContext(ctx, method, base+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			fmt.Printf("%s %s: %v\n", method, path, err)
			failed++
			return ""
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		got := strings.TrimSpace(string(b))
		ok := res.StatusCode == want && (check == nil || check(got))
		mark := "ok"
		if !ok {
			mark = "FAIL"
			failed++
		} else {
			done++
		}
		if len(got) > 120 {
			got = got[:120] + "..."
		}
		fmt.Printf("%-4s %s %s -> %d %s\n", mark, method, path, res.StatusCode, got)
		return got
	}
	has := func(s string) func(string) bool { return func(b string) bool { return strings.Contains(b, s) } }
	call("POST", "/api/v1/automations/fetch/tasks", `{"url":"https://example.org/a","retries":1}`, 201, has(`"id":`))
	call("POST", "/api/v1/automations/fetch/tasks", `{"url":`, 400, has(`"error":`))
	call("POST", "/api/v1/automations/fetch/tasks", ``, 400, has("empty body"))
	call("POST", "/api/v1/automations/fetch/tasks", `{"url":"https://example.org/`+strings.Repeat("a", 20<<10)+`"}`, 413, has("payload too large"))
	call("POST", "/api/v1/automations/fetch/tasks", `{"url":"not a url"}`, 422, has("url (fails url)"))
	call("POST", "/api/v1/automations/fetch/tasks", `{"url":"https://example.org","extra":1}`, 400, has("extra"))
	call("POST", "/api/v1/automations/nope/tasks", `{}`, 404, has(`"error":`))
	call("GET", "/api/v1/catalog", "", 200, has(`"fetch":{"config":`))
	call("PATCH", "/api/v1/workers/fetch/web-1/config", `{"user_agent":"fleet-example/2","timeouts":{"connect_ms":800}}`, 200, has(`"gen":1`))
	call("PATCH", "/api/v1/workers/fetch/web-1/config", `[1,2]`, 422, has(`"error":`))
	call("PATCH", "/api/v1/workers/fetch/we{b}/config", `{}`, 404, has(`"error":`))
	// The worker applies gen 1 through the invalidation.
	deadline := time.Now().Add(5 * time.Second)
	for w.Gen() != 1 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if w.Gen() == 1 {
		done++
		fmt.Println("ok   worker web-1 applied config gen 1")
	} else {
		failed++
		fmt.Printf("FAIL worker web-1 at gen %d\n", w.Gen())
	}
	call("GET", "/api/v1/workers?active=30s", "", 200, has(`"id":"web-1"`))
	call("GET", "/api/v1/workers?active=soon", "", 400, nil)
	call("GET", "/fleet/", "", 200, has(`<tr data-queue="fetch">`))
	call("GET", "/fleet/queues/nope", "", 404, nil)
	fmt.Printf("done=%d failed=%d\n", done, failed)
	if failed > 0 {
		return fmt.Errorf("%d checks failed", failed)
	}
	return nil
}
