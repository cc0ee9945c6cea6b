package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

// snapshot is the server's counters at one moment: the calls of each
// command so far (INFO commandstats, which counts the commands a Lua
// script runs as well as the EVALSHA that ran it) and its CPU time
// (used_cpu_user + used_cpu_sys, every thread).
type snapshot struct {
	calls map[string]int64
	cpu   time.Duration
}

// cost is what the server did between two snapshots, the meter's own INFO
// calls left out.
type cost struct {
	calls map[string]int64
	cpu   time.Duration
}

// readSnapshot takes one snapshot with a single INFO call on c.
func readSnapshot(ctx context.Context, c rueidis.Client) (snapshot, error) {
	s, err := c.Do(ctx, c.B().Info().Section("commandstats", "cpu").Build()).ToString()
	if err != nil {
		return snapshot{}, fmt.Errorf("INFO: %w", err)
	}
	return parseInfo(s)
}

// parseInfo reads a snapshot out of the text of INFO commandstats cpu.
func parseInfo(info string) (snapshot, error) {
	snap := snapshot{calls: make(map[string]int64)}
	var cpu float64
	seen := 0
	for line := range strings.SplitSeq(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		switch {
		case strings.HasPrefix(name, "cmdstat_"):
			for kv := range strings.SplitSeq(rest, ",") {
				k, v, _ := strings.Cut(kv, "=")
				if k == "calls" {
					n, err := strconv.ParseInt(v, 10, 64)
					if err != nil {
						return snapshot{}, fmt.Errorf("INFO %q: %w", line, err)
					}
					snap.calls[strings.TrimPrefix(name, "cmdstat_")] = n
				}
			}
		case name == "used_cpu_user", name == "used_cpu_sys":
			v, err := strconv.ParseFloat(rest, 64)
			if err != nil {
				return snapshot{}, fmt.Errorf("INFO %q: %w", line, err)
			}
			cpu += v
			seen++
		}
	}
	if seen != 2 {
		return snapshot{}, errors.New("INFO has no used_cpu_user/used_cpu_sys")
	}
	snap.cpu = time.Duration(cpu * float64(time.Second))
	return snap, nil
}

// since returns the cost from prev to s.
func (s snapshot) since(prev snapshot) cost {
	c := cost{calls: make(map[string]int64), cpu: s.cpu - prev.cpu}
	for name, n := range s.calls {
		if name == "info" {
			continue
		}
		if d := n - prev.calls[name]; d != 0 {
			c.calls[name] = d
		}
	}
	return c
}

// commands is the sum of every command's calls.
func (c cost) commands() int64 {
	var n int64
	for _, v := range c.calls {
		n += v
	}
	return n
}

// add returns the cost of both stretches of work.
func (c cost) add(d cost) cost {
	sum := cost{calls: make(map[string]int64), cpu: c.cpu + d.cpu}
	for k, v := range c.calls {
		sum.calls[k] += v
	}
	for k, v := range d.calls {
		sum.calls[k] += v
	}
	return sum
}

// breakdown lists the calls of each command per task, most first,
// leaving out those under 0.01 per task.
func (c cost) breakdown(tasks int64) string {
	if tasks <= 0 {
		return ""
	}
	names := make([]string, 0, len(c.calls))
	for k := range c.calls {
		names = append(names, k)
	}
	slices.SortFunc(names, func(a, b string) int {
		if c.calls[a] != c.calls[b] {
			if c.calls[a] > c.calls[b] {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	var sb strings.Builder
	for _, k := range names {
		per := float64(c.calls[k]) / float64(tasks)
		if per < 0.01 {
			continue
		}
		if sb.Len() > 0 {
			sb.WriteByte(' ')
		}
		fmt.Fprintf(&sb, "%s=%.2f", k, per)
	}
	return sb.String()
}
