package fleet_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/internal/redistest"
)

// depthCfg is a config whose schema the catalog carries.
type depthCfg struct {
	Depth int      `json:"depth" validate:"gte=0,lte=5"`
	Mode  string   `json:"mode,omitempty" validate:"omitempty,oneof=fast slow"`
	Tags  []string `json:"tags,omitempty" validate:"max=2,dive,min=2"`
	Proxy *struct {
		Port int `json:"port" validate:"required,gt=0"`
	} `json:"proxy,omitempty"`
}

// UpdateConfig refuses, writing nothing, a worker that never registered
// and a merged config that fails the catalog's schema of the type.
func TestUpdateConfigRefuses(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)

		// Unknown type, unknown id: ErrWorkerNotFound, no key written.
		for _, n := range [][2]string{{"pages", "nobody"}, {"nosuchtype", "w1"}} {
			if gen, err := e.F.UpdateConfig(c, n[0], n[1], json.RawMessage(`{"depth":1}`)); !errors.Is(err, fleet.ErrWorkerNotFound) || gen != 0 ||
				errors.Is(err, fleet.ErrUnavailable) || !strings.Contains(err.Error(), n[1]) {
				t.Fatalf("UpdateConfig %v = %d, %v; want ErrWorkerNotFound", n, gen, err)
			}
		}
		if got := e.keys(t); len(got) != 0 {
			t.Fatalf("refused updates wrote %v", got)
		}

		// A registered worker of a type in the catalog.
		w := fleet.NewLoopWorker(e.F, fleet.WorkerOptions{Type: "pages", ID: "w1", Slots: 1},
			fleet.LoopFunc[depthCfg, out](func(ctx context.Context, s *fleet.Slot[depthCfg, out]) error { <-ctx.Done(); return nil }))
		if err := e.F.PublishCatalog(c, w.Catalog()); err != nil {
			t.Fatal(err)
		}
		startWorker(t, w)
		k := e.wk("pages", "w1")
		bad := map[string][]string{
			`{"depth":9}`:                      {"depth (maximum 5)"},
			`{"depth":-1,"mode":"slowest"}`:    {"depth (minimum 0)", `mode (one of "fast" "slow")`},
			`{"depth":"2"}`:                    {"depth (must be integer, not string)"},
			`{"depth":2.5}`:                    {"depth (must be integer, not number)"},
			`{"tags":["a","bb","cc"]}`:         {"tags (maxItems 2)", "tags[0] (minLength 2)"},
			`{"proxy":{}}`:                     {"proxy.port (required)"},
			`{"proxy":{"port":0}}`:             {"proxy.port (above 0)"},
			`{"depth":1,"proxy":{"port":"x"}}`: {"proxy.port (must be integer, not string)"},
		}
		for patch, want := range bad {
			gen, err := e.F.UpdateConfig(c, "pages", "w1", json.RawMessage(patch))
			if !errors.Is(err, fleet.ErrInvalidConfig) || gen != 0 {
				t.Fatalf("patch %s = %d, %v; want ErrInvalidConfig", patch, gen, err)
			}
			for _, f := range want {
				if !strings.Contains(err.Error(), f) {
					t.Errorf("patch %s: %v does not name %q", patch, err, f)
				}
			}
		}
		if g, _ := e.get(t, k.Gen); g != "0" {
			t.Fatalf("gen after refused patches = %q", g)
		}
		if cfg, _ := e.get(t, k.Config); cfg != "{}" {
			t.Fatalf("config after refused patches = %s", cfg)
		}
		// Valid ones pass, and null deletes as before.
		if gen, err := e.F.UpdateConfig(c, "pages", "w1", json.RawMessage(`{"depth":5,"mode":"fast","proxy":{"port":8080},"extra":true}`)); err != nil || gen != 1 {
			t.Fatalf("valid patch = %d, %v", gen, err)
		}
		if gen, err := e.F.UpdateConfig(c, "pages", "w1", json.RawMessage(`{"mode":null}`)); err != nil || gen != 2 {
			t.Fatalf("null patch = %d, %v", gen, err)
		}
		if cfg, _ := e.get(t, k.Config); cfg != `{"depth":5,"extra":true,"proxy":{"port":8080}}` {
			t.Fatalf("config = %s", cfg)
		}
		waitFor(t, 5*time.Second, func() bool { return w.Gen() == 2 }, "gen 2 not applied (at %d)", later(func() any { return w.Gen() }))
	})
}

// Workers shows the gen the worker runs beside the stored one: they differ
// while the worker refuses the newest config.
func TestWorkersShowAppliedGen(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		w := fleet.NewLoopWorker(e.F, fleet.WorkerOptions{Type: "applied", ID: "w1", Slots: 1}, idleLoop())
		startWorker(t, w)
		k := e.wk("applied", "w1")
		info := func() fleet.WorkerInfo {
			ws, err := e.F.Workers(c, fleet.WorkersFilter{Type: "applied"})
			if err != nil || len(ws) != 1 {
				t.Fatalf("Workers = %+v, %v", ws, err)
			}
			return ws[0]
		}
		if i := info(); i.Gen != 0 || i.AppliedGen != 0 {
			t.Fatalf("at start: %+v", i)
		}
		// No catalog entry: the worker is the judge. gen 1 is valid.
		if _, err := e.F.UpdateConfig(c, "applied", "w1", json.RawMessage(`{"rate":7}`)); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 5*time.Second, func() bool { return e.hgetall(t, k.State)["applied_gen"] == "1" }, "applied_gen never 1: %v", later(func() any { return e.hgetall(t, k.State) }))
		if i := info(); i.Gen != 1 || i.AppliedGen != 1 {
			t.Fatalf("after gen 1: %+v", i)
		}
		// gen 2 breaks the worker's validate tags: refused, it runs gen 1.
		if _, err := e.F.UpdateConfig(c, "applied", "w1", json.RawMessage(`{"rate":500}`)); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 5*time.Second, func() bool { return strings.Contains(e.hgetall(t, k.State)["last_error"], "gen 2") },
			"gen 2 never refused: %v", e.hgetall(t, k.State))
		if i := info(); i.Gen != 2 || i.AppliedGen != 1 || !strings.Contains(i.LastError, "rate (fails lte=100)") {
			t.Fatalf("after refused gen 2: %+v", i)
		}
		// Redis loses the worker's keys: it registers again with the gen it runs.
		e.do(t, e.Raw.B().Del().Key(k.Hardware).Key(k.State).Build())
		waitFor(t, 10*time.Second, func() bool { return e.hgetall(t, k.State)["applied_gen"] == "1" },
			"applied_gen not restored: %v", e.hgetall(t, k.State))
	})
}
