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

// flowNode is one task of a flow's page.
type flowNode struct {
	fleet.FlowMember
	Status fleet.TaskStatus // where a not-ended task is now, by Lookup
	Deps   []fleet.DependencyState
}

// maxFlowLookups bounds the Lookups of a flow's page (one per task that
// has not ended).
const maxFlowLookups = 200

// flow shows a flow's (or batch's) state, the counts of its tasks
// (Fleet.FlowStatus) and each task with its state (Fleet.FlowMembers);
// a task that has not ended is looked up for where it is now and, while
// it waits, the tasks it waits for.
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
	ms, err := h.f.FlowMembers(r.Context(), id)
	if err != nil {
		h.redisErr(w, r, err)
		return
	}
	nodes, looked := make([]flowNode, len(ms)), 0
	for i, m := range ms {
		nodes[i] = flowNode{FlowMember: m}
		if m.State != "pending" || m.Queue == "" || looked == maxFlowLookups {
			continue
		}
		looked++
		rec, err := h.f.Queue(m.Queue).Lookup(r.Context(), m.ID)
		if err == nil {
			nodes[i].Status, nodes[i].Deps = rec.Status, rec.Dependencies
		} else if !errors.Is(err, fleet.ErrTaskNotFound) {
			h.redisErr(w, r, err)
			return
		}
	}
	h.render(w, r, http.StatusOK, "flow", page{Title: "Flow " + id, Nav: "overview",
		Data: struct {
			Status fleet.FlowStatus
			Nodes  []flowNode
		}{st, nodes}})
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
