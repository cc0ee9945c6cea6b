package fleet

// Per-task logs: what a handler writes with the task's logger (Logger,
// Task.Logger), kept with the task in fleet:queue:<name>:log:<id>, one
// entry per run (docs/SCHEMA.md), and shown where the task is shown
// (Lookup, fleetctl task get, the dashboard's task page).

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/fleet-go/fleet/internal/engine"
)

// discard is the logger of a ctx that carries no task, and of a queue
// that keeps no logs.
var discard = slog.New(slog.DiscardHandler)

// Logger returns the logger of the task whose handler ctx is: what it is
// given is kept with the task (Task.Logger). Outside a handler of a
// worker, it returns a logger that discards everything.
func Logger(ctx context.Context) *slog.Logger {
	if r, _ := ctx.Value(taskKey{}).(*reservation); r != nil {
		return r.Logger()
	}
	return discard
}

// Logger returns the task's logger: the lines given to it (of any level)
// are kept with the task, one entry per run, in
// fleet:queue:<name>:log:<id>, within QueueOptions.Logs' bounds, and
// shown by Lookup (TaskRecord.Logs), fleetctl task get and the
// dashboard's task page. They are written with the run's end (a worker's
// ack, nack, dead letter, snooze or release of the task; a raw
// reservation's own), only if the run wrote lines: by the ack's own
// script call for an ack that keeps the record (QueueOptions.Retention),
// in one call before the end for the others, and not at all for an ack
// that keeps no record, since the ack deletes the task's log. A run that
// writes no lines costs nothing. A task's log lives as long as its record
// does: deleted by an ack that keeps none, kept as long as the record by
// one that keeps it, and past that, max(DeadMaxAge, Retention) after its
// last write (docs/SCHEMA.md). On a queue that seals (QueueOptions.Sealer)
// each entry is sealed. The lines of a run whose lease was lost before
// its end are not kept. Safe for concurrent use.
func (r *reservation) Logger() *slog.Logger {
	if l := r.taskLog(); l != nil {
		return l.logger
	}
	return discard
}

// taskLog is the lines of one run, as JSON objects (slog's JSONHandler
// spells them), bounded by the queue's LogOptions.
type taskLog struct {
	logger  *slog.Logger
	max     LogOptions
	mu      sync.Mutex
	lines   []byte // the lines, comma-separated
	n       int
	dropped int
	// seen, when set (worker_one.go), is told the lines of each run as it
	// ends, as a JSON array, whether or not they are written.
	seen func(lines []byte)
}

// taskLog returns r's log, made at its first use; nil when the queue keeps
// no logs.
func (r *reservation) taskLog() *taskLog {
	if l := r.logs.Load(); l != nil {
		return l
	}
	o := r.core.opts.Logs
	if o.Lines < 0 {
		return nil
	}
	l := &taskLog{max: o}
	l.logger = slog.New(slog.NewJSONHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
	if r.logs.CompareAndSwap(nil, l) {
		return l
	}
	return r.logs.Load()
}

// Write keeps one line that slog's handler spelled, within the bounds.
func (l *taskLog) Write(p []byte) (int, error) {
	line := bytes.TrimSuffix(p, []byte("\n"))
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n >= l.max.Lines || len(l.lines)+len(line)+1 > l.max.Bytes {
		l.dropped++
		return len(p), nil
	}
	if l.n > 0 {
		l.lines = append(l.lines, ',')
	}
	l.lines = append(l.lines, line...)
	l.n++
	return len(p), nil
}

// take returns the run's entry (logEntry) and empties the log; nil when
// the run wrote nothing.
func (l *taskLog) take(attempt int, worker string, at time.Time) []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n == 0 && l.dropped == 0 {
		return nil
	}
	if l.seen != nil {
		l.seen(append(append([]byte{'['}, l.lines...), ']'))
	}
	var b bytes.Buffer
	b.WriteString(`{"attempt":`)
	b.WriteString(strconv.Itoa(attempt))
	if worker != "" {
		b.WriteString(`,"worker":`)
		w, _ := json.Marshal(worker) // a string always encodes
		b.Write(w)
	}
	b.WriteString(`,"at":`)
	b.WriteString(strconv.FormatInt(at.UnixMilli(), 10))
	b.WriteString(`,"lines":[`)
	b.Write(l.lines)
	b.WriteString(`],"dropped":`)
	b.WriteString(strconv.Itoa(l.dropped))
	b.WriteByte('}')
	l.lines, l.n, l.dropped = nil, 0, 0
	return b.Bytes()
}

var queueLogScript = newScript("queue_log.lua")

// endLog writes the lines of the run that ends, if it wrote any, to the
// task's log (queue_log.lua), before the end that acked says: nothing for
// an ack that keeps no record (the ack deletes the log), and nothing
// either for one that keeps it, which carries the entry in its own call
// (Reservation.SetLog, ack_all). Its errors are
// the caller's to report: the end goes on without the lines (ErrLeaseLost
// says the end will find the lease lost too).
func (r *reservation) endLog(ctx context.Context, acked bool) error {
	l := r.logs.Load()
	if l == nil {
		return nil
	}
	q := r.core
	entry := l.take(r.r.Attempts()+1, workerOf(r.r.Token()), q.fleet.now())
	if entry == nil || acked && r.r.Retention() == 0 {
		return nil // nothing to write, or the ack deletes the task's log
	}
	stored, err := seal(q.opts.Sealer, q.name, sealLog, entry)
	if err != nil {
		return err
	}
	if acked {
		r.r.SetLog(q.opts.Logs.Runs, stored) // the ack's own call appends it
		return nil
	}
	r.r.MarkLogged() // before the write: the ack must delete or keep it
	mark := "1"      // the body tells the reservations to come
	if acked {
		mark = "0" // this one acks: MarkLogged tells it
	}
	ttl := max(q.opts.DeadMaxAge, q.opts.Retention, r.r.Retention())
	code, err := queueLogScript.Exec(ctx, q.fleet.client, q.keys(), []string{r.id(), r.r.Token(), string(stored),
		strconv.Itoa(q.opts.Logs.Runs), strconv.FormatInt(max(ttl.Milliseconds(), 1), 10), mark}).AsInt64()
	if err != nil {
		return err
	}
	if engine.EndCode(code) != engine.EndDone {
		return fmt.Errorf("%w: task %s", ErrLeaseLost, r.id())
	}
	return nil
}

// workerOf is the worker ("type|id") that a lease token names, "" for a
// token of a Reserve of one's own (as Lookup's Worker: parseLeaseEntry).
func workerOf(token string) string {
	_, w, _ := parseLeaseEntry(token)
	return w
}

// logEntry reads one entry of a task's log of queue: opened where this
// process can, else Sealed with its key id.
func (f *Fleet) logEntry(queue string, e []byte) TaskLog {
	shown := f.shown(queue, sealLog, e)
	if kid, ok := SealedKeyID(shown); ok {
		return TaskLog{Sealed: kid}
	}
	var w struct {
		Attempt int             `json:"attempt"`
		Worker  string          `json:"worker"`
		At      int64           `json:"at"`
		Lines   json.RawMessage `json:"lines"`
		Dropped int             `json:"dropped"`
	}
	if err := json.Unmarshal(shown, &w); err != nil {
		return TaskLog{Lines: []LogLine{{Level: "ERROR", Message: "fleet: an entry of the task's log does not read: " + err.Error()}}}
	}
	t := TaskLog{Attempt: w.Attempt, Worker: w.Worker, Lines: parseLines(w.Lines), Dropped: w.Dropped}
	if w.At > 0 {
		t.At = time.UnixMilli(w.At)
	}
	return t
}

// parseLines reads a JSON array of the lines slog's JSONHandler spelled.
func parseLines(raw []byte) []LogLine {
	var objs []map[string]json.RawMessage
	if err := json.Unmarshal(raw, &objs); err != nil {
		return nil
	}
	out := make([]LogLine, 0, len(objs))
	for _, o := range objs {
		var ln LogLine
		_ = json.Unmarshal(o[slog.TimeKey], &ln.Time)
		_ = json.Unmarshal(o[slog.LevelKey], &ln.Level)
		_ = json.Unmarshal(o[slog.MessageKey], &ln.Message)
		delete(o, slog.TimeKey)
		delete(o, slog.LevelKey)
		delete(o, slog.MessageKey)
		if len(o) > 0 {
			ln.Attrs = o
		}
		out = append(out, ln)
	}
	return out
}
