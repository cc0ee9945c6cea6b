package fleetui

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/fleet-go/fleet"
)

// The stream tail's timing: how often it reads the stream, and how long one
// response lasts before the browser's EventSource reconnects (with the
// Last-Event-ID it saw), so that a host's Server.Shutdown never waits on a
// tail for longer than that.
const (
	tailPoll    = 300 * time.Millisecond
	tailMaxLife = 30 * time.Second
	tailFirst   = 50  // entries sent when a tail starts
	tailBatch   = 200 // entries read per poll
)

// tailEntry is the data of one "entry" event.
type tailEntry struct {
	ID   string `json:"id"`
	Time string `json:"time"`
	Data string `json:"data"`
}

// streamEvents tails stream:<type> as Server-Sent Events: the newest
// entries first, then every new entry, read from the sorted set every
// tailPoll. It ends when the request's context does, or after tailMaxLife.
// Event ids are the entries' times in unix milliseconds, so a reconnecting
// EventSource resumes where it stopped (entries of that millisecond come
// again; the page drops the ids it has).
func (h *handler) streamEvents(w http.ResponseWriter, r *http.Request) {
	typ := r.PathValue("type")
	ctx := r.Context()
	var since time.Time
	if v := r.Header.Get("Last-Event-ID"); v != "" {
		ms, err := strconv.ParseInt(v, 10, 64)
		if err != nil || ms <= 0 {
			h.fail(w, r, http.StatusBadRequest, "bad Last-Event-ID "+strconv.Quote(v))
			return
		}
		since = time.UnixMilli(ms)
	}
	n := tailFirst
	if !since.IsZero() {
		n = tailBatch
	}
	first, err := h.f.StreamTail(ctx, typ, since, n)
	var de *fleet.StreamDecodeError
	if err != nil && !errors.As(err, &de) {
		h.redisErr(w, r, err)
		return
	}
	rc := http.NewResponseController(w)
	hd := w.Header()
	hd.Set("Content-Type", "text/event-stream")
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	if _, err := fmt.Fprint(w, "retry: 1000\n\n"); err != nil {
		return
	}
	seen := map[string]bool{} // ids sent at the newest time sent
	send := func(es []fleet.StreamEntry[json.RawMessage]) error {
		for _, e := range es {
			key := e.ID
			if key == "" {
				key = strconv.FormatInt(e.Time.UnixMilli(), 10) + string(e.Data)
			}
			if seen[key] {
				continue
			}
			if e.Time.After(since) {
				since, seen = e.Time, map[string]bool{}
			}
			seen[key] = true
			b, err := json.Marshal(tailEntry{ID: e.ID, Time: when(e.Time), Data: pretty(e.Data)})
			if err != nil {
				return err
			}
			if _, err := fmt.Fprintf(w, "id: %d\nevent: entry\ndata: %s\n\n", e.Time.UnixMilli(), b); err != nil {
				return err
			}
		}
		return rc.Flush()
	}
	if err := send(first); err != nil {
		return
	}
	tick := time.NewTicker(tailPoll)
	defer tick.Stop()
	life := time.NewTimer(tailMaxLife)
	defer life.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-life.C:
			return
		case <-tick.C:
		}
		var es []fleet.StreamEntry[json.RawMessage]
		var err error
		if since.IsZero() {
			es, err = h.f.StreamTail(ctx, typ, time.Time{}, tailBatch)
		} else {
			es, err = h.f.StreamTail(ctx, typ, since, tailBatch)
		}
		if err != nil && !errors.As(err, &de) {
			if ctx.Err() == nil {
				msg, _ := json.Marshal(err.Error())
				_, _ = fmt.Fprintf(w, "event: failure\ndata: %s\n\n", msg)
				_ = rc.Flush()
			}
			return
		}
		if err := send(es); err != nil {
			return
		}
	}
}
