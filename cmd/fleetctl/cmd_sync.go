package main

import (
	"context"
	"fmt"
	"text/tabwriter"

	"github.com/fleet-go/fleet"
)

func init() {
	register(&command{
		name:    "sync",
		summary: "rebuild every derived key (indexes, registries, leases, dedup) from the documented keys",
		run: func(ctx context.Context, a *app, args []string) int {
			if len(args) > 0 {
				return a.usageErr("sync", "takes no arguments")
			}
			var opts fleet.SyncOptions
			if b := a.newBar("sync"); b != nil {
				opts.Progress = func(p fleet.SyncProgress) { b.set("sync: "+string(p.Stage), int64(p.Done), int64(p.Total)) }
				defer b.done()
			}
			r, err := a.f.SyncWith(ctx, opts)
			if err != nil {
				return a.fail(err)
			}
			a.emit(r, func(w *tabwriter.Writer) {
				fmt.Fprintln(w, "KIND\tCOUNT")
				for _, row := range []struct {
					k string
					n int
				}{
					{"queues", r.Queues}, {"pools", r.Pools}, {"worker types", r.WorkerTypes}, {"workers", r.Workers},
					{"queues registered", r.QueuesRegistered}, {"pools registered", r.PoolsRegistered},
					{"workers indexed", r.WorkersIndexed}, {"workers unindexed", r.WorkersUnindexed},
					{"leases removed", r.LeasesRemoved}, {"leases missing (left to the sweeper)", r.LeasesMissing},
					{"dedup added", r.DedupAdded}, {"dedup removed", r.DedupRemoved}, {"dedup fixed", r.DedupFixed},
					{"pool items indexed", r.PoolIndexed}, {"pool entries unindexed", r.PoolUnindexed},
					{"pool items expired", r.PoolExpired}, {"pool entries not valid items", r.PoolBad},
				} {
					fmt.Fprintf(w, "%s\t%d\n", row.k, row.n)
				}
				if r.MarkerWritten {
					fmt.Fprintln(w, "layout marker\twritten")
				}
				for _, k := range r.Skipped {
					fmt.Fprintf(w, "skipped key\t%s\n", k)
				}
				fmt.Fprintf(w, "fixed\t%d\n", r.Fixed())
			})
			return exitOK
		},
	})
}
