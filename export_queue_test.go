package fleet

import (
	"context"

	"github.com/fleet-go/fleet/internal/engine"
)

// AckAndTake runs the reserve script as a worker slot does when it finishes
// a task while the queue has more: it acks t and takes up to n tasks in one
// call. acked is 1 (done), 0 (the lease was lost) or -1 (no reply).
func AckAndTake[T any](ctx context.Context, q *Queue[T], t *Task[T], n int) (acked int, tasks []*Task[T], err error) {
	acks, tasks, err := AckManyAndTake(ctx, q, []*Task[T]{t}, n)
	acked = -1
	if acks != "" {
		acked = int(acks[0] - '0')
	}
	return acked, tasks, err
}

// AckManyAndTake runs the reserve script as a worker's group commit does:
// it acks every task of ts and takes up to n tasks (n may be 0) in one
// call, on the shard of ts[0] (the tasks must share it, as those of one
// group commit call do). acks has a digit per task, in order: '1' done,
// '0' lease lost.
func AckManyAndTake[T any](ctx context.Context, q *Queue[T], ts []*Task[T], n int) (acks string, tasks []*Task[T], err error) {
	rs := make([]*engine.Reservation, len(ts))
	for i, t := range ts {
		rs[i] = t.r
	}
	res, err := ts[0].core.e.Reserve(ctx, engine.Req{N: n, Acks: rs}) // t's shard, as the worker's group commit
	for _, c := range res.Acks {
		acks += string(rune('0' + c))
	}
	if len(res.Tasks) > 0 {
		tasks, _ = q.decodeAll(ctx, res.Tasks)
	}
	return acks, tasks, opErr("ack", q.name, err) // as the worker's group commit reports it
}

// StaleTask returns a handle on t's task that holds token instead of t's
// lease token: a holder whose reservation is not the one that exists.
func StaleTask[T any](t *Task[T], token string) *Task[T] {
	return &Task[T]{ID: t.ID, reservation: reservation{r: t.r.WithToken(token), core: t.core}}
}

// TaskShard is the shard of a sharded queue that holds t (0 unsharded).
func TaskShard[T any](t *Task[T]) int { return t.core.key.Shard }
