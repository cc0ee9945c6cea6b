package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/fleet-go/fleet"
)

func init() {
	var cursor string
	var limit int
	register(&command{
		name:    "task",
		args:    "get <queue> <task id> | cancel <queue> <task id> | signal <queue> <task id> <name> <JSON value> | find <queue> <key>=<value>",
		summary: "show a task's state (waiting, pending, scheduled, active with its progress, done, dead, canceled), cancel it, send it a signal (fleet.WaitSignal), or find tasks by an indexed metadata key (QueueOptions.IndexMeta)",
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&cursor, "cursor", "", "find: the cursor a previous page printed (next)")
			fs.IntVar(&limit, "limit", 0, "find: show at most this many tasks (0: fleet.DefaultFindLimit)")
		},
		run: func(ctx context.Context, a *app, args []string) int {
			if len(args) == 5 && args[0] == "signal" {
				queue, id, name, value := args[1], args[2], args[3], args[4]
				if !json.Valid([]byte(value)) {
					return a.usageErr("task", "signal's value must be JSON (a string is quoted: '\"yes\"')")
				}
				if err := a.f.Queue(queue).Signal(ctx, id, name, json.RawMessage(value)); err != nil {
					return a.fail(err)
				}
				a.emit(map[string]string{"signaled": id, "signal": name}, func(w *tabwriter.Writer) { fmt.Fprintf(w, "signaled %s %s\n", id, shownText(name)) })
				return exitOK
			}
			if len(args) != 3 {
				return a.usageErr("task", "needs an action (get, cancel, signal, find), a queue and a task id (signal: and a name and a JSON value; find: <key>=<value>)")
			}
			action, queue, id := args[0], args[1], args[2]
			switch action {
			case "find":
				key, value, ok := strings.Cut(id, "=")
				if !ok {
					return a.usageErr("task", "find needs <key>=<value>")
				}
				page, next, err := a.f.Queue(queue).FindByMeta(ctx, key, value, cursor, limit)
				if err != nil {
					return a.fail(err)
				}
				out := struct {
					Tasks []fleet.TaskRecord `json:"tasks"`
					Next  string             `json:"next"`
				}{Tasks: page, Next: next}
				if out.Tasks == nil {
					out.Tasks = []fleet.TaskRecord{}
				}
				a.emit(out, func(w *tabwriter.Writer) {
					fmt.Fprintln(w, "ID\tSTATUS\tATTEMPTS\tSUBMITTED\tLAST ERROR")
					for _, r := range page {
						sub := ""
						if !r.SubmittedAt.IsZero() {
							sub = ts(r.SubmittedAt)
						}
						fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s\n", r.ID, r.Status, r.Attempts, sub, r.LastError)
					}
					if next != "" {
						fmt.Fprintf(w, "next page: --cursor %s\n", next)
					}
				})
				return exitOK
			case "get":
				r, err := a.f.Queue(queue).Lookup(ctx, id)
				if err != nil {
					return a.fail(err)
				}
				a.emit(r, func(w *tabwriter.Writer) {
					fmt.Fprintf(w, "id\t%s\nstatus\t%s\nattempts\t%d\n", r.ID, r.Status, r.Attempts)
					if r.CancelRequested {
						fmt.Fprintf(w, "cancel\trequested, not yet acted on by its worker\n")
					}
					prio := ""
					if r.Priority > 0 {
						prio = strconv.Itoa(r.Priority)
					}
					for _, kv := range [][2]string{{"group", r.Group}, {"priority", prio}, {"worker", r.Worker}, {"progress", shownJSON(r.Progress)},
						{"dedup key", r.DedupKey}, {"debounce", debounceText(r)},
						{"flow", r.Flow}, {"last error", r.LastError}, {"payload", shownJSON(r.Payload)}, {"result", shownJSON(r.Result)}} {
						if kv[1] != "" {
							fmt.Fprintf(w, "%s\t%s\n", kv[0], kv[1])
						}
					}
					for _, d := range r.Dependencies {
						fmt.Fprintf(w, "waits for\t%s %s (%s, policy %s)\n", d.Queue, d.ID, d.Status, d.Policy)
					}
					for _, k := range slices.Sorted(maps.Keys(r.Metadata)) {
						fmt.Fprintf(w, "meta %s\t%s\n", k, r.Metadata[k])
					}
					for _, st := range r.Steps {
						printStep(w, st)
					}
					for _, l := range r.Logs {
						printLog(w, l)
					}
					for _, kv := range []struct {
						k string
						v time.Time
					}{{"submitted", r.SubmittedAt}, {"ready at", r.ReadyAt}, {"deadline", r.Deadline}, {"done at", r.DoneAt}, {"dead at", r.DeadAt}, {"expires at", r.ExpiresAt}} {
						if !kv.v.IsZero() {
							fmt.Fprintf(w, "%s\t%s\n", kv.k, ts(kv.v))
						}
					}
				})
				return exitOK
			case "cancel":
				if err := a.f.Queue(queue).Cancel(ctx, id); err != nil {
					return a.fail(err)
				}
				a.emit(map[string]string{"canceled": id}, func(w *tabwriter.Writer) { fmt.Fprintf(w, "canceled %s\n", id) })
				return exitOK
			}
			return a.usageErr("task", "expected get <queue> <id>, cancel <queue> <id>, signal <queue> <id> <name> <JSON value> or find <queue> <key>=<value>")
		},
	})
}

// printStep writes one recorded step of a durable task (fleet.Step,
// fleet.Sleep) as a row: its place, name, state, runs and duration, and
// its error, result or wake time, quoted where it holds a control
// character.
func printStep(w io.Writer, s fleet.StepRecord) {
	row := fmt.Sprintf("step %d\t%s %s", s.Index, shownText(s.Name), s.State)
	switch s.State {
	case fleet.StepSleep:
		row += " until " + ts(s.Wake)
	case fleet.StepWaiting:
		row += " until " + ts(s.Wake) + " (its timeout)"
	case fleet.StepSignaled:
		row += " at " + ts(s.At)
	case fleet.StepTimedOut:
		row += " at " + ts(s.Wake)
	default:
		row += fmt.Sprintf(", %d run(s), %v", s.Attempts, s.Duration)
	}
	if s.Error != "" {
		row += ": " + shownText(s.Error)
	}
	if len(s.Result) > 0 {
		row += " -> " + shownJSON(s.Result)
	}
	fmt.Fprintln(w, row)
}

// printLog writes one run's log (fleet.TaskLog) as a header row and one
// row per line, each message and attribute quoted where it holds a
// control character, so that a line cannot forge rows or drive the
// terminal.
func printLog(w io.Writer, l fleet.TaskLog) {
	if l.Sealed != "" {
		fmt.Fprintf(w, "log\tsealed (key %s; --keys opens it)\n", l.Sealed)
		return
	}
	head := fmt.Sprintf("attempt %d", l.Attempt)
	if l.Worker != "" {
		head += ", " + shownText(l.Worker)
	}
	if !l.At.IsZero() {
		head += ", ended " + ts(l.At)
	}
	if l.Dropped > 0 {
		head += fmt.Sprintf(", %d lines dropped", l.Dropped)
	}
	fmt.Fprintf(w, "log\t%s\n", head)
	for _, ln := range l.Lines {
		line := ln.Time.UTC().Format("15:04:05.000") + " " + shownText(ln.Level) + " " + shownText(ln.Message)
		for _, k := range slices.Sorted(maps.Keys(ln.Attrs)) {
			line += " " + shownText(k) + "=" + shownText(string(ln.Attrs[k]))
		}
		fmt.Fprintf(w, "\t%s\n", line)
	}
}

// shownText is s as a terminal may show it: quoted (Go syntax) when it
// holds a control character or invalid UTF-8, else as it is.
func shownText(s string) string {
	if !utf8.ValidString(s) || strings.IndexFunc(s, unicode.IsControl) >= 0 {
		return strconv.Quote(s)
	}
	return s
}

// debounceText spells the debounce a waiting task was submitted with
// (TaskRecord.Debounce), "" for none: its window, and the latest it starts
// (its first submit plus the max wait).
func debounceText(r fleet.TaskRecord) string {
	if r.Debounce == nil {
		return ""
	}
	return fmt.Sprintf("window %v, starts by %s at the latest (max wait %v)", r.Debounce.Window, ts(r.DebounceUntil), r.Debounce.MaxWait)
}
