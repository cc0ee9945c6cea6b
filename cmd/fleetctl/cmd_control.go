package main

import (
	"context"
	"fmt"
	"text/tabwriter"

	"github.com/fleet-go/fleet"
)

func init() {
	for _, c := range []struct {
		name, summary string
		do            func(f *fleet.Fleet, ctx context.Context, name string) error
	}{
		{"pause", "pause a queue: workers reserve nothing from it, submits are still accepted", func(f *fleet.Fleet, ctx context.Context, name string) error { return f.Queue(name).Pause(ctx) }},
		{"resume", "resume a paused queue", func(f *fleet.Fleet, ctx context.Context, name string) error { return f.Queue(name).Resume(ctx) }},
	} {
		register(&command{
			name:    c.name,
			args:    "<queue>",
			summary: c.summary,
			run: func(ctx context.Context, a *app, args []string) int {
				if len(args) != 1 {
					return a.usageErr(c.name, "takes one queue name")
				}
				if err := c.do(a.f, ctx, args[0]); err != nil {
					return a.fail(err)
				}
				st, err := a.f.Queue(args[0]).Stats(ctx)
				if err != nil {
					return a.fail(err)
				}
				a.emit(map[string]any{"queue": args[0], "paused": st.Paused}, func(w *tabwriter.Writer) {
					fmt.Fprintf(w, "%s\tpaused=%v\n", args[0], st.Paused)
				})
				return exitOK
			},
		})
	}
	register(&command{
		name:    "schedules",
		summary: "list the periodic schedules: queue, spec, missed-tick policy, paused, last and next tick",
		run: func(ctx context.Context, a *app, args []string) int {
			if len(args) > 0 {
				return a.usageErr("schedules", "takes no arguments")
			}
			list, err := a.f.Schedules(ctx)
			if err != nil {
				return a.fail(err)
			}
			a.emit(list, func(w *tabwriter.Writer) {
				fmt.Fprintln(w, "SCHEDULE\tQUEUE\tSPEC\tMISSED\tPAUSED\tLAST\tNEXT")
				for _, s := range list {
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%v\t%s\t%s\n", s.Name, s.Queue, s.Spec, s.Missed, s.Paused, ts(s.Last), ts(s.Next))
				}
			})
			return exitOK
		},
	})
}
