package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"text/tabwriter"
)

func init() {
	var offset, count int
	var all bool
	register(&command{
		name:    "dlq",
		args:    "list <queue> | requeue <queue> (<task id> | --all) | purge <queue>",
		summary: "list, requeue or purge a queue's dead letters",
		flags: func(fs *flag.FlagSet) {
			fs.IntVar(&offset, "offset", 0, "list: skip this many dead letters")
			fs.IntVar(&count, "count", 100, "list: show at most this many")
			fs.BoolVar(&all, "all", false, "requeue: every dead letter that is a task")
		},
		run: func(ctx context.Context, a *app, args []string) int {
			if len(args) < 2 {
				return a.usageErr("dlq", "needs an action (list, requeue, purge) and a queue name")
			}
			action, queue := args[0], args[1]
			switch {
			case action == "list" && len(args) == 2:
				ds, err := a.f.Queue(queue).DeadLetters(ctx, offset, count)
				if err != nil {
					return a.fail(err)
				}
				type row struct {
					ID       string          `json:"id"`
					Attempts int             `json:"attempts"`
					Error    string          `json:"error"`
					DeadAt   string          `json:"dead_at,omitempty"`
					Payload  json.RawMessage `json:"payload,omitempty"`
					Raw      string          `json:"raw"`
				}
				rows := []row{}
				for _, d := range ds {
					r := row{ID: d.ID, Attempts: d.Attempts, Error: d.Error, Payload: json.RawMessage(d.Payload), Raw: d.Raw}
					if len(r.Payload) == 0 || !json.Valid(r.Payload) {
						r.Payload = nil
					}
					if !d.DeadAt.IsZero() {
						r.DeadAt = ts(d.DeadAt)
					}
					rows = append(rows, r)
				}
				a.emit(rows, func(w *tabwriter.Writer) {
					fmt.Fprintln(w, "ID\tATTEMPTS\tDEAD AT\tERROR")
					for _, r := range rows {
						id := r.ID
						if id == "" {
							id = "(poison)"
						}
						fmt.Fprintf(w, "%s\t%d\t%s\t%s\n", id, r.Attempts, r.DeadAt, r.Error)
					}
				})
				return exitOK
			case action == "requeue" && len(args) == 3 && !all:
				if err := a.f.Queue(queue).RequeueDead(ctx, args[2]); err != nil {
					return a.fail(err)
				}
				a.emit(map[string]int{"requeued": 1}, func(w *tabwriter.Writer) { fmt.Fprintln(w, "requeued 1") })
				return exitOK
			case action == "requeue" && len(args) == 2 && all:
				n, err := a.f.Queue(queue).RequeueAllDead(ctx)
				if err != nil {
					return a.fail(err)
				}
				a.emit(map[string]int{"requeued": n}, func(w *tabwriter.Writer) { fmt.Fprintf(w, "requeued %d\n", n) })
				return exitOK
			case action == "purge" && len(args) == 2:
				n, err := a.f.Queue(queue).PurgeDead(ctx)
				if err != nil {
					return a.fail(err)
				}
				a.emit(map[string]int64{"purged": n}, func(w *tabwriter.Writer) { fmt.Fprintf(w, "purged %d\n", n) })
				return exitOK
			}
			return a.usageErr("dlq", "expected list <queue>, requeue <queue> <id>, requeue <queue> --all, or purge <queue>")
		},
	})
}
