package fleet

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/fleet-go/fleet/internal/keys"
)

// WorkerInfo is what ListWorkers reads of one registered worker.
type WorkerInfo struct {
	// Type and ID name the worker.
	Type string `json:"type"`
	ID   string `json:"id"`
	// State is its last recorded state ("" when it has no state hash).
	State WorkerState `json:"state"`
	// LastSeen is its last heartbeat (zero when never seen).
	LastSeen time.Time `json:"last_seen"`
	// LastError is its last recorded error.
	LastError string `json:"last_error"`
}

// ListWorkers lists the registered workers of type typ (wkrs:<type>), or of
// every type when typ is "" (wkrs:all), with their state, sorted by type
// and id. Workers are never removed from the registry: filter on LastSeen
// for the live ones. May return ErrInvalidName, ErrWrongType,
// ErrUnavailable.
func (f *Fleet) ListWorkers(ctx context.Context, typ string) ([]WorkerInfo, error) {
	const op = "list workers"
	if typ != "" {
		if err := keys.Check(keys.KindType, typ); err != nil {
			return nil, opErr(op, typ, err)
		}
	}
	if err := f.alive(ctx); err != nil {
		return nil, opErr(op, typ, err)
	}
	c := f.client
	var out []WorkerInfo
	if typ == "" {
		all, err := c.Do(ctx, c.B().Smembers().Key(f.keys.AllWorkers()).Build()).AsStrSlice()
		if err != nil {
			return nil, opErr(op, "all", err)
		}
		for _, m := range all {
			t, id, ok := strings.Cut(m, "|")
			if ok && workerNames(t, id) == nil {
				out = append(out, WorkerInfo{Type: t, ID: id})
			}
		}
	} else {
		ids, err := c.Do(ctx, c.B().Smembers().Key(f.keys.Workers(typ)).Build()).AsStrSlice()
		if err != nil {
			return nil, opErr(op, typ, err)
		}
		for _, id := range ids {
			if keys.Check(keys.KindWorker, id) == nil {
				out = append(out, WorkerInfo{Type: typ, ID: id})
			}
		}
	}
	slices.SortFunc(out, func(a, b WorkerInfo) int {
		return strings.Compare(a.Type+"|"+a.ID, b.Type+"|"+b.ID)
	})
	if len(out) == 0 {
		return out, nil
	}
	cmds := make(rueidis.Commands, len(out))
	for i, w := range out {
		cmds[i] = c.B().Hgetall().Key(f.keys.Worker(w.Type, w.ID).State).Build()
	}
	for i, r := range c.DoMulti(ctx, cmds...) {
		m, err := r.AsStrMap()
		if err != nil {
			return nil, opErr(op, out[i].Type+"|"+out[i].ID, err)
		}
		out[i].State = WorkerState(m["state"])
		out[i].LastError = m["last_error"]
		if s, err := strconv.ParseInt(m["last_seen"], 10, 64); err == nil {
			out[i].LastSeen = time.Unix(s, 0)
		}
	}
	return out, nil
}
