// Package fleetui is an operator's dashboard for a fleet: an http.Handler
// that the host application mounts on its own server. It is not a daemon:
// it starts no goroutine of its own, and every page reads Redis through the
// fleet admin API while the request lasts.
//
//	mux.Handle("/fleet/", fleetui.Handler(f, fleetui.Options{}))
//
// # Pages
//
//   - the overview: every queue with its depth, in flight, scheduled and
//     dead counts, its latency, its rates of done and failed tasks over the
//     last five minutes and its depth over the last hour; a chart of the
//     tasks done and failed per minute over the last hour; the pools; the
//     worker types;
//   - a queue's history: charts of its tasks done and failed, and of its
//     depth, over the last hour, 24 hours or 30 days;
//   - a queue: its pending tasks, scheduled tasks and dead letters, a page
//     at a time, with the payloads pretty-printed; a dead letter can be
//     re-queued, and all of them re-queued or purged, each after a
//     confirmation;
//   - a task (search it by id or dedup key from any page): its state,
//     queue, attempts, last error, payload, result, metadata, progress,
//     times, worker and lease deadline, and the tasks it waits for; the
//     actions its state allows: cancel (running or pending), delete
//     (pending or scheduled), run now (scheduled), re-queue (dead);
//   - a queue's search by metadata (find.go): the tasks whose metadata sets
//     a key the queue indexes (QueueOptions.IndexMeta) to a value, in any
//     state, a page at a time (Queue.FindByMeta);
//   - a queue's tasks by state (pending, scheduled, running with worker and
//     lease deadline, dead, and done while QueueOptions.Retention keeps
//     their records), paginated by cursors that stay correct while
//     the queue changes (lists.go), with batch actions on a selection
//     after a confirmation; the queue's latency, and its pause and resume;
//   - a queue's groups (depth, running, limits, state), a flow's or
//     batch's state and counts, the schedules with pause and resume;
//   - the workers of a type (state, last seen, the stored and the applied
//     config gen, stats, last error) and one worker's slots;
//   - the pools, and a pool's items and claims by tag value;
//   - a stream's live tail, over Server-Sent Events;
//   - the catalog's JSON Schemas.
//
// Pages are rendered on the server with html/template, which escapes every
// payload, error and name. A few lines of JavaScript, served with the CSS
// from the handler itself (go:embed; no CDN, so it works offline), poll the
// page being shown every Options.Refresh and swap in its new content, so
// counts change without a reload; they also ask for confirmations. The
// Content-Security-Policy allows scripts and styles from the handler only.
//
// # Cost on Redis
//
// A list page reads one page (a pending or dead page looks for its cursor
// in a window of a few pages around it), whatever the queue holds. Finding
// a waiting or dead task (the search, a task page, an action) reads its
// queue in one script, O(N) in the tasks waiting and dead (Queue.Lookup):
// a waiting task's page therefore polls at a tenth of Options.Refresh, a
// running one's (O(1)) at Refresh, an ended one's not at all.
//
// # History
//
// The rates and charts come from the queues' history, which every Fleet
// that runs or sweeps a queue keeps in Redis (Queue.History,
// Options.HistoryFlush, docs/SCHEMA.md): counts of tasks done, retried and
// dead-lettered per minute for 24 hours and per day for 30 days, and a
// depth sample a minute. So the charts are full when a page first opens,
// whoever looked before, and they survive the host's restarts. The
// handler keeps nothing of its own.
//
// # Mutations and CSRF
//
// Every action (re-queue, purge, the task actions, batches, pause and
// resume) takes a POST with a CSRF token; Options.ReadOnly
// hides them and refuses their POSTs with 403. The first response sets a
// random session cookie (HttpOnly, SameSite=Strict, scoped to the prefix);
// the token in each form is the HMAC-SHA256 of that cookie under a key of
// the Handler (Options.CSRFKey, else 32 random bytes made by Handler). A
// POST whose token is missing or does not match its cookie gets 403 and
// changes nothing.
//
// # Authentication
//
// The dashboard has none of its own: it can cancel, delete and re-queue tasks, so wrap it
// in the host's authentication, as Example_auth shows.
package fleetui

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/fleet-go/fleet"
)

// Defaults of Options.
const (
	// DefaultPrefix is the path the handler is mounted at.
	DefaultPrefix = "/fleet/"
	// DefaultPageSize is how many entries a page lists.
	DefaultPageSize = 20
	// DefaultRefresh is how often a page polls for new content.
	DefaultRefresh = 2 * time.Second
	// MaxPageSize bounds Options.PageSize.
	MaxPageSize = 500
)

// Options configures a Handler. The zero value means the defaults.
type Options struct {
	// Prefix is the path the handler is mounted at: the pattern given to
	// the host's ServeMux, which passes the whole path on. It must start
	// and end with '/'. Defaults to DefaultPrefix.
	Prefix string
	// ReadOnly hides the mutations (re-queue, purge, the task actions,
	// batches, pause and resume) and refuses their POSTs with 403. Defaults to false.
	ReadOnly bool
	// CSRFKey is the HMAC key of the CSRF tokens, at least 16 bytes. Give
	// every replica behind one load balancer the same key. Defaults to 32
	// random bytes per Handler.
	CSRFKey []byte
	// PageSize is how many tasks or dead letters a page lists, at most
	// MaxPageSize. Defaults to DefaultPageSize.
	PageSize int
	// Refresh is how often a page polls for new content. Defaults to
	// DefaultRefresh.
	Refresh time.Duration
}

func (o Options) withDefaults() (Options, error) {
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if o.PageSize == 0 {
		o.PageSize = DefaultPageSize
	}
	if o.Refresh == 0 {
		o.Refresh = DefaultRefresh
	}
	switch {
	case !strings.HasPrefix(o.Prefix, "/") || !strings.HasSuffix(o.Prefix, "/"):
		return o, fmt.Errorf("fleetui: Options.Prefix %q must start and end with '/'", o.Prefix)
	case o.CSRFKey != nil && len(o.CSRFKey) < 16:
		return o, fmt.Errorf("fleetui: Options.CSRFKey has %d bytes, fewer than 16", len(o.CSRFKey))
	case o.PageSize < 0 || o.PageSize > MaxPageSize:
		return o, fmt.Errorf("fleetui: Options.PageSize %d is not within 1..%d", o.PageSize, MaxPageSize)
	case o.Refresh < 100*time.Millisecond:
		return o, fmt.Errorf("fleetui: Options.Refresh %v is shorter than 100ms", o.Refresh)
	}
	if o.CSRFKey == nil {
		o.CSRFKey = make([]byte, 32)
		_, _ = rand.Read(o.CSRFKey) // crypto/rand.Read never fails
	}
	return o, nil
}

//go:embed assets
var assets embed.FS

// handler serves the dashboard of one Fleet.
type handler struct {
	f     *fleet.Fleet
	o     Options
	mux   *http.ServeMux
	pages map[string]*template.Template
}

// Handler returns the dashboard of f, to mount at opts.Prefix. It is safe
// for concurrent use and starts no goroutine. Invalid options, or a nil f,
// give a handler that answers every request with 500 and the reason (the
// field at fault), rather than a panic.
func Handler(f *fleet.Fleet, opts Options) http.Handler {
	o, err := opts.withDefaults()
	if err == nil && f == nil {
		err = errors.New("fleetui: Handler needs a *fleet.Fleet, got nil")
	}
	if err != nil {
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, err.Error(), http.StatusInternalServerError)
		})
	}
	h := &handler{f: f, o: o, mux: http.NewServeMux()}
	h.pages = parsePages()
	static, _ := fs.Sub(assets, "assets/static") // a constant path in the embedded tree
	m := h.mux
	m.Handle("GET /assets/", http.StripPrefix("/assets/", http.FileServerFS(static)))
	m.HandleFunc("GET /{$}", h.overview)
	m.HandleFunc("GET /queues/{name}", h.queue)
	m.HandleFunc("POST /queues/{name}/requeue", h.mutate(h.requeue))
	m.HandleFunc("POST /queues/{name}/requeue-all", h.mutate(h.requeueAll))
	m.HandleFunc("POST /queues/{name}/purge", h.mutate(h.purge))
	m.HandleFunc("POST /queues/{name}/pause", h.mutate(h.pauseQueue(true)))
	m.HandleFunc("POST /queues/{name}/resume", h.mutate(h.pauseQueue(false)))
	m.HandleFunc("POST /queues/{name}/batch", h.mutate(h.batch))
	m.HandleFunc("GET /queues/{name}/groups", h.groups)
	m.HandleFunc("GET /queues/{name}/find", h.find)
	m.HandleFunc("GET /queues/{name}/{list}", h.list)
	m.HandleFunc("GET /queues/{name}/tasks/{id}", h.task)
	m.HandleFunc("POST /queues/{name}/tasks/{id}/{action}", h.mutate(h.taskAction))
	m.HandleFunc("GET /search", h.search)
	m.HandleFunc("GET /flows/{id}", h.flow)
	m.HandleFunc("GET /schedules", h.schedules)
	m.HandleFunc("POST /schedules/{sched}/pause", h.pauseSchedule(true))
	m.HandleFunc("POST /schedules/{sched}/resume", h.pauseSchedule(false))
	m.HandleFunc("GET /workers", h.workerTypes)
	m.HandleFunc("GET /workers/{type}", h.workersOfType)
	m.HandleFunc("GET /workers/{type}/{id}", h.worker)
	m.HandleFunc("GET /pools", h.pools)
	m.HandleFunc("GET /pools/{name}", h.pool)
	m.HandleFunc("GET /streams", h.streams)
	m.HandleFunc("GET /streams/{type}", h.stream)
	m.HandleFunc("GET /streams/{type}/events", h.streamEvents)
	m.HandleFunc("GET /catalog", h.catalog)
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { h.fail(w, r, http.StatusNotFound, "no such page") })
	return http.StripPrefix(strings.TrimSuffix(o.Prefix, "/"), h)
}

// ServeHTTP sets the security headers and the session cookie, then routes.
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'; base-uri 'none'")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "same-origin")
	h.mux.ServeHTTP(w, r)
}

// sessionCookie names the cookie whose HMAC is the CSRF token.
const sessionCookie = "fleetui_session"

// session returns the request's session id, setting a new cookie when the
// request has none that could be one.
func (h *handler) session(w http.ResponseWriter, r *http.Request) string {
	if c, err := r.Cookie(sessionCookie); err == nil && validSession(c.Value) {
		return c.Value
	}
	var b [16]byte
	_, _ = rand.Read(b[:])
	id := base64.RawURLEncoding.EncodeToString(b[:])
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: id, Path: h.o.Prefix, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	return id
}

func validSession(s string) bool {
	b, err := base64.RawURLEncoding.DecodeString(s)
	return err == nil && len(b) == 16
}

// token is the CSRF token of session id.
func (h *handler) token(session string) string {
	m := hmac.New(sha256.New, h.o.CSRFKey)
	m.Write([]byte("fleetui csrf\x00"))
	m.Write([]byte(session))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// checkCSRF reports whether the POST carries the token of its cookie.
func (h *handler) checkCSRF(r *http.Request) bool {
	c, err := r.Cookie(sessionCookie)
	if err != nil || !validSession(c.Value) {
		return false
	}
	got := r.PostFormValue("csrf")
	return got != "" && hmac.Equal([]byte(got), []byte(h.token(c.Value)))
}

// guard guards a mutation: read-only, body size, CSRF.
func (h *handler) guard(do http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if h.o.ReadOnly {
			h.fail(w, r, http.StatusForbidden, "the dashboard is read-only")
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, 1<<20)
		if !h.checkCSRF(r) {
			h.fail(w, r, http.StatusForbidden, "missing or invalid CSRF token: reload the page and try again")
			return
		}
		do(w, r)
	}
}

// mutate guards a mutation of a queue: guard, and a known queue.
func (h *handler) mutate(do func(w http.ResponseWriter, r *http.Request, queue string)) http.HandlerFunc {
	return h.guard(func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("name")
		if !h.known(w, r, fleet.RegistryQueue, name, "queue") {
			return
		}
		do(w, r, name)
	})
}

// known answers 404 (or 500 when Redis fails) unless the registry of kind
// names name.
func (h *handler) known(w http.ResponseWriter, r *http.Request, kind fleet.RegistryKind, name, what string) bool {
	ok, err := h.f.Registered(r.Context(), kind, name)
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, err.Error())
		return false
	}
	if !ok {
		h.fail(w, r, http.StatusNotFound, "no "+what+" named "+strconv.Quote(name))
		return false
	}
	return true
}

// page is what every template gets.
type page struct {
	Title    string
	Nav      string
	Prefix   string
	CSRF     string
	ReadOnly bool
	Refresh  int64 // ms; 0 turns the polling off
	Status   int
	Message  string
	Data     any
}

// render executes the page template name.
func (h *handler) render(w http.ResponseWriter, r *http.Request, status int, name string, p page) {
	p.Prefix, p.ReadOnly, p.Status = h.o.Prefix, h.o.ReadOnly, status
	p.CSRF = h.token(h.session(w, r))
	if p.Refresh == 0 && status == http.StatusOK {
		p.Refresh = h.o.Refresh.Milliseconds()
	}
	if p.Refresh < 0 {
		p.Refresh = 0
	}
	var buf bytes.Buffer
	if err := h.pages[name].ExecuteTemplate(&buf, "layout", p); err != nil {
		http.Error(w, "fleetui: render "+name+": "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// fail renders an error page.
func (h *handler) fail(w http.ResponseWriter, r *http.Request, status int, msg string) {
	if errors.Is(r.Context().Err(), context.Canceled) {
		return // the client left
	}
	h.render(w, r, status, "error", page{Title: http.StatusText(status), Message: msg, Refresh: -1})
}

// redisErr renders the failure of an admin call.
func (h *handler) redisErr(w http.ResponseWriter, r *http.Request, err error) {
	status := http.StatusInternalServerError
	switch {
	case errors.Is(err, fleet.ErrInvalidName), errors.Is(err, fleet.ErrScheduleNotFound), errors.Is(err, fleet.ErrFlowNotFound):
		status = http.StatusNotFound
	case errors.Is(err, fleet.ErrInvalidArgument):
		status = http.StatusBadRequest
	case errors.Is(err, fleet.ErrDeadLetterNotFound), errors.Is(err, fleet.ErrDuplicate):
		status = http.StatusConflict
	case errors.Is(err, fleet.ErrUnavailable):
		status = http.StatusServiceUnavailable
	}
	h.fail(w, r, status, err.Error())
}

// pageParam reads the 1-based page number key of the query: 1 when absent,
// false (after a 400) when it is not a number from 1 to 1e6.
func (h *handler) pageParam(w http.ResponseWriter, r *http.Request, key string) (int, bool) {
	v := r.URL.Query().Get(key)
	if v == "" && !r.URL.Query().Has(key) {
		return 1, true
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 1_000_000 {
		h.fail(w, r, http.StatusBadRequest, "bad page "+key+"="+strconv.Quote(v)+": want a number from 1 to 1000000")
		return 0, false
	}
	return n, true
}
