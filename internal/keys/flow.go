package keys

// Flow holds the keys of one flow or batch (docs/FLOWS.md). Both share the
// flow's own slot in the tagged layout ({<id>}), apart from every queue's.
type Flow struct {
	// Record is fleet:flow:<id> (hash; optional): the flow's state, its
	// counts (total, ok, fail, cancel), its callbacks and its retention.
	// Lifetime: an hour until its submit commits; then until the flow is
	// done, and its retention after that (PX).
	Record string
	// Members is fleet:flow:<id>:m (hash; optional): member ref -> its
	// state ('p' pending, '+' succeeded, 'x' failed, 'c' cancelled, 'a'
	// aborted before its commit, 'k' a batch's callback). Lifetime: the
	// record's.
	Members string
}

// Flow returns the keys of flow (or batch) id.
func (k Keys) Flow(id string) Flow {
	base := k.join("fleet", "flow", k.tag(id))
	return Flow{Record: base, Members: base + ":m"}
}

// Flows is fleet:flows (zset: flow id -> server ms; derived): the flows
// with an operation under way (a Close that completes a batch, a cancel's
// walk), written before it and removed after it, so that a sweeper finishes
// one that a crash stopped. Untagged: never in a flow's script.
func (k Keys) Flows() string { return k.join("fleet", "flows") }

// ProgressTopic is the event topic fleet:progress:<queue> (pub/sub channel
// event:fleet:progress:<queue>; carries {"queue","id","progress"}):
// Task.Progress publishes there each value it stores.
func (k Keys) ProgressTopic(queue string) string { return "fleet:progress:" + queue }
