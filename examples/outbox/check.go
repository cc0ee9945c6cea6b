package main

// This file holds the host's checks, once the workers ended.

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/fleetsql"
)

// check verifies "completed if and only if committed" and prints the
// outcome: every order shipped once, its task done (acked once, by one
// worker), the victim's task acked by worker-2 without running the
// handler, with worker-1's result.
func check(ctx context.Context, db *sql.DB, ob *fleetsql.Outbox, ship *fleet.Queue[Ship], placed []int64,
	victim int64, w1, w2 *workerProc) error {
	var rows, shipments int
	if err := db.QueryRowContext(ctx, `SELECT (SELECT count(*) FROM orders), (SELECT count(*) FROM shipments)`).Scan(&rows, &shipments); err != nil {
		return err
	}
	var bad []string
	if rows != len(placed) || shipments != len(placed) {
		bad = append(bad, fmt.Sprintf("%d order rows and %d shipments, want %d each", rows, shipments, len(placed)))
	}
	ackedBy := map[string]int{}    // tasks done, by the worker that acked them
	found := 0                     // tasks that worker-2 acked without running the handler
	var victimRec fleet.TaskRecord // when its checks passed
	for _, order := range placed {
		var n int
		var task, by string
		if err := db.QueryRowContext(ctx, `SELECT count(*), coalesce(min(task_id), ''), coalesce(min(worker), '') FROM shipments WHERE order_id = $1`,
			order).Scan(&n, &task, &by); err != nil {
			return err
		}
		if n != 1 {
			bad = append(bad, fmt.Sprintf("order %d: %d shipments", order, n))
			continue
		}
		rec, err := ship.Lookup(ctx, task)
		if err != nil || rec.Status != fleet.TaskDone {
			bad = append(bad, fmt.Sprintf("order %d: task %s %s, want done (%v)", order, task, rec.Status, err))
			continue
		}
		ackedBy[rec.Worker]++
		if rec.Worker == "ship|worker-2" && w2.count("handle", task) == 0 {
			found++
		}
		if order != victim {
			continue
		}
		var res Shipped
		_ = json.Unmarshal(rec.Result, &res)
		switch {
		case by != "worker-1" || w1.count("commit", task) != 1:
			bad = append(bad, fmt.Sprintf("order %d: shipped by %q, want worker-1", order, by))
		case rec.Worker != "ship|worker-2" || w2.count("ack", task) != 1:
			bad = append(bad, fmt.Sprintf("order %d: task acked by %q, want worker-2", order, rec.Worker))
		case w2.count("handle", task) != 0:
			bad = append(bad, fmt.Sprintf("order %d: worker-2 ran the handler of the completed task", order))
		case res.By != "worker-1":
			bad = append(bad, fmt.Sprintf("order %d: task's result %s, want worker-1's", order, rec.Result))
		default:
			victimRec = rec
		}
	}
	// The completion rows left can only be those of tasks that worker-1
	// acked just before it died, whose delete its Reap had not made yet:
	// they go after ReapOptions.Retention. worker-2's Reap deleted its own.
	left, err := doneRows(ctx, db, ob)
	if err != nil {
		return err
	}
	for _, id := range left {
		if rec, err := ship.Lookup(ctx, id); err != nil || rec.Worker != "ship|worker-1" {
			bad = append(bad, fmt.Sprintf("completion row of task %s left, acked by %q (%v)", id, rec.Worker, err))
		}
	}
	st, err := ship.Stats(ctx)
	if err != nil {
		return err
	}
	if n := st.Pending + st.InFlight + st.Scheduled + st.Dead; n != 0 {
		bad = append(bad, fmt.Sprintf("%d tasks left in the queue (%d dead)", n, st.Dead))
	}
	if victimRec.ID != "" {
		fmt.Printf("worker-2: took task %s again after its lease ran out (attempt %d); Once found its completion row and acked it without running the handler, result %s\n",
			victimRec.ID, victimRec.Attempts+1, victimRec.Result)
	}
	fmt.Printf("orders=%d shipments=%d done=%d (worker-1 %d, worker-2 %d of which %d found completed) queue_left=%d completion_rows_left=%d\n",
		rows, shipments, ackedBy["ship|worker-1"]+ackedBy["ship|worker-2"], ackedBy["ship|worker-1"], ackedBy["ship|worker-2"], found,
		st.Pending+st.InFlight+st.Scheduled+st.Dead, len(left))
	if len(left) > 0 {
		fmt.Printf("the %d completion rows left are of tasks that worker-1 acked just before it died, before its Reap deleted them: a Reap deletes them after ReapOptions.Retention\n", len(left))
	}
	if len(bad) > 0 {
		return fmt.Errorf("not completed if and only if committed: %q", bad)
	}
	return nil
}

// doneRows returns the task ids of the completion table.
func doneRows(ctx context.Context, db *sql.DB, ob *fleetsql.Outbox) ([]string, error) {
	r, err := db.QueryContext(ctx, `SELECT task_id FROM `+ob.DoneTable())
	if err != nil {
		return nil, err
	}
	defer r.Close()
	var ids []string
	for r.Next() {
		var id string
		if err := r.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, r.Err()
}
