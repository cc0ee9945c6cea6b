package fleet

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/redis/rueidis"

	"github.com/fleet-go/fleet/internal/keys"
	"github.com/fleet-go/fleet/internal/taskbody"
)

// Submitting tasks: Submit, SubmitMany, SubmitWith, SubmitJSON.

// newBody spells the body of a task (taskbody.New) with the per-task
// options of opts: the one place that maps SubmitOptions to the options a
// body carries.
func newBody(id string, payload []byte, opts SubmitOptions) string {
	return taskbody.New(id, payload, bodyOptions(opts))
}

// bodyOptions maps SubmitOptions to the options a body carries.
func bodyOptions(opts SubmitOptions) taskbody.Options {
	o := taskbody.Options{
		DedupKey: opts.DedupKey, UniqueFor: opts.UniqueFor, Priority: opts.Priority, MaxAttempts: opts.MaxAttempts,
		Backoff: opts.Backoff.String(), Timeout: opts.Timeout, ExpiresAt: opts.ExpiresAt, Metadata: opts.Metadata, Group: opts.Group,
	}
	if d := opts.Debounce; d != nil {
		o.Debounce, o.DebounceMaxWait = d.Window, d.MaxWait
	}
	return o
}

// pushBody is newBody for a task that push (queue_submit.lua) writes: it
// names in "mx" the metadata index keys the task joins (metaSuffixes),
// which its ack leaves. A tracked task is not indexed.
func (q *queueCore) pushBody(id string, payload []byte, opts SubmitOptions) string {
	o := bodyOptions(opts)
	if !opts.tracked() {
		o.Indexed = q.metaSuffixes(opts.Metadata)
	}
	return taskbody.New(id, payload, o)
}

// metaSuffixes returns the suffixes (internal/keys MetaSuffix) of the
// metadata index keys that a task with metadata meta joins: one per key of
// QueueOptions.IndexMeta that meta sets, in IndexMeta's order; nil for a
// queue that indexes nothing.
func (q *queueCore) metaSuffixes(meta map[string]string) []string {
	if len(q.opts.IndexMeta) == 0 || len(meta) == 0 {
		return nil
	}
	var out []string
	for _, k := range q.opts.IndexMeta {
		if v, ok := meta[k]; ok {
			out = append(out, keys.MetaSuffix(k, v))
		}
	}
	return out
}

// Submit validates payload (go-playground/validator tags on T) and pushes
// it as a new task at the tail of the queue. It returns the task's id, a
// UUIDv7. May return ErrInvalidPayload (the message lists the failing
// fields; nothing is written), ErrWrongType, ErrUnavailable.
func (q *Queue[T]) Submit(ctx context.Context, payload T) (string, error) {
	ids, err := q.submitMany(ctx, "submit", []T{payload})
	if err != nil {
		return "", err
	}
	return ids[0], nil
}

// SubmitMany validates every payload, then pushes them all in one command
// (one round trip), in order. Either all are pushed or none: one invalid
// payload fails the call with ErrInvalidPayload and nothing is written.
func (q *Queue[T]) SubmitMany(ctx context.Context, payloads []T) ([]string, error) {
	return q.submitMany(ctx, "submit many", payloads)
}

func (q *Queue[T]) submitMany(ctx context.Context, op string, payloads []T) ([]string, error) {
	if err := q.ready(ctx); err != nil {
		return nil, opErr(op, q.name, err)
	}
	if len(payloads) == 0 {
		return nil, nil
	}
	ids := make([]string, len(payloads))
	bodies := make([]string, len(payloads))
	for i, p := range payloads {
		b, err := q.encodePayload(p)
		if err != nil {
			if len(payloads) > 1 {
				err = within("payload "+strconv.Itoa(i), err)
			}
			return nil, opErr(op, q.name, err)
		}
		if ids[i], err = newTaskID(); err != nil {
			return nil, opErr(op, q.name, err)
		}
		bodies[i] = newBody(ids[i], b, SubmitOptions{})
	}
	done := q.fleet.observeSubmit(ctx, q.name, ids, bodies, time.Time{}, "")
	if err := q.register(ctx); err != nil {
		done.call(0, err)
		return nil, opErr(op, q.name, err)
	}
	c := q.fleet.client
	s := q.pick("") // a sharded queue: the whole batch goes to one shard, round-robin
	if err := c.Do(ctx, c.B().Rpush().Key(s.key.Pending).Element(bodies...).Build()).Error(); err != nil {
		done.call(0, err)
		return nil, opErr(op, q.name, err)
	}
	done.call(len(ids), nil)
	s.wakeLocal()
	return ids, nil
}

// Submission is one task of SubmitManyWith: its payload and the options
// of its submit (those of SubmitWith).
type Submission[T any] struct {
	Payload T
	Options SubmitOptions
}

// SubmitManyWith is SubmitMany with options per task. Every payload and
// every option is checked first: one invalid fails the call with
// ErrInvalidPayload or ErrInvalidArgument, naming the submission, and
// nothing is written. Then the tasks go in one round trip: the tasks of
// one shard (all of them, on an unsharded queue) in one atomic script, in
// order. It returns each task's id, or the id of the live task that holds
// its DedupKey (an earlier one of the same call included). When a task
// with UniqueFor finds its key held, its place gets the holder's id and
// the error (errors.Is ErrDuplicate) joins a *DuplicateError for each
// such task; a task with Replace or Debounce whose key's holder is running
// likewise gets the holder's id and an ErrTaskRunning; the other tasks are
// written all the same.
func (q *Queue[T]) SubmitManyWith(ctx context.Context, subs []Submission[T]) ([]string, error) {
	const op = "submit many"
	if err := q.ready(ctx); err != nil {
		return nil, opErr(op, q.name, err)
	}
	if len(subs) == 0 {
		return nil, nil
	}
	items := make([]submission, len(subs))
	var named map[string]bool // the caller-chosen ids (SubmitOptions.ID)
	for i, sub := range subs {
		if err := q.checkSubmit(sub.Options); err != nil {
			return nil, opErr(op, q.name, within("submission "+strconv.Itoa(i), err))
		}
		b, err := q.encodePayload(sub.Payload)
		if err != nil {
			return nil, opErr(op, q.name, within("submission "+strconv.Itoa(i), err))
		}
		id, err := submitID(sub.Options)
		if err != nil {
			return nil, opErr(op, q.name, within("submission "+strconv.Itoa(i), err))
		}
		if sub.Options.ID != "" {
			if named[id] {
				return nil, opErr(op, q.name, within("submission "+strconv.Itoa(i), fmt.Errorf("%w: SubmitOptions.ID %s is given twice in the call", ErrInvalidArgument, id)))
			}
			if named == nil {
				named = map[string]bool{}
			}
			named[id] = true
		}
		items[i] = submission{id: id, body: q.pushBody(id, b, sub.Options), opts: sub.Options}
	}
	ids, refused, err := q.pushTracked(ctx, items)
	if err != nil {
		return nil, opErr(op, q.name, err)
	}
	var dups []error
	for i, e := range refused {
		if e != nil {
			dups = append(dups, within("submission "+strconv.Itoa(i), e))
		}
	}
	return ids, opErr(op, q.name, errors.Join(dups...))
}

// SubmitOptions says how SubmitWith pushes a task.
type SubmitOptions struct {
	// NotBefore delays the task: it waits in :scheduled until then. Defaults
	// to none (the task is ready at once).
	NotBefore time.Time
	// DedupKey makes the submit idempotent: while a task submitted with the
	// same key is pending, scheduled or in flight, another submit with it
	// adds nothing and returns that task's id. The key is free again once
	// the task is acked or dead-lettered. Defaults to none.
	DedupKey string
	// UniqueFor keeps DedupKey held for this long after the task is acked
	// (asynq's Unique, BullMQ's deduplication ttl), in
	// fleet:queue:<name>:unique:<key>; a task that is dead-lettered frees
	// its key at once, as without it. While the key is held, live or within
	// the window, SubmitWith returns the holder's id and a *DuplicateError
	// (errors.Is ErrDuplicate) naming it. It needs DedupKey. Defaults to 0:
	// the key is held only while the task lives, and a duplicate gets the
	// holder's id with a nil error.
	UniqueFor time.Duration
	// ShardKey picks the shard of a sharded queue (QueueOptions.Shards):
	// tasks with the same key go to the same shard, so they are reserved in
	// the order they were submitted (per-key FIFO). A submit with a DedupKey
	// goes to the shard of its dedup key, so that the key is held in one
	// place; giving both, they must be equal. Ignored by an unsharded
	// queue. Defaults to none: round-robin.
	ShardKey string

	// Priority orders the task among the queue's pending tasks: 0 (the
	// default) is normal, on the documented list; 1 to MaxPriority run
	// before normal tasks, higher first, in an aged order: a task of
	// priority p goes before the tasks of priority 0 that became ready
	// less than p x PriorityStep before it, and after older ones (and so
	// with any two levels), so that normal tasks still run under a steady
	// stream of urgent ones. Prioritized tasks wait in
	// fleet:queue:<name>:prio, off the documented list (docs/SCHEMA.md).
	// With Group, the task is placed on its group's list in the same aged
	// order, counted from when each task was submitted: the round over the
	// groups stays fair, and a group's tasks of one priority keep their
	// submit order. Defaults to 0.
	Priority int
	// MaxAttempts, when set, is how many times this task runs before it is
	// dead-lettered, in place of the queue's (QueuePolicy.MaxAttempts).
	// Defaults to 0: the queue's.
	MaxAttempts int
	// Backoff, when set, is this task's retry policy, in place of the
	// queue's (QueueOptions.Backoff): its Base and Max default to the
	// queue's BackoffBase and BackoffMax. It travels in the task's body
	// ("backoff", as ParseBackoff reads it), so every process's nacks and
	// sweeper apply it; being declared, it also schedules the retry of a
	// lease that ran out. A Func cannot travel with a task: one is refused
	// with ErrInvalidArgument. Defaults to none: the queue's.
	Backoff Backoff
	// Timeout, when set, bounds one run of this task's handler in a batch
	// worker, in place of WorkerOptions.TaskTimeout. Defaults to 0: the
	// worker's.
	Timeout time.Duration
	// ExpiresAt, when set, is when the task expires: one not started by
	// then is dead-lettered with the error "expired" (by the reserve that
	// finds it, or by the worker about to start it: the server's clock
	// decides) and never runs. It must be in the future. Defaults to none.
	ExpiresAt time.Time
	// Metadata is a small map of strings carried with the task (its body's
	// "meta"): the handler reads it (Task.Metadata), and so do middleware
	// (TaskInfo.Metadata), Lookup (TaskRecord.Metadata), fleetctl and
	// fleetui. At most MaxMetadataBytes of JSON, with keys of valid text.
	// Defaults to none.
	Metadata map[string]string
	// Group puts the task in a group of the queue (a tenant, a site, an
	// account): reserves take round-robin across the groups that have
	// tasks and are under their limits (QueueOptions.Groups,
	// Queue.SetGroupLimit), so that a busy group gets no more than its
	// share. A group name follows the rules of a queue name. On a sharded
	// queue a group's tasks all go to the group's shard (so its limits
	// hold), so ShardKey and DedupKey are refused beside it. Groups wait
	// off the documented list (docs/SCHEMA.md). Defaults to none: the task
	// is on the queue's documented list, which takes its turn in the round
	// like a group without limits.
	Group string

	// After makes the task wait for other tasks, in any queue (DependOn,
	// Ignoring): it is not reservable until every one of them succeeded
	// (under IgnoreFailure: ended), and then goes to its queue once; a
	// dependency under FailDependent that is dead-lettered or cancelled
	// dead-letters it instead (docs/FLOWS.md). Each dependency must be
	// tracked (Track, a Flow, a Batch, After) or have ended with its end
	// recorded; see Flow.Submit for the errors. The task is tracked. Not
	// with DedupKey or UniqueFor. Defaults to none.
	After []Dependency
	// Replace, with DedupKey, makes a submit whose key names a live task
	// that is pending or scheduled give that task this submit's payload
	// and per-task options (NotBefore, Priority, Group, MaxAttempts,
	// Backoff, Timeout, ExpiresAt, Metadata) in its place, keeping its id:
	// SubmitWith returns that id and no error. The replaced task starts
	// afresh (attempts 0, no error of an earlier run), keeps its place on
	// its list (or its ready time among the priorities) when its route
	// does not change, and is routed anew when it does. When the holder is
	// running (reserved), nothing changes and SubmitWith returns the
	// holder's id and an error that is ErrTaskRunning (the caller may retry
	// later); when the key names no live task, the submit is a plain one.
	// Finding the holder reads the tasks waiting on its shard (O(N), like
	// Cancel). It needs DedupKey. Defaults to false: a duplicate adds
	// nothing.
	Replace bool
	// Debounce, with DedupKey, coalesces a burst of submits into one run:
	// see Debounce. It replaces as Replace does (and refuses a running
	// holder the same way), and sets the task's ready time itself, so it
	// is not with NotBefore. Defaults to nil: none.
	Debounce *Debounce

	// Track records the task's end (fleet:queue:<name>:result:<id>, for
	// DefaultFlowRetention or the queue's longer Retention), so that other
	// tasks can wait for it (After), Queue.Wait can wait for it from any
	// process, and Lookup and ResultOf see its end. Not with DedupKey or
	// UniqueFor. Defaults to false.
	Track bool
	// ID, when set, is the task's id, chosen by the caller (an order's id,
	// a request's idempotency key), for a tracked task (Track or After; a
	// Flow's step): a submit with an id that names a task that lives, or
	// whose end is still recorded (its retention), writes nothing and
	// returns that id with a nil error, so that a retried request gives one
	// run. The check is atomic in the task's slot (flow_put.lua); while
	// another submit of the id has not committed yet (After: between its
	// put and its mark), SubmitWith waits for it, bounded by ctx, and
	// submits the task itself if that one gave up. What the second submit
	// holds is not compared with the first. On a sharded queue the id picks
	// the shard (unless Group does: a repeat must name the same Group), so
	// that a repeat meets the first; ShardKey, if set, must equal it. Not
	// for a plain task (DedupKey is), a batch's task or callback. At most
	// 1024 bytes of text without white space, '{' or '}'. Defaults to none:
	// a new UUIDv7.
	ID string
}

// MaxTaskIDLen bounds a caller-chosen task id (SubmitOptions.ID).
const MaxTaskIDLen = 1024

// tracked reports whether the options make the task tracked (flow.go).
func (o SubmitOptions) tracked() bool { return o.Track || len(o.After) > 0 }

// isZero reports whether o sets nothing: the submit is a plain push.
func (o SubmitOptions) isZero() bool {
	return o.NotBefore.IsZero() && o.DedupKey == "" && o.UniqueFor == 0 && o.ShardKey == "" && o.Priority == 0 &&
		o.MaxAttempts == 0 && o.Backoff.IsZero() && o.Timeout == 0 && o.ExpiresAt.IsZero() && len(o.Metadata) == 0 && o.Group == "" && !o.tracked() &&
		!o.Replace && o.Debounce == nil && o.ID == ""
}

// Bounds of SubmitOptions.
const (
	// MaxPriority is the highest SubmitOptions.Priority.
	MaxPriority = 9
	// MaxMetadataBytes bounds SubmitOptions.Metadata as JSON.
	MaxMetadataBytes = 4 << 10
)

// SubmitWith is Submit with a delay and/or a dedup key. It returns the new
// task's id, or the id of the live task that holds opts.DedupKey (with
// UniqueFor: the holder's id and a *DuplicateError), or opts.ID, whether
// this submit made the task or an earlier one did (SubmitOptions.ID). May return
// ErrInvalidArgument for options out of range, and Submit's errors.
func (q *Queue[T]) SubmitWith(ctx context.Context, payload T, opts SubmitOptions) (string, error) {
	const op = "submit"
	if err := q.ready(ctx); err != nil {
		return "", opErr(op, q.name, err)
	}
	if err := q.checkSubmit(opts); err != nil {
		return "", opErr(op, q.name, err)
	}
	b, err := q.encodePayload(payload)
	if err != nil {
		return "", opErr(op, q.name, err)
	}
	id, err := submitID(opts)
	if err != nil {
		return "", opErr(op, q.name, err)
	}
	if opts.tracked() {
		return id, opErr(op, q.name, q.submitTracked(ctx, []submission{{id: id, body: newBody(id, b, opts), opts: opts}}))
	}
	got, refused, err := q.push(ctx, []submission{{id: id, body: q.pushBody(id, b, opts), opts: opts}})
	if err != nil {
		return "", opErr(op, q.name, err)
	}
	return got[0], opErr(op, q.name, refused[0])
}

// submitID returns the id of a task that SubmitWith or SubmitManyWith
// submits: opts.ID (a tracked task's only: a plain task's submit has no
// record that a repeat could meet), or a new UUIDv7.
func submitID(opts SubmitOptions) (string, error) {
	if opts.ID == "" {
		return newTaskID()
	}
	if !opts.tracked() {
		return "", fmt.Errorf("%w: SubmitOptions.ID is for a tracked task (Track or After); a plain task's submit is made idempotent by DedupKey", ErrInvalidArgument)
	}
	return opts.ID, nil
}

// pushTracked is push, for a call whose tasks may be tracked: those go
// through submitTracked (flow_task.go), the others through push.
func (q *queueCore) pushTracked(ctx context.Context, subs []submission) ([]string, []error, error) {
	var plain, tracked []submission
	for _, s := range subs {
		if s.opts.tracked() {
			tracked = append(tracked, s)
		} else {
			plain = append(plain, s)
		}
	}
	if len(tracked) == 0 {
		return q.push(ctx, subs)
	}
	if err := q.submitTracked(ctx, tracked); err != nil {
		return nil, nil, err
	}
	ids, refused := make([]string, len(subs)), make([]error, len(subs))
	for i, s := range subs {
		ids[i] = s.id
	}
	if len(plain) == 0 {
		return ids, refused, nil
	}
	got, gotRefused, err := q.push(ctx, plain)
	if err != nil {
		return nil, nil, err
	}
	j := 0
	for i, s := range subs {
		if !s.opts.tracked() {
			ids[i], refused[i] = got[j], gotRefused[j]
			j++
		}
	}
	return ids, refused, nil
}

// checkSubmit checks SubmitWith's options.
func (q *queueCore) checkSubmit(opts SubmitOptions) error {
	if opts.tracked() {
		if err := checkFlowOptions(opts); err != nil {
			return err
		}
	}
	if err := checkReplace(opts.Replace, opts.Debounce, opts.DedupKey, opts.NotBefore); err != nil {
		return err
	}
	if opts.ID != "" {
		if err := checkCallerID("SubmitOptions.ID", opts.ID, MaxTaskIDLen); err != nil {
			return err
		}
		if opts.ShardKey != "" && opts.ShardKey != opts.ID && q.opts.Shards > 1 {
			return fmt.Errorf("%w: ShardKey %q and ID %q differ: a task with a caller-chosen id goes to its id's shard (leave ShardKey empty, or make them equal)", ErrInvalidArgument, opts.ShardKey, opts.ID)
		}
	}
	switch {
	case opts.DedupKey != "" && (len(opts.DedupKey) > keys.MaxNameLen || !isText(opts.DedupKey)):
		return fmt.Errorf("%w: dedup key of %d bytes must be valid text of at most %d bytes", ErrInvalidArgument, len(opts.DedupKey), keys.MaxNameLen)
	case opts.ShardKey != "" && opts.DedupKey != "" && opts.ShardKey != opts.DedupKey && q.opts.Shards > 1:
		return fmt.Errorf("%w: ShardKey %q and DedupKey %q differ: a task with a dedup key goes to its dedup key's shard (leave ShardKey empty, or make them equal)", ErrInvalidArgument, opts.ShardKey, opts.DedupKey)
	case opts.UniqueFor < 0:
		return fmt.Errorf("%w: SubmitOptions.UniqueFor %v is negative", ErrInvalidArgument, opts.UniqueFor)
	case opts.UniqueFor != 0 && opts.DedupKey == "":
		return fmt.Errorf("%w: SubmitOptions.UniqueFor needs a DedupKey", ErrInvalidArgument)
	case opts.UniqueFor != 0 && opts.UniqueFor.Milliseconds() < 1:
		return fmt.Errorf("%w: SubmitOptions.UniqueFor %v is under a millisecond", ErrInvalidArgument, opts.UniqueFor)
	case opts.Priority < 0 || opts.Priority > MaxPriority:
		return fmt.Errorf("%w: SubmitOptions.Priority %d is not in [0, %d]", ErrInvalidArgument, opts.Priority, MaxPriority)
	case opts.MaxAttempts < 0:
		return fmt.Errorf("%w: SubmitOptions.MaxAttempts %d is negative", ErrInvalidArgument, opts.MaxAttempts)
	case opts.Timeout < 0:
		return fmt.Errorf("%w: SubmitOptions.Timeout %v is negative", ErrInvalidArgument, opts.Timeout)
	case opts.Backoff.Func != nil:
		return fmt.Errorf("%w: SubmitOptions.Backoff.Func cannot travel with a task (set it in QueueOptions.Backoff)", ErrInvalidArgument)
	case !opts.ExpiresAt.IsZero() && !opts.ExpiresAt.After(q.fleet.now()):
		return fmt.Errorf("%w: SubmitOptions.ExpiresAt %v is not in the future", ErrInvalidArgument, opts.ExpiresAt.Format(time.RFC3339Nano))
	}
	if _, err := opts.Backoff.check("SubmitOptions.Backoff", q.opts.BackoffBase, q.opts.BackoffMax); err != nil {
		return err
	}
	if opts.Group != "" {
		if err := keys.Check(keys.KindGroup, opts.Group); err != nil {
			return fmt.Errorf("%w: SubmitOptions.Group: %w", ErrInvalidArgument, err)
		}
		if q.opts.Shards > 1 && (opts.ShardKey != "" || opts.DedupKey != "") {
			return fmt.Errorf("%w: SubmitOptions.Group on a sharded queue picks the shard: leave ShardKey and DedupKey empty", ErrInvalidArgument)
		}
	}
	return checkMetadata(opts.Metadata)
}

// checkMetadata checks SubmitOptions.Metadata: keys of valid text, values
// valid UTF-8, at most MaxMetadataBytes of JSON.
func checkMetadata(m map[string]string) error {
	n := 2
	for k, v := range m {
		if k == "" || !isText(k) {
			return fmt.Errorf("%w: SubmitOptions.Metadata key %q is empty or not valid text", ErrInvalidArgument, k)
		}
		if !utf8.ValidString(v) {
			return fmt.Errorf("%w: SubmitOptions.Metadata[%q] is not valid UTF-8", ErrInvalidArgument, k)
		}
		n += len(k) + len(v) + 6
	}
	if n > MaxMetadataBytes {
		return fmt.Errorf("%w: SubmitOptions.Metadata of about %d bytes of JSON, more than MaxMetadataBytes %d", ErrInvalidArgument, n, MaxMetadataBytes)
	}
	return nil
}

// submission is one task of a push: its id, its body, its options.
type submission struct {
	id, body string
	opts     SubmitOptions
	parent   string // a child's parent (StartChild: childRef and its ref), told its end
}

// push pushes tasks with their options (queue_submit.lua), each to its
// shard: by its group, else its dedup key, else its shard key, else the shard that the
// call's round-robin pick gives all such tasks; one script per shard, in
// one round trip. It returns each task's id, or the id of the task that
// holds its dedup key (then it wrote nothing, or it replaced that task's
// body: Replace, Debounce), and for each task nil or why it was refused
// (a *DuplicateError under UniqueFor; ErrTaskRunning: replaceOutcome).
func (q *queueCore) push(ctx context.Context, subs []submission) ([]string, []error, error) {
	var done submitDone
	if len(subs) == 1 {
		s := &subs[0]
		done = q.fleet.observeSubmitOne(ctx, q.name, s.id, &s.body, s.opts.NotBefore, s.opts.DedupKey)
	} else if q.fleet.obs != nil {
		ids, bodies := make([]string, len(subs)), make([]string, len(subs))
		for i, s := range subs {
			ids[i], bodies[i] = s.id, s.body
		}
		done = q.fleet.observeSubmit(ctx, q.name, ids, bodies, time.Time{}, "")
		for i := range subs {
			subs[i].body = bodies[i]
		}
	}
	if err := q.register(ctx); err != nil {
		done.call(0, err)
		return nil, nil, err
	}
	var shards []*queueCore
	var places [][]int // the tasks of each shard, by their place in subs
	var rr *queueCore
	for i, s := range subs {
		route := cmp.Or(s.opts.Group, s.opts.DedupKey, s.opts.ShardKey)
		var sh *queueCore
		switch {
		case route != "":
			sh = q.pick(route)
		case rr == nil:
			rr = q.pick("")
			sh = rr
		default:
			sh = rr
		}
		j := slices.Index(shards, sh)
		if j < 0 {
			j = len(shards)
			shards, places = append(shards, sh), append(places, nil)
		}
		places[j] = append(places[j], i)
	}
	execs := make([]rueidis.LuaExec, len(shards))
	for j, sh := range shards {
		ks := sh.keys()
		args := make([]string, 1, 1+6*len(places[j]))
		args[0] = "0" // no index entries (q.indexArgs below adds them)
		if len(q.opts.IndexMeta) > 0 {
			ks, args = q.indexArgs(sh, subs, places[j], ks, args)
		}
		for _, i := range places[j] {
			o := subs[i].opts
			uk, ready := "0", ""
			if o.UniqueFor > 0 {
				ks = append(slices.Clip(ks), sh.key.Unique+o.DedupKey)
				uk = strconv.Itoa(len(ks))
			}
			if !o.NotBefore.IsZero() {
				ready = secondsString(o.NotBefore)
			}
			args = append(args, subs[i].id, subs[i].body, o.DedupKey, ready, uk, submitMode(o.Replace, o.Debounce))
		}
		execs[j] = rueidis.LuaExec{Keys: ks, Args: args}
	}
	ids, refused := make([]string, len(subs)), make([]error, len(subs))
	written := 0
	var err error
	for j, r := range queueSubmitScript.ExecMulti(ctx, q.fleet.client, execs...) {
		got, e := r.AsStrSlice()
		if e == nil && len(got) != len(places[j]) {
			e = unexpectedReply("submit", len(got))
		}
		if e != nil {
			err = cmp.Or(err, e)
			continue
		}
		scheduled, ready := false, false
		for k, i := range places[j] {
			o := subs[i].opts
			var replaced bool
			ids[i], replaced, refused[i] = replaceOutcome(got[k], o.DedupKey, o.Debounce != nil)
			switch {
			case ids[i] == subs[i].id || replaced:
				if ids[i] == subs[i].id {
					written++
				}
				later := !o.NotBefore.IsZero() || o.Debounce != nil
				scheduled, ready = scheduled || later, ready || !later
			case refused[i] == nil && o.UniqueFor > 0:
				refused[i] = &DuplicateError{Key: o.DedupKey, ID: ids[i]}
			}
		}
		if ready {
			shards[j].wakeLocal()
		}
		if scheduled {
			shards[j].e.LookSoon()
		}
	}
	done.call(written, err)
	if err != nil {
		return nil, nil, err
	}
	return ids, refused, nil
}

// indexArgs spells the metadata index entries of the tasks of subs at
// places, pushed to shard sh, into the KEYS ks and ARGV args of
// queue_submit.lua (args holds its count, "0"): the horizon (the id prefix
// of max(DeadMaxAge, Retention) ago, by this process's clock, and that
// span in ms), then for each entry the task's place in the call and the
// place in KEYS of its index key.
func (q *queueCore) indexArgs(sh *queueCore, subs []submission, places []int, ks, args []string) ([]string, []string) {
	var pairs []string
	for k, i := range places {
		o := subs[i].opts
		if o.tracked() {
			continue
		}
		for _, suffix := range q.metaSuffixes(o.Metadata) {
			ks = append(slices.Clip(ks), sh.key.MetaIndex+suffix)
			pairs = append(pairs, strconv.Itoa(k+1), strconv.Itoa(len(ks)))
		}
	}
	if len(pairs) == 0 {
		return ks, args
	}
	horizon := max(q.opts.DeadMaxAge, q.opts.Retention)
	ms := q.fleet.now().Add(-horizon).UnixMilli()
	args[0] = strconv.Itoa(len(pairs) / 2)
	args = append(args, fmt.Sprintf("%08x-%04x", uint64(ms)>>16, uint64(ms)&0xffff), strconv.FormatInt(horizon.Milliseconds(), 10))
	return ks, append(args, pairs...)
}

// SubmitJSON decodes raw strictly into the payload type of the queue named
// queue (unknown fields and trailing data are refused), validates it, and
// submits it. The queue must have been made by NewQueue in this process.
// The errors tell an HTTP front end what to answer: ErrQueueNotFound (404),
// ErrInvalidJSON (400, an empty body too), ErrPayloadTooLarge (413),
// ErrInvalidPayload (422); nothing is written for any.
func (f *Fleet) SubmitJSON(ctx context.Context, queue string, raw []byte) (string, error) {
	return f.SubmitJSONWith(ctx, queue, raw, SubmitOptions{})
}

// SubmitJSONWith is SubmitJSON with the options of SubmitWith (a delay, a
// dedup key, a unique window, a shard key): it returns what SubmitWith
// returns, and the errors of SubmitJSON for raw.
func (f *Fleet) SubmitJSONWith(ctx context.Context, queue string, raw []byte, opts SubmitOptions) (string, error) {
	e, ok := f.queues.Load(queue)
	if !ok {
		return "", opErr("submit json", queue, ErrQueueNotFound)
	}
	return e.(jsonSubmitter).submitJSON(ctx, raw, opts)
}

// jsonSubmitter is what SubmitJSON takes of the queueEntry of a queue
// name: every Queue[T] is one (the compiler checks it below).
type jsonSubmitter interface {
	submitJSON(ctx context.Context, raw []byte, opts SubmitOptions) (string, error)
}

var _ jsonSubmitter = (*Queue[struct{}])(nil)

func (q *Queue[T]) submitJSON(ctx context.Context, raw []byte, opts SubmitOptions) (string, error) {
	if len(raw) > q.opts.MaxPayloadBytes {
		return "", opErr("submit json", q.name, fmt.Errorf("%w: %d bytes, more than QueueOptions.MaxPayloadBytes %d", ErrPayloadTooLarge, len(raw), q.opts.MaxPayloadBytes))
	}
	if len(bytes.TrimSpace(raw)) == 0 {
		return "", opErr("submit json", q.name, fmt.Errorf("%w: empty body", ErrInvalidJSON))
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var p T
	if err := dec.Decode(&p); err != nil {
		return "", opErr("submit json", q.name, fmt.Errorf("%w: %w", ErrInvalidJSON, err))
	}
	if _, err := dec.Token(); err != io.EOF {
		return "", opErr("submit json", q.name, fmt.Errorf("%w: trailing data after the JSON value", ErrInvalidJSON))
	}
	if opts.isZero() {
		return q.Submit(ctx, p)
	}
	return q.SubmitWith(ctx, p, opts)
}

// Encode validates payload as Submit does and returns the JSON that a task
// of the queue would carry, writing nothing: for a caller that keeps a
// task to submit later (an outbox row written in the application's own
// SQL transaction, relayed with Fleet.SubmitJSONWith). May return
// ErrInvalidPayload, ErrPayloadTooLarge, and the queue's own error (Err).
func (q *Queue[T]) Encode(payload T) (json.RawMessage, error) {
	if q.err != nil {
		return nil, opErr("encode", q.name, q.err)
	}
	b, err := q.encodePayload(payload)
	if err != nil {
		return nil, opErr("encode", q.name, err)
	}
	return b, nil
}

// CheckOptions reports whether SubmitWith would accept opts on this queue,
// writing nothing: nil, or the error SubmitWith would return for them
// (ErrInvalidArgument naming the field, or the queue's own error). Like
// Encode, it is for a caller that keeps a task to submit later (an outbox
// row), so that bad options fail where the task is written. ExpiresAt is
// checked against this process's clock now; it must still be in the
// future when the task is submitted.
func (q *queueCore) CheckOptions(opts SubmitOptions) error {
	if q.err != nil {
		return opErr("check options", q.name, q.err)
	}
	if err := q.checkSubmit(opts); err != nil {
		return opErr("check options", q.name, err)
	}
	if opts.ID != "" && !opts.tracked() {
		_, err := submitID(opts)
		return opErr("check options", q.name, err)
	}
	return nil
}
