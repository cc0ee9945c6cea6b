package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/fleet-go/fleet"
)

// configArg reads a JSON argument: literal text, @file, or - for stdin.
func (a *app) configArg(s string) (json.RawMessage, error) {
	var b []byte
	var err error
	switch {
	case s == "-":
		b, err = io.ReadAll(a.in)
	case strings.HasPrefix(s, "@"):
		b, err = os.ReadFile(s[1:])
	default:
		b = []byte(s)
	}
	if err != nil {
		return nil, err
	}
	if !json.Valid(b) {
		return nil, fmt.Errorf("%w: %q is not JSON", fleet.ErrInvalidArgument, strings.TrimSpace(string(b)))
	}
	return b, nil
}

func init() {
	register(&command{
		name:    "config",
		args:    "get <type> <id> | set <type> <id> <json> | patch <type> <id> <json>   (json: text, @file or -)",
		summary: "read a worker's config, replace it, or merge a JSON patch into it (RFC 7386); set and patch raise its gen",
		run: func(ctx context.Context, a *app, args []string) int {
			if len(args) < 3 {
				return a.usageErr("config", "needs an action (get, set, patch), a type and a worker id")
			}
			action, typ, id := args[0], args[1], args[2]
			type out struct {
				Type   string          `json:"type"`
				ID     string          `json:"id"`
				Gen    int64           `json:"gen"`
				Config json.RawMessage `json:"config,omitempty"`
			}
			show := func(o out) int {
				a.emit(o, func(w *tabwriter.Writer) {
					fmt.Fprintf(w, "gen\t%d\n", o.Gen)
					if o.Config != nil {
						fmt.Fprintf(w, "config\t%s\n", o.Config)
					}
				})
				return exitOK
			}
			switch {
			case action == "get" && len(args) == 3:
				cfg, gen, err := a.f.WorkerConfig(ctx, typ, id)
				if err != nil {
					return a.fail(err)
				}
				if cfg == nil && gen == 0 {
					return a.notFound(fmt.Errorf("worker %s of type %s has no config", id, typ))
				}
				return show(out{typ, id, gen, cfg})
			case action == "patch" && len(args) == 4:
				patch, err := a.configArg(args[3])
				if err != nil {
					return a.fail(err)
				}
				gen, err := a.f.UpdateConfig(ctx, typ, id, patch)
				if err != nil {
					return a.fail(err)
				}
				return show(out{Type: typ, ID: id, Gen: gen})
			case action == "set" && len(args) == 4:
				cfg, err := a.configArg(args[3])
				if err != nil {
					return a.fail(err)
				}
				for {
					_, gen, err := a.f.WorkerConfig(ctx, typ, id)
					if err != nil {
						return a.fail(err)
					}
					err = a.f.PushConfig(ctx, typ, id, cfg, gen+1)
					if errors.Is(err, fleet.ErrStaleGen) {
						continue // another change came in between: read again
					}
					if err != nil {
						return a.fail(err)
					}
					return show(out{Type: typ, ID: id, Gen: gen + 1})
				}
			}
			return a.usageErr("config", "expected get <type> <id>, set <type> <id> <json>, or patch <type> <id> <json>")
		},
	})
}
