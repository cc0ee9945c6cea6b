package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
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
		name:    "policy",
		args:    "<queue>",
		summary: "show the policy stored for a queue, which every process applies: attempts, retry backoff, dead letters, concurrency caps, group limits, indexed metadata",
		run: func(ctx context.Context, a *app, args []string) int {
			if len(args) != 1 {
				return a.usageErr("policy", "takes one queue name")
			}
			p, ok, err := a.f.Queue(args[0]).Policy(ctx)
			if err != nil {
				return a.fail(err)
			}
			if !ok {
				return a.notFound(fmt.Errorf("no policy is stored for queue %s (none until a handle of it first reached Redis)", args[0]))
			}
			a.emit(p, func(w *tabwriter.Writer) {
				backoff := p.RetryBackoff().String()
				if p.Backoff == "" {
					backoff += " (the default: a lease that ran out goes back at once)"
				}
				rows := [][2]string{
					{"max attempts", strconv.Itoa(p.MaxAttempts)},
					{"backoff", backoff},
					{"dead letters", fmt.Sprintf("at most %d, kept %v", p.DeadMax, time.Duration(p.DeadMaxAgeMS)*time.Millisecond)},
				}
				if p.GlobalConcurrency > 0 {
					rows = append(rows, [2]string{"global concurrency", strconv.Itoa(p.GlobalConcurrency)})
				}
				if p.GroupConcurrency > 0 {
					rows = append(rows, [2]string{"group concurrency", strconv.Itoa(p.GroupConcurrency)})
				}
				if p.GroupRate > 0 {
					rows = append(rows, [2]string{"group rate", fmt.Sprintf("%d/%v burst %d", p.GroupRate, time.Duration(p.GroupPerMS)*time.Millisecond, p.GroupBurst)})
				}
				if len(p.IndexMeta) > 0 {
					rows = append(rows, [2]string{"indexed metadata", strings.Join(p.IndexMeta, ", ")})
				}
				for _, r := range rows {
					fmt.Fprintf(w, "%s\t%s\n", r[0], r[1])
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
