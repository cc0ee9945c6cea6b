package fleet

import (
	"context"
	"slices"
	"strings"

	"github.com/redis/rueidis"

	"github.com/fleet-go/fleet/internal/keys"
)

// famCount is one family's tally on one side.
type famCount struct{ keys, elems int64 }

// verify counts every family's keys and elements on both sides, each side
// scanned on its own, and fills the report's Families and Mismatches.
func (m *migration) verify(ctx context.Context, srcNodes []migNode) error {
	src, err := tally(ctx, m.src, srcNodes, m.opts.Batch)
	if err != nil {
		return err
	}
	dstNodes, _, err := identify(ctx, m.dst)
	if err != nil {
		return err
	}
	dst, err := tally(ctx, m.dst, dstNodes, m.opts.Batch)
	if err != nil {
		return err
	}
	fams := make([]keys.Family, 0, len(src)+len(dst))
	for f := range src {
		fams = append(fams, f)
	}
	for f := range dst {
		fams = append(fams, f)
	}
	slices.Sort(fams)
	m.rep.Families, m.rep.Mismatches = nil, nil
	for _, f := range slices.Compact(fams) {
		s, t := src[f], dst[f]
		fc := MigrateFamily{Family: string(f), SourceKeys: s.keys, TargetKeys: t.keys, SourceElements: s.elems, TargetElements: t.elems}
		m.rep.Families = append(m.rep.Families, fc)
		if s != t {
			m.rep.Mismatches = append(m.rep.Mismatches, fc)
		}
	}
	return nil
}

// tally counts the keys of each family under f's prefix, and their
// elements, leaving out the layout marker, the migration record and keys of
// unknown shape.
func tally(ctx context.Context, f *Fleet, nodes []migNode, batch int) (map[keys.Family]famCount, error) {
	out := map[keys.Family]famCount{}
	pattern := scanPattern(f.keys.Prefix())
	seen := map[string]bool{} // SCAN may return a key twice
	for _, n := range nodes {
		for cursor := uint64(0); ; {
			e, err := n.c.Do(ctx, n.c.B().Scan().Cursor(cursor).Match(pattern).Count(int64(batch)).Build()).AsScanEntry()
			if err != nil {
				return nil, opErr("migrate: verify: scan", n.addr, err)
			}
			var ks []string
			var fs []keys.Family
			for _, k := range e.Elements {
				if seen[k] || !ofFamily(k, f.keys.Prefix()) {
					continue
				}
				seen[k] = true
				p, ok := f.keys.Parse(k)
				if !ok || p.Family == keys.FamMeta || p.Family == keys.FamMigrate {
					continue
				}
				ks, fs = append(ks, k), append(fs, p.Family)
			}
			if len(ks) > 0 {
				elems, err := countElements(ctx, f.client, ks)
				if err != nil {
					return nil, err
				}
				for i, el := range elems {
					if el < 0 { // gone between SCAN and TYPE
						continue
					}
					c := out[fs[i]]
					c.keys++
					c.elems += el
					out[fs[i]] = c
				}
			}
			if cursor = e.Cursor; cursor == 0 {
				break
			}
		}
	}
	return out, nil
}

// countElements returns each key's element count (LLEN, SCARD, ZCARD,
// HLEN, XLEN or STRLEN by its type), or -1 for a key that is gone.
func countElements(ctx context.Context, c rueidis.Client, ks []string) ([]int64, error) {
	types := make(rueidis.Commands, len(ks))
	for i, k := range ks {
		types[i] = c.B().Type().Key(k).Build()
	}
	out := make([]int64, len(ks))
	cmds := make(rueidis.Commands, 0, len(ks))
	at := make([]int, 0, len(ks))
	for i, r := range c.DoMulti(ctx, types...) {
		typ, err := r.ToString()
		if err != nil {
			return nil, opErr("migrate: verify: type of", ks[i], err)
		}
		var cmd rueidis.Completed
		switch strings.ToLower(typ) {
		case "string":
			cmd = c.B().Strlen().Key(ks[i]).Build()
		case "list":
			cmd = c.B().Llen().Key(ks[i]).Build()
		case "set":
			cmd = c.B().Scard().Key(ks[i]).Build()
		case "zset":
			cmd = c.B().Zcard().Key(ks[i]).Build()
		case "hash":
			cmd = c.B().Hlen().Key(ks[i]).Build()
		case "stream":
			cmd = c.B().Xlen().Key(ks[i]).Build()
		case "none":
			out[i] = -1
			continue
		default:
			continue // a module type: counted as a key with no elements
		}
		cmds = append(cmds, cmd)
		at = append(at, i)
	}
	if len(cmds) == 0 {
		return out, nil
	}
	for j, r := range c.DoMulti(ctx, cmds...) {
		n, err := r.AsInt64()
		if err != nil {
			return nil, opErr("migrate: verify: count", ks[at[j]], err)
		}
		out[at[j]] = n
	}
	return out, nil
}
