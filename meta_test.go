package fleet_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/internal/redistest"
)

func TestMarker(t *testing.T) {
	t.Parallel()
	tg := redistest.Targets(t)[0]
	c := ctx(t)
	raw := redistest.Client(t, tg)
	opened := func(prefix string, layout fleet.Layout) error {
		f, err := fleet.Open(c, fleet.Options{URL: tg.URL, Prefix: prefix, Layout: layout})
		if err == nil {
			f.Close()
		}
		return err
	}
	marker := func(prefix string) map[string]string {
		m, err := raw.Do(c, raw.B().Hgetall().Key(prefix+"fleet:meta").Build()).AsStrMap()
		if err != nil {
			t.Fatal(err)
		}
		return m
	}

	// First use records the layout and the schema version.
	p := redistest.Prefix(t, tg)
	if err := opened(p, fleet.LayoutAuto); err != nil {
		t.Fatal(err)
	}
	if m := marker(p); len(m) != 2 || m["layout"] != "compat" || m["schema"] != "1" {
		t.Fatalf("marker %v", m)
	}
	// Another layout on the same database is refused, saying what to do.
	err := opened(p, fleet.LayoutTagged)
	if !errors.Is(err, fleet.ErrMarker) || !strings.Contains(err.Error(), "Migrate") {
		t.Fatalf("tagged on a compat database: %v", err)
	}
	if err := opened(p, fleet.LayoutCompat); err != nil {
		t.Fatalf("the same layout again: %v", err)
	}
	// A newer schema is refused; a broken marker too.
	raw.Do(c, raw.B().Hset().Key(p+"fleet:meta").FieldValue().FieldValue("schema", "99").Build())
	if err := opened(p, fleet.LayoutCompat); !errors.Is(err, fleet.ErrMarker) || !strings.Contains(err.Error(), "newer") {
		t.Fatalf("newer schema: %v", err)
	}
	raw.Do(c, raw.B().Hset().Key(p+"fleet:meta").FieldValue().FieldValue("schema", "1").FieldValue("layout", "sideways").Build())
	if err := opened(p, fleet.LayoutCompat); !errors.Is(err, fleet.ErrMarker) {
		t.Fatalf("broken marker: %v", err)
	}

	// A fresh database takes the layout asked for.
	p2 := redistest.Prefix(t, tg)
	if err := opened(p2, fleet.LayoutTagged); err != nil {
		t.Fatal(err)
	}
	if m := marker(p2); m["layout"] != "tagged" {
		t.Fatalf("marker %v", m)
	}

	// Documented data without a marker was written by another client: it is
	// compat.
	p3 := redistest.Prefix(t, tg)
	raw.Do(c, raw.B().Sadd().Key(p3+"wkrs:all").Member("scraper|host1").Build())
	if err := opened(p3, fleet.LayoutTagged); !errors.Is(err, fleet.ErrMarker) {
		t.Fatalf("tagged on unmarked documented data: %v", err)
	}
	if m := marker(p3); m["layout"] != "compat" {
		t.Fatalf("marker after the refused open: %v", m)
	}
	if err := opened(p3, fleet.LayoutAuto); err != nil {
		t.Fatal(err)
	}
}
