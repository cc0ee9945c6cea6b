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

// checkHolds checks that at most limit holds overlap at any instant, and,
// with fences, that each grant's fence is greater than every grant's that
// ended before it began.
func checkHolds(hs []hold, limit int, fences bool) error {
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
}
