package fleet

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/rueidis"
)

// SchemaVersion is the version of the key schema this fleet writes. The
// layout marker records it; Open refuses a database whose marker names a
// newer one.
const SchemaVersion = 1

// Marker is what the layout marker key fleet:meta records.
type Marker struct {
	// Layout is the key layout the database is written in.
	Layout Layout
	// Schema is the schema version it was written with.
	Schema int
	// Found is false when the database had no marker.
	Found bool
}

// checkMarker reads the layout marker and, when write is set, writes it on
// first use. A
// database without a marker that holds documented fleet data (fleet:catalog
// or wkrs:all, which every documented master and worker writes) is taken
// as compat, as written by another client that follows the documented
// schema.
func (f *Fleet) checkMarker(ctx context.Context, write bool) error {
	m, err := f.ReadMarker(ctx)
	if err != nil {
		return err
	}
	if !m.Found {
		m.Layout = f.layout
		n, err := f.client.Do(ctx, f.client.B().Exists().Key(f.keys.Catalog()).Build()).AsInt64()
		if err == nil && n == 0 {
			n, err = f.client.Do(ctx, f.client.B().Exists().Key(f.keys.AllWorkers()).Build()).AsInt64()
		}
		if err != nil {
			return connectErr(nil, err)
		}
		if n > 0 {
			m.Layout = LayoutCompat
		}
		if !write {
			return f.compareMarker(Marker{Layout: m.Layout, Schema: SchemaVersion, Found: true})
		}
		c := f.client
		res := c.DoMulti(ctx,
			c.B().Hsetnx().Key(f.keys.Meta()).Field("layout").Value(string(m.Layout)).Build(),
			c.B().Hsetnx().Key(f.keys.Meta()).Field("schema").Value(strconv.Itoa(SchemaVersion)).Build())
		for _, r := range res {
			if err := r.Error(); err != nil {
				if classify(err) == ErrAuth {
					// A user that may not write the marker can still work;
					// it just cannot guard the layout.
					f.log.Warn("fleet: cannot write the layout marker", "key", f.keys.Meta(), "err", err)
					return f.compareMarker(Marker{Layout: m.Layout, Schema: SchemaVersion, Found: true})
				}
				return connectErr(nil, err)
			}
		}
		// Another process may have won the race: compare with what stands.
		if m, err = f.ReadMarker(ctx); err != nil {
			return err
		}
	}
	return f.compareMarker(m)
}

func (f *Fleet) compareMarker(m Marker) error {
	if m.Schema > SchemaVersion {
		return fmt.Errorf("%w: %s records schema %d, newer than this fleet's %d: upgrade fleet", ErrMarker, f.keys.Meta(), m.Schema, SchemaVersion)
	}
	if m.Layout != f.layout {
		return fmt.Errorf("%w: %s records the %s layout, and this Fleet asked for %s: open with Layout %q, or Migrate the database to the %s layout first",
			ErrMarker, f.keys.Meta(), m.Layout, f.layout, m.Layout, f.layout)
	}
	return nil
}

// ReadMarker returns the database's layout marker (Found false when there
// is none).
func (f *Fleet) ReadMarker(ctx context.Context) (Marker, error) {
	kv, err := f.client.Do(ctx, f.client.B().Hgetall().Key(f.keys.Meta()).Build()).AsStrMap()
	if err != nil {
		if rueidis.IsRedisNil(err) {
			return Marker{}, nil
		}
		return Marker{}, opErr("read marker", f.keys.Meta(), err)
	}
	if len(kv) == 0 {
		return Marker{}, nil
	}
	m := Marker{Layout: Layout(kv["layout"]), Found: true}
	if m.Schema, err = strconv.Atoi(kv["schema"]); err != nil || (m.Layout != LayoutCompat && m.Layout != LayoutTagged) {
		return m, fmt.Errorf("%w: %s holds layout %q, schema %q: expected compat or tagged and a number; fix or delete it", ErrMarker, f.keys.Meta(), kv["layout"], kv["schema"])
	}
	return m, nil
}
