package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"text/tabwriter"

	"github.com/fleet-go/fleet"
)

// migrate copies the fleet at --url (the source) into --to (the target).
func init() {
	var to, toPrefix, toLayout string
	var dry, restart, skipVerify bool
	var batch, listed int
	register(&command{
		name:    "migrate",
		summary: "copy every fleet key from this fleet (the source) to another (--to), e.g. a compat single node into a tagged cluster",
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&to, "to", "", "Redis URL of the target (required)")
			fs.StringVar(&toPrefix, "to-prefix", "", "key prefix on the target (defaults to none)")
			fs.StringVar(&toLayout, "to-layout", "", "key layout on the target: compat or tagged (defaults to compat on a single node, tagged on a cluster)")
			fs.BoolVar(&dry, "dry-run", false, "list what would be copied; write nothing")
			fs.BoolVar(&restart, "restart", false, "ignore the target's record of an interrupted migration and start over")
			fs.BoolVar(&skipVerify, "skip-verify", false, "skip the count check at the end")
			fs.IntVar(&batch, "batch", 0, "keys per SCAN batch (defaults to 1000)")
			fs.IntVar(&listed, "list", 0, "most unknown keys to list (defaults to 1000)")
		},
		run: func(ctx context.Context, a *app, args []string) int {
			if len(args) > 0 {
				return a.usageErr("migrate", "takes no arguments")
			}
			if to == "" {
				return a.usageErr("migrate", "--to is required")
			}
			target, err := fleet.Open(ctx, fleet.Options{URL: to, Prefix: toPrefix, Layout: fleet.Layout(toLayout)})
			if err != nil {
				return a.fail(err)
			}
			defer target.Close()
			opts := fleet.MigrateOptions{DryRun: dry, Restart: restart, SkipVerify: skipVerify, Batch: batch, Listed: listed}
			b := a.newBar("migrate")
			if b != nil {
				opts.Progress = func(p fleet.MigrateProgress) {
					b.set(fmt.Sprintf("migrate: %d copied, %d skipped", p.Copied, p.Skipped), int64(p.Scanned), int64(p.Total))
				}
			}
			r, err := fleet.Migrate(ctx, a.f, target, opts)
			b.done()
			if err != nil && !errors.Is(err, fleet.ErrMigrateMismatch) {
				return a.fail(err)
			}
			a.emit(r, func(w *tabwriter.Writer) {
				for _, s := range r.Plan {
					fmt.Fprintf(w, "%s\t->\t%s\t(%s, %s, ttl %v)\n", s.Source, s.Target, s.Family, s.Type, s.TTL)
				}
				if len(r.Families) > 0 {
					fmt.Fprintln(w, "FAMILY\tSOURCE KEYS\tTARGET KEYS\tSOURCE ELEMENTS\tTARGET ELEMENTS")
					for _, fam := range r.Families {
						fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\n", fam.Family, fam.SourceKeys, fam.TargetKeys, fam.SourceElements, fam.TargetElements)
					}
				}
				for _, k := range r.UnknownKeys {
					fmt.Fprintf(w, "unknown key (skipped)\t%s\n", k)
				}
				fmt.Fprintf(w, "scanned %d, copied %d, skipped %d, vanished %d, dry run %v, resumed %v, verified %v, in %v\n",
					r.Scanned, r.Copied, r.Skipped, r.Vanished, r.DryRun, r.Resumed, r.Verified, r.Elapsed.Round(1e6))
			})
			if err != nil {
				fmt.Fprintln(a.err, "fleetctl:", err)
				return exitProblems
			}
			return exitOK
		},
	})
}
