package main

import (
	"context"
	"flag"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/fleet-go/fleet"
)

func init() {
	var typ string
	var active, stale time.Duration
	register(&command{
		name:    "workers",
		summary: "list workers with state, last seen, last error and config gen",
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&typ, "type", "", "only workers of this automation type")
			fs.DurationVar(&active, "active", 0, "only workers seen within this long (e.g. 1m)")
			fs.DurationVar(&stale, "exited-after", 3*fleet.DefaultHeartbeat, "call a worker exited when it was last seen longer ago than this")
		},
		run: func(ctx context.Context, a *app, args []string) int {
			if len(args) > 0 {
				return a.usageErr("workers", "takes no arguments")
			}
			ws, err := a.f.Workers(ctx, fleet.WorkersFilter{Type: typ, ActiveWithin: active})
			if err != nil {
				return a.fail(err)
			}
			// An exited worker keeps its last state (often IDLE): only
			// last_seen tells it from an idle one.
			type row struct {
				fleet.WorkerInfo
				Exited bool `json:"exited"`
			}
			rows := []row{}
			now := time.Now()
			for _, x := range ws {
				rows = append(rows, row{x, x.LastSeen.IsZero() || now.Sub(x.LastSeen) > stale})
			}
			a.emit(rows, func(w *tabwriter.Writer) {
				fmt.Fprintln(w, "TYPE\tID\tSTATE\tLAST SEEN\tGEN\tAPPLIED\tCHUNK\tLAST ERROR")
				for _, x := range rows {
					state := string(x.State)
					if x.Exited {
						state = "EXITED (" + state + ")"
					}
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\n", x.Type, x.ID, state, ts(x.LastSeen), x.Gen, x.AppliedGen, chunkText(x.Chunk), x.LastError)
				}
			})
			return exitOK
		},
	})
}

// chunkText spells a chunk worker's ChunkOptions (WorkerInfo.Chunk) as
// "<min>-<max> wait <max wait>", "-" for any other worker.
func chunkText(c *fleet.ChunkOptions) string {
	if c == nil {
		return "-"
	}
	return fmt.Sprintf("%d-%d wait %v", c.MinSize, c.MaxSize, c.MaxWait)
}
