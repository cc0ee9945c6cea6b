package main

import (
	"bufio"
	"context"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/fleet-go/fleet"
)

// confirm asks the operator to type yes before a destructive command,
// unless --yes was given. Without a terminal to ask, it refuses.
func (a *app) confirm(cmd, what string) (bool, int) {
	if a.yes {
		return true, exitOK
	}
	if !a.ttyIn {
		return false, a.usageErr(cmd, "%s: pass --yes to confirm (no terminal to ask on)", what)
	}
	fmt.Fprintf(a.err, "%s. Type yes to go on: ", what)
	line, _ := bufio.NewReader(a.in).ReadString('\n')
	if strings.TrimSpace(line) != "yes" {
		fmt.Fprintln(a.err, "fleetctl: not confirmed; nothing changed")
		return false, exitError
	}
	return true, exitOK
}

// report prints what a removal removed.
func (a *app) report(r fleet.RemoveReport) {
	a.emit(r, func(w *tabwriter.Writer) {
		fmt.Fprintln(w, "WORKERS\tITEMS\tKEYS\tENTRIES")
		fmt.Fprintf(w, "%d\t%d\t%d\t%d\n", r.Workers, r.Items, r.Keys, r.Entries)
	})
}

func init() {
	register(&command{
		name:    "remove-worker",
		args:    "<type> <id>",
		summary: "delete a worker's keys and index entries (stop it first)",
		run: func(ctx context.Context, a *app, args []string) int {
			if len(args) != 2 {
				return a.usageErr("remove-worker", "needs a type and a worker id")
			}
			ws, err := a.f.Workers(ctx, fleet.WorkersFilter{Type: args[0]})
			if err != nil {
				return a.fail(err)
			}
			found := false
			for _, w := range ws {
				found = found || w.ID == args[1]
			}
			if !found {
				return a.notFound(fmt.Errorf("no worker %s of type %s is indexed", args[1], args[0]))
			}
			if ok, code := a.confirm("remove-worker", fmt.Sprintf("This deletes every key of worker %s|%s", args[0], args[1])); !ok {
				return code
			}
			r, err := a.f.RemoveWorker(ctx, args[0], args[1])
			if err != nil {
				return a.fail(err)
			}
			a.report(r)
			return exitOK
		},
	})
	register(&command{
		name:    "remove-type",
		args:    "<type>",
		summary: "remove all state of an automation type: workers, stream, queue, catalog entry",
		run: func(ctx context.Context, a *app, args []string) int {
			if len(args) != 1 {
				return a.usageErr("remove-type", "needs a type")
			}
			if ok, code := a.confirm("remove-type", fmt.Sprintf("This deletes the workers, stream, queue and catalog entry of type %s", args[0])); !ok {
				return code
			}
			r, err := a.f.RemoveType(ctx, args[0])
			if err != nil {
				return a.fail(err)
			}
			a.report(r)
			return exitOK
		},
	})
	register(&command{
		name:    "remove-pool",
		args:    "<pool>",
		summary: "remove a pool: its items, claims and derived index keys",
		run: func(ctx context.Context, a *app, args []string) int {
			if len(args) != 1 {
				return a.usageErr("remove-pool", "needs a pool name")
			}
			ov, err := a.f.Overview(ctx)
			if err != nil {
				return a.fail(err)
			}
			found := false
			for _, p := range ov.Pools {
				found = found || p.Name == args[0]
			}
			if !found {
				return a.notFound(fmt.Errorf("no pool %s is registered", args[0]))
			}
			if ok, code := a.confirm("remove-pool", fmt.Sprintf("This deletes pool %s with its items and claims", args[0])); !ok {
				return code
			}
			r, err := a.f.RemovePool(ctx, args[0])
			if err != nil {
				return a.fail(err)
			}
			a.report(r)
			return exitOK
		},
	})
}
