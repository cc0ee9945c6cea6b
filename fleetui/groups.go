package fleetui

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/fleet-go/fleet"
)

// groups shows a queue's groups (Queue.Groups): each one's depth, running
// count, limits, state and pause.
func (h *handler) groups(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if !h.known(w, r, fleet.RegistryQueue, name, "queue") {
		return
	}
	gs, err := h.f.Queue(name).Groups(r.Context())
	if err != nil {
		h.redisErr(w, r, err)
		return
	}
	h.render(w, r, http.StatusOK, "groups", page{Title: "Queue " + name + ": groups", Nav: "overview",
		Data: struct {
			Queue  string
			Groups []fleet.GroupInfo
		}{name, gs}})
}

// flow shows a flow's (or batch's) state and the counts of its tasks
// (Fleet.FlowStatus); a task page lists a waiting task's dependencies.
func (h *handler) flow(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	st, err := h.f.FlowStatus(r.Context(), id)
	if errors.Is(err, fleet.ErrFlowNotFound) || errors.Is(err, fleet.ErrInvalidArgument) {
		h.fail(w, r, http.StatusNotFound, "no flow or batch "+strconv.Quote(id))
		return
	}
	if err != nil {
		h.redisErr(w, r, err)
		return
	}
	h.render(w, r, http.StatusOK, "flow", page{Title: "Flow " + id, Nav: "overview", Data: st})
}

// schedules lists the schedules (Fleet.Schedules), each with pause or
// resume.
func (h *handler) schedules(w http.ResponseWriter, r *http.Request) {
	ss, err := h.f.Schedules(r.Context())
	if err != nil {
		h.redisErr(w, r, err)
		return
	}
	h.render(w, r, http.StatusOK, "schedules", page{Title: "Schedules", Nav: "schedules",
		Data: struct {
			Rows []fleet.ScheduleInfo
			Did  string
		}{ss, didText(r.URL.Query().Get("did"), "")}})
}

// pauseSchedule pauses or resumes a schedule: 404 for an unknown one.
func (h *handler) pauseSchedule(pause bool) http.HandlerFunc {
	return h.guard(func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("sched")
		var err error
		did := "resumed"
		if pause {
			err, did = h.f.PauseSchedule(r.Context(), name), "paused"
		} else {
			err = h.f.ResumeSchedule(r.Context(), name)
		}
		if err != nil {
			h.redisErr(w, r, err)
			return
		}
		http.Redirect(w, r, h.o.Prefix+"schedules?did="+did, http.StatusSeeOther)
	})
}
