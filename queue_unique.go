package fleet

import (
	"context"
	"fmt"
	"strconv"
)

var queueSubmitUniqueScript = newScript("queue_submit_unique.lua")

// submitUnique is SubmitWith with UniqueFor set.
func (q *Queue[T]) submitUnique(ctx context.Context, payload T, opts SubmitOptions) (string, error) {
	const op = "submit"
	switch {
	case opts.UniqueFor < 0:
		return "", opErr(op, q.name, fmt.Errorf("%w: SubmitOptions.UniqueFor %v is negative", ErrInvalidArgument, opts.UniqueFor))
	case opts.DedupKey == "":
		return "", opErr(op, q.name, fmt.Errorf("%w: SubmitOptions.UniqueFor needs a DedupKey", ErrInvalidArgument))
	case opts.UniqueFor.Milliseconds() < 1:
		return "", opErr(op, q.name, fmt.Errorf("%w: SubmitOptions.UniqueFor %v is under a millisecond", ErrInvalidArgument, opts.UniqueFor))
	}
	b, err := q.encodePayload(payload)
	if err != nil {
		return "", opErr(op, q.name, err)
	}
	id, err := newTaskID()
	if err != nil {
		return "", opErr(op, q.name, err)
	}
	readyAt := ""
	if !opts.NotBefore.IsZero() {
		readyAt = secondsString(opts.NotBefore)
	}
	body := newBody(id, b, opts.DedupKey)
	body = body[:len(body)-1] + `,"unique_ms":` + strconv.FormatInt(opts.UniqueFor.Milliseconds(), 10) + "}"
	done := q.f.observeSubmitOne(ctx, q.name, id, &body, opts.NotBefore, opts.DedupKey)
	if err := q.register(ctx); err != nil {
		done.call(0, err)
		return "", opErr(op, q.name, err)
	}
	got, err := queueSubmitUniqueScript.Exec(ctx, q.f.client, []string{q.k.Pending, q.k.Scheduled, q.k.Dedup, q.k.Unique + opts.DedupKey},
		[]string{id, body, opts.DedupKey, readyAt}).ToString()
	done.call(boolInt(err == nil && got == id), err)
	if err != nil {
		return "", opErr(op, q.name, err)
	}
	if got != id {
		return got, opErr(op, q.name, &DuplicateError{Key: opts.DedupKey, ID: got})
	}
	if readyAt == "" {
		q.wakeLocal()
	}
	return got, nil
}
