// Package costmeter measures what a stretch of work cost a redis-server: the
// commands it ran, from INFO commandstats (which counts the commands a Lua
// script runs as well as the EVALSHA that ran it), and the CPU time it spent,
// from INFO cpu (used_cpu_user plus used_cpu_sys, every thread of the
// process). It is meant for benchmarks on a server of their own, where
// nothing else runs commands; the INFO calls it makes are left out of the
// counts.
//
// Monitor records the commands themselves, in order, through MONITOR, to show
// where the commands of one operation go.
package costmeter

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

// Snapshot is the server's counters at one moment.
type Snapshot struct {
	// Calls is the calls of each command so far, by commandstats name in
	// lower case ("get", "client|tracking").
	Calls map[string]int64
	// Failed is the failed and rejected calls of each command so far (an
	// error reply, a command refused), by the same names; 0 ones left out.
	Failed map[string]int64
	// CPU is used_cpu_user + used_cpu_sys so far.
	CPU time.Duration
}

// Read takes a snapshot with one INFO commandstats cpu call on c.
func Read(ctx context.Context, c rueidis.Client) (Snapshot, error) {
	s, err := c.Do(ctx, c.B().Info().Section("commandstats", "cpu").Build()).ToString()
	if err != nil {
		return Snapshot{}, fmt.Errorf("costmeter: INFO: %w", err)
	}
	return Parse(s)
}

// Parse reads a snapshot out of the text of INFO commandstats cpu.
func Parse(info string) (Snapshot, error) {
	snap := Snapshot{Calls: make(map[string]int64), Failed: make(map[string]int64)}
	var cpu float64
	seen := 0
	for line := range strings.SplitSeq(info, "\n") {
		line = strings.TrimSpace(line)
		name, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch {
		case strings.HasPrefix(name, "cmdstat_"):
			calls, ok := field(rest, "calls")
			if !ok {
				return Snapshot{}, fmt.Errorf("costmeter: no calls in %q", line)
			}
			cmd := strings.TrimPrefix(name, "cmdstat_")
			snap.Calls[cmd] = calls
			failed, _ := field(rest, "failed_calls")
			rejected, _ := field(rest, "rejected_calls")
			if failed+rejected > 0 {
				snap.Failed[cmd] = failed + rejected
			}
		case name == "used_cpu_user", name == "used_cpu_sys":
			v, err := strconv.ParseFloat(rest, 64)
			if err != nil {
				return Snapshot{}, fmt.Errorf("costmeter: %q: %w", line, err)
			}
			cpu += v
			seen++
		}
	}
	if seen != 2 {
		return Snapshot{}, errors.New("costmeter: INFO has no used_cpu_user/used_cpu_sys")
	}
	snap.CPU = time.Duration(cpu * float64(time.Second))
	return snap, nil
}

// field returns the integer value of key in "calls=12,usec=34,...".
func field(s, key string) (int64, bool) {
	for kv := range strings.SplitSeq(s, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if ok && k == key {
			n, err := strconv.ParseInt(v, 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// Cost is what the server did between two snapshots.
type Cost struct {
	// Calls is the calls of each command, INFO left out.
	Calls map[string]int64
	// CPU is the server's CPU time.
	CPU time.Duration
}

// Since returns the cost from prev to s.
func (s Snapshot) Since(prev Snapshot) Cost {
	c := Cost{Calls: make(map[string]int64), CPU: s.CPU - prev.CPU}
	for name, n := range s.Calls {
		if name == "info" {
			continue
		}
		if d := n - prev.Calls[name]; d != 0 {
			c.Calls[name] = d
		}
	}
	return c
}

// Add returns the sum of c and d: the cost of two stretches of work.
func (c Cost) Add(d Cost) Cost {
	sum := Cost{Calls: make(map[string]int64, len(c.Calls)+len(d.Calls)), CPU: c.CPU + d.CPU}
	for name, n := range c.Calls {
		sum.Calls[name] += n
	}
	for name, n := range d.Calls {
		sum.Calls[name] += n
	}
	return sum
}

// Commands returns the sum of the calls of every command: the EVALSHA of a
// script and each command the script ran count one each.
func (c Cost) Commands() int64 {
	var n int64
	for _, v := range c.Calls {
		n += v
	}
	return n
}

// scripts are the commands that run a script or a function.
var scripts = []string{"eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro"}

// Scripts returns how many scripts (EVAL, EVALSHA, FCALL and their _ro
// forms) ran.
func (c Cost) Scripts() int64 {
	var n int64
	for _, s := range scripts {
		n += c.Calls[s]
	}
	return n
}

// Breakdown lists the calls of each command divided by ops, most first:
// "evalsha=2.00 type=10.00 ...". Commands under 0.005 per op are left out.
func (c Cost) Breakdown(ops int) string {
	if ops <= 0 {
		ops = 1
	}
	names := make([]string, 0, len(c.Calls))
	for name := range c.Calls {
		names = append(names, name)
	}
	slices.SortFunc(names, func(a, b string) int {
		if d := c.Calls[b] - c.Calls[a]; d != 0 {
			if d > 0 {
				return 1
			}
			return -1
		}
		return strings.Compare(a, b)
	})
	var sb strings.Builder
	for _, name := range names {
		per := float64(c.Calls[name]) / float64(ops)
		if per < 0.005 {
			continue
		}
		if sb.Len() > 0 {
			sb.WriteByte(' ')
		}
		fmt.Fprintf(&sb, "%s=%.2f", name, per)
	}
	return sb.String()
}

// Meter measures one stretch of work: Start takes the first snapshot, Stop
// the second.
type Meter struct {
	c     rueidis.Client
	start Snapshot
}

// Start takes the snapshot the cost is counted from.
func Start(ctx context.Context, c rueidis.Client) (*Meter, error) {
	s, err := Read(ctx, c)
	if err != nil {
		return nil, err
	}
	return &Meter{c: c, start: s}, nil
}

// Stop returns the cost since Start.
func (m *Meter) Stop(ctx context.Context) (Cost, error) {
	s, err := Read(ctx, m.c)
	if err != nil {
		return Cost{}, err
	}
	return s.Since(m.start), nil
}

// Monitor records the commands a server runs, through MONITOR on a
// connection of its own. Its methods are not safe for concurrent use.
type Monitor struct {
	addr string
	conn net.Conn
	r    *bufio.Reader
}

// StartMonitor opens a connection to addr ("host:port", no auth) and turns
// MONITOR on.
func StartMonitor(ctx context.Context, addr string) (*Monitor, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("costmeter: monitor: %w", err)
	}
	m := &Monitor{addr: addr, conn: conn, r: bufio.NewReader(conn)}
	if err := m.deadline(ctx); err != nil {
		conn.Close()
		return nil, err
	}
	if _, err := conn.Write([]byte("MONITOR\r\n")); err != nil {
		conn.Close()
		return nil, fmt.Errorf("costmeter: monitor: %w", err)
	}
	line, err := m.r.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "+OK") {
		conn.Close()
		return nil, fmt.Errorf("costmeter: monitor: reply %q: %v", strings.TrimSpace(line), err)
	}
	return m, nil
}

func (m *Monitor) deadline(ctx context.Context) error {
	dl, ok := ctx.Deadline()
	if !ok {
		dl = time.Now().Add(30 * time.Second)
	}
	return m.conn.SetDeadline(dl)
}

// Collect returns the commands the server ran since StartMonitor or the last
// Collect, in order, as MONITOR prints them without the timestamp:
// `[0 127.0.0.1:50212] "EVALSHA" ...`, or `[0 lua] "TYPE" ...` for a command
// run by a script. It knows where to stop by sending an ECHO of a random
// mark from a connection of its own and reading up to it.
func (m *Monitor) Collect(ctx context.Context) ([]string, error) {
	if err := m.deadline(ctx); err != nil {
		return nil, err
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	mark := "costmeter-mark-" + hex.EncodeToString(b[:])
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", m.addr)
	if err != nil {
		return nil, fmt.Errorf("costmeter: monitor mark: %w", err)
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	if _, err := fmt.Fprintf(conn, "ECHO %s\r\n", mark); err != nil {
		return nil, fmt.Errorf("costmeter: monitor mark: %w", err)
	}
	if _, err := bufio.NewReader(conn).ReadString('\n'); err != nil {
		return nil, fmt.Errorf("costmeter: monitor mark: %w", err)
	}
	var lines []string
	for {
		line, err := m.r.ReadString('\n')
		if err != nil {
			return lines, fmt.Errorf("costmeter: monitor: %w", err)
		}
		line = strings.TrimSpace(strings.TrimPrefix(line, "+"))
		if strings.Contains(line, mark) {
			return lines, nil
		}
		if _, rest, ok := strings.Cut(line, " "); ok { // drop the timestamp
			line = rest
		}
		lines = append(lines, line)
	}
}

// Close ends the monitor's connection.
func (m *Monitor) Close() error { return m.conn.Close() }
