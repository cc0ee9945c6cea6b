package fleet_test

// Cost benchmarks (issue 10, "minimum Redis work on the hot path"): what each
// hot-path operation costs Redis, beside a bare rueidis "floor" that runs the
// minimal commands and scripts for the same operation, on the same
// redis-server (one of the benchmark's own, so nothing else moves its
// counters), in the same run.
//
// Run: go test -run '^$' -bench '^BenchmarkCost' -benchtime 2000x .
// ('Cost' alone also matches BenchmarkWorkerIdleCost, a 6 s run.)
//
// Each benchmark has a floor and a fleet sub-benchmark, floor first. Both
// report per operation:
//   - cmds/op: calls from INFO commandstats deltas; a script's EVALSHA and
//     each command it ran count one each; the meter's own INFO calls are
//     left out;
//   - scripts/op: EVAL/EVALSHA/FCALL calls alone;
//   - redis-µs/op: server CPU, the used_cpu_user+used_cpu_sys delta;
//   - ops/s and redis-cpu-%: the rate, and the server's CPU over wall time.
//
// fleet also reports its ratios to the floor run just before it
// (x-floor-cmds, x-floor-cpu, x-floor-rate), and both log the commands per
// op by name. TestCostTrace (FLEET_COST_TRACE=1) prints, through MONITOR,
// the commands of one operation of each kind.

import (
	"context"
	"crypto/rand"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/internal/costmeter"
)

// BenchmarkCostTrace prints, through MONITOR on a server of its own, the
// commands of one operation of each kind, fleet and floor (it runs them
// once, whatever b.N):
//
//	go test -run '^$' -bench CostTrace -benchtime 1x -v .
func BenchmarkCostTrace(t *testing.B) {
	srv := costServer(t)
	ctx := context.Background()
	mon, err := costmeter.StartMonitor(ctx, srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer mon.Close()
	meter := costClient(t, srv.Addr, nil)
	quiet := func() {
		prev := int64(-1)
		for {
			s, err := costmeter.Read(ctx, meter)
			if err != nil {
				t.Fatal(err)
			}
			var n int64
			for name, v := range s.Calls {
				if name != "info" {
					n += v
				}
			}
			if n == prev {
				return
			}
			prev = n
			time.Sleep(5 * time.Millisecond)
		}
	}
	trace := func(what string, op func()) {
		t.Helper()
		quiet()
		if _, err := mon.Collect(ctx); err != nil {
			t.Fatal(err)
		}
		op()
		quiet()
		lines, err := mon.Collect(ctx)
		if err != nil {
			t.Fatal(err)
		}
		lines = slices.DeleteFunc(lines, func(l string) bool { return strings.Contains(strings.ToLower(l), `"info"`) })
		var sb strings.Builder
		for _, l := range lines {
			if len(l) > 160 {
				l = l[:160] + "..."
			}
			sb.WriteString("\n    " + l)
		}
		t.Logf("%s: %d commands%s", what, len(lines), sb.String())
	}

	f := costFleet(t, srv.URL())
	raw := costClient(t, srv.Addr, nil)

	// Lock pair.
	lk := f.Lock("trace")
	lockPair := func() {
		l, err := lk.Acquire(ctx, fleet.LockOptions{Hold: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	lockPair()
	trace("fleet lock acquire+release", lockPair)
	floorPair := func() {
		token := rand.Text()
		if err := raw.Do(ctx, raw.B().Set().Key("floor:lock:trace").Value(token).Nx().PxMilliseconds(10000).Build()).Error(); err != nil {
			t.Fatal(err)
		}
		if err := floorRelease.Exec(ctx, raw, []string{"floor:lock:trace"}, []string{token}).Error(); err != nil {
			t.Fatal(err)
		}
	}
	floorPair()
	trace("floor lock acquire+release", floorPair)

	// Busy-queue cycle.
	q := fleet.NewQueue[costJob](f, "trace-busy", fleet.QueueOptions{})
	busy := func() {
		if _, err := q.Submit(ctx, costJob{N: 1}); err != nil {
			t.Fatal(err)
		}
		ts, err := q.Reserve(ctx, 1, 0)
		if err != nil || len(ts) != 1 {
			t.Fatal(len(ts), err)
		}
		if err := ts[0].Ack(ctx); err != nil {
			t.Fatal(err)
		}
	}
	busy()
	trace("fleet busy cycle (submit, reserve 1, ack)", busy)
	fq := newFloorQueue(raw, "trace-busy")
	floorBusy := func() {
		if err := fq.submit(ctx, 1); err != nil {
			t.Fatal(err)
		}
		id, ok, err := fq.reserve(ctx)
		if err != nil || !ok {
			t.Fatal(ok, err)
		}
		if err := fq.ack(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	floorBusy()
	trace("floor busy cycle", floorBusy)

	// KV set then get.
	kv := f.KV("trace")
	kvOp := func() {
		if err := kv.Set(ctx, "k", "v"+rand.Text(), 0); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if _, _, err := kv.GetString(ctx, "k"); err != nil {
				t.Fatal(err)
			}
		}
	}
	kvOp()
	trace("fleet KV set + 2 gets", kvOp)
	cached := costClient(t, srv.Addr, func(o *rueidis.ClientOption) { o.DisableCache = false })
	floorKV := func() {
		if err := cached.Do(ctx, cached.B().Set().Key("floor:kv:k").Value("v"+rand.Text()).Build()).Error(); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if err := cached.DoCache(ctx, cached.B().Get().Key("floor:kv:k").Cache(), time.Minute).Error(); err != nil {
				t.Fatal(err)
			}
		}
	}
	floorKV()
	trace("floor KV set + 2 gets (DoCache)", floorKV)

	// Idle pickup.
	iq := fleet.NewQueue[costJob](f, "trace-idle", fleet.QueueOptions{})
	done := make(chan error, 1)
	w := fleet.NewBatchWorker(f, fleet.WorkerOptions{Type: "cost-trace", ID: "w", Slots: 1,
		Heartbeat: time.Hour, OnTaskEnd: func(_ string, err error) { done <- err }}, iq,
		fleet.BatchFunc[costCfg, costOut, costJob](func(context.Context, *fleet.Slot[costCfg, costOut], *fleet.Task[costJob]) error {
			return nil
		}))
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer w.Stop(ctx)
	pickup := func() {
		if _, err := iq.Submit(ctx, costJob{N: 1}); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("task not done")
		}
	}
	pickup()
	trace("fleet idle pickup (1 slot, heartbeat off)", pickup)
	if err := w.Stop(ctx); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	fiq, fdone := floorIdleConsumer(t, srv.Addr, "trace-idle")
	floorPickup := func() {
		if err := fiq.submit(ctx, 1); err != nil {
			t.Fatal(err)
		}
		select {
		case <-fdone:
		case <-time.After(10 * time.Second):
			t.Fatal("task not done")
		}
	}
	floorPickup()
	trace("floor idle pickup", floorPickup)
}
