package fleet_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/internal/redistest"
)

// wcfg is the config of the worker tests.
type wcfg struct {
	Rate  int               `json:"rate" validate:"gte=0,lte=100"`
	Mode  string            `json:"mode,omitempty"`
	Proxy map[string]string `json:"proxy,omitempty"`
}

// out is the output of the worker tests.
type out struct {
	Slot int `json:"slot"`
	N    int `json:"n"`
}

// wkeys spells a worker's keys in the test's layout.
type wkeys struct{ Hardware, Config, Gen, State, Stats, Type, All string }

func (e *env) wk(typ, id string) wkeys {
	base := e.key("wkr:"+typ+":"+id, "wkr:{"+typ+":"+id+"}")
	return wkeys{base + ":hardware", base + ":config", base + ":gen", base + ":state", base + ":stats",
		e.Prefix + "wkrs:" + typ, e.Prefix + "wkrs:all"}
}

// idleLoop is a loop automation that waits for its ctx.
func idleLoop() fleet.LoopFunc[wcfg, out] {
	return func(ctx context.Context, s *fleet.Slot[wcfg, out]) error {
		<-ctx.Done()
		return nil
	}
}

// startWorker starts w and stops it when the test ends.
func startWorker(t *testing.T, w *fleet.Worker) {
	t.Helper()
	if err := w.Start(context.Background()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = w.Stop(c)
	})
}

// TestWorkerKeys asserts every key a worker writes, with its type and
// fields, in each layout.
func TestWorkerKeys(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		k := e.wk("scraper", "host1")
		w := fleet.NewLoopWorker(e.F, fleet.WorkerOptions{Type: "scraper", ID: "host1", Slots: 3,
			Heartbeat: 50 * time.Millisecond, Config: wcfg{Rate: 5}},
			fleet.LoopFunc[wcfg, out](func(ctx context.Context, s *fleet.Slot[wcfg, out]) error {
				s.Metric("queue_depth", 7)
				s.Count("pages", 2)
				<-ctx.Done()
				return nil
			}))
		if w.Type() != "scraper" || w.ID() != "host1" {
			t.Fatalf("Type/ID %q %q", w.Type(), w.ID())
		}
		before := time.Now().Unix()
		startWorker(t, w)

		want := []string{k.All, k.Config, k.Gen, k.Hardware, k.State, k.Type}
		slices.Sort(want)
		// :stats comes with the first heartbeat.
		waitFor(t, 5*time.Second, func() bool { _, ok := e.get(t, k.Stats); return ok }, "no stats written")
		want = append(want, k.Stats)
		slices.Sort(want)
		if got := e.keys(t); !slices.Equal(got, want) {
			t.Fatalf("keys\n got %v\nwant %v", got, want)
		}
		if ty, _ := e.do(t, e.Raw.B().Type().Key(k.State).Build()).ToString(); ty != "hash" {
			t.Fatalf("state is a %s", ty)
		}
		for _, s := range []string{k.Hardware, k.Config, k.Gen, k.Stats} {
			if ty, _ := e.do(t, e.Raw.B().Type().Key(s).Build()).ToString(); ty != "string" {
				t.Fatalf("%s is a %s", s, ty)
			}
		}
		for _, s := range []string{k.Type, k.All} {
			if ty, _ := e.do(t, e.Raw.B().Type().Key(s).Build()).ToString(); ty != "set" {
				t.Fatalf("%s is a %s", s, ty)
			}
		}
		if m, _ := e.do(t, e.Raw.B().Smembers().Key(k.Type).Build()).AsStrSlice(); !slices.Equal(m, []string{"host1"}) {
			t.Fatalf("wkrs:scraper = %v", m)
		}
		if m, _ := e.do(t, e.Raw.B().Smembers().Key(k.All).Build()).AsStrSlice(); !slices.Equal(m, []string{"scraper|host1"}) {
			t.Fatalf("wkrs:all = %v", m)
		}
		if cfg, _ := e.get(t, k.Config); cfg != `{"rate":5}` {
			t.Fatalf("config %q", cfg)
		}
		if gen, _ := e.get(t, k.Gen); gen != "0" {
			t.Fatalf("gen %q", gen)
		}

		hw, _ := e.get(t, k.Hardware)
		var h map[string]any
		if err := json.Unmarshal([]byte(hw), &h); err != nil {
			t.Fatal(err)
		}
		host, _ := os.Hostname()
		fields := slices.Sorted(func(yield func(string) bool) {
			for f := range h {
				if !yield(f) {
					return
				}
			}
		})
		if !slices.Equal(fields, []string{"arch", "cpus", "fleet_version", "go_version", "hostname", "kind", "memory_bytes", "os", "pid", "slots", "started_at"}) {
			t.Fatalf("hardware fields %v", fields)
		}
		if h["hostname"] != host || h["cpus"] != float64(runtime.NumCPU()) || h["os"] != runtime.GOOS || h["go_version"] != runtime.Version() ||
			h["kind"] != "loop" || h["slots"] != float64(3) || h["pid"] != float64(os.Getpid()) || h["fleet_version"] == "" {
			t.Fatalf("hardware %s", hw)
		}
		if runtime.GOOS == "linux" && h["memory_bytes"].(float64) <= 0 {
			t.Fatalf("memory_bytes %v", h["memory_bytes"])
		}

		waitFor(t, 5*time.Second, func() bool {
			s, _ := e.get(t, k.Stats)
			return strings.Contains(s, `"pages":2`)
		}, "metrics not in stats")
		st := e.hgetall(t, k.State)
		seen, err := strconv.ParseInt(st["last_seen"], 10, 64)
		if len(st) != 4 || st["state"] != "RUNNING" || st["last_error"] != "" || st["applied_gen"] != "0" || err != nil || seen < before || seen > time.Now().Unix() {
			t.Fatalf("state %v", st)
		}
		raw, _ := e.get(t, k.Stats)
		var stats fleet.WorkerStats
		dec := json.NewDecoder(strings.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&stats); err != nil {
			t.Fatalf("stats %s: %v", raw, err)
		}
		if stats.Slots != 3 || stats.Busy != 3 || stats.State != fleet.StateRunning || len(stats.PerSlot) != 3 || stats.Gen != 0 {
			t.Fatalf("stats %s", raw)
		}
		for i, ps := range stats.PerSlot {
			if ps.Slot != i || ps.Metrics["queue_depth"] != 7 || ps.Metrics["pages"] != 2 {
				t.Fatalf("slot stats %s", raw)
			}
		}

		// Stop writes the final state.
		c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := w.Stop(c); err != nil {
			t.Fatal(err)
		}
		select {
		case <-w.Stopped():
		default:
			t.Fatal("Stopped not closed after Stop")
		}
		if st := e.hgetall(t, k.State); st["state"] != "IDLE" {
			t.Fatalf("state after stop %v", st)
		}
		if err := w.Start(context.Background()); !errors.Is(err, fleet.ErrWorkerStarted) {
			t.Fatalf("second Start = %v", err)
		}
	})
}

// TestConfigUpdateMerge checks the merge patch semantics and what is left
// in Redis.
func TestConfigUpdateMerge(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		k := e.wk("scraper", "w1")
		c := ctx(t)
		e.do(t, e.Raw.B().Set().Key(k.Gen).Value("0").Build()) // registered, as a worker of the documented schema does
		gen, err := e.F.UpdateConfig(c, "scraper", "w1", json.RawMessage(`{"a":{"b":1,"c":{"d":2}},"drop":true,"big":12345678901234567890,"eo":{},"ea":[],"s":"<&>"}`))
		if err != nil || gen != 1 {
			t.Fatalf("first UpdateConfig = %d, %v", gen, err)
		}
		if cfg, _ := e.get(t, k.Config); cfg != `{"a":{"b":1,"c":{"d":2}},"big":12345678901234567890,"drop":true,"ea":[],"eo":{},"s":"<&>"}` {
			t.Fatalf("config %s", cfg)
		}
		gen, err = e.F.UpdateConfig(c, "scraper", "w1", json.RawMessage(`{"a":{"c":{"e":3},"b":null},"drop":null,"new":[1,{}]}`))
		if err != nil || gen != 2 {
			t.Fatalf("second UpdateConfig = %d, %v", gen, err)
		}
		if cfg, _ := e.get(t, k.Config); cfg != `{"a":{"c":{"d":2,"e":3}},"big":12345678901234567890,"ea":[],"eo":{},"new":[1,{}],"s":"<&>"}` {
			t.Fatalf("merged config %s", cfg)
		}
		if g, _ := e.get(t, k.Gen); g != "2" {
			t.Fatalf("gen %q", g)
		}
		raw, g, err := e.F.WorkerConfig(c, "scraper", "w1")
		if err != nil || g != 2 || !strings.HasPrefix(string(raw), `{"a":`) {
			t.Fatalf("WorkerConfig = %s %d %v", raw, g, err)
		}
		if got := e.keys(t); !slices.Equal(got, []string{k.Config, k.Gen}) && !slices.Equal(got, []string{k.Gen, k.Config}) {
			t.Fatalf("keys %v", got)
		}
		for _, bad := range []string{`[1]`, `null`, `"x"`, `{`, `{"a":1} {}`, ``} {
			if _, err := e.F.UpdateConfig(c, "scraper", "w1", json.RawMessage(bad)); !errors.Is(err, fleet.ErrInvalidConfig) || errors.Is(err, fleet.ErrUnavailable) {
				t.Fatalf("patch %q: %v", bad, err)
			}
		}
		if g, _ := e.get(t, k.Gen); g != "2" {
			t.Fatalf("gen after bad patches %q", g)
		}

		// PushConfig: only a higher gen.
		if err := e.F.PushConfig(c, "scraper", "w1", wcfg{Rate: 9}, 2); !errors.Is(err, fleet.ErrStaleGen) || errors.Is(err, fleet.ErrUnavailable) {
			t.Fatalf("push gen 2 = %v", err)
		}
		var sg *fleet.StaleGenError
		if err := e.F.PushConfig(c, "scraper", "w1", wcfg{Rate: 9}, 1); !errors.As(err, &sg) || sg.Current != 2 || sg.Pushed != 1 {
			t.Fatalf("push gen 1 = %v", err)
		}
		if err := e.F.PushConfig(c, "scraper", "w1", wcfg{Rate: 9}, 7); err != nil {
			t.Fatal(err)
		}
		if cfg, _ := e.get(t, k.Config); cfg != `{"rate":9}` {
			t.Fatalf("pushed config %s", cfg)
		}
		if g, _ := e.get(t, k.Gen); g != "7" {
			t.Fatalf("gen %q", g)
		}
		if err := e.F.PushConfig(c, "scraper", "w1", []int{1}, 8); !errors.Is(err, fleet.ErrInvalidConfig) {
			t.Fatalf("push array = %v", err)
		}

		// Wrong-type keys change nothing.
		k2 := e.wk("scraper", "w2")
		e.do(t, e.Raw.B().Hset().Key(k2.Gen).FieldValue().FieldValue("x", "1").Build())
		if _, err := e.F.UpdateConfig(c, "scraper", "w2", json.RawMessage(`{}`)); !errors.Is(err, fleet.ErrWrongType) {
			t.Fatalf("hash gen: %v", err)
		}
		e.do(t, e.Raw.B().Del().Key(k2.Gen).Build())
		e.do(t, e.Raw.B().Set().Key(k2.Gen).Value("seven").Build())
		if err := e.F.PushConfig(c, "scraper", "w2", nil, 9); !errors.Is(err, fleet.ErrWrongType) {
			t.Fatalf("text gen: %v", err)
		}
		if _, ok := e.get(t, k2.Config); ok {
			t.Fatal("config written despite a bad gen")
		}
	})
}

// TestConfigBadNames refuses names that could steer keys.
func TestConfigBadNames(t *testing.T) {
	e := open(t, redistest.Targets(t)[0])
	c := ctx(t)
	for _, n := range [][2]string{{"a:b", "w"}, {"a", "w|x"}, {"a|b", "w"}, {"a{b}", "w"}, {"a", "w x"}, {"", "w"}, {"a", ""}} {
		if _, err := e.F.UpdateConfig(c, n[0], n[1], json.RawMessage(`{}`)); !errors.Is(err, fleet.ErrInvalidName) {
			t.Errorf("UpdateConfig %q: %v", n, err)
		}
		if err := e.F.PushConfig(c, n[0], n[1], nil, 1); !errors.Is(err, fleet.ErrInvalidName) {
			t.Errorf("PushConfig %q: %v", n, err)
		}
		w := fleet.NewLoopWorker(e.F, fleet.WorkerOptions{Type: n[0], ID: n[1], Slots: 1}, idleLoop())
		if n[1] == "" {
			continue // the default id
		}
		if err := w.Start(c); !errors.Is(err, fleet.ErrInvalidName) {
			t.Errorf("Start %q: %v", n, err)
		}
	}
	if w := fleet.NewLoopWorker(e.F, fleet.WorkerOptions{Type: "t", ID: "w", Slots: -1}, idleLoop()); !errors.Is(w.Start(c), fleet.ErrInvalidArgument) {
		t.Errorf("Slots -1: %v", w.Err())
	}
	// Slots 0 means the default, one slot.
	w0 := fleet.NewLoopWorker(e.F, fleet.WorkerOptions{Type: "t", ID: "w0"}, idleLoop())
	if err := w0.Err(); err != nil {
		t.Fatalf("Slots 0: %v", err)
	}
	if got := w0.Stats().Slots; got != fleet.DefaultSlots {
		t.Errorf("Slots 0 runs %d slots, want %d", got, fleet.DefaultSlots)
	}
	if w := fleet.NewLoopWorker[wcfg, out](e.F, fleet.WorkerOptions{Type: "t", ID: "w", Slots: 1}, nil); !errors.Is(w.Err(), fleet.ErrInvalidArgument) {
		t.Errorf("nil automation: %v", w.Err())
	}
	if w := fleet.NewLoopWorker(e.F, fleet.WorkerOptions{Type: "t", ID: "w", Slots: 1, Heartbeat: -1}, idleLoop()); !errors.Is(w.Err(), fleet.ErrInvalidArgument) {
		t.Errorf("negative heartbeat: %v", w.Err())
	}
	w := fleet.NewLoopWorker(e.F, fleet.WorkerOptions{Type: "t", ID: "w", Slots: 1}, idleLoop())
	if err := w.Stop(c); !errors.Is(err, fleet.ErrWorkerNotStarted) {
		t.Errorf("Stop before Start: %v", err)
	}
	if got := e.keys(t); len(got) != 0 {
		t.Fatalf("bad input wrote %v", got)
	}
}

// TestConfigLive pushes configs while slots are busy: each gen is applied
// once, in order; a stale push is refused; an invalid one keeps the old
// config and sets last_error.
func TestConfigLive(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		k := e.wk("cfgtype", "w1")
		var mu sync.Mutex
		var applied []int64
		var refused []int64
		seen := make(chan int64, 1000)
		w := fleet.NewLoopWorker(e.F, fleet.WorkerOptions{Type: "cfgtype", ID: "w1", Slots: 4, Heartbeat: 50 * time.Millisecond,
			OnConfig: func(gen int64, err error) {
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					refused = append(refused, gen)
				} else {
					applied = append(applied, gen)
				}
			}},
			fleet.LoopFunc[wcfg, out](func(ctx context.Context, s *fleet.Slot[wcfg, out]) error {
				last := int64(-1)
				for {
					if g := s.Gen(); g != last {
						if g < last {
							return errors.New("gen went back")
						}
						last = g
						if s.Index() == 0 {
							seen <- int64(s.Config().Rate)
						}
					}
					select {
					case <-ctx.Done():
						return nil
					case <-s.ConfigChanged():
					}
				}
			}))
		startWorker(t, w)
		c := ctx(t)
		// Rapid pushes, in gen order, from two writers racing.
		var wg sync.WaitGroup
		for i := 1; i <= 20; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_ = e.F.PushConfig(c, "cfgtype", "w1", wcfg{Rate: i}, int64(i))
			}()
		}
		wg.Wait()
		waitFor(t, 5*time.Second, func() bool { return w.Gen() == 20 }, "gen 20 not applied (at %d)", later(func() any { return w.Gen() }))
		// OnConfig runs after the gen is in force: wait for its call.
		waitFor(t, 5*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return slices.Contains(applied, 20) }, "OnConfig never told gen 20")
		mu.Lock()
		got := slices.Clone(applied)
		mu.Unlock()
		if !slices.IsSorted(got) || len(slices.Compact(slices.Clone(got))) != len(got) || got[len(got)-1] != 20 {
			t.Fatalf("applied %v", got)
		}
		if err := e.F.PushConfig(c, "cfgtype", "w1", wcfg{Rate: 1}, 5); !errors.Is(err, fleet.ErrStaleGen) {
			t.Fatalf("stale push = %v", err)
		}

		// Invalid: rate above 100.
		gen, err := e.F.UpdateConfig(c, "cfgtype", "w1", json.RawMessage(`{"rate":500}`))
		if err != nil || gen != 21 {
			t.Fatalf("UpdateConfig = %d %v", gen, err)
		}
		waitFor(t, 5*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return slices.Contains(refused, 21) }, "gen 21 not refused")
		st := e.hgetall(t, k.State)
		if st["state"] != "ERROR" || !strings.Contains(st["last_error"], "gen 21") || !strings.Contains(st["last_error"], "rate (fails lte=100)") {
			t.Fatalf("state %v", st)
		}
		if w.Gen() != 20 {
			t.Fatalf("gen %d after an invalid config", w.Gen())
		}
		// A valid one clears the error at the next heartbeat.
		if gen, err = e.F.UpdateConfig(c, "cfgtype", "w1", json.RawMessage(`{"rate":30,"mode":"fast"}`)); err != nil || gen != 22 {
			t.Fatalf("UpdateConfig = %d %v", gen, err)
		}
		waitFor(t, 5*time.Second, func() bool { return w.Gen() == 22 }, "gen 22 not applied")
		waitFor(t, 5*time.Second, func() bool { return e.hgetall(t, k.State)["state"] == "RUNNING" }, "state not back to RUNNING")
		for {
			select {
			case r := <-seen:
				if r == 30 {
					return
				}
			case <-time.After(5 * time.Second):
				t.Fatal("slot 0 never saw rate 30")
			}
		}
	})
}

// TestWorkerStartInvalidConfig: a stored config that fails validation
// refuses Start, and says why in last_error.
func TestWorkerStartInvalidConfig(t *testing.T) {
	e := open(t, redistest.Targets(t)[0])
	k := e.wk("strict", "w1")
	e.do(t, e.Raw.B().Set().Key(k.Config).Value(`{"rate":500}`).Build())
	w := fleet.NewLoopWorker(e.F, fleet.WorkerOptions{Type: "strict", ID: "w1", Slots: 1}, idleLoop())
	err := w.Start(ctx(t))
	if !errors.Is(err, fleet.ErrInvalidConfig) || errors.Is(err, fleet.ErrUnavailable) {
		t.Fatalf("Start = %v", err)
	}
	if st := e.hgetall(t, k.State); st["state"] != "ERROR" || !strings.Contains(st["last_error"], "rate (fails lte=100)") {
		t.Fatalf("state %v", st)
	}
	if cfg, _ := e.get(t, k.Config); cfg != `{"rate":500}` {
		t.Fatalf("config changed: %s", cfg)
	}
	// A wrong-type key refuses Start too.
	k2 := e.wk("strict", "w2")
	e.do(t, e.Raw.B().Lpush().Key(k2.State).Element("x").Build())
	w2 := fleet.NewLoopWorker(e.F, fleet.WorkerOptions{Type: "strict", ID: "w2", Slots: 1}, idleLoop())
	if err := w2.Start(ctx(t)); !errors.Is(err, fleet.ErrWrongType) {
		t.Fatalf("Start on a list state = %v", err)
	}
}

// Stop called while Start is still registering (a shutdown signal during
// startup) returns, and every slot ends.
func TestWorkerStopDuringStart(t *testing.T) {
	e := open(t, redistest.Targets(t)[0])
	for i := range 30 {
		w := fleet.NewLoopWorker(e.F, fleet.WorkerOptions{Type: "rv", ID: "w" + strconv.Itoa(i), Slots: 2}, idleLoop())
		startErr := make(chan error, 1)
		go func() { startErr <- w.Start(context.Background()) }()
		stopErr := make(chan error, 1)
		go func() {
			for {
				if err := w.Stop(context.Background()); !errors.Is(err, fleet.ErrWorkerNotStarted) {
					stopErr <- err
					return
				}
			}
		}()
		select {
		case <-stopErr:
		case <-time.After(5 * time.Second):
			t.Fatalf("iteration %d: Stop during Start hangs", i)
		}
		<-startErr
		select {
		case <-w.Stopped():
		case <-time.After(5 * time.Second):
			t.Fatalf("iteration %d: Stopped never closed", i)
		}
	}
}

// Without client-side caching (a server without RESP3 tracking, or a
// caller-owned client), a running worker still gets a pushed config, by
// its ConfigPoll.
func TestWorkerConfigWithoutCache(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		nocache := openOn(t, tg, e.Prefix, func(o *fleet.Options) { o.DisableCache = true })
		w := fleet.NewLoopWorker(nocache, fleet.WorkerOptions{Type: "nc", ID: "w1", Slots: 1, ConfigPoll: 50 * time.Millisecond}, idleLoop())
		startWorker(t, w)
		gen, err := e.F.UpdateConfig(ctx(t), "nc", "w1", json.RawMessage(`{"rate": 7}`))
		if err != nil || gen != 1 {
			t.Fatalf("UpdateConfig = %d, %v", gen, err)
		}
		waitFor(t, 5*time.Second, func() bool { return w.Gen() == 1 }, "the worker never saw gen 1 (gen %d)", later(func() any { return w.Gen() }))
	})
}
