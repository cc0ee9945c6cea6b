package fleet_test

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/internal/redistest"
)

type scraperConfig struct {
	Proxy    string   `json:"proxy" validate:"required,url"`
	Threads  int      `json:"threads" validate:"required,min=1,max=10"`
	Mode     string   `json:"mode,omitempty" validate:"oneof=fast slow 'very slow'"`
	Sites    []string `json:"sites" validate:"min=1,max=5,dive,min=3"`
	Ratio    float64  `json:"ratio" validate:"gt=0,lte=1"`
	Level    int      `json:"level" validate:"oneof=1 2 3"`
	Retry    *retry   `json:"retry,omitempty"`
	Note     string   `json:"note" jsonschema:"description=free text"`
	internal int      //lint:ignore U1000 an unexported field, which the schema must leave out
}

type retry struct {
	Max   int `json:"max" validate:"required,gte=0,lt=100"`
	Delay int `json:"delay"`
}

type scrapedPage struct {
	URL  string `json:"url" validate:"required"`
	Body string `json:"body"`
}

type scrapeTask struct {
	URLs []string `json:"urls" validate:"required,len=2"`
}

// schema decodes one schema, failing the test on bad JSON.
func schema(t *testing.T, raw json.RawMessage) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("schema %s: %v", raw, err)
	}
	return m
}

func prop(m map[string]any, path ...string) map[string]any {
	for _, p := range path {
		m, _ = m[p].(map[string]any)
	}
	return m
}

func TestCatalogValidatorTags(t *testing.T) {
	raw, err := fleet.JSONSchema(reflect.TypeFor[scraperConfig]())
	if err != nil {
		t.Fatal(err)
	}
	s := schema(t, raw)
	if s["type"] != "object" || s["$id"] != nil {
		t.Fatalf("root: %s", raw)
	}
	if got := s["required"]; !reflect.DeepEqual(got, []any{"proxy", "threads"}) {
		t.Fatalf("required = %v", got)
	}
	checks := []struct {
		path []string
		key  string
		want any
	}{
		{[]string{"properties", "proxy"}, "format", "uri"},
		{[]string{"properties", "threads"}, "minimum", 1.0},
		{[]string{"properties", "threads"}, "maximum", 10.0},
		{[]string{"properties", "mode"}, "enum", []any{"fast", "slow", "very slow"}},
		{[]string{"properties", "sites"}, "minItems", 1.0},
		{[]string{"properties", "sites"}, "maxItems", 5.0},
		{[]string{"properties", "sites", "items"}, "minLength", 3.0},
		{[]string{"properties", "ratio"}, "exclusiveMinimum", 0.0},
		{[]string{"properties", "ratio"}, "maximum", 1.0},
		{[]string{"properties", "level"}, "enum", []any{1.0, 2.0, 3.0}},
		{[]string{"properties", "note"}, "description", "free text"},
		{[]string{"$defs", "retry"}, "required", []any{"max"}},
		{[]string{"$defs", "retry", "properties", "max"}, "minimum", 0.0},
		{[]string{"$defs", "retry", "properties", "max"}, "exclusiveMaximum", 100.0},
		{[]string{"properties", "retry"}, "$ref", "#/$defs/retry"},
	}
	for _, c := range checks {
		if got := prop(s, c.path...)[c.key]; !reflect.DeepEqual(got, c.want) {
			t.Errorf("%v %s = %#v, want %#v", c.path, c.key, got, c.want)
		}
	}
	if _, ok := prop(s, "properties")["internal"]; ok {
		t.Error("unexported field in the schema")
	}
	task, _ := fleet.JSONSchema(reflect.TypeFor[scrapeTask]())
	ts := schema(t, task)
	if p := prop(ts, "properties", "urls"); p["minItems"] != 2.0 || p["maxItems"] != 2.0 {
		t.Errorf("len=2: %v", p)
	}
	if _, err := fleet.JSONSchema(reflect.TypeFor[chan int]()); !errors.Is(err, fleet.ErrInvalidArgument) {
		t.Errorf("schema of a chan: %v", err)
	}
	if raw, err := fleet.JSONSchema(nil); raw != nil || err != nil {
		t.Errorf("schema of nil = %s, %v", raw, err)
	}
}

func TestCatalogPublishAndRead(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		err := e.F.PublishCatalog(c,
			fleet.Describe[scraperConfig, scrapedPage, scrapeTask]("cf-scraper"),
			fleet.DescribeLoop[retry, int]("ticker"),
		)
		if err != nil {
			t.Fatal(err)
		}
		// What is in Redis: fleet:catalog, a hash of type -> JSON with the
		// keys config, output, task_payload (null for a loop automation).
		key := e.Prefix + "fleet:catalog"
		if got := e.keys(t); !slices.Equal(got, []string{key}) {
			t.Fatalf("keys = %v", got)
		}
		m, err := e.Raw.Do(c, e.Raw.B().Hgetall().Key(key).Build()).AsStrMap()
		if err != nil || len(m) != 2 {
			t.Fatalf("HGETALL = %v, %v", m, err)
		}
		for typ, wantPayload := range map[string]any{"cf-scraper": reflect.TypeFor[scrapeTask](), "ticker": nil} {
			var stored map[string]json.RawMessage
			if err := json.Unmarshal([]byte(m[typ]), &stored); err != nil {
				t.Fatalf("%s: %v", typ, err)
			}
			keys := []string{}
			for k := range stored {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			if !slices.Equal(keys, []string{"config", "output", "task_payload"}) {
				t.Fatalf("%s fields = %v", typ, keys)
			}
			if wantPayload == nil {
				if string(stored["task_payload"]) != "null" {
					t.Fatalf("%s task_payload = %s, want null", typ, stored["task_payload"])
				}
			} else {
				want, _ := fleet.JSONSchema(wantPayload.(reflect.Type))
				if string(stored["task_payload"]) != string(want) {
					t.Fatalf("%s task_payload = %s, want %s", typ, stored["task_payload"], want)
				}
			}
		}
		wantOut, _ := fleet.JSONSchema(reflect.TypeFor[scrapedPage]())
		if want := `{"$schema":"https://json-schema.org/draft/2020-12/schema","properties":{"url":{"type":"string"},"body":{"type":"string"}},"type":"object","required":["url"]}`; string(wantOut) != want {
			t.Fatalf("output schema = %s\nwant %s", wantOut, want)
		}

		all, err := e.F.Catalog(c)
		if err != nil || len(all) != 2 {
			t.Fatalf("Catalog = %v, %v", all, err)
		}
		if string(all["cf-scraper"].Output) != string(wantOut) || all["ticker"].TaskPayload != nil {
			t.Fatalf("Catalog = %+v", all)
		}
		one, ok, err := e.F.CatalogSchemas(c, "cf-scraper")
		if err != nil || !ok || !reflect.DeepEqual(one, all["cf-scraper"]) {
			t.Fatalf("CatalogSchemas = %+v, %v, %v", one, ok, err)
		}
		if _, ok, err := e.F.CatalogSchemas(c, "absent"); ok || err != nil {
			t.Fatalf("absent = %v, %v", ok, err)
		}

		// A second Fleet (caching on) sees a republish: the invalidation
		// reaches its cached read.
		reader := openOn(t, tg, e.Prefix)
		if got, _ := reader.Catalog(c); len(got) != 2 {
			t.Fatalf("reader sees %d entries", len(got))
		}
		if _, ok, _ := reader.CatalogSchemas(c, "ticker"); !ok {
			t.Fatal("reader misses ticker")
		}
		if err := e.F.PublishCatalog(c, fleet.DescribeLoop[retry, string]("ticker")); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 2*time.Second, func() bool { got, _ := reader.Catalog(c); return len(got) == 1 }, "reader never saw the republish")
		waitFor(t, 2*time.Second, func() bool {
			s, ok, _ := reader.CatalogSchemas(c, "ticker")
			return ok && schema(t, s.Output)["type"] == "string"
		}, "reader never saw the new ticker")

		// No entries clears it.
		if err := e.F.PublishCatalog(c); err != nil {
			t.Fatal(err)
		}
		if got, err := e.F.Catalog(c); err != nil || len(got) != 0 {
			t.Fatalf("after clearing: %v, %v", got, err)
		}
	})
}

func TestCatalogBadInput(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		key := e.Prefix + "fleet:catalog"
		ok := fleet.DescribeLoop[retry, int]("ok")
		for _, bad := range []string{"", "a b", "a:b", "a|b", "{a}"} {
			err := e.F.PublishCatalog(c, ok, fleet.DescribeLoop[retry, int](bad))
			if !errors.Is(err, fleet.ErrInvalidName) {
				t.Fatalf("type %q: %v", bad, err)
			}
			if _, _, err := e.F.CatalogSchemas(c, bad); !errors.Is(err, fleet.ErrInvalidName) {
				t.Fatalf("CatalogSchemas(%q): %v", bad, err)
			}
		}
		if err := e.F.PublishCatalog(c, ok, ok); !errors.Is(err, fleet.ErrInvalidArgument) {
			t.Fatalf("repeated type: %v", err)
		}
		if err := e.F.PublishCatalog(c, fleet.DescribeLoop[retry, func()]("f")); !errors.Is(err, fleet.ErrInvalidArgument) {
			t.Fatalf("func output: %v", err)
		}
		cancelled, cancel := context.WithCancel(c)
		cancel()
		if err := e.F.PublishCatalog(cancelled, ok); !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled ctx: %v", err)
		}
		if got := e.keys(t); len(got) != 0 {
			t.Fatalf("refused publishes wrote %v", got)
		}

		// A stored entry that is not JSON: reported, the others returned.
		if err := e.F.PublishCatalog(c, ok, fleet.Describe[retry, int, string]("other")); err != nil {
			t.Fatal(err)
		}
		e.do(t, e.Raw.B().Hset().Key(key).FieldValue().FieldValue("broken", "not json").FieldValue("listy", "[1]").Build())
		all, err := e.F.Catalog(c)
		var de *fleet.CatalogDecodeError
		if !errors.Is(err, fleet.ErrDecode) || !errors.As(err, &de) || len(de.Types) != 2 || de.Types["broken"] == nil || de.Types["listy"] == nil {
			t.Fatalf("Catalog err = %v", err)
		}
		if len(all) != 2 || all["ok"].Config == nil || all["other"].TaskPayload == nil {
			t.Fatalf("Catalog = %+v", all)
		}
		if _, _, err := e.F.CatalogSchemas(c, "broken"); !errors.Is(err, fleet.ErrDecode) {
			t.Fatalf("CatalogSchemas(broken): %v", err)
		}
		// Publishing replaces the broken entries too.
		if err := e.F.PublishCatalog(c, ok); err != nil {
			t.Fatal(err)
		}
		if n, _ := e.Raw.Do(c, e.Raw.B().Hlen().Key(key).Build()).AsInt64(); n != 1 {
			t.Fatalf("HLEN after replace = %d", n)
		}

		// A key of another type: ErrWrongType, nothing changed.
		e.do(t, e.Raw.B().Del().Key(key).Build())
		e.do(t, e.Raw.B().Set().Key(key).Value("v").Build())
		if err := e.F.PublishCatalog(c, ok); !errors.Is(err, fleet.ErrWrongType) {
			t.Fatalf("publish on a string: %v", err)
		}
		if _, err := e.F.Catalog(c); !errors.Is(err, fleet.ErrWrongType) {
			t.Fatalf("Catalog on a string: %v", err)
		}
		if v, _ := e.get(t, key); v != "v" {
			t.Fatalf("string changed: %q", v)
		}
	})
}

// Readers never see a catalog half written: every HGETALL and HLEN during
// repeated publishes sees all entries of one publish.
func TestCatalogAtomicReplace(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		key := e.Prefix + "fleet:catalog"
		const n = 200
		entries := func(gen int) []fleet.CatalogEntry {
			out := make([]fleet.CatalogEntry, n)
			for i := range out {
				typ := "t" + string(rune('a'+gen%2)) + "-" + string(rune('0'+i%10)) + string(rune('0'+i/10%10)) + string(rune('0'+i/100))
				out[i] = fleet.DescribeLoop[retry, int](typ)
			}
			return out
		}
		if err := e.F.PublishCatalog(c, entries(0)...); err != nil {
			t.Fatal(err)
		}
		var stop atomic.Bool
		var reads, bad atomic.Int64
		var wg sync.WaitGroup
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for !stop.Load() {
					m, err := e.Raw.Do(c, e.Raw.B().Hgetall().Key(key).Build()).AsStrMap()
					l, err2 := e.Raw.Do(c, e.Raw.B().Hlen().Key(key).Build()).AsInt64()
					if err != nil || err2 != nil || len(m) != n || l != n {
						bad.Add(1)
						continue
					}
					// All entries from one publish: the same generation letter.
					gens := map[byte]bool{}
					for k := range m {
						gens[k[1]] = true
					}
					if len(gens) != 1 {
						bad.Add(1)
					}
					reads.Add(1)
				}
			}()
		}
		for gen := 1; gen <= 30; gen++ {
			if err := e.F.PublishCatalog(c, entries(gen)...); err != nil {
				t.Fatal(err)
			}
		}
		stop.Store(true)
		wg.Wait()
		if bad.Load() != 0 || reads.Load() == 0 {
			t.Fatalf("%d reads saw a partial catalog (of %d)", bad.Load(), reads.Load())
		}
	})
}
