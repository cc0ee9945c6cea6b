package main

// -procs each: every window runs in a process of its own, so that no
// system shares a heap, a scheduler or leftover goroutines with another.
// The parent starts this program again for each window, with the run's
// flags and -child; the child warms its one system up (uncounted),
// measures the one window, and writes its result as JSON on stdout.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"time"
)

// wireResult is winResult as a child writes it.
type wireResult struct {
	Tasks, Want          int64
	Wall                 time.Duration
	Calls                map[string]int64
	CPU                  time.Duration
	Capped               bool
	Doubles, Redelivered int64
	Errs                 int
	Firsts               []string
	P50, P99             time.Duration
	Offered              float64
}

func toWire(r winResult) wireResult {
	return wireResult{Tasks: r.tasks, Want: r.want, Wall: r.wall, Calls: r.cost.calls, CPU: r.cost.cpu, Capped: r.capped,
		Doubles: r.doubles, Redelivered: r.redelivered, Errs: r.errs, Firsts: r.firsts, P50: r.p50, P99: r.p99, Offered: r.offered}
}

func fromWire(w wireResult) winResult {
	return winResult{tasks: w.Tasks, want: w.Want, wall: w.Wall, cost: cost{calls: w.Calls, cpu: w.CPU}, capped: w.Capped,
		doubles: w.Doubles, redelivered: w.Redelivered, errs: w.Errs, firsts: w.Firsts, p50: w.P50, p99: w.P99, offered: w.Offered}
}

// childArgs are the flags of the child that measures system s on shape
// sh in round r: the parent's own, then the child's.
func childArgs(s system, sh shape, r int) []string {
	args := append([]string(nil), os.Args[1:]...)
	return append(args, "-child", s.key, "-child-shape", sh.key, "-child-round", strconv.Itoa(r))
}

// windowProc measures system s on shape sh in a process of its own.
func (b *bench) windowProc(ctx context.Context, s system, sh shape, r int) winResult {
	exe, err := os.Executable()
	if err != nil {
		fatalf("-procs each: %v", err)
	}
	cmd := exec.CommandContext(ctx, exe, childArgs(s, sh, r)...)
	cmd.Env = append(os.Environ(), "FLEET_REDIS_URL="+b.e.url)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, os.Stderr
	if err := cmd.Run(); err != nil {
		fatalf("%s %s round %d: child: %v", s.key, sh.key, r+1, err)
	}
	var w wireResult
	if err := json.Unmarshal(out.Bytes(), &w); err != nil {
		fatalf("%s %s round %d: child's result: %v: %q", s.key, sh.key, r+1, err, out.String())
	}
	return fromWire(w)
}

// runChild is the child's whole run: system key on shape shapeKey, warmed
// up first, its result on stdout.
func runChild(ctx context.Context, b *bench, o options, key, shapeKey string, round int) {
	var s *system
	for _, c := range pickSystems(o) {
		if c.key == key {
			s = &c
			break
		}
	}
	var sh *shape
	for _, c := range pickShapes(o) {
		if c.key == shapeKey {
			sh = &c
			break
		}
	}
	if s == nil || sh == nil {
		fatalf("-child %q -child-shape %q: not among -systems %q and -shapes %q", key, shapeKey, o.systems, o.shapes)
	}
	b.warm(ctx, *s)
	res := b.window(ctx, *s, *sh, round)
	if err := json.NewEncoder(os.Stdout).Encode(toWire(res)); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
