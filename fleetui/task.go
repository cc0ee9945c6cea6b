package fleetui

import (
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"

	"github.com/fleet-go/fleet"
)

// The actions on one task, each allowed in some states only: a POST for
// another state gets 409 and changes nothing.
var taskActions = map[string][]fleet.TaskStatus{
	"cancel":  {fleet.TaskActive, fleet.TaskPending},
	"delete":  {fleet.TaskPending, fleet.TaskScheduled},
	"run":     {fleet.TaskScheduled},
	"requeue": {fleet.TaskDead, fleet.TaskCanceled},
}

// taskURL is the page of task id of queue name.
func (h *handler) taskURL(name, id, query string) string {
	return h.o.Prefix + "queues/" + url.PathEscape(name) + "/tasks/" + url.PathEscape(id) + query
}

// validID reports whether s could be a task id the admin API accepts.
func validID(s string) bool { return s != "" && len(s) <= 1024 }

// search finds a task by id or dedup key, in one queue (queue=) or in
// every registered queue, and redirects to its page: 400 for an empty or
// overlong query or an unknown queue name, 404 when no task matches.
func (h *handler) search(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	q := r.URL.Query().Get("q")
	if !validID(q) {
		h.fail(w, r, http.StatusBadRequest, "search needs a task id or dedup key of 1 to 1024 bytes")
		return
	}
	names := []string{r.URL.Query().Get("queue")}
	if names[0] == "" {
		var err error
		if names, err = h.f.QueueNames(ctx); err != nil {
			h.redisErr(w, r, err)
			return
		}
	} else {
		ok, err := h.f.Registered(ctx, fleet.RegistryQueue, names[0])
		if err != nil {
			h.redisErr(w, r, err)
			return
		}
		if !ok {
			h.fail(w, r, http.StatusBadRequest, "no queue named "+strconv.Quote(names[0]))
			return
		}
	}
	for _, n := range names {
		qu := h.f.Queue(n)
		if _, err := qu.Lookup(ctx, q); err == nil {
			http.Redirect(w, r, h.taskURL(n, q, ""), http.StatusSeeOther)
			return
		} else if !errors.Is(err, fleet.ErrTaskNotFound) && !errors.Is(err, fleet.ErrInvalidName) {
			h.redisErr(w, r, err)
			return
		}
		if id, err := qu.DedupTask(ctx, q); err == nil {
			http.Redirect(w, r, h.taskURL(n, id, ""), http.StatusSeeOther)
			return
		} else if !errors.Is(err, fleet.ErrTaskNotFound) && !errors.Is(err, fleet.ErrInvalidName) {
			h.redisErr(w, r, err)
			return
		}
	}
	h.fail(w, r, http.StatusNotFound, "no task has the id or live dedup key "+strconv.Quote(q))
}

// taskView is the task page's data.
type taskView struct {
	Queue   string
	Rec     fleet.TaskRecord
	Actions []string
	Did     string
	Metas   []metaRow
}

type metaRow struct{ Key, Value string }

func (h *handler) task(w http.ResponseWriter, r *http.Request) {
	name, id := r.PathValue("name"), r.PathValue("id")
	if !h.known(w, r, fleet.RegistryQueue, name, "queue") {
		return
	}
	rec, ok := h.lookup(w, r, name, id)
	if !ok {
		return
	}
	v := taskView{Queue: name, Rec: rec}
	for _, a := range []string{"cancel", "delete", "run", "requeue"} {
		if slices.Contains(taskActions[a], rec.Status) {
			v.Actions = append(v.Actions, a)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(rec.Metadata)) {
		v.Metas = append(v.Metas, metaRow{k, rec.Metadata[k]})
	}
	v.Did = didText(r.URL.Query().Get("did"), r.URL.Query().Get("n"))
	// The page polls itself while the task may change. Lookup is O(1) for
	// a running task but scans the queue for a waiting one (O(N)), so a
	// waiting task's page polls at a tenth of the pace, and an ended one's
	// not at all.
	refresh := int64(0)
	switch rec.Status {
	case fleet.TaskDone, fleet.TaskDead, fleet.TaskCanceled:
		refresh = -1
	case fleet.TaskPending, fleet.TaskScheduled, fleet.TaskWaiting:
		refresh = 10 * h.o.Refresh.Milliseconds()
	}
	h.render(w, r, http.StatusOK, "task", page{Title: "Task " + id, Nav: "overview", Refresh: refresh, Data: v})
}

// lookup reads task id of queue name, answering 404 for an unknown id
// (or one that could be no task's) and the Redis error otherwise; ok is
// false when it answered.
func (h *handler) lookup(w http.ResponseWriter, r *http.Request, name, id string) (fleet.TaskRecord, bool) {
	rec, err := h.f.Queue(name).Lookup(r.Context(), id)
	if errors.Is(err, fleet.ErrTaskNotFound) || errors.Is(err, fleet.ErrInvalidArgument) {
		h.fail(w, r, http.StatusNotFound, "no task "+strconv.Quote(id)+" in queue "+strconv.Quote(name))
		return rec, false
	}
	if err != nil {
		h.redisErr(w, r, err)
		return rec, false
	}
	return rec, true
}

// taskAction runs one action on one task, after checking that its state
// allows it.
func (h *handler) taskAction(w http.ResponseWriter, r *http.Request, name string) {
	id, action := r.PathValue("id"), r.PathValue("action")
	if _, ok := taskActions[action]; !ok {
		h.fail(w, r, http.StatusBadRequest, "unknown action "+strconv.Quote(action)+": want cancel, delete, run or requeue")
		return
	}
	qu := h.f.Queue(name)
	rec, ok := h.lookup(w, r, name, id)
	if !ok {
		return
	}
	if !slices.Contains(taskActions[action], rec.Status) {
		h.fail(w, r, http.StatusConflict, "cannot "+action+" task "+id+": it is "+string(rec.Status))
		return
	}
	if err := doAction(r, qu, action, id); err != nil {
		h.redisErr(w, r, err)
		return
	}
	if action == "delete" {
		http.Redirect(w, r, h.queueURL(name, "?did=deleted&n=1"), http.StatusSeeOther)
		return
	}
	http.Redirect(w, r, h.taskURL(name, id, "?did="+action), http.StatusSeeOther)
}

// doAction runs action on task id: its state was checked.
func doAction(r *http.Request, qu *fleet.Queue[json.RawMessage], action, id string) error {
	switch action {
	case "requeue":
		return qu.RequeueDead(r.Context(), id)
	case "run":
		return qu.RunNow(r.Context(), id)
	default: // cancel, delete: Cancel removes a waiting task, stops a running one
		return qu.Cancel(r.Context(), id)
	}
}

// didText says what an action did, for the flash of the page it
// redirects to.
func didText(did, n string) string {
	switch did {
	case "cancel":
		return "Asked the task to stop: its worker cancels it."
	case "run":
		return "The task is due now: the next reserve takes it."
	case "requeue":
		return "Re-queued the task."
	case "deleted":
		return "Deleted " + strconv.Itoa(atoi(n)) + " task(s)."
	case "requeued":
		return "Re-queued 1 dead letter."
	case "requeued-all", "batch-requeue":
		return "Re-queued " + strconv.Itoa(atoi(n)) + " dead letters."
	case "purged":
		return "Purged " + strconv.Itoa(atoi(n)) + " dead letters."
	case "batch-delete":
		return "Deleted " + strconv.Itoa(atoi(n)) + " tasks."
	case "batch-cancel":
		return "Cancelled " + strconv.Itoa(atoi(n)) + " tasks."
	case "paused":
		return "Paused: reserves take nothing until it is resumed."
	case "resumed":
		return "Resumed."
	}
	return ""
}

// batchStates are the list states a batch action may start from, and
// the states its tasks must be in.
var batchActions = map[string][]fleet.TaskStatus{
	"requeue": {fleet.TaskDead, fleet.TaskCanceled},
	"delete":  {fleet.TaskPending, fleet.TaskScheduled},
	"cancel":  {fleet.TaskActive, fleet.TaskPending},
}

// batch runs one action on the selected tasks (form fields id) of a list:
// 400 and nothing changed for an unknown action or list, no selection, more
// than MaxPageSize ids or an empty id. A task whose state no longer allows
// the action (it ran, ended, or left) is skipped and counted.
func (h *handler) batch(w http.ResponseWriter, r *http.Request, name string) {
	action, list := r.PostFormValue("action"), r.PostFormValue("list")
	states, ok := batchActions[action]
	if !ok {
		h.fail(w, r, http.StatusBadRequest, "unknown batch action "+strconv.Quote(action)+": want requeue, delete or cancel")
		return
	}
	if !slices.Contains(listStates, list) {
		h.fail(w, r, http.StatusBadRequest, "unknown list "+strconv.Quote(list))
		return
	}
	ids := r.PostForm["id"]
	if len(ids) == 0 || len(ids) > MaxPageSize || slices.ContainsFunc(ids, func(s string) bool { return !validID(s) }) {
		h.fail(w, r, http.StatusBadRequest, "a batch needs 1 to "+strconv.Itoa(MaxPageSize)+" task ids, none empty")
		return
	}
	qu := h.f.Queue(name)
	done, skipped := 0, 0
	for _, id := range ids {
		rec, err := qu.Lookup(r.Context(), id)
		if errors.Is(err, fleet.ErrTaskNotFound) || (err == nil && !slices.Contains(states, rec.Status)) {
			skipped++
			continue
		}
		if err == nil {
			err = doAction(r, qu, action, id)
		}
		switch {
		case errors.Is(err, fleet.ErrTaskNotFound), errors.Is(err, fleet.ErrTaskFinished), errors.Is(err, fleet.ErrDeadLetterNotFound):
			skipped++
		case err != nil:
			h.redisErr(w, r, err)
			return
		default:
			done++
		}
	}
	q := "?did=batch-" + action + "&n=" + strconv.Itoa(done)
	if skipped > 0 {
		q += "&skipped=" + strconv.Itoa(skipped)
	}
	http.Redirect(w, r, h.queueURL(name, "/"+list+q), http.StatusSeeOther)
}

// pauseQueue pauses or resumes a queue.
func (h *handler) pauseQueue(pause bool) func(w http.ResponseWriter, r *http.Request, name string) {
	return func(w http.ResponseWriter, r *http.Request, name string) {
		qu := h.f.Queue(name)
		var err error
		did := "resumed"
		if pause {
			err, did = qu.Pause(r.Context()), "paused"
		} else {
			err = qu.Resume(r.Context())
		}
		if err != nil {
			h.redisErr(w, r, err)
			return
		}
		http.Redirect(w, r, h.queueURL(name, "?did="+did), http.StatusSeeOther)
	}
}
