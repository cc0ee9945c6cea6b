package keys

// Queue holds the keys of one task queue. Every key shares the queue's slot
// in the tagged layout.
type Queue struct {
	Pending    string // fleet:queue:<name> (list of JSON bodies)
	Processing string // fleet:queue:<name>:processing (zset: id -> deadline)
	Body       string // fleet:queue:<name>:processing:body (hash: id -> body)
	Scheduled  string // fleet:queue:<name>:scheduled (zset: body -> ready_at)
	Dead       string // fleet:queue:<name>:dead (list of dead bodies)

	// Lease is fleet:queue:<name>:processing:lease (hash: id -> "<token>
	// <deadline_ms>"; derived). It holds the token of each reservation that
	// fleet made and the deadline fleet last gave it, so that only the
	// reservation that exists now can be acked, nacked or extended, and only
	// by its owner. Losing it only revokes the leases in flight: their tasks
	// come back through the sweeper when their deadlines pass, so it never
	// needs rebuilding.
	Lease string
	// Policy is fleet:queue:<name>:policy (string: JSON; derived): the
	// queue's retry and dead-letter policy, which every process applies.
	Policy string
	// Call is the prefix of fleet:queue:<name>:call:<token prefix> (string,
	// PX lease; derived): the ids one reserve call took, or a tombstone, so
	// that a caller that gave up mid-call can hand them back.
	Call string
	// Dedup is fleet:queue:<name>:dedup (hash: dedup key -> task id;
	// derived). An entry lives while its task is pending, scheduled or in
	// flight, and ends when the task is acked or dead-lettered. It can be
	// rebuilt from the "dedup" field of the bodies in the documented keys.
	Dedup string
	// Unique is the prefix of fleet:queue:<name>:unique:<dedup key> (string:
	// the id of the task that held the key, PX the window; optional): a dedup
	// key kept held after its task was acked, for SubmitOptions.UniqueFor.
	Unique string
	// Paused is fleet:queue:<name>:paused (string "1"; optional): while it
	// exists, batch workers reserve nothing from the queue.
	Paused string
	// Result is the prefix of fleet:queue:<name>:result:<id> (string: JSON
	// {id, result, attempts, done_at, worker}, PX QueueOptions.Retention;
	// optional): a completed task's record, kept when retention is on.
	Result string
}

// Queue returns the keys of queue name.
func (k Keys) Queue(name string) Queue {
	base := k.join("fleet", "queue", k.tag(name))
	return Queue{
		Pending:    base,
		Processing: base + ":processing",
		Body:       base + ":processing:body",
		Scheduled:  base + ":scheduled",
		Dead:       base + ":dead",
		Lease:      base + ":processing:lease",
		Dedup:      base + ":dedup",
		Policy:     base + ":policy",
		Call:       base + ":call:",
		Unique:     base + ":unique:",
		Paused:     base + ":paused",
		Result:     base + ":result:",
	}
}

// Queues is fleet:queues (set of queue names; derived): the queue registry
// that lets a sweeper find every queue without scanning the keyspace. It is
// not tagged, so on a cluster it lives in another slot than the queues' keys
// and is never touched by a queue script. It can be rebuilt by scanning for
// fleet:queue:* keys.
func (k Keys) Queues() string { return k.join("fleet", "queues") }
