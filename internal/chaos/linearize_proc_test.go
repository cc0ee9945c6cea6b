package chaos

// The checked clients of TestLinearizable that run as processes of their
// own (role "linclient", started, SIGKILLed and SIGSTOPped by procs_test.go's
// machinery): KV writes and fresh reads, Counter Incr and Get, and Lock
// grants, on the same keys as the clients inside the test, each call
// written to the process's evidence file before it is made and after it
// returns. A call that was made and never returned (the process was
// killed) has an unknown outcome; times are wall-clock ns, the clock the
// test shares with its children.

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fleet-go/fleet"
)

// The evidence lines of a linclient, after runRole's B line (times are
// wall-clock ns):
//
//	O seq kind key arg call   a call is made: kind set, del, get (fresh), incr,
//	                          cget (the counter's Get) or lock; arg the value
//	                          set, else "-"
//	D seq ret ok out          it returned: ok 1 with out the value read, the
//	                          counter's value or the lock's fence; ok 0 (out
//	                          "-") for an absent value or a lock not granted;
//	                          ok E for an error (a write's outcome is unknown)
//	L seq deadline            a granted lock's lease Deadline (before its D)
//	H seq end lapsed          the hold's end as its holder proves it: the last
//	                          instant it saw itself before the Deadline;
//	                          lapsed 1 when it then found the Deadline passed
//	                          (a SIGSTOP outlasted the lease), else 0
const linClientRole = "linclient"

// runLinClient runs a linclient's loops (KV, Counter, Lock; each one call
// at a time) until ctx ends (SIGTERM).
func runLinClient(ctx context.Context, c childConfig, f *fleet.Fleet, rec *recorder) error {
	now := func() int64 { return time.Now().UnixNano() }
	var seq atomic.Int64
	call := func(kind string, key int, arg string) int64 {
		s := seq.Add(1)
		if arg == "" {
			arg = "-"
		}
		rec.line("O %d %s %d %s %d", s, kind, key, arg, now())
		return s
	}
	done := func(s int64, err error, ok bool, out string) {
		at, flag := now(), "0"
		switch {
		case err != nil:
			flag = "E"
		case ok:
			flag = "1"
		}
		if out == "" {
			out = "-"
		}
		rec.line("D %d %d %s %s", s, at, flag, out)
	}
	opCtx := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, time.Second) }
	var wg sync.WaitGroup
	wg.Go(func() { // KV: sets (values unique to this incarnation), deletes, fresh reads
		kv := f.KV("reg")
		for i := 0; ctx.Err() == nil; i++ {
			key := i % linKeys
			k := strconv.Itoa(key)
			oc, cancel := opCtx()
			switch r := (i * 7919) % 10; {
			case r < 4:
				v := fmt.Sprintf("%s.%d.%d", c.Name, c.Inc, i) // unique in the run
				s := call("set", key, v)
				done(s, kv.Set(oc, k, v, 0), false, "")
			case r < 5:
				s := call("del", key, "")
				_, err := kv.Delete(oc, k)
				done(s, err, false, "")
			default:
				s := call("get", key, "")
				v, ok, err := kv.GetString(fleet.WithFreshReads(oc), k)
				done(s, err, ok, v)
			}
			cancel()
			sleep(ctx, 2*time.Millisecond)
		}
	})
	wg.Go(func() { // Counter
		ctr := f.Counter("ctr")
		for i := 0; ctx.Err() == nil; i++ {
			oc, cancel := opCtx()
			var v int64
			var err error
			var s int64
			if i%2 == 0 {
				s = call("incr", 0, "")
				v, err = ctr.Incr(oc)
			} else {
				s = call("cget", 0, "")
				v, err = ctr.Get(oc)
			}
			done(s, err, true, strconv.FormatInt(v, 10))
			cancel()
			sleep(ctx, 2*time.Millisecond)
		}
	})
	wg.Go(func() { // Lock: hold it for 0-80 ms, in steps that each check the lease
		for i := 0; ctx.Err() == nil; i++ {
			oc, cancel := context.WithTimeout(ctx, 3*time.Second)
			s := call("lock", 0, "")
			l, err := f.Lock("mu").Acquire(oc, fleet.LockOptions{Hold: linHold, Wait: 2 * time.Second})
			if err != nil {
				done(s, nil, false, "") // not granted (a grant whose reply was lost is abandoned)
				cancel()
				continue
			}
			dl := l.Deadline()
			rec.line("L %d %d", s, dl.UnixNano()) // before D: a grant is known with its deadline
			done(s, nil, true, strconv.FormatInt(l.Fence(), 10))
			last, lapsed := int64(0), 0 // the last instant seen before the deadline
			for step := 0; ; step++ {
				t := time.Now()
				if !t.Before(dl) {
					lapsed = 1 // the lease proves no more: a SIGSTOP outlasted it
					break
				}
				last = t.UnixNano()
				if step == i%5 {
					break
				}
				sleep(ctx, 20*time.Millisecond)
			}
			if last != 0 {
				rec.line("H %d %d %d", s, last, lapsed)
			}
			_ = l.Release(oc)
			cancel()
		}
	})
	wg.Wait()
	return nil
}

// linChild is what one linclient process did, read back from its
// evidence files (one per incarnation) by the test.
type linChild struct {
	kv, counter []linOp
	holds       []hold
	unknown     int // calls of unknown outcome: cut off by a kill, or failed
	lapsed      int // holds that a SIGSTOP outlasted: ended at the last instant seen before Deadline
}

// readLinClient reads one incarnation's evidence: client is its id in the
// histories, base the wall-clock ns that the test's times count from.
func readLinClient(path string, client int, base int64, into *linChild) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	type pending struct {
		op       linOp
		deadline int64
		granted  bool
		end      int64
		lapsed   bool
	}
	ops := map[int64]*pending{}
	var order []int64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		w := strings.Fields(sc.Text())
		if len(w) == 0 {
			continue
		}
		bad := func() error { return fmt.Errorf("%s: bad line %q", path, sc.Text()) }
		num := func(i int) int64 {
			if i >= len(w) {
				return 0
			}
			n, _ := strconv.ParseInt(w[i], 10, 64)
			return n
		}
		switch w[0] {
		case "O":
			if len(w) != 6 {
				return bad()
			}
			s := num(1)
			op := linOp{client: client, kind: w[2], key: int(num(3)), call: num(5) - base, ret: never}
			if w[4] != "-" {
				op.arg = w[4]
			}
			ops[s] = &pending{op: op}
			order = append(order, s)
		case "D":
			p := ops[num(1)]
			if len(w) != 5 || p == nil {
				return bad()
			}
			if w[3] == "E" {
				continue // an error: the outcome is unknown
			}
			p.op.ret = num(2) - base
			p.op.ok = w[3] == "1"
			if w[4] != "-" {
				p.op.out = w[4]
			}
			p.granted = p.op.kind == "lock" && p.op.ok
		case "L":
			p := ops[num(1)]
			if len(w) != 3 || p == nil {
				return bad()
			}
			p.deadline = num(2) - base
		case "H":
			p := ops[num(1)]
			if len(w) != 4 || p == nil {
				return bad()
			}
			p.end, p.lapsed = num(2)-base, w[3] == "1"
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	for _, s := range order {
		p := ops[s]
		op := p.op
		if op.ret == never {
			into.unknown++
		}
		switch op.kind {
		case "set", "del", "get":
			if op.kind == "get" && op.ret == never {
				continue // a read that never returned says nothing
			}
			into.kv = append(into.kv, op)
		case "incr", "cget":
			if op.kind == "cget" {
				if op.ret == never {
					continue
				}
				op.kind = "get"
			}
			into.counter = append(into.counter, op)
		case "lock":
			if !p.granted {
				continue
			}
			fence, _ := strconv.ParseInt(op.out, 10, 64)
			end := p.end
			if end == 0 {
				// Killed while it held the lock (or before it said how
				// long): it may have held it up to the deadline.
				end = p.deadline
			}
			if p.lapsed {
				into.lapsed++
			}
			into.holds = append(into.holds, hold{client: client, call: op.call, ret: op.ret, end: end, deadline: p.deadline, fence: fence})
		}
	}
	return nil
}
