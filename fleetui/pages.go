package fleetui

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"html/template"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fleet-go/fleet"
)

// pageNames are the templates under assets/templates, each with the layout.
var pageNames = []string{"overview", "queue", "workertypes", "workers", "worker", "pools", "pool", "streams", "stream", "catalog", "error", "task", "list", "groups", "flow", "schedules", "find"}

func parsePages() map[string]*template.Template {
	funcs := template.FuncMap{
		"pretty": pretty,
		"when":   when,
		"seg":    url.PathEscape,
		"add":    func(a, b int) int { return a + b },
		"dur":    dur,
	}
	out := make(map[string]*template.Template, len(pageNames))
	for _, n := range pageNames {
		// The templates are embedded constants, parsed the same way in every
		// test: a parse error here is a bug of this package, never input.
		out[n] = template.Must(template.New(n).Funcs(funcs).ParseFS(assets, "assets/templates/layout.html", "assets/templates/"+n+".html"))
	}
	return out
}

// pretty indents JSON, with <, > and & left as they are (html/template
// escapes them where the text lands); text that is not JSON is returned
// as it is.
func pretty(v any) string {
	var raw []byte
	switch x := v.(type) {
	case json.RawMessage:
		raw = x
	case string:
		raw = []byte(x)
	case []byte:
		raw = x
	default:
		return ""
	}
	if id, ok := fleet.SealedKeyID(raw); ok {
		// A sealed queue's value that the host's Fleet cannot open (it made
		// no Queue with the Sealer, and no Options.OpenWith).
		return "sealed (key " + id + ")"
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var val any
	if err := dec.Decode(&val); err != nil || dec.More() {
		return string(raw)
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if enc.Encode(val) != nil {
		return string(raw)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// when spells a time in UTC to the second, or "–" for the zero time.
func when(t time.Time) string {
	if t.IsZero() {
		return "–"
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

// queueRow is one queue on the overview.
type queueRow struct {
	fleet.QueueCounts
	Rates rates
	Spark template.HTML
}

// typeRow is one worker type on the overview and the workers page: its
// workers by state, and the tasks its live workers did since they started
// (their stats frames' counters).
type typeRow struct {
	Type                          string
	Workers, Running, Idle, Error int
	Done, Failed                  int64
}

func (h *handler) overview(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	ov, err := h.f.Overview(ctx)
	if err != nil {
		h.redisErr(w, r, err)
		return
	}
	types, err := h.typeRows(ctx)
	if err != nil {
		h.redisErr(w, r, err)
		return
	}
	names := make([]string, len(ov.Queues))
	for i, q := range ov.Queues {
		names[i] = q.Name
	}
	hist, err := h.lastHour(ctx, names)
	if err != nil {
		h.redisErr(w, r, err)
		return
	}
	data := struct {
		Queues []queueRow
		Pools  []fleet.PoolCounts
		Types  []typeRow
		Chart  template.HTML
	}{Pools: ov.Pools, Types: types, Chart: barChart("done-chart", sum(hist), "minute")}
	for i, q := range ov.Queues {
		data.Queues = append(data.Queues, queueRow{QueueCounts: q, Rates: rateOf(hist[i]), Spark: depthLine("spark-"+strconv.Itoa(i), hist[i], 120, 24)})
	}
	h.render(w, r, http.StatusOK, "overview", page{Title: "Overview", Nav: "overview", Data: data})
}

// typeRows reads the workers and their stats frames, by type.
func (h *handler) typeRows(ctx context.Context) ([]typeRow, error) {
	ws, err := h.f.Workers(ctx, fleet.WorkersFilter{})
	if err != nil {
		return nil, err
	}
	frames, err := h.f.StatsFrames(ctx, ws)
	if err != nil {
		return nil, err
	}
	by := map[string]*typeRow{}
	for i, wi := range ws {
		row := by[wi.Type]
		if row == nil {
			row = &typeRow{Type: wi.Type}
			by[wi.Type] = row
		}
		row.Workers++
		switch wi.State {
		case fleet.StateRunning:
			row.Running++
		case fleet.StateIdle:
			row.Idle++
		case fleet.StateError:
			row.Error++
		}
		row.Done += frames[i].Done
		row.Failed += frames[i].Failed
	}
	out := make([]typeRow, 0, len(by))
	for _, k := range slices.Sorted(maps.Keys(by)) {
		out = append(out, *by[k])
	}
	return out, nil
}

// pager links the pages of one section of a page.
type pager struct {
	Page, Pages int
	Prev, Next  string // URLs; empty at either end
}

func (h *handler) pagerFor(r *http.Request, key string, p int, total int64) pager {
	size := int64(h.o.PageSize)
	pg := pager{Page: p, Pages: int(max((total+size-1)/size, 1))}
	link := func(n int) string {
		q := r.URL.Query()
		q.Set(key, strconv.Itoa(n))
		return "?" + q.Encode() + "#" + key
	}
	if p > 1 {
		pg.Prev = link(min(p-1, pg.Pages))
	}
	if int64(p)*size < total {
		pg.Next = link(p + 1)
	}
	return pg
}

func (h *handler) queue(w http.ResponseWriter, r *http.Request) {
	ctx, name := r.Context(), r.PathValue("name")
	var pages [3]int
	for i, k := range []string{"pending", "scheduled", "dead"} {
		var ok bool
		if pages[i], ok = h.pageParam(w, r, k); !ok {
			return
		}
	}
	spanName := r.URL.Query().Get("span")
	if spanName == "" {
		spanName = "1h"
	}
	span, ok := histSpans[spanName]
	if !ok {
		h.fail(w, r, http.StatusBadRequest, "span must be 1h, 24h or 30d")
		return
	}
	if !h.known(w, r, fleet.RegistryQueue, name, "queue") {
		return
	}
	hist, err := h.f.Queue(name).History(ctx, span.span)
	if err != nil {
		h.redisErr(w, r, err)
		return
	}
	hist = group(hist, span.group)
	st, err := h.f.Queue(name).Stats(ctx)
	if err != nil {
		h.redisErr(w, r, err)
		return
	}
	pol, hasPol, err := h.f.Queue(name).Policy(ctx)
	if err != nil {
		h.redisErr(w, r, err)
		return
	}
	size := h.o.PageSize
	pending, err := h.f.Queue(name).Pending(ctx, (pages[0]-1)*size, size)
	if err != nil {
		h.redisErr(w, r, err)
		return
	}
	scheduled, err := h.f.Queue(name).Scheduled(ctx, (pages[1]-1)*size, size)
	if err != nil {
		h.redisErr(w, r, err)
		return
	}
	dead, err := h.f.Queue(name).DeadLetters(ctx, (pages[2]-1)*size, size)
	if err != nil {
		h.redisErr(w, r, err)
		return
	}
	data := struct {
		Name                     string
		Stats                    fleet.QueueStats
		Pending, Scheduled       []fleet.WaitingTask
		Dead                     []fleet.DeadLetter
		PendingP, ScheduledP     pager
		DeadP                    pager
		Did                      string
		PendingFrom, DeadFrom    int
		ScheduledFrom            int
		RequeueAllN, PurgeDeadsN int64
		Span                     string
		Spans                    []string
		Chart, Depth             template.HTML
		Policy                   *fleet.QueuePolicy // nil when none is stored
		Backoff                  string
		DeadAge                  time.Duration
	}{Name: name, Stats: st, Pending: pending, Scheduled: scheduled, Dead: dead,
		Span: spanName, Spans: []string{"1h", "24h", "30d"},
		Chart: barChart("history-chart", hist, span.label), Depth: depthLine("depth-chart", hist, 600, 60),
		PendingP:    h.pagerFor(r, "pending", pages[0], st.Pending),
		ScheduledP:  h.pagerFor(r, "scheduled", pages[1], st.Scheduled),
		DeadP:       h.pagerFor(r, "dead", pages[2], st.Dead),
		PendingFrom: (pages[0]-1)*size + 1, ScheduledFrom: (pages[1]-1)*size + 1, DeadFrom: (pages[2]-1)*size + 1}
	if hasPol {
		data.Policy, data.Backoff, data.DeadAge = &pol, pol.RetryBackoff().String(), time.Duration(pol.DeadMaxAgeMS)*time.Millisecond
	}
	data.Did = didText(r.URL.Query().Get("did"), r.URL.Query().Get("n"))
	h.render(w, r, http.StatusOK, "queue", page{Title: "Queue " + name, Nav: "overview", Data: data})
}

// atoi reads a count for a message: non-numbers read as 0.
func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return max(n, 0)
}

func (h *handler) queueURL(name, query string) string {
	return h.o.Prefix + "queues/" + url.PathEscape(name) + query
}

func (h *handler) requeue(w http.ResponseWriter, r *http.Request, name string) {
	id := r.PostFormValue("id")
	if id == "" {
		h.fail(w, r, http.StatusBadRequest, "requeue needs the id of a dead letter")
		return
	}
	if err := h.f.Queue(name).RequeueDead(r.Context(), id); err != nil {
		h.redisErr(w, r, err)
		return
	}
	http.Redirect(w, r, h.queueURL(name, "?did=requeued#dead"), http.StatusSeeOther)
}

func (h *handler) requeueAll(w http.ResponseWriter, r *http.Request, name string) {
	n, err := h.f.Queue(name).RequeueAllDead(r.Context())
	if err != nil {
		h.redisErr(w, r, err)
		return
	}
	http.Redirect(w, r, h.queueURL(name, "?did=requeued-all&n="+strconv.Itoa(n)+"#dead"), http.StatusSeeOther)
}

func (h *handler) purge(w http.ResponseWriter, r *http.Request, name string) {
	n, err := h.f.Queue(name).PurgeDead(r.Context())
	if err != nil {
		h.redisErr(w, r, err)
		return
	}
	http.Redirect(w, r, h.queueURL(name, "?did=purged&n="+strconv.FormatInt(n, 10)+"#dead"), http.StatusSeeOther)
}

func (h *handler) workerTypes(w http.ResponseWriter, r *http.Request) {
	rows, err := h.typeRows(r.Context())
	if err != nil {
		h.redisErr(w, r, err)
		return
	}
	h.render(w, r, http.StatusOK, "workertypes", page{Title: "Workers", Nav: "workers", Data: rows})
}

// workerRow is one worker with its last stats frame.
type workerRow struct {
	fleet.WorkerInfo
	Stats    fleet.WorkerStats
	HasStats bool
}

func (h *handler) workerRows(w http.ResponseWriter, r *http.Request, typ string) ([]workerRow, bool) {
	ws, err := h.f.Workers(r.Context(), fleet.WorkersFilter{Type: typ})
	if err != nil {
		h.redisErr(w, r, err)
		return nil, false
	}
	frames, err := h.f.StatsFrames(r.Context(), ws)
	if err != nil {
		h.redisErr(w, r, err)
		return nil, false
	}
	rows := make([]workerRow, len(ws))
	for i, wi := range ws {
		rows[i] = workerRow{WorkerInfo: wi, Stats: frames[i], HasStats: frames[i].TS != 0}
	}
	return rows, true
}

func (h *handler) workersOfType(w http.ResponseWriter, r *http.Request) {
	typ := r.PathValue("type")
	rows, ok := h.workerRows(w, r, typ)
	if !ok {
		return
	}
	if len(rows) == 0 {
		h.fail(w, r, http.StatusNotFound, "no workers of type "+strconv.Quote(typ))
		return
	}
	h.render(w, r, http.StatusOK, "workers", page{Title: "Workers of " + typ, Nav: "workers",
		Data: struct {
			Type string
			Rows []workerRow
		}{typ, rows}})
}

// slotRow is one slot of a worker's stats frame, with its metrics sorted.
type slotRow struct {
	fleet.SlotStats
	Metrics []metric
}

type metric struct {
	Name  string
	Value float64
}

func (h *handler) worker(w http.ResponseWriter, r *http.Request) {
	typ, id := r.PathValue("type"), r.PathValue("id")
	if !h.known(w, r, fleet.RegistryWorker, typ+"|"+id, "worker") {
		return
	}
	rows, ok := h.workerRows(w, r, typ)
	if !ok {
		return
	}
	i := slices.IndexFunc(rows, func(w workerRow) bool { return w.ID == id })
	if i < 0 {
		// Only wkrs:all lists it: show what the index says.
		rows, i = []workerRow{{WorkerInfo: fleet.WorkerInfo{Type: typ, ID: id}}}, 0
	}
	var slots []slotRow
	for _, s := range rows[i].Stats.PerSlot {
		sr := slotRow{SlotStats: s}
		for _, k := range slices.Sorted(maps.Keys(s.Metrics)) {
			sr.Metrics = append(sr.Metrics, metric{k, s.Metrics[k]})
		}
		slots = append(slots, sr)
	}
	h.render(w, r, http.StatusOK, "worker", page{Title: "Worker " + typ + "/" + id, Nav: "workers",
		Data: struct {
			Row   workerRow
			Slots []slotRow
		}{rows[i], slots}})
}

func (h *handler) pools(w http.ResponseWriter, r *http.Request) {
	ov, err := h.f.Overview(r.Context())
	if err != nil {
		h.redisErr(w, r, err)
		return
	}
	h.render(w, r, http.StatusOK, "pools", page{Title: "Pools", Nav: "pools", Data: ov.Pools})
}

func (h *handler) pool(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if !h.known(w, r, fleet.RegistryPool, name, "pool") {
		return
	}
	ov, err := h.f.Overview(r.Context())
	if err != nil {
		h.redisErr(w, r, err)
		return
	}
	counts := fleet.PoolCounts{Name: name}
	if i := slices.IndexFunc(ov.Pools, func(p fleet.PoolCounts) bool { return p.Name == name }); i >= 0 {
		counts = ov.Pools[i]
	}
	tags, err := h.f.PoolTagCounts(r.Context(), name)
	if err != nil {
		h.redisErr(w, r, err)
		return
	}
	h.render(w, r, http.StatusOK, "pool", page{Title: "Pool " + name, Nav: "pools",
		Data: struct {
			Counts fleet.PoolCounts
			Tags   []fleet.TagCount
		}{counts, tags}})
}

// streamTypes lists the types that may have a stream: those of the
// catalog, of the workers and of the queues.
func (h *handler) streamTypes(r *http.Request) ([]string, error) {
	ctx := r.Context()
	set := map[string]bool{}
	cat, err := h.f.Catalog(ctx)
	var de *fleet.CatalogDecodeError
	if err != nil && !errors.As(err, &de) {
		return nil, err
	}
	for t := range cat {
		set[t] = true
	}
	if de != nil {
		for t := range de.Types {
			set[t] = true
		}
	}
	ws, err := h.f.Workers(ctx, fleet.WorkersFilter{})
	if err != nil {
		return nil, err
	}
	for _, wi := range ws {
		set[wi.Type] = true
	}
	return slices.Sorted(maps.Keys(set)), nil
}

type streamRow struct {
	Type string
	Len  int64
}

func (h *handler) streams(w http.ResponseWriter, r *http.Request) {
	types, err := h.streamTypes(r)
	if err != nil {
		h.redisErr(w, r, err)
		return
	}
	var rows []streamRow
	for _, t := range types {
		n, err := fleet.NewStream[json.RawMessage](h.f, t, fleet.StreamOptions{}).Len(r.Context())
		if errors.Is(err, fleet.ErrInvalidName) {
			continue
		}
		if err != nil {
			h.redisErr(w, r, err)
			return
		}
		rows = append(rows, streamRow{t, n})
	}
	h.render(w, r, http.StatusOK, "streams", page{Title: "Streams", Nav: "streams", Data: rows})
}

func (h *handler) stream(w http.ResponseWriter, r *http.Request) {
	typ := r.PathValue("type")
	n, err := fleet.NewStream[json.RawMessage](h.f, typ, fleet.StreamOptions{}).Len(r.Context())
	if errors.Is(err, fleet.ErrInvalidName) {
		h.fail(w, r, http.StatusNotFound, "no stream named "+strconv.Quote(typ))
		return
	}
	if err != nil {
		h.redisErr(w, r, err)
		return
	}
	if n == 0 {
		types, err := h.streamTypes(r)
		if err != nil {
			h.redisErr(w, r, err)
			return
		}
		if !slices.Contains(types, typ) {
			h.fail(w, r, http.StatusNotFound, "no stream named "+strconv.Quote(typ))
			return
		}
	}
	h.render(w, r, http.StatusOK, "stream", page{Title: "Stream " + typ, Nav: "streams", Refresh: -1,
		Data: struct {
			Type   string
			Len    int64
			Events string
		}{typ, n, h.o.Prefix + "streams/" + url.PathEscape(typ) + "/events"}})
}

type catalogRow struct {
	Type                        string
	Config, Output, TaskPayload json.RawMessage
}

func (h *handler) catalog(w http.ResponseWriter, r *http.Request) {
	cat, err := h.f.Catalog(r.Context())
	var de *fleet.CatalogDecodeError
	if err != nil && !errors.As(err, &de) {
		h.redisErr(w, r, err)
		return
	}
	var rows []catalogRow
	for _, t := range slices.Sorted(maps.Keys(cat)) {
		s := cat[t]
		rows = append(rows, catalogRow{t, s.Config, s.Output, s.TaskPayload})
	}
	var bad []string
	if de != nil {
		bad = slices.Sorted(maps.Keys(de.Types))
	}
	h.render(w, r, http.StatusOK, "catalog", page{Title: "Catalog", Nav: "catalog",
		Data: struct {
			Rows []catalogRow
			Bad  []string
		}{rows, bad}})
}

// dur shows a duration to the millisecond, "–" for none.
func dur(d time.Duration) string {
	if d <= 0 {
		return "–"
	}
	return d.Round(time.Millisecond).String()
}
