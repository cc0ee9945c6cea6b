package main

import (
	"context"
	"fmt"
	"text/tabwriter"
)

func init() {
	register(&command{
		name:    "health",
		summary: "check every node for what would lose data or break fleet (exit 3 when problems are found)",
		run: func(ctx context.Context, a *app, args []string) int {
			if len(args) > 0 {
				return a.usageErr("health", "takes no arguments")
			}
			r, err := a.f.Health(ctx)
			if err != nil {
				return a.fail(err)
			}
			a.emit(r, func(w *tabwriter.Writer) {
				fmt.Fprintf(w, "layout\t%s\ncluster\t%v\nclient cache\t%v\noutside prefix\t%v\n\n", r.Layout, r.Cluster, r.Cache, r.OutsidePrefix)
				fmt.Fprintln(w, "NODE\tVERSION\tAOF\tMAXMEMORY POLICY\tKEYS")
				for _, n := range r.Nodes {
					fmt.Fprintf(w, "%s\t%s\t%v\t%s\t%d\n", n.Addr, n.Version, n.AOF, n.MaxmemoryPolicy, n.Keys)
				}
				if len(r.Problems) > 0 {
					fmt.Fprintln(w, "\nPROBLEM\tNODE\tMESSAGE")
					for _, p := range r.Problems {
						fmt.Fprintf(w, "%s\t%s\t%s\n", p.Code, p.Node, p.Message)
					}
				}
			})
			if !r.OK() {
				return exitProblems
			}
			return exitOK
		},
	})
}
