package keys

// Queue holds the keys of one task queue. Every key shares the queue's slot
// in the tagged layout.
type Queue struct {
	Pending    string // fleet:queue:<name> (list of JSON bodies)
	Processing string // fleet:queue:<name>:processing (zset: id -> deadline)
	Body       string // fleet:queue:<name>:processing:body (hash: id -> body)
	Scheduled  string // fleet:queue:<name>:scheduled (zset: body -> ready_at)
	Dead       string // fleet:queue:<name>:dead (list of dead bodies)
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
	}
}

// Queues is fleet:queues (set of queue names; derived): the queue registry
// that lets a sweeper find every queue without scanning the keyspace.
func (k Keys) Queues() string { return k.join("fleet", "queues") }
