package fleetui

import (
	"maps"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
)

func TestRingRates(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	r := newRing(5*time.Second, 30*time.Second)
	at := func(sec int, done, failed map[string]int64) sample {
		return sample{at: t0.Add(time.Duration(sec) * time.Second), queues: map[string]fleet.QueueCounts{"mail": {QueueStats: fleet.QueueStats{Pending: int64(sec)}}}, done: done, failed: failed}
	}
	r.add(at(0, map[string]int64{"mail|a": 10, "web|x": 5}, map[string]int64{"mail|a": 1}))
	r.add(at(3, map[string]int64{"mail|a": 99}, nil)) // younger than every: dropped
	// mail|a restarted (10 -> 4 counts 4); mail|b is new (counts nothing).
	r.add(at(10, map[string]int64{"mail|a": 4, "mail|b": 50, "web|x": 5}, map[string]int64{"mail|a": 3, "mail|b": 2}))
	r.add(at(20, map[string]int64{"mail|a": 8, "mail|b": 60, "web|x": 5}, map[string]int64{"mail|a": 3, "mail|b": 2}))
	ss := r.snapshot()
	if len(ss) != 3 {
		t.Fatalf("%d samples, want 3", len(ss))
	}
	rt, span := typeRates(ss)
	// mail: 4 + (4 + 10) = 18 done in 20 s = 54/min; failed: 3 - 1 = 2 -> 6/min.
	want := map[string]rates{"mail": {Done: "54.0", Failed: "6.0"}, "web": {Done: "0.0", Failed: "0.0"}}
	if span != 20*time.Second || !maps.Equal(rt, want) {
		t.Fatalf("rates %v over %v, want %v over 20s", rt, span, want)
	}
	// Past the history, the oldest samples go.
	r.add(at(45, map[string]int64{"mail|a": 8}, nil))
	if ss := r.snapshot(); len(ss) != 2 || !ss[0].at.Equal(t0.Add(20*time.Second)) {
		t.Fatalf("after trimming: %d samples from %v", len(ss), ss[0].at)
	}
	if sparkline(ss[:1], "mail") != "" || doneChart(ss[:1]) != "" {
		t.Fatal("one sample draws nothing")
	}
	if s := sparkline(ss, "mail"); s == "" {
		t.Fatal("no sparkline")
	}
}
