package fleet

import "context"

// AckAndTake runs the reserve script as a worker slot does when it finishes
// a task while the queue has more: it acks t and takes up to n tasks in one
// call. acked is 1 (done), 0 (the lease was lost) or -1.
func AckAndTake[T any](ctx context.Context, q *Queue[T], t *Task[T], n int) (acked int, tasks []*Task[T], err error) {
	tasks, st, err := q.reserveAs(ctx, n, false, "", t)
	return st.acked, tasks, err
}

// AckManyAndTake runs the reserve script as a worker's group commit does:
// it acks every task of ts and takes up to n tasks (n may be 0) in one
// call. acks has a digit per task, in order: '1' done, '0' lease lost.
func AckManyAndTake[T any](ctx context.Context, q *Queue[T], ts []*Task[T], n int) (acks string, tasks []*Task[T], err error) {
	tasks, st, err := q.reserveShardAs(ctx, n, false, "", ts)
	return st.acks, tasks, queueErr("ack", q.name, err) // as the worker's group commit reports it
}

// StaleTask returns a handle on t's task that holds token instead of t's
// lease token: a holder whose reservation is not the one that exists.
func StaleTask[T any](t *Task[T], token string) *Task[T] {
	return &Task[T]{ID: t.ID, q: t.q, token: token, body: t.body, dedup: t.dedup}
}
