package fleet

// TaskStatus is where a task is in its life.
type TaskStatus string

// The statuses Lookup reports.
const (
	// TaskPending: waiting on the queue.
	TaskPending TaskStatus = "pending"
	// TaskScheduled: waiting for its ready time (a delay, or a retry's
	// backoff).
	TaskScheduled TaskStatus = "scheduled"
	// TaskWaiting: waiting for the tasks it depends on (SubmitOptions.After,
	// a Flow; docs/FLOWS.md): not on its queue yet.
	TaskWaiting TaskStatus = "waiting"
	// TaskActive: reserved by a worker, which holds its lease.
	TaskActive TaskStatus = "active"
	// TaskDone: acked, and its record retained (QueueOptions.Retention).
	TaskDone TaskStatus = "done"
	// TaskDead: in the dead letters.
	TaskDead TaskStatus = "dead"
	// TaskCanceled: cancelled while it ran (Queue.Cancel); its record is
	// the dead letter. A task cancelled while it waited is gone.
	TaskCanceled TaskStatus = "canceled"
)
