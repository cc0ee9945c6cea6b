package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/fleet-go/fleet"
)

func init() {
	register(&command{
		name:    "queues",
		args:    "[queue]",
		summary: "count the tasks of every registered queue (or of one): pending, in flight, scheduled, dead; whether it is paused; how long its next task has waited",
		run: func(ctx context.Context, a *app, args []string) int {
			var qs []fleet.QueueCounts
			switch len(args) {
			case 0:
				ov, err := a.f.Overview(ctx)
				if err != nil {
					return a.fail(err)
				}
				qs = ov.Queues
			case 1:
				st, err := a.f.Queue(args[0]).Stats(ctx)
				if err != nil {
					return a.fail(err)
				}
				if st.Pending+st.InFlight+st.Scheduled+st.Dead == 0 && !st.Paused {
					// Empty: known only if registered.
					ov, err := a.f.Overview(ctx)
					if err != nil {
						return a.fail(err)
					}
					if !slices.ContainsFunc(ov.Queues, func(q fleet.QueueCounts) bool { return q.Name == args[0] }) {
						return a.notFound(fmt.Errorf("no queue %s is registered, and it holds no task", args[0]))
					}
				}
				qs = []fleet.QueueCounts{{Name: args[0], QueueStats: st}}
			default:
				return a.usageErr("queues", "takes at most one queue name")
			}
			a.emit(qs, func(w *tabwriter.Writer) {
				fmt.Fprintln(w, "QUEUE\tPENDING\tIN FLIGHT\tSCHEDULED\tDEAD\tPAUSED\tLATENCY")
				for _, q := range qs {
					fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\t%v\t%v\n", q.Name, q.Pending, q.InFlight, q.Scheduled, q.Dead, q.Paused, q.Latency.Round(time.Millisecond))
				}
			})
			return exitOK
		},
	})
	register(&command{
		name:    "groups",
		args:    "<queue>",
		summary: "list a queue's groups: pending, running, limits (own or the queue's), state, latency",
		run: func(ctx context.Context, a *app, args []string) int {
			if len(args) != 1 {
				return a.usageErr("groups", "takes one queue name")
			}
			gs, err := a.f.Queue(args[0]).Groups(ctx)
			if err != nil {
				return a.fail(err)
			}
			a.emit(gs, func(w *tabwriter.Writer) {
				fmt.Fprintln(w, "GROUP\tPENDING\tRUNNING\tCONCURRENCY\tRATE\tOWN\tSTATE\tLATENCY")
				for _, g := range gs {
					conc, rate := "-", "-"
					if g.Limits.Concurrency > 0 {
						conc = strconv.Itoa(g.Limits.Concurrency)
					}
					if r := g.Limits.Rate; r.Rate > 0 {
						rate = fmt.Sprintf("%d/%v burst %d", r.Rate, r.Per, r.Burst)
					}
					fmt.Fprintf(w, "%s\t%d\t%d\t%s\t%s\t%v\t%s\t%v\n", g.Name, g.Pending, g.Running, conc, rate, g.Own, g.State, g.Latency.Round(time.Millisecond))
				}
			})
			return exitOK
		},
	})
	register(&command{
		name:    "pools",
		summary: "count the items and claimed items of every registered pool",
		run: func(ctx context.Context, a *app, args []string) int {
			if len(args) > 0 {
				return a.usageErr("pools", "takes no arguments")
			}
			ov, err := a.f.Overview(ctx)
			if err != nil {
				return a.fail(err)
			}
			a.emit(ov.Pools, func(w *tabwriter.Writer) {
				fmt.Fprintln(w, "POOL\tITEMS\tCLAIMED")
				for _, p := range ov.Pools {
					fmt.Fprintf(w, "%s\t%d\t%d\n", p.Name, p.Items, p.Claimed)
				}
			})
			return exitOK
		},
	})
}
