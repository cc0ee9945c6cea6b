package fleet

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// Task is a reserved task: the payload and the lease that only its holder
// can end. End it with exactly one of Ack, Nack, DeadLetter, Release or
// Snooze before Deadline, or Extend the lease. Reserve and the workers make
// Tasks; the zero Task is not one. Its methods are safe for concurrent use.
type Task[T any] struct {
	// ID is the task's id, stable across retries.
	ID string
	// Payload is the task's payload.
	Payload T
	// Attempts counts the earlier runs of the task that failed (nacks, and
	// leases that ran out): 0 on the first delivery.
	Attempts int

	*reservation // the lease, and the end of the reservation (queue_core.go)
}

// decode makes the typed task of r: its payload decoded into T and
// validated. A payload that does not is poison, which decode buries under
// r's lease, uncounted (so that it never loops), returning nil and what
// the burial returned.
func (q *Queue[T]) decode(ctx context.Context, r *reservation) (*Task[T], error) {
	t := &Task[T]{ID: r.id, Attempts: r.attempts, reservation: r}
	payload := r.payload
	if len(payload) == 0 {
		payload = json.RawMessage("null")
	}
	err := json.Unmarshal(payload, &t.Payload)
	if err != nil {
		err = fmt.Errorf("payload does not decode into %T: %w", t.Payload, err)
	} else if err = q.validate(t.Payload); err != nil {
		err = within("payload no longer validates", err)
	}
	r.payload = nil
	if err != nil {
		return nil, r.bury(ctx, err.Error())
	}
	return t, nil
}

// decodeAll decodes rs (decode): the tasks, and the last burial's error
// when none was left.
func (q *Queue[T]) decodeAll(ctx context.Context, rs []*reservation) ([]*Task[T], error) {
	tasks := make([]*Task[T], 0, len(rs))
	var buryErr error
	for _, r := range rs {
		t, err := q.decode(ctx, r)
		if t != nil {
			tasks = append(tasks, t)
		} else if err != nil {
			buryErr = err
		}
	}
	if len(tasks) > 0 {
		buryErr = nil
	}
	return tasks, buryErr
}

// wireBody is the part of a body that fleet reads.
type wireBody struct {
	ID       string          `json:"id"`
	Payload  json.RawMessage `json:"payload"`
	Attempts int             `json:"attempts"`
	Dedup    string          `json:"dedup"`
	UniqueMS int64           `json:"unique_ms"`
	Trace    json.RawMessage `json:"trace"` // the submit's trace context (observe.go)
	// The per-task options (SubmitOptions; docs/SCHEMA.md).
	Priority    int               `json:"priority"`
	MaxAttempts int               `json:"max_attempts"`
	TimeoutMS   int64             `json:"timeout_ms"`
	ExpiresAt   float64           `json:"expires_at"` // unix s
	Meta        map[string]string `json:"meta"`
	Group       string            `json:"group"`
	Track       int64             `json:"track"` // a tracked task: how long its end stays recorded (ms; flow.go)
}

// parseBody reads a body: the shape newBody writes for a task without
// options on a fast path (plainBody), any other through encoding/json.
func parseBody(body string) (wireBody, error) {
	if w, ok := plainBody(body); ok {
		return w, nil
	}
	var w wireBody
	if err := json.Unmarshal([]byte(body), &w); err != nil {
		return w, fmt.Errorf("body is not a task: %w", err)
	}
	if w.ID == "" {
		return w, errors.New("body has no usable id")
	}
	if w.Attempts < 0 {
		w.Attempts = 0
	}
	return w, nil
}

// plainBody reads a body in the exact shape that newBody writes for a
// task without options, {"id":"<id>","payload":<json>,"attempts":0},
// without encoding/json's reflection: most bodies of a busy queue are such.
// It reports false for anything else (another shape, an id that JSON
// would unescape or re-encode, a payload that is not one valid JSON value
// with nothing around it), which parseBody then reads the slow way; where
// it says true, encoding/json reads the same (FuzzParseBody checks).
func plainBody(body string) (wireBody, bool) {
	const head, mid, tail = `{"id":"`, `","payload":`, `,"attempts":0}`
	if len(body) < len(head)+len(mid)+len(tail)+2 || !strings.HasPrefix(body, head) || !strings.HasSuffix(body, tail) {
		return wireBody{}, false
	}
	rest := body[len(head) : len(body)-len(tail)]
	end := strings.IndexByte(rest, '"')
	if end <= 0 || !strings.HasPrefix(rest[end:], mid) {
		return wireBody{}, false
	}
	id := rest[:end]
	for i := range len(id) {
		if c := id[i]; c < 0x20 || c == '\\' || c >= utf8.RuneSelf {
			return wireBody{}, false
		}
	}
	payload := rest[end+len(mid):]
	if payload == "" || isJSONSpace(payload[0]) || isJSONSpace(payload[len(payload)-1]) {
		return wireBody{}, false
	}
	p := []byte(payload)
	if !json.Valid(p) {
		return wireBody{}, false
	}
	return wireBody{ID: id, Payload: p}, true
}

func isJSONSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// rewriteBody returns body with fields set (nil deletes one). Fields that
// fleet does not know are kept; the payload keeps its bytes.
func rewriteBody(body string, set map[string]any) (string, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(body), &m); err != nil {
		return "", err
	}
	for k, v := range set {
		if v == nil {
			delete(m, k)
			continue
		}
		b, err := json.Marshal(v)
		if err != nil {
			return "", err
		}
		m[k] = b
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(m); err != nil {
		return "", err
	}
	return strings.TrimSuffix(buf.String(), "\n"), nil
}

// deadEntry is a body as it goes to the dead letters, but for "dead_at",
// which the script appends from the server's clock: the task's fields,
// attempts counted, plus "error".
func deadEntry(body string, attempts int, cause string) string {
	s, err := rewriteBody(body, map[string]any{"attempts": attempts, "error": cause, "dead_at": nil})
	if err != nil || s == "{}" {
		// Not a JSON object (or an empty one): keep the raw body inside a
		// wrapper, the shape that queue_reserve gives poison.
		b, _ := json.Marshal(map[string]any{"body": body, "error": cause})
		return string(b)
	}
	return s
}
