package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"
)

// runInfo is what the report says about the run itself.
type runInfo struct {
	args              string
	started           time.Time
	took              time.Duration
	loadPre, loadPost string
	loads             []string // at the start of each round
	version           string
	procs             int
}

// summary is one window's progress line.
func (r winResult) summary() string {
	cpu, cmds := r.perTask()
	s := fmt.Sprintf("%9.0f/s  %6.1f µs/task  %5.2f cmds/task  redis %3.0f%%", r.rate(), cpu, cmds, 100*r.cpuShare())
	if r.offered != 0 {
		s = fmt.Sprintf("p50 %9s p99 %9s  %6.1f µs/task  %5.2f cmds/task  redis %3.0f%%  (offered %.0f/s)",
			fmtLat(r.p50), fmtLat(r.p99), cpu, cmds, 100*r.cpuShare(), r.offered)
	}
	if r.capped {
		s += fmt.Sprintf("  CAPPED %d/%d", r.tasks, r.want)
	}
	if r.doubles+r.redelivered > 0 || r.errs > 0 {
		s += fmt.Sprintf("  doubles %d redelivered %d errors %d %v", r.doubles, r.redelivered, r.errs, r.firsts)
	}
	return s
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func fmtRate(r float64) string {
	switch {
	case math.IsNaN(r):
		return ""
	case r >= 10000:
		return fmt.Sprintf("%.1fk/s", r/1000)
	case r >= 1000:
		return fmt.Sprintf("%.2fk/s", r/1000)
	}
	return fmt.Sprintf("%.0f/s", r)
}

func fmtLat(d time.Duration) string {
	switch {
	case d < 0:
		return "never"
	case d < time.Millisecond:
		return fmt.Sprintf("%d µs", d.Microseconds())
	case d < 10*time.Millisecond:
		return fmt.Sprintf("%.2f ms", float64(d)/1e6)
	case d < time.Second:
		return fmt.Sprintf("%.0f ms", float64(d)/1e6)
	}
	return fmt.Sprintf("%.2f s", d.Seconds())
}

// ratio is a ratio taken in each round.
type ratio []float64

func (r ratio) String() string {
	if len(r) == 0 {
		return ""
	}
	lo, hi := slices.Min(r), slices.Max(r)
	if len(r) == 1 {
		return fmt.Sprintf("%.2f", r[0])
	}
	return fmt.Sprintf("**%.2f** (%.2f–%.2f)", median(r), lo, hi)
}

// table holds the results by measure and system, and computes the ratios.
type table struct {
	o       options
	systems []system
	shapes  []shape
	res     map[string]map[string][]winResult
}

func (t table) has(key string) bool {
	return slices.ContainsFunc(t.systems, func(s system) bool { return s.key == key })
}

// rates returns a system's rate on a measure in each round.
func (t table) rates(sh, sys string) []float64 {
	var out []float64
	for _, w := range t.res[sh][sys] {
		out = append(out, w.rate())
	}
	return out
}

// over returns a's rate over b's in each round where both ran.
func (t table) over(sh, a, b string) ratio {
	ra, rb := t.rates(sh, a), t.rates(sh, b)
	var out ratio
	for i := range min(len(ra), len(rb)) {
		out = append(out, ra[i]/rb[i])
	}
	return out
}

// fastestPeer returns, per round, fleet's rate over the fastest peer
// setting's (of family, or of all peers when family is ""), and the
// settings that were fastest.
func (t table) fastestPeer(sh, sys, family string) (ratio, []string) {
	mine := t.rates(sh, sys)
	var out ratio
	var who []string
	for i := range mine {
		best, name := 0.0, ""
		for _, s := range t.systems {
			if s.family == "" || (family != "" && s.family != family) {
				continue
			}
			r := t.rates(sh, s.key)
			if i < len(r) && r[i] > best {
				best, name = r[i], s.title
			}
		}
		if best > 0 {
			out = append(out, mine[i]/best)
			if !slices.Contains(who, name) {
				who = append(who, name)
			}
		}
	}
	return out, who
}

// cpuOver returns a's Redis CPU per task over b's in each round.
func (t table) cpuOver(sh, a, b string) ratio {
	wa, wb := t.res[sh][a], t.res[sh][b]
	var out ratio
	for i := range min(len(wa), len(wb)) {
		ca, _ := wa[i].perTask()
		cb, _ := wb[i].perTask()
		out = append(out, ca/cb)
	}
	return out
}

func report(w io.Writer, o options, info runInfo, systems []system, shapes []shape, res map[string]map[string][]winResult) {
	t := table{o: o, systems: systems, shapes: shapes, res: res}
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }

	p("`%s`\n\n", strings.TrimSpace("cd bench && GOWORK=off go run ./cmd/queues "+info.args))
	mode := "each window in a process of its own (-procs each)"
	if o.procs == "one" {
		mode = "every system in this one process (-procs one)"
	}
	p("redis-server %s on loopback, started by the program; GOMAXPROCS %d; %s; %d rounds, -n %d, -c %d; %s, took %s.  \n",
		info.version, info.procs, mode, o.rounds, o.n, o.c, info.started.Format("2006-01-02 15:04 MST"), info.took.Round(time.Second))
	p("Load average (1, 5, 15 min): %s before, %s after; at each round's start: %s.\n\n", info.loadPre, info.loadPost, strings.Join(info.loads, "; "))

	var thr []shape
	var idle []shape
	for _, sh := range shapes {
		if sh.kind == shIdle {
			idle = append(idle, sh)
		} else {
			thr = append(thr, sh)
		}
	}

	// Throughput: medians, then the ratios.
	capped := false
	if len(thr) > 0 {
		p("Tasks per second, medians over the rounds; ratios: median (min–max) of the ratios taken in each round.\n\n")
		p("| measure |")
		for _, s := range systems {
			p(" %s |", s.title)
		}
		p(" fleet ÷ fastest peer | fleet ÷ floor | fleet raw ÷ floor |\n|---|")
		for range systems {
			p("---|")
		}
		p("---|---|---|\n")
		for _, sh := range thr {
			p("| %s |", sh.title)
			for _, s := range systems {
				ws := res[sh.key][s.key]
				if len(ws) == 0 {
					if sh.kind == shSubmit && s.sharesOf != "" {
						p(" = %s |", s.sharesOf)
					} else {
						p(" |")
					}
					continue
				}
				mark := capMark(ws)
				capped = capped || mark != ""
				p(" %s%s |", fmtRate(median(t.rates(sh.key, s.key))), mark)
			}
			fp, who := t.fastestPeer(sh.key, "fleet", "")
			cell := fp.String()
			if len(who) > 0 {
				cell += " vs " + strings.Join(who, ", ")
			}
			raw := ""
			if sh.kind != shSubmit {
				raw = t.over(sh.key, "fleet-raw", "floor").String()
			}
			p(" %s | %s | %s |\n", cell, t.over(sh.key, "fleet", "floor"), raw)
		}
		p("\n")
		if capped {
			p("\\* at least one round's window hit -cap (%s) before every task was done: the rate is what was done by then.\n\n", o.cap)
		}
	}

	// Idle pickup.
	if len(idle) > 0 {
		p("Idle pickup: tasks submitted one per call at a fixed rate into an idle consumer of %d handlers, for %s after %s idle; from the submit call to the handler's start, medians over the rounds of each round's p50 and p99; commands per task over the window (the idle polling in it included).\n\n", o.c, o.idleFor, o.settle)
		p("| idle pickup |")
		for _, s := range systems {
			p(" %s |", s.title)
		}
		p("\n|---|")
		for range systems {
			p("---|")
		}
		p("\n")
		for _, sh := range idle {
			for _, row := range []string{"p50 / p99", "commands per task"} {
				p("| %d/s %s |", sh.rate, row)
				for _, s := range systems {
					ws := res[sh.key][s.key]
					if len(ws) == 0 {
						p(" |")
						continue
					}
					var p50, p99, cmds []float64
					for _, w := range ws {
						p50 = append(p50, latVal(w.p50))
						p99 = append(p99, latVal(w.p99))
						_, c := w.perTask()
						cmds = append(cmds, c)
					}
					if row == "p50 / p99" {
						p(" %s / %s%s |", fmtLat(latDur(median(p50))), fmtLat(latDur(median(p99))), capMark(ws))
					} else {
						p(" %.1f%s |", median(cmds), capMark(ws))
					}
				}
				p("\n")
			}
		}
		p("\n\"never\": more than that share of the tasks was not picked up within -cap (%s) of the last submit (such a window is marked *).\n\n", o.cap)
	}

	// The server's side.
	p("Redis per task, medians over the rounds: CPU µs (used_cpu_user+used_cpu_sys) · commands · the server's share of one core over the window.\n\n")
	p("| Redis per task |")
	for _, s := range systems {
		p(" %s |", s.title)
	}
	p("\n|---|")
	for range systems {
		p("---|")
	}
	p("\n")
	for _, sh := range shapes {
		p("| %s |", sh.key)
		for _, s := range systems {
			ws := res[sh.key][s.key]
			if len(ws) == 0 {
				p(" |")
				continue
			}
			var cpu, cmds, share []float64
			for _, w := range ws {
				c, n := w.perTask()
				cpu, cmds, share = append(cpu, c), append(cmds, n), append(share, w.cpuShare())
			}
			p(" %.1f µs · %.2f · %.0f%%%s |", median(cpu), median(cmds), 100*median(share), capMark(ws))
		}
		p("\n")
	}
	p("\n\\* a window cut short at -cap: every command and CPU µs of the window over the tasks done by then (the submits of those left over included).\n\n")

	t.goals(p)

	// Anything odd.
	var odd []string
	for _, sh := range shapes {
		for _, s := range systems {
			for i, w := range res[sh.key][s.key] {
				lost := w.want - w.tasks
				if sh.kind == shSubmit {
					lost = 0
				}
				if w.capped || lost > 0 || w.doubles > 0 || w.redelivered > 0 || w.errs > 0 {
					odd = append(odd, fmt.Sprintf("- %s, %s, round %d: %d of %d done%s; doubles %d, redelivered %d, errors %d %v",
						s.key, sh.key, i+1, w.tasks, w.want, map[bool]string{true: " (capped)", false: ""}[w.capped], w.doubles, w.redelivered, w.errs, w.firsts))
				}
			}
		}
	}
	if len(odd) > 0 {
		p("Windows short of their tasks, or with doubles, redeliveries or errors:\n\n%s\n\n", strings.Join(odd, "\n"))
	} else {
		p("Every task of every window ended exactly once, with no error.\n\n")
	}

	if o.breakdown {
		p("Commands per task by command, over all rounds:\n\n")
		for _, sh := range shapes {
			for _, s := range systems {
				ws := res[sh.key][s.key]
				if len(ws) == 0 {
					continue
				}
				var sum cost
				var tasks int64
				for _, w := range ws {
					sum = sum.add(w.cost)
					tasks += w.tasks
				}
				p("- %s, %s: %s\n", sh.key, s.key, sum.breakdown(tasks))
			}
		}
		p("\n")
	}
}

// capMark is "*" when a round's window was cut short at -cap.
func capMark(ws []winResult) string {
	if slices.ContainsFunc(ws, func(w winResult) bool { return w.capped }) {
		return "*"
	}
	return ""
}

// latVal turns a latency into a float for medians: never is +Inf.
func latVal(d time.Duration) float64 {
	if d < 0 {
		return math.Inf(1)
	}
	return float64(d)
}

func latDur(v float64) time.Duration {
	if math.IsInf(v, 1) {
		return -1
	}
	return time.Duration(v)
}

// goals checks issue #22's goals on the medians of the per-round ratios.
func (t table) goals(p func(string, ...any)) {
	type goal struct {
		what   string
		r      ratio
		target float64
		atMost bool
	}
	var gs []goal
	ok := func(keys ...string) bool {
		for _, k := range keys {
			if !t.has(k) {
				return false
			}
		}
		return true
	}
	hasPeer := slices.ContainsFunc(t.systems, func(s system) bool { return s.family != "" })
	for _, sh := range []string{"drain", "cycle"} {
		if _, in := t.res[sh]; !in || !t.has("fleet") {
			continue
		}
		if hasPeer {
			r, _ := t.fastestPeer(sh, "fleet", "")
			gs = append(gs, goal{sh + ": fleet ÷ fastest peer setting", r, 2, false})
		}
		for _, fam := range []struct{ name, dflt string }{{"asynq", "asynq"}, {"gocraft", "gocraft-readme"}} {
			target := 2.0
			if fam.name == "asynq" {
				target = 5
			}
			if ok(fam.dflt) {
				gs = append(gs, goal{sh + ": fleet ÷ " + fam.dflt, t.over(sh, "fleet", fam.dflt), target, false})
			}
			if slices.ContainsFunc(t.systems, func(s system) bool { return s.family == fam.name && s.key != fam.dflt }) {
				r, _ := t.fastestPeer(sh, "fleet", fam.name)
				gs = append(gs, goal{sh + ": fleet ÷ " + fam.name + " at its fastest setting", r, target, false})
			}
		}
		if ok("floor") {
			gs = append(gs, goal{sh + ": fleet ÷ floor", t.over(sh, "fleet", "floor"), 0.8, false})
		}
	}
	if _, in := t.res["drain"]; in && ok("fleet-raw", "floor") {
		gs = append(gs, goal{"drain: fleet raw Reserve(1)/Ack ÷ floor", t.over("drain", "fleet-raw", "floor"), 0.6, false})
	}
	if _, in := t.res["drain"]; in && ok("fleet-raw", "safe") {
		gs = append(gs, goal{"drain: fleet raw Redis CPU per task ÷ safe floor's", t.cpuOver("drain", "fleet-raw", "safe"), 1.5, true})
	}
	var lines []string
	for _, g := range gs {
		if len(g.r) == 0 {
			continue
		}
		m := median(g.r)
		pass := m >= g.target
		cmp := "≥"
		if g.atMost {
			pass, cmp = m <= g.target, "≤"
		}
		lines = append(lines, fmt.Sprintf("| %s %s %.1f | %s | %s |", g.what, cmp, g.target, g.r, map[bool]string{true: "met", false: "**not met**"}[pass]))
	}
	if t.has("fleet") {
		for _, sh := range t.shapes {
			ws := t.res[sh.key]["fleet"]
			if sh.kind != shIdle || len(ws) == 0 {
				continue
			}
			var p99, cmds ratio
			for _, w := range ws {
				p99 = append(p99, latVal(w.p99)/1e6)
				_, c := w.perTask()
				cmds = append(cmds, c)
			}
			m := median(p99)
			lines = append(lines, fmt.Sprintf("| idle pickup at %d/s: fleet p99 < 1 ms | %s ms | %s |", sh.rate, p99, map[bool]string{true: "met", false: "**not met**"}[m < 1]))
			if sh.rate == 500 {
				lines = append(lines, fmt.Sprintf("| idle pickup at 500/s: fleet commands per task ≤ 15 | %s | %s |", cmds, map[bool]string{true: "met", false: "**not met**"}[median(cmds) <= 15]))
			}
		}
	}
	if len(lines) == 0 {
		return
	}
	p("Issue #22's goals, on the median of the per-round figures:\n\n| goal | median (min–max) | |\n|---|---|---|\n%s\n\n", strings.Join(lines, "\n"))
}
