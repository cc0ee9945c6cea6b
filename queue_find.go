package fleet

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/google/uuid"
	"github.com/redis/rueidis"

	"github.com/fleet-go/fleet/internal/keys"
)

// Finding tasks by their metadata: QueueOptions.IndexMeta, FindByMeta.

var queueFindScript = newScript("queue_find.lua")

// Bounds of FindByMeta.
const (
	// DefaultFindLimit is FindByMeta's page size when limit is 0.
	DefaultFindLimit = 100
	// MaxFindLimit bounds FindByMeta's limit.
	MaxFindLimit = 1000
)

// FindByMeta lists the tasks of the queue whose metadata
// (SubmitOptions.Metadata) sets key, one of QueueOptions.IndexMeta, to
// value, in any state: pending, scheduled, active, retrying (scheduled),
// dead or canceled while the dead letter is kept, and done while its
// record is kept (QueueOptions.Retention). It returns a page of at most
// limit tasks (0: DefaultFindLimit) in the order of their ids, which is
// the order of their submits, each as Lookup would find it, and the
// cursor of the next page: pass "" for the first, then the returned
// cursor, until it comes back "". A page may hold fewer than limit tasks
// (even none) while the cursor is not "": entries whose task is gone are
// pruned as the page meets them.
//
// A walk never skips a task that was indexed for the whole walk, however
// many tasks are submitted and end meanwhile, and never returns a task
// twice; a task submitted during the walk is listed when its id sorts
// after the cursor. The cursor is a task id, and stays valid across
// calls, processes and reconnections: after an error, call again with the
// same cursor. On a sharded queue every shard's index is read (one
// pipelined round trip) and merged into one order under one cursor.
//
// Each page is one script per shard, O(limit) for the active and done
// tasks it lists and, when it lists one that waits or is dead, one pass
// over the queue's waiting and dead tasks (as Lookup): a call for
// operators and status pages. May return ErrInvalidArgument (a key that
// the queue does not index, a bad cursor or limit), ErrUnavailable.
func (q *queueCore) FindByMeta(ctx context.Context, key, value, cursor string, limit int) ([]TaskRecord, string, error) {
	const op = "find by meta"
	if err := q.ready(ctx); err != nil {
		return nil, "", opErr(op, q.name, err)
	}
	switch {
	case limit < 0 || limit > MaxFindLimit:
		return nil, "", opErr(op, q.name, fmt.Errorf("%w: limit %d is not in [0, %d]", ErrInvalidArgument, limit, MaxFindLimit))
	case cursor != "" && !validCursor(cursor):
		return nil, "", opErr(op, q.name, fmt.Errorf("%w: cursor %q is not one that FindByMeta returned", ErrInvalidArgument, cursor))
	}
	if err := keys.Check(keys.KindGroup, key); err != nil {
		return nil, "", opErr(op, q.name, fmt.Errorf("%w: metadata key: %w", ErrInvalidArgument, err))
	}
	if err := q.indexes(ctx, key); err != nil {
		return nil, "", opErr(op, q.name, err)
	}
	if limit == 0 {
		limit = DefaultFindLimit
	}
	shards := q.shardsOf(ctx)
	execs := make([]rueidis.LuaExec, len(shards))
	for i, s := range shards {
		execs[i] = rueidis.LuaExec{Keys: s.keys(s.key.MetaKey(key, value)), Args: []string{cursor, fmt.Sprint(limit)}}
	}
	type hit struct {
		id  string
		res []string
	}
	var hits []hit
	next := "" // the smallest last id of the shards that read a full page: past it, a shard may hold more
	for _, rr := range queueFindScript.ExecMulti(ctx, q.fleet.client, execs...) {
		reply, err := rr.ToArray()
		if err != nil {
			return nil, "", opErr(op, q.name, err)
		}
		if len(reply) < 2 {
			return nil, "", opErr(op, q.name, unexpectedReply(op, len(reply)))
		}
		last, _ := reply[0].ToString()
		full, _ := reply[1].AsInt64()
		if full == 1 && (next == "" || last < next) {
			next = last
		}
		for _, m := range reply[2:] {
			res, err := m.AsStrSlice()
			if err != nil || len(res) < 2 {
				return nil, "", opErr(op, q.name, unexpectedReply(op, len(res)))
			}
			hits = append(hits, hit{id: res[0], res: res[1:]})
		}
	}
	slices.SortFunc(hits, func(a, b hit) int { return strings.Compare(a.id, b.id) })
	page := make([]TaskRecord, 0, min(len(hits), limit))
	for _, h := range hits {
		if next != "" && h.id > next {
			break // the next page lists it, with the tasks of the shards that stopped before it
		}
		if len(page) == limit {
			// Shards that read less than a page gave more than one page
			// together: the next page starts after this one's last.
			next = page[limit-1].ID
			break
		}
		page = append(page, q.record(h.id, h.res))
	}
	return page, next, nil
}

// validCursor reports whether c can be a cursor of FindByMeta: a task id
// as fleet makes them (a UUID in its canonical form).
func validCursor(c string) bool {
	u, err := uuid.Parse(c)
	return err == nil && u.String() == c
}

// indexes checks that the queue indexes metadata key key: this handle's
// QueueOptions.IndexMeta names it, or the stored policy's (the options of
// the handles that submit, for a handle that does not: Fleet.Queue).
func (q *queueCore) indexes(ctx context.Context, key string) error {
	if slices.Contains(q.opts.IndexMeta, key) {
		return nil
	}
	p, _, err := q.fleet.storedPolicy(ctx, q.key.Policy)
	if err != nil {
		return err
	}
	if !slices.Contains(p.IndexMeta, key) {
		return fmt.Errorf("%w: metadata key %q is not indexed by the queue (QueueOptions.IndexMeta)", ErrInvalidArgument, key)
	}
	return nil
}
