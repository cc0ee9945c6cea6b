package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"text/tabwriter"
	"time"
)

func init() {
	register(&command{
		name:    "task",
		args:    "get <queue> <task id> | cancel <queue> <task id>",
		summary: "show a task's state (waiting, pending, scheduled, active with its progress, done, dead, canceled), or cancel it",
		run: func(ctx context.Context, a *app, args []string) int {
			if len(args) != 3 {
				return a.usageErr("task", "needs an action (get, cancel), a queue and a task id")
			}
			action, queue, id := args[0], args[1], args[2]
			switch action {
			case "get":
				r, err := a.f.Queue(queue).Lookup(ctx, id)
				if err != nil {
					return a.fail(err)
				}
				a.emit(r, func(w *tabwriter.Writer) {
					fmt.Fprintf(w, "id\t%s\nstatus\t%s\nattempts\t%d\n", r.ID, r.Status, r.Attempts)
					if r.CancelRequested {
						fmt.Fprintf(w, "cancel\trequested, not yet acted on by its worker\n")
					}
					prio := ""
					if r.Priority > 0 {
						prio = strconv.Itoa(r.Priority)
					}
					for _, kv := range [][2]string{{"group", r.Group}, {"priority", prio}, {"worker", r.Worker}, {"progress", shownJSON(r.Progress)},
						{"flow", r.Flow}, {"last error", r.LastError}, {"payload", shownJSON(r.Payload)}, {"result", shownJSON(r.Result)}} {
						if kv[1] != "" {
							fmt.Fprintf(w, "%s\t%s\n", kv[0], kv[1])
						}
					}
					for _, d := range r.Dependencies {
						fmt.Fprintf(w, "waits for\t%s %s (%s, policy %s)\n", d.Queue, d.ID, d.Status, d.Policy)
					}
					for _, k := range slices.Sorted(maps.Keys(r.Metadata)) {
						fmt.Fprintf(w, "meta %s\t%s\n", k, r.Metadata[k])
					}
					for _, kv := range []struct {
						k string
						v time.Time
					}{{"submitted", r.SubmittedAt}, {"ready at", r.ReadyAt}, {"deadline", r.Deadline}, {"done at", r.DoneAt}, {"dead at", r.DeadAt}, {"expires at", r.ExpiresAt}} {
						if !kv.v.IsZero() {
							fmt.Fprintf(w, "%s\t%s\n", kv.k, ts(kv.v))
						}
					}
				})
				return exitOK
			case "cancel":
				if err := a.f.Queue(queue).Cancel(ctx, id); err != nil {
					return a.fail(err)
				}
				a.emit(map[string]string{"canceled": id}, func(w *tabwriter.Writer) { fmt.Fprintf(w, "canceled %s\n", id) })
				return exitOK
			}
			return a.usageErr("task", "expected get <queue> <id> or cancel <queue> <id>")
		},
	})
}
