package main

import (
	"context"
	"fmt"
	"slices"
	"text/tabwriter"
)

func init() {
	register(&command{
		name:    "catalog",
		args:    "[type]",
		summary: "list the published automation types, or print one type's schemas",
		run: func(ctx context.Context, a *app, args []string) int {
			switch len(args) {
			case 0:
				cat, err := a.f.Catalog(ctx)
				if err != nil {
					return a.fail(err)
				}
				types := make([]string, 0, len(cat))
				for t := range cat {
					types = append(types, t)
				}
				slices.Sort(types)
				a.emit(cat, func(w *tabwriter.Writer) {
					fmt.Fprintln(w, "TYPE\tTASKS")
					for _, t := range types {
						tasks := "no (loop)"
						if cat[t].TaskPayload != nil {
							tasks = "yes"
						}
						fmt.Fprintf(w, "%s\t%s\n", t, tasks)
					}
				})
				return exitOK
			case 1:
				s, ok, err := a.f.CatalogSchemas(ctx, args[0])
				if err != nil {
					return a.fail(err)
				}
				if !ok {
					fmt.Fprintf(a.err, "fleetctl catalog: type %q is not in the catalog\n", args[0])
					return exitNotFound
				}
				a.json = true // schemas are JSON either way
				a.emit(s, nil)
				return exitOK
			}
			return a.usageErr("catalog", "takes at most one type")
		},
	})
}
