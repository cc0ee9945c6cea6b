package chaos

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// TestCounts checks the counting on made-up evidence: each violation the
// suite asserts on is found, and what is no violation is not counted.
func TestCounts(t *testing.T) {
	const s = 1_000_000 // µs in a second
	ev := newEvidence()
	lines := map[string][]string{
		"w1.0": {
			"B 0 100",
			// a: run 1..3 s, acked; w2 ran it 2..4 s and acked too.
			// Its step's fn ran and its record came back at 1.1 and 1.2 s; w2's
			// run ran the fn again at 2.1 s: a step re-run.
			"S w1.0.1 a 1 0 0 1000000 0 4000000 0", "P w1.0.1 a 1100000", "Q w1.0.1 a 1200000 1",
			"E w1.0.1 a 3000000 3000001 ok 4000000 0 0", "A a 3000002",
			// b: begun at 5 s, its lease ran out at 4.5 s.
			// Its step's record came back with another task's result.
			"S w1.0.2 b 2 0 1 5000000 0 4500000 0", "Q w1.0.2 b 5000100 99", "E w1.0.2 b 5100000 5100001 ok 4500000 600000 0", "A b 5100002",
			// g: run 10..14 s, but w1 was stopped from 10.5 to 13.9 s.
			"S w1.0.3 g 7 0 2 10000000 0 11000000 0", "E w1.0.3 g 14000000 14000001 ok 14500000 3000000 0", "F g 14000002 leaselost",
			"S w1.0.4 k 11 1 0 40000100 0 41000000 0 1", "E w1.0.4 k 40500000 40500001 ok 41000000 0 0", "A k 40500002",
			"X 50000000",
		},
		"w2.0": {
			"S w2.0.1 a 1 1 0 2000000 0 5000000 0", "P w2.0.1 a 2100000", "Q w2.0.1 a 2100100 1", "E w2.0.1 a 4000000 4000001 ok 5000000 0 0", "A a 4000002",
			// g again, 12..13 s: overlaps g's first run only while w1 was stopped.
			"S w2.0.2 g 7 1 0 12000000 0 14000000 0", "E w2.0.2 g 13000000 13000001 ok 14000000 0 0", "A g 13000002",
			// h: w3 died at 20 s mid-run; w2 ran it after.
			// Its step came back recorded (w3 ran it before it died): no fn.
			"S w2.0.3 h 8 1 0 22000000 0 24000000 0", "Q w2.0.3 h 22000100 8", "E w2.0.3 h 22500000 22500001 ok 24000000 0 0", "A h 22500002",
			// i: the ack's reply was lost (a cut): it may have acked.
			"S w2.0.4 i 9 0 2 30000000 0 31000000 0", "E w2.0.4 i 30100000 30100001 ok 31000000 0 0", "F i 30100002 fleet:_redis_unavailable",
			// j: the ack said the lease was lost, and no one ran it again: lost.
			"S w2.0.5 j 10 0 2 32000000 0 33000000 0", "E w2.0.5 j 32100000 32100001 ok 33000000 0 0", "F j 32100002 leaselost",
			// k: called after its lease with its ctx already ended (it did nothing); w1 ran it later.
			"S w2.0.6 k 11 0 2 40000000 0 39000000 0 0", "E w2.0.6 k 40000000 40000001 ctx:lost 39000000 0 0", "F k 40000002 ctx",
		},
		"w3.0": {
			// f: the handler ended well, then w3 was killed before the ack's outcome was written.
			"S w3.0.1 f 6 0 0 15000000 0 16000000 0", "E w3.0.1 f 15200000 15200001 ok 16000000 0 0",
			"S w3.0.2 h 8 0 1 19000000 0 21000000 0", "P w3.0.2 h 19100000", "Q w3.0.2 h 19200000 8",
			"bogus line",
		},
	}
	for proc, ls := range lines {
		for _, l := range ls {
			ev.add(proc, l)
		}
	}
	w := &world{
		submitted: map[string]int{"a": 1, "b": 2, "c": 3, "d": 4, "e": 5, "f": 6, "g": 7, "h": 8, "i": 9, "j": 10, "k": 11},
		deaths:    map[string]int64{"w3.0": 20 * s},
		dead:      map[string]bool{"d": true},
		left:      map[string]bool{"e": true},
		phases:    []phaseSpan{{name: "one", from: 0}, {name: "two", from: 9 * s}},
		faults: []faultEvent{
			{at: 10_500_000, kind: "stop", target: "w1", detail: "w1.0"},
			{at: 13_900_000, kind: "cont", target: "w1", detail: "w1.0"},
		},
		margin: 100 * time.Millisecond, lease: time.Second,
	}
	w.stops = stopsOf(w.faults, w.deaths)
	rep := analyze(ev, w)
	got := map[string]int{"submitted": rep.Submitted, "acked": rep.Acked, "inferred": rep.AckedInferred, "unknownReply": rep.UnknownAckReply, "dead": rep.Dead,
		"lost": rep.Lost, "stuck": rep.Stuck, "ackedTwice": rep.AckedTwice, "overlaps": rep.Overlaps,
		"begunLate": rep.BegunLate, "calledDead": rep.CalledDead, "livePastLease": rep.LivePastLease, "unended": rep.Unended, "bad": len(ev.bad),
		"stepReruns": rep.StepReruns, "stepWrong": rep.StepWrong, "stepMemoized": rep.StepMemoized}
	want := map[string]int{"submitted": 11, "acked": 7, "calledDead": 1, "inferred": 2, "unknownReply": 1, "dead": 1,
		"lost": 3, "stuck": 1, "ackedTwice": 1, "overlaps": 1,
		"begunLate": 1, "livePastLease": 2, "unended": 0, "bad": 1,
		"stepReruns": 1, "stepWrong": 1, "stepMemoized": 2} // h on w2, and b
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %d, want %d", k, got[k], v)
		}
	}
	if rep.MaxOverlap != time.Second {
		t.Errorf("max overlap %v, want 1s (a: 1..3 s and 2..4 s)", rep.MaxOverlap)
	}
	if f := rep.Per["one"]; f == nil || f.Overlaps != 1 || f.AckedTwice != 1 || f.BegunLate != 1 {
		t.Errorf("phase one: %+v, want the overlap, the second ack and the late start", f)
	}
	// g's runs overlapped 12..13 s on the wall clock, but w1 was stopped
	// then: 0.1 s (13.9..14) is within the margin.
	for _, v := range rep.Violations {
		if strings.Contains(v, "task g") || strings.Contains(v, "task h") {
			t.Errorf("violation counted for a run that did nothing at the time: %s", v)
		}
	}
	if len(rep.Violations) != 8 { // a overlap, b late, a twice, e stuck, c and j lost, a's step re-run, b's step result
		t.Errorf("%d violations, want 8:\n%s", len(rep.Violations), strings.Join(rep.Violations, "\n"))
	}
}

// TestCountsWaits checks the counting of the durable waits on made-up
// evidence: each of their violations (a signal lost, a wrong value, a
// send refused, a wait timed out, a parked task resumed twice at once, a
// parked task found leased) is found, and what is none is not counted.
func TestCountsWaits(t *testing.T) {
	ev := newEvidence()
	lines := map[string][]string{
		"w1.0": {
			"B 0 100",
			// a: parks at 1.05 s, woken, takes its signal (seq 1) at 2.1 s: fine.
			"S w1.0.1 a 1 0 0 1000000 0 2000000 0", "W w1.0.1 a 1050000 wait", "E w1.0.1 a 1050000 1050001 wait 2000000 0 0", "F a 1050002 fleet:_suspended",
			"S w1.0.2 a 1 0 0 2000000 0 3000000 0", "G w1.0.2 a 2100000 1", "E w1.0.2 a 2200000 2200001 ok 3000000 0 0", "A a 2200002",
			// b: its signal was sent, yet its run went past the wait without it,
			// and it was acked: lost.
			"S w1.0.3 b 2 0 0 3000000 0 4000000 0", "W w1.0.3 b 3050000 wait", "E w1.0.3 b 3050000 3050001 wait 4000000 0 0",
			"S w1.0.4 b 2 0 0 4000000 0 5000000 0", "E w1.0.4 b 4100000 4100001 ok 5000000 0 0", "A b 4100002",
			// c: its wait returned another task's value.
			"S w1.0.5 c 3 0 0 5000000 0 6000000 0", "G w1.0.5 c 5100000 2", "E w1.0.5 c 5200000 5200001 ok 6000000 0 0", "A c 5200002",
			// d: parked, then resumed twice at once (w1 and w2, 7..8 s and 7.2..8.2 s).
			"S w1.0.6 d 4 0 0 6000000 0 7000000 0", "W w1.0.6 d 6050000 sleep", "E w1.0.6 d 6050000 6050001 wait 7000000 0 0",
			"S w1.0.7 d 4 0 0 7000000 0 9000000 0", "G w1.0.7 d 7050000 4", "E w1.0.7 d 8000000 8000001 ok 9000000 0 0", "A d 8000002",
			// e: its wait timed out.
			"S w1.0.8 e 5 0 0 9000000 0 10000000 0", "H w1.0.8 e 9100000 timeout", "E w1.0.8 e 9100000 9100001 waiterr:timeout 10000000 0 0",
			// g: its send was refused.
			"S w1.0.9 g 7 0 0 10000000 0 11000000 0", "W w1.0.9 g 10050000 wait", "E w1.0.9 g 10050000 10050001 wait 11000000 0 0",
			// x: a task of a lost submit reply: the sweep's -1 is right.
			"S w1.0.10 x 9 0 0 11000000 0 12000000 0", "G w1.0.10 x 11100000 -1", "E w1.0.10 x 11200000 11200001 ok 12000000 0 0", "A x 11200002",
			// h: no wait (and no signal): nothing to count.
			"S w1.0.11 h 8 0 0 12000000 0 13000000 0", "E w1.0.11 h 12100000 12100001 ok 13000000 0 0", "A h 12100002",
			"X 50000000",
		},
		"w2.0": {
			"S w2.0.1 d 4 0 1 7200000 0 9000000 0", "G w2.0.1 d 7250000 4", "E w2.0.1 d 8200000 8200001 ok 9000000 0 0",
			"W w2.0.1 bogus 1 wait", // a W of another task's run: does not parse
		},
	}
	for proc, ls := range lines {
		for _, l := range ls {
			ev.add(proc, l)
		}
	}
	w := &world{
		submitted:  map[string]int{"a": 1, "b": 2, "c": 3, "d": 4, "e": 5, "g": 7, "h": 8},
		waiters:    map[string]int{"a": 1, "b": 2, "c": 3, "d": 4, "e": 5, "g": 7},
		signaled:   map[string]int{"a": 1, "b": 2, "c": 3, "d": 4},
		sigRefused: map[string]string{"g": "fleet: task not found"},
		dead:       map[string]bool{}, left: map[string]bool{"e": true, "g": true},
		deaths:      map[string]int64{},
		parkSamples: 40, parkedLeased: []string{"task d at 06:00:00.000"},
		margin: 100 * time.Millisecond, lease: time.Second,
	}
	w.stops = stopsOf(nil, w.deaths)
	rep := analyze(ev, w)
	got := map[string]int{"waiters": rep.Waiters, "parked": rep.Parked, "sent": rep.SignalsSent, "delivered": rep.SignalsDelivered,
		"lost": rep.SignalLost, "wrong": rep.SignalWrong, "refused": rep.SignalRefused, "timedOut": rep.WaitTimedOut,
		"waitOverlaps": rep.WaitOverlaps, "overlaps": rep.Overlaps, "samples": rep.ParkSamples, "parkedLeased": rep.ParkedLeased, "bad": len(ev.bad)}
	want := map[string]int{"waiters": 6, "parked": 4, "sent": 4, "delivered": 2, // a and d
		"lost": 1, "wrong": 1, "refused": 1, "timedOut": 1, "waitOverlaps": 1, "overlaps": 1, "samples": 40, "parkedLeased": 1, "bad": 1}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %d, want %d", k, got[k], v)
		}
	}
	var waitV []string
	for _, v := range rep.Violations {
		if !strings.Contains(v, "stuck") && !strings.Contains(v, "still in Redis after the drain") {
			waitV = append(waitV, v)
		}
	}
	// b lost, c wrong, d overlap, e timed out, g refused, d parked and leased
	for _, task := range []string{"task b", "task c", "task d", "task e", "task g"} {
		if !slices.ContainsFunc(waitV, func(v string) bool { return strings.Contains(v, task) }) {
			t.Errorf("no violation names %s:\n%s", task, strings.Join(waitV, "\n"))
		}
	}
	for _, v := range rep.Violations {
		if strings.Contains(v, "task a") || strings.Contains(v, "task x") || strings.Contains(v, "task h") {
			t.Errorf("violation counted for a wait that went well: %s", v)
		}
	}
	if len(waitV) != 6 {
		t.Errorf("%d wait violations, want 6:\n%s", len(waitV), strings.Join(waitV, "\n"))
	}
}

// TestCountsChildren checks the counting of the children on made-up
// evidence: a child lost, a parent whose runs started other children, a
// wait with wrong results, and a parent stranded are each found; a parent
// that went well is not counted.
func TestCountsChildren(t *testing.T) {
	ev := newEvidence()
	for _, l := range []string{
		"B 0 100",
		// p: children k1 k2, parked, resumed, acked: fine.
		"S w1.0.1 p 1 0 0 1000000 0 2000000 0", "C w1.0.1 p k1 k2", "W w1.0.1 p 1100000 children", "E w1.0.1 p 1100000 1100001 wait 2000000 0 0",
		"S w1.0.2 k1 1000010 0 1 1200000 0 2200000 0", "E w1.0.2 k1 1210000 1210001 ok 2200000 0 0", "A k1 1210002",
		"S w1.0.3 k2 1000011 0 1 1200000 0 2200000 0", "E w1.0.3 k2 1220000 1220001 ok 2200000 0 0", "A k2 1220002",
		"S w1.0.4 p 1 0 0 1300000 0 2300000 0", "C w1.0.4 p k1 k2", "J w1.0.4 p 1310000 ok", "E w1.0.4 p 1320000 1320001 ok 2300000 0 0", "A p 1320002",
		// q: its second run started other children (k4 for k3); k4 never ran: lost.
		"S w1.0.5 q 2 0 0 3000000 0 4000000 0", "C w1.0.5 q k3", "W w1.0.5 q 3100000 children", "E w1.0.5 q 3100000 3100001 wait 4000000 0 0",
		"S w1.0.6 k3 1000020 0 1 3200000 0 4200000 0", "E w1.0.6 k3 3210000 3210001 ok 4200000 0 0", "A k3 3210002",
		"S w1.0.7 q 2 0 0 3300000 0 4300000 0", "C w1.0.7 q k4", "W w1.0.7 q 3310000 children", "E w1.0.7 q 3310000 3310001 wait 4300000 0 0",
		// r: its wait returned wrong results.
		"S w1.0.8 r 3 0 0 5000000 0 6000000 0", "C w1.0.8 r k5", "J w1.0.8 r 5100000 bad:child_0", "E w1.0.8 r 5200000 5200001 ok 6000000 0 0", "A r 5200002",
		"S w1.0.9 k5 1000030 0 1 4900000 0 5900000 0", "E w1.0.9 k5 4910000 4910001 ok 5900000 0 0", "A k5 4910002",
		// s: its child ended, it stays parked: stranded.
		"S w1.0.10 s 4 0 0 7000000 0 8000000 0", "C w1.0.10 s k6", "W w1.0.10 s 7100000 children", "E w1.0.10 s 7100000 7100001 wait 8000000 0 0",
		"S w1.0.11 k6 1000040 0 1 7200000 0 8200000 0", "E w1.0.11 k6 7210000 7210001 ok 8200000 0 0", "A k6 7210002",
		"C w1.0.99 s k7", // a C of a run never begun: does not parse
		"X 50000000",
	} {
		ev.add("w1.0", l)
	}
	w := &world{
		submitted: map[string]int{"p": 1, "q": 2, "r": 3, "s": 4},
		dead:      map[string]bool{}, left: map[string]bool{"q": true, "s": true},
		deaths: map[string]int64{}, margin: 100 * time.Millisecond, lease: time.Second,
	}
	w.stops = stopsOf(nil, w.deaths)
	rep := analyze(ev, w)
	got := map[string]int{"parents": rep.Parents, "children": rep.Children, "acked": rep.ChildrenAcked, "resumed": rep.ParentsResumed,
		"lost": rep.ChildLost, "twice": rep.ChildTwice, "wrong": rep.ChildWrong, "stranded": rep.ParentStranded, "extra": rep.ExtraAcked, "bad": len(ev.bad)}
	want := map[string]int{"parents": 4, "children": 6, "acked": 5, "resumed": 2,
		"lost": 1, "twice": 1, "wrong": 1, "stranded": 1, "extra": 0, "bad": 1} // k4 lost; q waits for it: not stranded
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %d, want %d", k, got[k], v)
		}
	}
	ev2 := newEvidence()
	for _, l := range []string{"B 0 100", "S w1.0.1 p 1 0 0 1000000 0 2000000 0", "C w1.0.1 p k1", "W w1.0.1 p 1100000 children", "E w1.0.1 p 1100000 1100001 wait 2000000 0 0"} {
		ev2.add("w1.0", l)
	}
	rep2 := analyze(ev2, &world{submitted: map[string]int{"p": 1}, dead: map[string]bool{}, left: map[string]bool{"p": true, "k1": true},
		deaths: map[string]int64{}, margin: 100 * time.Millisecond, lease: time.Second})
	if rep2.ChildLost != 1 || rep2.ParentStranded != 0 {
		t.Errorf("a child left in Redis: lost %d, stranded %d; want 1, 0", rep2.ChildLost, rep2.ParentStranded)
	}
	for _, v := range rep.Violations {
		if strings.Contains(v, "task p:") || strings.Contains(v, "task p ") {
			t.Errorf("violation counted for a parent that went well: %s", v)
		}
	}
}
