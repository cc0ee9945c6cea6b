package fleet

import "context"

// AckAndTake runs the reserve script as a worker slot does when it finishes
// a task while the queue has more: it acks t and takes up to n tasks in one
// call. acked is 1 (done), 0 (the lease was lost) or -1.
func AckAndTake[T any](ctx context.Context, q *Queue[T], t *Task[T], n int) (acked int, tasks []*Task[T], err error) {
	tasks, st, err := q.reserve(ctx, n, false, t)
	return st.acked, tasks, err
}
