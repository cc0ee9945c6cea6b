package fleetui

import (
	"encoding/json"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/fleet-go/fleet"
)

// listStates are the lists of a queue's tasks by state, each paginated by
// a cursor rather than an offset, so that a page shows the tasks after the
// last one seen however many came or went before it since:
//
//   - running, scheduled and done (sorted sets): the cursor is the last
//     task's score and id (Queue.Running, Queue.ScheduledAfter, Queue.Done:
//     the done tasks whose records QueueOptions.Retention keeps);
//   - pending and dead (lists): the cursor is the last task's id and the
//     index it had; the next page looks for that id around the index and
//     goes on after it. When the task left the list meanwhile (reserved,
//     re-queued), the next page starts again from the list's head and says
//     so: it may show a task twice, never skip one.
var listStates = []string{"pending", "scheduled", "running", "dead", "done"}

// listActions are the batch actions each list offers.
var listActions = map[string][]string{
	"pending":   {"delete", "cancel"},
	"scheduled": {"delete"},
	"running":   {"cancel"},
	"dead":      {"requeue"},
}

// listRow is one task of a list.
type listRow struct {
	ID       string
	Payload  json.RawMessage
	Raw      string // shown when the body is not a task
	Attempts int
	When     time.Time // ready at, lease deadline, died at
	Worker   string
	Error    string
	Cancel   bool
	Result   json.RawMessage // a done task's
}

// listView is the data of a list page.
type listView struct {
	Queue     string
	List      string
	Stats     fleet.QueueStats
	Rows      []listRow
	Actions   []string
	Next      string // the next page's URL; empty at the end
	First     bool   // this is the first page
	Restarted bool   // the cursor's task left: listing from the head
	Did       string
	Skipped   int
}

// listWindow is how far around its index a list's cursor task is looked
// for, besides the page itself.
func (h *handler) listWindow() int { return 4*h.o.PageSize + 100 }

func (h *handler) list(w http.ResponseWriter, r *http.Request) {
	ctx, name, list := r.Context(), r.PathValue("name"), r.PathValue("list")
	if !slices.Contains(listStates, list) {
		h.fail(w, r, http.StatusNotFound, "no list "+strconv.Quote(list)+": want pending, scheduled, running, dead or done")
		return
	}
	qv := r.URL.Query()
	after := qv.Get("after")
	if qv.Has("after") && !validID(after) {
		h.fail(w, r, http.StatusBadRequest, "bad cursor after="+strconv.Quote(after))
		return
	}
	var score float64
	var at int
	if after != "" {
		var err error
		switch list {
		case "running", "scheduled", "done":
			score, err = strconv.ParseFloat(qv.Get("score"), 64)
			if err == nil && (math.IsNaN(score) || math.IsInf(score, 0)) {
				err = strconv.ErrRange
			}
		default:
			at, err = strconv.Atoi(qv.Get("at"))
			if err == nil && (at < 0 || at > 1<<30) {
				err = strconv.ErrRange
			}
		}
		if err != nil {
			h.fail(w, r, http.StatusBadRequest, "bad cursor: after needs a number (score= for running, scheduled and done, at= for pending and dead)")
			return
		}
	}
	if !h.known(w, r, fleet.RegistryQueue, name, "queue") {
		return
	}
	qu := h.f.Queue(name)
	st, err := qu.Stats(ctx)
	if err != nil {
		h.redisErr(w, r, err)
		return
	}
	v := listView{Queue: name, List: list, Stats: st, First: after == "", Actions: listActions[list],
		Did: didText(qv.Get("did"), qv.Get("n")), Skipped: atoi(qv.Get("skipped"))}
	size := h.o.PageSize
	next := url.Values{}
	switch list {
	case "running":
		ts, err := qu.Running(ctx, fleet.TaskCursor{Score: score, ID: after}, size)
		if err != nil {
			h.redisErr(w, r, err)
			return
		}
		for _, t := range ts {
			v.Rows = append(v.Rows, listRow{ID: t.ID, Payload: t.Payload, Attempts: t.Attempts, When: t.Deadline, Worker: t.Worker, Cancel: t.CancelRequested})
		}
		if len(ts) == size {
			setCursor(next, ts[len(ts)-1].Cursor)
		}
	case "done":
		ds, err := qu.Done(ctx, fleet.TaskCursor{Score: score, ID: after}, size)
		if err != nil {
			h.redisErr(w, r, err)
			return
		}
		for _, d := range ds {
			v.Rows = append(v.Rows, listRow{ID: d.ID, Attempts: d.Attempts, When: d.DoneAt, Worker: d.Worker, Result: d.Result})
		}
		if len(ds) == size {
			setCursor(next, ds[len(ds)-1].Cursor)
		}
	case "scheduled":
		ws, c, err := qu.ScheduledAfter(ctx, fleet.TaskCursor{Score: score, ID: after}, size)
		if err != nil {
			h.redisErr(w, r, err)
			return
		}
		for _, t := range ws {
			v.Rows = append(v.Rows, listRow{ID: t.ID, Payload: t.Payload, Raw: t.Raw, Attempts: t.Attempts, When: t.ReadyAt})
		}
		if len(ws) == size {
			setCursor(next, c)
		}
	case "pending", "dead":
		rows, base, restarted, err := h.listPage(r, qu, list, after, at)
		if err != nil {
			h.redisErr(w, r, err)
			return
		}
		v.Rows, v.Restarted = rows, restarted
		if len(rows) == size {
			next.Set("after", rows[len(rows)-1].ID)
			next.Set("at", strconv.Itoa(base+len(rows)-1))
		}
	}
	if len(next) > 0 {
		v.Next = "?" + next.Encode()
	}
	h.render(w, r, http.StatusOK, "list", page{Title: "Queue " + name + ": " + list, Nav: "overview", Data: v})
}

// setCursor puts cursor c of a sorted set's list in the next page's query.
func setCursor(next url.Values, c fleet.TaskCursor) {
	next.Set("after", c.ID)
	next.Set("score", strconv.FormatFloat(c.Score, 'f', -1, 64))
}

// listPage reads a page of the pending list or the dead letters after the
// task after, which had index at; base is the index of the page's first
// row.
func (h *handler) listPage(r *http.Request, qu *fleet.Queue[json.RawMessage], list, after string, at int) (rows []listRow, base int, restarted bool, err error) {
	ctx, size := r.Context(), h.o.PageSize
	read := func(off, n int) ([]listRow, error) {
		var out []listRow
		if list == "pending" {
			ws, err := qu.Pending(ctx, off, n)
			for _, t := range ws {
				out = append(out, listRow{ID: t.ID, Payload: t.Payload, Raw: t.Raw, Attempts: t.Attempts})
			}
			return out, err
		}
		ds, err := qu.DeadLetters(ctx, off, n)
		for _, d := range ds {
			out = append(out, listRow{ID: d.ID, Payload: d.Payload, Raw: d.Raw, Attempts: d.Attempts, When: d.DeadAt, Error: d.Error})
		}
		return out, err
	}
	if after == "" {
		rows, err = read(0, size)
		return rows, 0, false, err
	}
	lo := max(0, at-h.listWindow())
	win, err := read(lo, at-lo+1+h.listWindow()+size)
	if err != nil {
		return nil, 0, false, err
	}
	if i := slices.IndexFunc(win, func(x listRow) bool { return x.ID == after }); i >= 0 {
		rows = win[i+1 : min(i+1+size, len(win))]
		return rows, lo + i + 1, false, nil
	}
	rows, err = read(0, size)
	return rows, 0, true, err
}
