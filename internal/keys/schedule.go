package keys

// Schedule holds the keys of one periodic schedule. Both share the slot of
// the schedule's queue in the tagged layout, so that a tick is recorded and
// its task pushed in one script.
type Schedule struct {
	// Def is fleet:queue:<queue>:schedule:<name> (hash: queue, spec,
	// payload, missed, grace_ms, paused; optional): the schedule.
	Def string
	// Last is fleet:queue:<queue>:schedule:<name>:last (string: unix ms;
	// optional): the latest tick that was handled (submitted or skipped).
	Last string
}

// Schedule returns the keys of schedule name of queue.
func (k Keys) Schedule(queue, name string) Schedule {
	base := k.join("fleet", "queue", k.tag(queue), "schedule", name)
	return Schedule{Def: base, Last: base + ":last"}
}

// Schedules is fleet:schedules (hash: schedule name -> queue name;
// optional): the index of every schedule, which schedulers read. It is not
// tagged, so on a cluster it lives apart from the schedules' keys and is
// never touched by a schedule script.
func (k Keys) Schedules() string { return k.join("fleet", "schedules") }
