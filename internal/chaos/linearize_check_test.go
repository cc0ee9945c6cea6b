package chaos

// The models and checks of TestLinearizable, and the proof that they fail
// on the histories they exist to catch.

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

func toPorcupine(ops []linOp) []porcupine.Operation {
	out := make([]porcupine.Operation, len(ops))
	for i, op := range ops {
		out[i] = porcupine.Operation{ClientId: op.client, Input: op, Call: op.call, Output: op, Return: op.ret}
	}
	return out
}

// checkPorcupine checks a history against m, writing porcupine's HTML of
// a failing one into dir (a new temporary directory, kept, when dir is
// ""), and says where.
func checkPorcupine(t *testing.T, report func(string, ...any), name string, m porcupine.Model, ops []porcupine.Operation, dir string) {
	t.Helper()
	res, info := porcupine.CheckOperationsVerbose(m, ops, 5*time.Minute)
	switch res {
	case porcupine.Ok:
		t.Logf("%s: %d operations, linearizable", name, len(ops))
	case porcupine.Unknown:
		report("%s: porcupine gave up on %d operations (timed out)", name, len(ops))
	default:
		if dir == "" {
			var err error
			if dir, err = os.MkdirTemp("", "fleet-porcupine-"); err != nil {
				t.Logf("%s: no directory for the visualisation: %v", name, err)
			}
		}
		path := filepath.Join(dir, "porcupine-"+name+".html")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Logf("%s: no directory for the visualisation: %v", name, err)
		}
		if err := porcupine.VisualizePath(m, info, path); err != nil {
			t.Logf("%s: cannot write the visualisation: %v", name, err)
		}
		report("%s: the history of %d operations is NOT linearizable; see %s", name, len(ops), path)
	}
}

// register is a KV key's state: its value, or absent.
type register struct {
	val string
	ok  bool
}

var kvModel = porcupine.Model{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		by := map[int][]porcupine.Operation{}
		for _, op := range h {
			k := op.Input.(linOp).key
			by[k] = append(by[k], op)
		}
		out := make([][]porcupine.Operation, 0, len(by))
		for _, ops := range by {
			out = append(out, ops)
		}
		return out
	},
	Init: func() any { return register{} },
	Step: func(state, input, _ any) (bool, any) {
		s, op := state.(register), input.(linOp)
		switch op.kind {
		case "set":
			return true, register{val: op.arg, ok: true}
		case "del":
			return true, register{}
		}
		return op.ok == s.ok && op.out == s.val, s
	},
	DescribeOperation: func(input, _ any) string {
		op := input.(linOp)
		switch op.kind {
		case "set":
			return fmt.Sprintf("set(k%d, %s)", op.key, op.arg)
		case "del":
			return fmt.Sprintf("del(k%d)", op.key)
		}
		if !op.ok {
			return fmt.Sprintf("get(k%d) -> absent", op.key)
		}
		return fmt.Sprintf("get(k%d) -> %s", op.key, op.out)
	},
	DescribeState: func(state any) string {
		if s := state.(register); s.ok {
			return s.val
		}
		return "absent"
	},
}

// counterState is the counter's value, and how many increments of unknown
// outcome it has taken so far.
type counterState struct{ val, unknowns int64 }

// counterModel checks Incr and Get. An increment of unknown outcome may
// take effect at any time after its invocation, or never: rather than as
// operations that never return (which porcupine would have to place in
// every order, exponential in their number), they are counted in each
// known operation's budget, the unknown increments invoked before it
// returned (resolveUnknown). A known operation may find the counter
// higher than its state by up to the unused budget: those increments took
// effect just before it.
var counterModel = porcupine.Model{
	Init: func() any { return counterState{} },
	Step: func(state, input, _ any) (bool, any) {
		s, op := state.(counterState), input.(linOp)
		out, err := strconv.ParseInt(op.out, 10, 64)
		if err != nil {
			return false, s
		}
		seen := out // the value the op saw before its own increment
		if op.kind == "incr" {
			seen--
		}
		jump := seen - s.val
		if jump < 0 || s.unknowns+jump > op.budget {
			return false, s
		}
		return true, counterState{val: out, unknowns: s.unknowns + jump}
	},
	DescribeOperation: func(input, _ any) string {
		op := input.(linOp)
		return fmt.Sprintf("%s -> %s (unknown incrs before: %d)", op.kind, op.out, op.budget)
	},
	DescribeState: func(state any) string {
		s := state.(counterState)
		return fmt.Sprintf("%d (%d unknown incrs in it)", s.val, s.unknowns)
	},
}

// resolveUnknown drops the increments of unknown outcome from a counter
// history, and gives each remaining operation its budget: how many of
// them were invoked before it returned.
func resolveUnknown(ops []linOp) []linOp {
	var calls []int64
	var known []linOp
	for _, op := range ops {
		if op.ret == never {
			calls = append(calls, op.call)
		} else {
			known = append(known, op)
		}
	}
	slices.Sort(calls)
	for i := range known {
		n, _ := slices.BinarySearch(calls, known[i].ret)
		known[i].budget = int64(n)
	}
	return known
}

// stepBacks returns the counter operations that found the counter lower
// than a known operation (with incrs, an acknowledged increment) that
// ended before they began: a witness, with no search, that the history
// is not linearizable (the counter only grows), for when porcupine gives
// up or to say why it failed. Below an acknowledged increment, that
// increment was lost; below only what a read found, the read saw a write
// that was then lost.
func stepBacks(ops []linOp, incrs bool) []string {
	var known, before []linOp
	for _, op := range ops {
		if op.ret != never {
			known = append(known, op)
			if !incrs || op.kind == "incr" {
				before = append(before, op)
			}
		}
	}
	seen := func(op linOp) int64 { // the value before the op's own increment
		v, _ := strconv.ParseInt(op.out, 10, 64)
		if op.kind == "incr" {
			v--
		}
		return v
	}
	byRet := before
	slices.SortFunc(byRet, func(a, b linOp) int { return cmpInt(a.ret, b.ret) })
	most := make([]int64, len(byRet)) // most[i]: the highest value found by byRet[:i+1]
	for i, op := range byRet {
		v, _ := strconv.ParseInt(op.out, 10, 64)
		most[i] = v
		if i > 0 {
			most[i] = max(most[i], most[i-1])
		}
	}
	var bad []string
	for _, op := range known {
		n, _ := slices.BinarySearchFunc(byRet, op.call, func(x linOp, t int64) int { return cmpInt(x.ret, t) })
		if n > 0 && seen(op) < most[n-1] {
			bad = append(bad, fmt.Sprintf("client %d's %s at %v found %d, after %d was found", op.client, op.kind, time.Duration(op.call), seen(op), most[n-1]))
		}
	}
	return bad
}

// staleReads returns the cached reads that fail bounded staleness against
// the writes: a read of value v fails when every write of v (a delete, or
// the start, for absent) was overwritten, by a write of another value
// begun after it ended, more than bound before the read began; or when no
// write of v began before the read ended. Set values are unique, so a
// value other than absent has one write; absent has the start and every
// delete. It runs in O(n log n): each write's overwrite time (the earliest
// end of a known write of another value begun after it ended) comes from
// suffix minima over the writes sorted by their call.
func staleReads(writes, reads []linOp, bound int64) []string {
	type w struct {
		call, ret   int64
		val         register
		overwritten int64 // the earliest end of a write of another value begun after this one ended
	}
	byKey := map[int][]*w{}
	for _, op := range writes {
		switch op.kind {
		case "set":
			byKey[op.key] = append(byKey[op.key], &w{call: op.call, ret: op.ret, val: register{op.arg, true}})
		case "del":
			byKey[op.key] = append(byKey[op.key], &w{call: op.call, ret: op.ret, val: register{}})
		}
	}
	type index struct {
		sets    map[string]*w
		absent  []*w    // the start and the deletes, by call
		bestAbs []int64 // bestAbs[i]: the latest overwrite of absent[:i+1]
	}
	idx := map[int]*index{}
	for k := range linKeys {
		ws := byKey[k]
		slices.SortFunc(ws, func(a, b *w) int { return cmpInt(a.call, b.call) })
		// Suffix minima of the known writes' ends: of all, and of the sets.
		minAll, minSet := make([]int64, len(ws)+1), make([]int64, len(ws)+1)
		minAll[len(ws)], minSet[len(ws)] = never, never
		for i := len(ws) - 1; i >= 0; i-- {
			minAll[i], minSet[i] = minAll[i+1], minSet[i+1]
			if ws[i].ret != never {
				minAll[i] = min(minAll[i], ws[i].ret)
				if ws[i].val.ok {
					minSet[i] = min(minSet[i], ws[i].ret)
				}
			}
		}
		after := func(t int64, suffix []int64) int64 { // the earliest known end of a write called after t
			i, _ := slices.BinarySearchFunc(ws, t+1, func(x *w, t int64) int { return cmpInt(x.call, t) })
			return suffix[i]
		}
		ix := &index{sets: map[string]*w{}}
		ix.absent = append(ix.absent, &w{call: -1, ret: -1, overwritten: after(-1, minSet)})
		for _, x := range ws {
			if x.ret == never {
				x.overwritten = never // it may take effect at any time: never certainly overwritten
			} else if x.val.ok {
				x.overwritten = after(x.ret, minAll)
			} else {
				x.overwritten = after(x.ret, minSet)
			}
			if x.val.ok {
				ix.sets[x.val.val] = x
			} else {
				ix.absent = append(ix.absent, x)
			}
		}
		best := int64(-1 << 62)
		for _, x := range ix.absent {
			best = max(best, x.overwritten)
			ix.bestAbs = append(ix.bestAbs, best)
		}
		idx[k] = ix
	}
	var bad []string
	for _, r := range reads {
		ix := idx[r.key]
		possible := false
		if r.ok {
			if c := ix.sets[r.out]; c != nil && c.call <= r.ret {
				possible = c.overwritten >= r.call-bound
			}
		} else {
			// The deletes called before the read ended: is any not certainly
			// overwritten before r.call-bound?
			n, _ := slices.BinarySearchFunc(ix.absent, r.ret+1, func(x *w, t int64) int { return cmpInt(x.call, t) })
			possible = n > 0 && ix.bestAbs[n-1] >= r.call-bound
		}
		if !possible {
			bad = append(bad, fmt.Sprintf("client %d read k%d = %v at %v", r.client, r.key, register{r.out, r.ok}, time.Duration(r.call)))
		}
	}
	return bad
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// checkHolds checks that no hold was recorded past its lease's deadline
// (its holder could not prove it then), that at most limit holds overlap
// at any instant, and, with fences, that each grant's fence is greater
// than every grant's that ended before it began.
func checkHolds(hs []hold, limit int, fences bool) error {
	for _, h := range hs {
		if h.deadline != 0 && h.end > h.deadline {
			return fmt.Errorf("client %d's hold (fence %d) recorded to %v, past its deadline %v", h.client, h.fence, time.Duration(h.end), time.Duration(h.deadline))
		}
	}
	type edge struct {
		at int64
		d  int
	}
	var edges []edge
	for _, h := range hs {
		if h.end > h.ret {
			edges = append(edges, edge{h.ret, 1}, edge{h.end, -1})
		}
	}
	slices.SortFunc(edges, func(a, b edge) int {
		if a.at != b.at {
			return int(min(max(a.at-b.at, -1), 1))
		}
		return a.d - b.d // an end before a start at the same instant
	})
	n := 0
	for _, e := range edges {
		if n += e.d; n > limit {
			return fmt.Errorf("%d holds at %v, over the limit %d", n, time.Duration(e.at), limit)
		}
	}
	if fences {
		for _, a := range hs {
			for _, b := range hs {
				if a.ret < b.call && b.fence <= a.fence {
					return fmt.Errorf("fence %d granted at %v after fence %d granted at %v", b.fence, time.Duration(b.ret), a.fence, time.Duration(a.ret))
				}
			}
		}
	}
	return nil
}

// limitWindow is the tightest window of a limiter history: the most
// tokens certainly used within it, its length, and what the limit allows
// there (burst + length/iv).
type limitWindow struct {
	tokens     int64
	from, to   int64 // ns of the run
	allowed    float64
	excessIVns int64 // tokens*iv - length - burst*iv: > slack is a violation
}

func (w limitWindow) String() string {
	return fmt.Sprintf("%d tokens within [%v, %v] (%v), where the limit allows %.2f",
		w.tokens, time.Duration(w.from), time.Duration(w.to), time.Duration(w.to-w.from), w.allowed)
}

// limitSlack is what the server's clock may add to a window: TIME (inside
// the script) counts whole µs, so two instants truncated to µs may lie up
// to 1 µs further apart than they were.
const limitSlack = int64(time.Microsecond)

// checkLimiter checks a Limiter history (ops of kind "allow" or "wait",
// tokens n, out "admitted" or "denied", ret never when the outcome is
// unknown) against the limit: in every window of length w on the server's
// clock, at most burst + w/iv tokens are used. It returns the tightest
// window, and an error for a window over the limit.
//
// Only local times are known: the API returns no server time. The bound
// still holds on them: an admitted call's tokens were taken, by the script
// on the server, at an instant between the call's invocation and its
// response (for Wait, they are used when due, which is after the script
// ran and no later than Wait's return: Wait sleeps the server's wait from
// the reply's arrival), and the server's clock is this machine's wall
// clock, the one the times are read from. So every admitted call whose
// interval lies within [a, b] used its tokens within [a, b], and those
// tokens may not pass burst + (b-a)/iv (+ limitSlack). The check takes,
// for every a (an invocation) and b (a response), the calls within [a, b]:
// a history fails only when the limit was certainly passed. A call of
// unknown outcome (its reply lost, its ctx ended) may have taken its
// tokens or not: it is counted as possibly admitted, so it never fails the
// check by itself (it is not among the calls certainly in any window),
// and a denial says nothing here either.
//
// It runs in O(n log n): the invocations are swept from the latest down,
// and a segment tree over the responses holds, for every b,
// tokens(a, b)*iv - b, taking a range add for each call swept in.
func checkLimiter(ops []linOp, iv time.Duration, burst int) (limitWindow, error) {
	var adm []linOp
	for _, op := range ops {
		if op.ret != never && op.out == "admitted" {
			adm = append(adm, op)
		}
	}
	if len(adm) == 0 {
		return limitWindow{}, nil
	}
	rets := make([]int64, len(adm))
	for i, op := range adm {
		rets[i] = op.ret
	}
	slices.Sort(rets)
	tr := newMaxTree(len(rets), func(i int) int64 { return -rets[i] })
	slices.SortFunc(adm, func(a, b linOp) int { return cmpInt(b.call, a.call) })
	ivn, burstNs := int64(iv), int64(burst)*int64(iv)
	best := limitWindow{excessIVns: -1 << 62}
	for _, op := range adm {
		from, _ := slices.BinarySearch(rets, op.ret)
		tr.add(from, len(rets)-1, int64(op.tokens)*ivn)
		a := op.call
		lo, _ := slices.BinarySearch(rets, a)
		if lo == len(rets) {
			continue
		}
		g, at := tr.max(lo, len(rets)-1)
		if ex := g + a - burstNs; ex > best.excessIVns {
			b := rets[at]
			best = limitWindow{tokens: (g + b) / ivn, from: a, to: b, allowed: float64(burst) + float64(b-a)/float64(ivn), excessIVns: ex}
		}
	}
	if best.excessIVns > limitSlack {
		return best, fmt.Errorf("over the limit (rate 1/%v, burst %d): %v", iv, burst, best)
	}
	return best, nil
}

// maxTree is a segment tree of int64 with range add and range max (with
// the position of the max).
type maxTree struct {
	n      int
	mx, lz []int64
	at     []int
}

func newMaxTree(n int, init func(int) int64) *maxTree {
	t := &maxTree{n: n, mx: make([]int64, 4*n), lz: make([]int64, 4*n), at: make([]int, 4*n)}
	var build func(node, l, r int)
	build = func(node, l, r int) {
		if l == r {
			t.mx[node], t.at[node] = init(l), l
			return
		}
		m := (l + r) / 2
		build(2*node, l, m)
		build(2*node+1, m+1, r)
		t.pull(node)
	}
	build(1, 0, n-1)
	return t
}

func (t *maxTree) pull(node int) {
	l, r := 2*node, 2*node+1
	if t.mx[r] > t.mx[l] {
		t.mx[node], t.at[node] = t.mx[r], t.at[r]
	} else {
		t.mx[node], t.at[node] = t.mx[l], t.at[l]
	}
	t.mx[node] += t.lz[node]
}

// add adds v to positions [ql, qr].
func (t *maxTree) add(ql, qr int, v int64) {
	var rec func(node, l, r int)
	rec = func(node, l, r int) {
		if qr < l || r < ql {
			return
		}
		if ql <= l && r <= qr {
			t.mx[node] += v
			t.lz[node] += v
			return
		}
		m := (l + r) / 2
		rec(2*node, l, m)
		rec(2*node+1, m+1, r)
		t.pull(node)
	}
	rec(1, 0, t.n-1)
}

// max returns the largest value in [ql, qr] and its position.
func (t *maxTree) max(ql, qr int) (int64, int) {
	var rec func(node, l, r int) (int64, int)
	rec = func(node, l, r int) (int64, int) {
		if ql <= l && r <= qr {
			return t.mx[node], t.at[node]
		}
		m := (l + r) / 2
		best, at := int64(-1<<62), -1
		if ql <= m {
			best, at = rec(2*node, l, m)
		}
		if qr > m {
			if v, p := rec(2*node+1, m+1, r); at < 0 || v > best {
				best, at = v, p
			}
		}
		return best + t.lz[node], at
	}
	return rec(1, 0, t.n-1)
}

// The checks fail on the histories they exist to catch.
func TestLinearizableCheckersCatch(t *testing.T) {
	ms := int64(time.Millisecond)
	// The witness of a cached read from before invalidations had a bound:
	// del acknowledged, and 42 µs later another client reads the value.
	writes := []linOp{
		{client: 0, kind: "set", key: 0, arg: "1", call: 0, ret: 1 * ms},
		{client: 0, kind: "del", key: 0, call: 2 * ms, ret: 3 * ms},
	}
	read := linOp{client: 1, kind: "get", key: 0, out: "1", ok: true, call: 3*ms + 42_000, ret: 4 * ms}
	if bad := staleReads(writes, []linOp{read}, 0); len(bad) != 1 {
		t.Errorf("a read 42µs after the delete with a bound of 0: %v, want it flagged", bad)
	}
	if bad := staleReads(writes, []linOp{read}, int64(linCacheTTL)); len(bad) != 0 {
		t.Errorf("a read 42µs after the delete within the bound: %v, want none flagged", bad)
	}
	late := read
	late.call, late.ret = 3*ms+int64(linCacheTTL)+1, 3*ms+int64(linCacheTTL)+2
	if bad := staleReads(writes, []linOp{late}, int64(linCacheTTL)); len(bad) != 1 {
		t.Errorf("a read past the bound: %v, want it flagged", bad)
	}
	unwritten := linOp{client: 1, kind: "get", key: 0, out: "9", ok: true, call: 5 * ms, ret: 6 * ms}
	if bad := staleReads(writes, []linOp{unwritten}, int64(linCacheTTL)); len(bad) != 1 {
		t.Errorf("a read of a value never written: %v, want it flagged", bad)
	}
	// A fresh read that misses an acknowledged write is not linearizable.
	kv := append(slices.Clone(writes), linOp{client: 1, kind: "get", key: 0, out: "1", ok: true, call: 4 * ms, ret: 5 * ms})
	if porcupine.CheckOperations(kvModel, toPorcupine(kv)) {
		t.Error("kv: a read of a deleted value after the delete passed")
	}
	if !porcupine.CheckOperations(kvModel, toPorcupine(writes)) {
		t.Error("kv: a plain set and delete failed")
	}
	// Two increments that both return 1, one after the other.
	ctr := []linOp{{kind: "incr", out: "1", call: 0, ret: 1}, {client: 1, kind: "incr", out: "1", call: 2, ret: 3}}
	if porcupine.CheckOperations(counterModel, toPorcupine(ctr)) {
		t.Error("counter: two increments to 1 passed")
	}
	// An increment of unknown outcome may apply later, or never.
	ctr[1].ret, ctr[1].out = never, ""
	applied := append(slices.Clone(ctr), linOp{kind: "get", out: "1", call: 4, ret: 5}, linOp{kind: "get", out: "2", call: 6, ret: 7})
	if !porcupine.CheckOperations(counterModel, toPorcupine(resolveUnknown(applied))) {
		t.Error("counter: an unknown increment applied late failed")
	}
	if !porcupine.CheckOperations(counterModel, toPorcupine(resolveUnknown(applied[:3]))) {
		t.Error("counter: an unknown increment never applied failed")
	}
	early := append(slices.Clone(ctr), linOp{kind: "get", out: "2", call: 1, ret: 1}) // before the unknown incr's call
	if porcupine.CheckOperations(counterModel, toPorcupine(resolveUnknown(early))) {
		t.Error("counter: a get that saw an increment not yet invoked passed")
	}
	if porcupine.CheckOperations(counterModel, toPorcupine(resolveUnknown(append(applied, linOp{kind: "get", out: "1", call: 8, ret: 9})))) {
		t.Error("counter: a get that went back passed")
	}
	if back := stepBacks(append(applied, linOp{kind: "get", out: "1", call: 8, ret: 9}), false); len(back) != 1 {
		t.Errorf("counter: a get that went back: step-backs %v, want it alone", back)
	}
	if back := stepBacks(append(applied, linOp{kind: "get", out: "1", call: 8, ret: 9}), true); len(back) != 0 {
		t.Errorf("counter: a get that went back below a get: step-backs below an increment %v, want none", back)
	}
	if back := stepBacks(append(applied, linOp{kind: "get", out: "0", call: 8, ret: 9}), true); len(back) != 1 {
		t.Errorf("counter: a get that went back below an acknowledged increment: %v, want it alone", back)
	}
	if back := stepBacks(applied, false); len(back) != 0 {
		t.Errorf("counter: step-backs %v in a good history", back)
	}
	// Overlapping holds, and a fence that goes back.
	if err := checkHolds([]hold{{ret: 0, end: 10, fence: 1}, {call: 5, ret: 6, end: 12, fence: 2}}, 1, true); err == nil {
		t.Error("lock: overlapping holds passed")
	}
	if err := checkHolds([]hold{{ret: 0, end: 10, fence: 2}, {call: 11, ret: 12, end: 14, fence: 1}}, 1, true); err == nil {
		t.Error("lock: a lower fence after a higher one passed")
	}
	if err := checkHolds([]hold{{ret: 0, end: 10}, {ret: 1, end: 10}, {ret: 2, end: 10}}, 2, false); err == nil {
		t.Error("semaphore: three holds of two passed")
	}
	if err := checkHolds([]hold{{ret: 0, end: 10, fence: 1}, {call: 10, ret: 11, end: 14, fence: 2}}, 1, true); err != nil {
		t.Errorf("lock: holds one after the other: %v", err)
	}
	// A holder stopped past its lease that records its hold to when it
	// woke (after the next holder's grant).
	if err := checkHolds([]hold{{ret: 0, end: 10, deadline: 10, fence: 1}, {call: 10, ret: 11, end: 14, deadline: 14, fence: 2}}, 1, true); err != nil {
		t.Errorf("lock: holds to their deadlines: %v", err)
	}
	if err := checkHolds([]hold{{ret: 0, end: 9, deadline: 8, fence: 1}, {call: 10, ret: 11, end: 14, deadline: 14, fence: 2}}, 1, true); err == nil {
		t.Error("lock: a hold recorded past its deadline passed")
	}
	// A client process's evidence: a set cut off by a kill is unknown, a
	// read cut off says nothing, a grant with no end held to its deadline,
	// and a holder that records its hold past the deadline is caught.
	const base = 1_000_000
	ev := filepath.Join(t.TempDir(), "lc1.0.log")
	if err := os.WriteFile(ev, []byte(`B 1 2
O 1 set 0 lc1.0.0 1000100
D 1 1000200 0 -
O 2 lock 0 - 1000300
L 2 1400300
D 2 1000400 1 7
H 2 1000500 0
O 3 set 1 lc1.0.1 1000600
O 4 get 2 - 1000600
O 5 lock 0 - 1500000
L 5 1900000
D 5 1500100 1 8
H 5 1900001 1
O 6 lock 0 - 2000000
L 6 2400000
D 6 2000100 1 9
`), 0o644); err != nil {
		t.Fatal(err)
	}
	var ch linChild
	if err := readLinClient(ev, 100, base, &ch); err != nil {
		t.Fatal(err)
	}
	wantKV := []linOp{{client: 100, kind: "set", key: 0, arg: "lc1.0.0", call: 100, ret: 200}, {client: 100, kind: "set", key: 1, arg: "lc1.0.1", call: 600, ret: never}}
	wantHolds := []hold{{client: 100, call: 300, ret: 400, end: 500, deadline: 400300, fence: 7},
		{client: 100, call: 500000, ret: 500100, end: 900001, deadline: 900000, fence: 8},
		{client: 100, call: 1000000, ret: 1000100, end: 1400000, deadline: 1400000, fence: 9}}
	if !slices.Equal(ch.kv, wantKV) || !slices.Equal(ch.holds, wantHolds) || ch.unknown != 2 || ch.lapsed != 1 {
		t.Errorf("client evidence read as kv %+v, holds %+v, unknown %d, lapsed %d; want kv %+v, holds %+v, unknown 2, lapsed 1",
			ch.kv, ch.holds, ch.unknown, ch.lapsed, wantKV, wantHolds)
	}
	if err := checkHolds(ch.holds, 1, true); err == nil {
		t.Error("lock: a client process's hold recorded past its deadline passed")
	}
	if err := checkHolds(append(ch.holds[:1:1], ch.holds[2]), 1, true); err != nil {
		t.Errorf("lock: a client process's holds: %v", err)
	}
	// A limiter of one token per 10 msd, burst 3.
	const iv, burst, msd = 10 * time.Millisecond, 3, time.Millisecond
	adm := func(call, ret time.Duration, n int) linOp {
		return linOp{kind: "allow", tokens: n, out: "admitted", call: int64(call), ret: int64(ret)}
	}
	ok := []linOp{adm(0, msd, 1), adm(0, msd, 2), adm(10*msd, 11*msd, 1), adm(20*msd, 21*msd, 1)}
	if _, err := checkLimiter(ok, iv, burst); err != nil {
		t.Errorf("limiter: a burst then one token per interval: %v", err)
	}
	over := append(slices.Clone(ok), adm(msd/2, msd/2+1, 1)) // a fourth token within the burst's millisecond
	if _, err := checkLimiter(over, iv, burst); err == nil {
		t.Error("limiter: burst+1 tokens within 1 msd passed")
	}
	// Over a long window: the burst at 0, then one token per interval for
	// 100 intervals is the most there may be; one more token among them
	// (each call 1 µs long) is one too many.
	long := []linOp{adm(0, time.Microsecond, burst)}
	for i := 1; i <= 100; i++ {
		at := time.Duration(i) * iv
		long = append(long, adm(at, at+time.Microsecond, 1))
	}
	if _, err := checkLimiter(long, iv, burst); err != nil {
		t.Errorf("limiter: a burst, then one token per interval for 100 intervals: %v", err)
	}
	long = append(long, adm(50*iv+msd/2, 50*iv+msd/2+time.Microsecond, 1))
	if _, err := checkLimiter(long, iv, burst); err == nil {
		t.Error("limiter: burst + 101 tokens in 100 intervals passed")
	}
	// Calls of unknown outcome, or denied, or whose intervals are too long
	// to place them in one window, never fail it.
	unk := slices.Clone(ok)
	for range 5 {
		x := adm(0, msd, 1)
		x.ret = never
		d := adm(0, msd, 1)
		d.out = "denied"
		unk = append(unk, x, d, adm(0, 10*time.Second, 1))
	}
	if _, err := checkLimiter(unk, iv, burst); err != nil {
		t.Errorf("limiter: unknown, denied and long calls beside a good history: %v", err)
	}
	// The sweep finds the tightest window that a look at every pair of an
	// invocation and a response finds.
	g := newRNG(1)
	for range 300 {
		var h []linOp
		for range 1 + g.intn(30) {
			call := g.between(0, 100*msd)
			h = append(h, adm(call, call+g.between(0, 20*msd), 1+g.intn(burst)))
		}
		w, _ := checkLimiter(h, iv, burst)
		worst := int64(-1 << 62)
		for _, a := range h {
			for _, b := range h {
				var n int64
				for _, x := range h {
					if x.call >= a.call && x.ret <= b.ret {
						n += int64(x.tokens)
					}
				}
				if b.ret >= a.call {
					worst = max(worst, n*int64(iv)-(b.ret-a.call)-burst*int64(iv))
				}
			}
		}
		if w.excessIVns != worst {
			t.Fatalf("limiter: the sweep found an excess of %d ns, the pairs %d, in %v", w.excessIVns, worst, h)
		}
	}
}
