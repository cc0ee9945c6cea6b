package fleetui

import (
	"errors"
	"net/http"
	"net/url"
	"strconv"

	"github.com/fleet-go/fleet"
)

// findView is the data of the search by metadata of a queue
// (Queue.FindByMeta over QueueOptions.IndexMeta).
type findView struct {
	Queue, Key, Value string
	Indexed           []string // the keys the queue indexes (its stored policy), for the form
	Rows              []fleet.TaskRecord
	Searched          bool   // a key and value were given
	Next              string // the next page's URL; empty at the end
	First             bool
}

// find lists the tasks of queue name whose metadata sets key= to value=,
// a page at a time (after= is FindByMeta's cursor): 400 for a key the
// queue does not index or a bad cursor.
func (h *handler) find(w http.ResponseWriter, r *http.Request) {
	ctx, name := r.Context(), r.PathValue("name")
	if !h.known(w, r, fleet.RegistryQueue, name, "queue") {
		return
	}
	qv := r.URL.Query()
	qu := h.f.Queue(name)
	pol, _, err := qu.Policy(ctx)
	if err != nil {
		h.redisErr(w, r, err)
		return
	}
	v := findView{Queue: name, Key: qv.Get("key"), Value: qv.Get("value"), Indexed: pol.IndexMeta, First: qv.Get("after") == ""}
	if v.Key == "" && len(v.Indexed) > 0 {
		v.Key = v.Indexed[0]
	}
	if qv.Has("value") {
		v.Searched = true
		rows, next, err := qu.FindByMeta(ctx, v.Key, v.Value, qv.Get("after"), h.o.PageSize)
		if errors.Is(err, fleet.ErrInvalidArgument) || errors.Is(err, fleet.ErrInvalidName) {
			h.fail(w, r, http.StatusBadRequest, err.Error())
			return
		}
		if err != nil {
			h.redisErr(w, r, err)
			return
		}
		v.Rows = rows
		if next != "" {
			v.Next = h.o.Prefix + "queues/" + url.PathEscape(name) + "/find?" +
				url.Values{"key": {v.Key}, "value": {v.Value}, "after": {next}}.Encode()
		}
	}
	h.render(w, r, http.StatusOK, "find", page{Title: "Queue " + name + ": find " + v.Key + "=" + strconv.Quote(v.Value), Nav: "overview", Data: v})
}
