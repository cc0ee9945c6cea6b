package fleet

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/fleet-go/fleet/internal/keys"
)

// Defaults of MigrateOptions.
const (
	// DefaultMigrateBatch is the SCAN COUNT of a migration, and so about how
	// many keys one pipelined batch copies.
	DefaultMigrateBatch = 1000
	// DefaultMigrateListed bounds how many unknown keys a MigrateReport
	// lists (all are counted).
	DefaultMigrateListed = 1000
)

// MigrateOptions configures Migrate. The zero value of each field means its
// default.
type MigrateOptions struct {
	// DryRun reads the source and lists in MigrateReport.Plan what would be
	// copied, writing nothing anywhere. (Opening the target writes its
	// layout marker unless it is opened with Options.NoMarkerWrite.)
	DryRun bool
	// Restart ignores (and, unless DryRun, deletes) the target's progress
	// record, and copies everything from the start.
	Restart bool
	// SkipVerify skips counting keys and elements on both sides after the
	// copy.
	SkipVerify bool
	// Batch is the SCAN COUNT, and so about how many keys one pipelined
	// batch reads and writes. Defaults to DefaultMigrateBatch.
	Batch int
	// Listed bounds how many unknown keys the report lists. Defaults to
	// DefaultMigrateListed.
	Listed int
	// Progress, when set, is called after every batch, in Migrate's
	// goroutine.
	Progress func(MigrateProgress)
}

// MigrateProgress is what MigrateOptions.Progress is told after each batch.
// Counts include those of an interrupted run that this one resumed.
type MigrateProgress struct {
	// Scanned counts source keys of the fleet's families that SCAN returned
	// (a key may be returned, and copied, more than once).
	Scanned int64
	// Copied counts keys written to the target (in a dry run: that would be).
	Copied int64
	// Skipped counts keys not copied: unknown shapes, the source's layout
	// marker and migration record, and keys that expired while read.
	Skipped int64
	// Total estimates the source's keys: the sum of DBSIZE over its nodes,
	// read when Migrate began. It counts keys outside the fleet too.
	Total int64
}

// MigrateStep is one key a migration copies, as listed by a dry run.
type MigrateStep struct {
	// Source and Target are the key's names on either side.
	Source, Target string
	// Family is the key's shape (docs/SCHEMA.md), such as "queue:scheduled".
	Family string
	// Type is the Redis type: string, list, set, zset or hash.
	Type string
	// TTL is the key's remaining time to live; 0 when it has none.
	TTL time.Duration
}

// MigrateFamily counts one family's keys and elements on both sides.
// Elements are LLEN, SCARD, ZCARD, HLEN or STRLEN, summed.
type MigrateFamily struct {
	// Family is the key family, as MigrateStep.Family names it: "kv",
	// "queue", "queue:processing", "pool", ...
	Family string
	// SourceKeys and TargetKeys count the family's keys on each side.
	SourceKeys, TargetKeys int64
	// SourceElements and TargetElements sum the family's elements on each
	// side.
	SourceElements, TargetElements int64
}

// MigrateReport is what Migrate did.
type MigrateReport struct {
	MigrateProgress
	// DryRun is true when nothing was written.
	DryRun bool
	// Resumed is true when this run continued an interrupted one from the
	// target's progress record.
	Resumed bool
	// Unknown counts source keys under the fleet's families whose shape no
	// layout documents, and members of a pool's tag registry
	// (fleet:pidx:<pool>:tags, a set of key names) of no known shape;
	// UnknownKeys lists the first of them (Listed), members as "<member> (a
	// member of <key>)". They are skipped, never guessed at.
	Unknown int64
	// UnknownKeys lists the first Listed of the Unknown keys and members.
	UnknownKeys []string
	// Vanished counts keys that expired or were deleted between SCAN and
	// the copy.
	Vanished int64
	// Plan lists, in a dry run, every key the migration would copy.
	Plan []MigrateStep
	// Families holds the per-family counts of the verification, sorted by
	// family; Mismatches those that differ. Both are empty when
	// verification was skipped (DryRun, SkipVerify) or did not run.
	Families []MigrateFamily
	// Mismatches holds the entries of Families whose counts differ.
	Mismatches []MigrateFamily
	// Verified is true when the counts were compared and matched.
	Verified bool
	// Elapsed is how long Migrate ran.
	Elapsed time.Duration
}

// migration is one run of Migrate.
type migration struct {
	src, dst *Fleet
	opts     MigrateOptions
	rep      *MigrateReport
	record   string // the target's progress record key
}

// Migrate copies every fleet key of source (every family of docs/SCHEMA.md
// under its prefix) to target, re-spelling each name from the source's
// layout and prefix to the target's: typically from a compat single node
// into a Redis Cluster in the tagged layout. Values, types and remaining
// TTLs are kept (DUMP and RESTORE ... REPLACE, so a re-run overwrites); the
// members of each pool's tag registry, which are key names, are re-spelled
// too. The source is only read. The layout markers (fleet:meta) are not
// copied: each side keeps its own.
//
// Keys are found with SCAN on every master of the source, in batches; after
// each batch the target's progress record (fleet:migrate) keeps each node's
// cursor, so a run interrupted by ctx or a failure resumes where it stopped
// when called again with the same source. SCAN returns every key that
// exists for the whole iteration at least once; a key written, renamed or
// deleted on the source during the migration may be missed or copied
// stale, so stop every writer first (docs/MIGRATE.md).
//
// At the end, unless opts.SkipVerify, the keys and elements of each family
// are counted on both sides; when they differ Migrate returns the report
// and an error wrapping ErrMigrateMismatch. Keys of an unknown shape are
// skipped and listed in the report. May also return ErrMigrateSource,
// ErrInvalidArgument, ErrClosed, ErrUnavailable and ctx's error; the report
// holds what was done before.
func (source *Fleet) MigrateTo(ctx context.Context, target *Fleet, opts MigrateOptions) (MigrateReport, error) {
	start := time.Now()
	rep := MigrateReport{DryRun: opts.DryRun}
	err := migrate(ctx, source, target, opts, &rep)
	rep.Elapsed = time.Since(start)
	return rep, err
}

func migrate(ctx context.Context, source, target *Fleet, opts MigrateOptions, rep *MigrateReport) error {
	if source == nil || target == nil || source == target {
		return opErr("migrate", "", fmt.Errorf("%w: need a source and a target Fleet, and two different ones", ErrInvalidArgument))
	}
	if opts.Batch < 0 || opts.Listed < 0 {
		return opErr("migrate", "", fmt.Errorf("%w: MigrateOptions.Batch %d and Listed %d may not be negative", ErrInvalidArgument, opts.Batch, opts.Listed))
	}
	if opts.Batch == 0 {
		opts.Batch = DefaultMigrateBatch
	}
	if opts.Listed == 0 {
		opts.Listed = DefaultMigrateListed
	}
	for _, f := range []*Fleet{source, target} {
		if err := f.alive(ctx); err != nil {
			return opErr("migrate", "", err)
		}
	}
	m := &migration{src: source, dst: target, opts: opts, rep: rep, record: target.keys.Migrate()}
	srcNodes, srcID, err := identify(ctx, source)
	if err != nil {
		return err
	}
	_, dstID, err := identify(ctx, target)
	if err != nil {
		return err
	}
	if srcID == dstID {
		return opErr("migrate", "", fmt.Errorf("%w: source and target are the same database and prefix", ErrInvalidArgument))
	}
	for _, n := range srcNodes {
		rep.Total += n.size
	}
	rec, err := m.loadRecord(ctx, srcID)
	if err != nil {
		return err
	}
	for _, n := range srcNodes {
		if err := m.copyNode(ctx, n, rec); err != nil {
			return err
		}
	}
	if opts.DryRun || opts.SkipVerify {
		return m.finish(ctx, "copied")
	}
	if err := m.verify(ctx, srcNodes); err != nil {
		return err
	}
	if len(rep.Mismatches) > 0 {
		if err := m.finish(ctx, "mismatch"); err != nil {
			return err
		}
		var b strings.Builder
		for i, f := range rep.Mismatches {
			if i > 0 {
				b.WriteString("; ")
			}
			fmt.Fprintf(&b, "%s: %d keys/%d elements on the source, %d/%d on the target", f.Family, f.SourceKeys, f.SourceElements, f.TargetKeys, f.TargetElements)
		}
		return opErr("migrate", "", fmt.Errorf("%w: %s", ErrMigrateMismatch, b.String()))
	}
	rep.Verified = true
	return m.finish(ctx, "done")
}

// migNode is one master of a Fleet's server.
type migNode struct {
	id   string // run_id
	addr string
	size int64 // DBSIZE when Migrate began
	c    rueidis.Client
}

// identify returns the masters of f's server, sorted by run id, and a
// string naming f's data: its layout, prefix, database and masters. A
// restarted node gets a new run id, and with it a new identity: its SCAN
// cursors would mean nothing.
func identify(ctx context.Context, f *Fleet) ([]migNode, string, error) {
	var nodes []migNode
	db := "0"
	for addr, c := range f.client.Nodes() {
		rs := c.DoMulti(ctx,
			c.B().Info().Section("server").Build(),
			c.B().Role().Build(),
			c.B().Dbsize().Build(),
			c.B().ClientInfo().Build())
		info, err := rs[0].ToString()
		if err != nil {
			return nil, "", opErr("migrate: read INFO of", addr, err)
		}
		role, err := rs[1].ToArray()
		if err == nil && len(role) == 0 {
			err = errors.New("empty ROLE reply")
		}
		if err != nil {
			return nil, "", opErr("migrate: read ROLE of", addr, err)
		}
		if r, _ := role[0].ToString(); r != "master" && f.cluster {
			continue
		}
		n := migNode{addr: addr, c: c}
		if n.size, err = rs[2].AsInt64(); err != nil {
			return nil, "", opErr("migrate: DBSIZE of", addr, err)
		}
		for _, line := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "run_id:"); ok {
				n.id = v
			}
		}
		if n.id == "" {
			return nil, "", opErr("migrate", "", fmt.Errorf("%w: INFO of %s names no run_id", ErrUnavailable, addr))
		}
		if ci, err := rs[3].ToString(); err == nil {
			for _, kv := range strings.Fields(ci) {
				if v, ok := strings.CutPrefix(kv, "db="); ok {
					db = v
				}
			}
		}
		nodes = append(nodes, n)
	}
	if len(nodes) == 0 {
		return nil, "", opErr("migrate", "", fmt.Errorf("%w: no master node", ErrUnavailable))
	}
	slices.SortFunc(nodes, func(a, b migNode) int { return strings.Compare(a.id, b.id) })
	ids := make([]string, len(nodes))
	for i, n := range nodes {
		ids[i] = n.id
	}
	return nodes, fmt.Sprintf("layout=%s prefix=%q db=%s nodes=%s", f.layout, f.keys.Prefix(), db, strings.Join(ids, ",")), nil
}

// Fields of the progress record fleet:migrate.
const (
	recSource   = "source"   // the source's identity
	recState    = "state"    // copying, copied, mismatch or done
	recCursor   = "cursor:"  // + node run id: the next SCAN cursor
	recDone     = "done:"    // + node run id: "1" once its SCAN ended
	recScanned  = "scanned"  // counts so far
	recCopied   = "copied"   //
	recSkipped  = "skipped"  //
	recUnknown  = "unknown"  //
	recVanished = "vanished" //
	recUpdated  = "updated"  // unix ms of the last batch
)

// loadRecord reads the target's progress record and decides whether this
// run resumes it. It returns the record's fields to resume from (nil for a
// fresh start), and starts a fresh record unless DryRun.
func (m *migration) loadRecord(ctx context.Context, srcID string) (map[string]string, error) {
	c := m.dst.client
	if m.opts.DryRun {
		return nil, nil
	}
	if m.opts.Restart {
		if err := c.Do(ctx, c.B().Del().Key(m.record).Build()).Error(); err != nil {
			return nil, opErr("migrate: delete progress record", m.record, err)
		}
	}
	rec, err := c.Do(ctx, c.B().Hgetall().Key(m.record).Build()).AsStrMap()
	if err != nil && !rueidis.IsRedisNil(err) {
		return nil, opErr("migrate: read progress record", m.record, err)
	}
	st := rec[recState]
	if len(rec) > 0 && st != "done" {
		if rec[recSource] != srcID {
			return nil, opErr("migrate", "", fmt.Errorf("%w: %s records an unfinished migration (%s) from %s, not from this source (%s): finish that one, or pass Restart",
				ErrMigrateSource, m.record, st, rec[recSource], srcID))
		}
		m.rep.Resumed = true
		num := func(f string) int64 { n, _ := strconv.ParseInt(rec[f], 10, 64); return n }
		m.rep.Scanned, m.rep.Copied, m.rep.Skipped = num(recScanned), num(recCopied), num(recSkipped)
		m.rep.Unknown, m.rep.Vanished = num(recUnknown), num(recVanished)
		return rec, nil
	}
	// A fresh start: replace a finished record (or none).
	cmds := rueidis.Commands{
		c.B().Del().Key(m.record).Build(),
		c.B().Hset().Key(m.record).FieldValue().FieldValue(recSource, srcID).FieldValue(recState, "copying").
			FieldValue(recUpdated, strconv.FormatInt(time.Now().UnixMilli(), 10)).Build(),
	}
	for _, r := range c.DoMulti(ctx, cmds...) {
		if err := r.Error(); err != nil {
			return nil, opErr("migrate: write progress record", m.record, err)
		}
	}
	return nil, nil
}

// finish sets the record's state (nothing in a dry run).
func (m *migration) finish(ctx context.Context, state string) error {
	if m.opts.DryRun {
		return nil
	}
	c := m.dst.client
	err := c.Do(ctx, c.B().Hset().Key(m.record).FieldValue().FieldValue(recState, state).
		FieldValue(recUpdated, strconv.FormatInt(time.Now().UnixMilli(), 10)).Build()).Error()
	return opErr("migrate: write progress record", m.record, err)
}

// scanPattern is the one SCAN MATCH pattern of a migration: the prefix (its
// glob characters escaped) followed by the first letter of a family
// (fleet:, stream:, wkr:, wkrs:). One pass over the keyspace instead of
// one per family; keys that are not of a family are dropped in Go.
func scanPattern(prefix string) string {
	var b strings.Builder
	for _, r := range prefix {
		if strings.ContainsRune(`\*?[]^`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String() + "[fsw]*"
}

// ofFamily reports whether key (under prefix) starts like a fleet family.
func ofFamily(key, prefix string) bool {
	rest, ok := strings.CutPrefix(key, prefix)
	if !ok {
		return false
	}
	for _, f := range []string{"fleet:", "wkr:", "wkrs:", "stream:"} {
		if strings.HasPrefix(rest, f) {
			return true
		}
	}
	return false
}

// copyNode scans one source node from the recorded cursor to the end,
// copying batch by batch and recording the cursor after each.
func (m *migration) copyNode(ctx context.Context, n migNode, rec map[string]string) error {
	if rec[recDone+n.id] == "1" {
		return nil
	}
	var cursor uint64
	if s := rec[recCursor+n.id]; s != "" {
		cursor, _ = strconv.ParseUint(s, 10, 64)
	}
	pattern := scanPattern(m.src.keys.Prefix())
	for {
		if err := ctx.Err(); err != nil {
			return opErr("migrate", "", fmt.Errorf("%w", err))
		}
		e, err := n.c.Do(ctx, n.c.B().Scan().Cursor(cursor).Match(pattern).Count(int64(m.opts.Batch)).Build()).AsScanEntry()
		if err != nil {
			return opErr("migrate: scan", n.addr, err)
		}
		if err := m.copyBatch(ctx, e.Elements); err != nil {
			return err
		}
		cursor = e.Cursor
		if err := m.save(ctx, n, cursor); err != nil {
			return err
		}
		if m.opts.Progress != nil {
			m.opts.Progress(m.rep.MigrateProgress)
		}
		if cursor == 0 {
			return nil
		}
	}
}

// save records the node's next cursor and the counts (nothing in a dry run).
func (m *migration) save(ctx context.Context, n migNode, cursor uint64) error {
	if m.opts.DryRun {
		return nil
	}
	c := m.dst.client
	i := func(v int64) string { return strconv.FormatInt(v, 10) }
	b := c.B().Hset().Key(m.record).FieldValue().
		FieldValue(recCursor+n.id, strconv.FormatUint(cursor, 10)).
		FieldValue(recScanned, i(m.rep.Scanned)).FieldValue(recCopied, i(m.rep.Copied)).
		FieldValue(recSkipped, i(m.rep.Skipped)).FieldValue(recUnknown, i(m.rep.Unknown)).
		FieldValue(recVanished, i(m.rep.Vanished)).FieldValue(recUpdated, i(time.Now().UnixMilli()))
	if cursor == 0 {
		b = b.FieldValue(recDone+n.id, "1")
	}
	return opErr("migrate: write progress record", m.record, c.Do(ctx, b.Build()).Error())
}

// migKey is one source key to copy.
type migKey struct {
	src, dst string
	fam      keys.Family
}

// copyBatch copies the keys one SCAN call returned: one pipeline of reads on
// the source, one of writes on the target.
func (m *migration) copyBatch(ctx context.Context, batch []string) error {
	sk, tk := m.src.keys, m.dst.keys
	var todo []migKey
	for _, key := range batch {
		if !ofFamily(key, sk.Prefix()) {
			continue
		}
		m.rep.Scanned++
		p, ok := sk.Parse(key)
		if !ok {
			m.unknown(key, true)
			continue
		}
		if p.Family == keys.FamMeta || p.Family == keys.FamMigrate {
			m.rep.Skipped++
			continue
		}
		dst, ok := tk.Spell(p)
		if !ok {
			// A shard of a sharded queue (QueueOptions.Shards): the compat
			// layout has no place for it.
			return opErr("migrate", "", fmt.Errorf("%w: %s belongs to sharded queue %q, which the target's layout cannot hold: lower its QueueOptions.Shards to 1 and let the sweeper drain the other shards first (docs/SCALING.md)", ErrLayout, key, p.Name))
		}
		todo = append(todo, migKey{src: key, dst: dst, fam: p.Family})
	}
	if len(todo) == 0 {
		return nil
	}
	sc := m.src.client
	reads := make(rueidis.Commands, 0, 2*len(todo))
	for _, k := range todo {
		reads = append(reads, sc.B().Pttl().Key(k.src).Build())
		switch {
		case m.opts.DryRun:
			reads = append(reads, sc.B().Type().Key(k.src).Build())
		case k.fam == keys.FamPoolTags:
			reads = append(reads, sc.B().Smembers().Key(k.src).Build())
		default:
			reads = append(reads, sc.B().Dump().Key(k.src).Build())
		}
	}
	rs := sc.DoMulti(ctx, reads...)
	tc := m.dst.client
	writes := make(rueidis.Commands, 0, len(todo))
	for i, k := range todo {
		pttl, err := rs[2*i].AsInt64()
		if err != nil {
			return opErr("migrate: read TTL of", k.src, err)
		}
		if pttl == -2 {
			m.rep.Vanished++
			m.rep.Skipped++
			continue
		}
		ttl := max(pttl, 0) // -1: no TTL
		if pttl == 0 {
			ttl = 1 // expiring within the millisecond: RESTORE's 0 would mean "no TTL"
		}
		val := rs[2*i+1]
		switch {
		case m.opts.DryRun:
			typ, err := val.ToString()
			if err != nil {
				return opErr("migrate: read type of", k.src, err)
			}
			if typ == "none" {
				m.rep.Vanished++
				m.rep.Skipped++
				continue
			}
			m.rep.Plan = append(m.rep.Plan, MigrateStep{Source: k.src, Target: k.dst, Family: string(k.fam), Type: typ, TTL: time.Duration(ttl) * time.Millisecond})
		case k.fam == keys.FamPoolTags:
			members, err := val.AsStrSlice()
			if err != nil {
				return opErr("migrate: read", k.src, err)
			}
			var moved []string
			for _, mb := range members {
				if t, ok := sk.Translate(mb, tk); ok {
					moved = append(moved, t)
				} else {
					m.unknown(fmt.Sprintf("%s (a member of %s)", mb, k.src), false)
				}
			}
			writes = append(writes, tc.B().Del().Key(k.dst).Build())
			if len(moved) > 0 {
				writes = append(writes, tc.B().Sadd().Key(k.dst).Member(moved...).Build())
				if ttl > 0 {
					writes = append(writes, tc.B().Pexpire().Key(k.dst).Milliseconds(ttl).Build())
				}
			}
		default:
			payload, err := val.ToString()
			if rueidis.IsRedisNil(err) {
				m.rep.Vanished++
				m.rep.Skipped++
				continue
			}
			if err != nil {
				return opErr("migrate: dump", k.src, err)
			}
			writes = append(writes, tc.B().Restore().Key(k.dst).Ttl(ttl).SerializedValue(payload).Replace().Build())
		}
		m.rep.Copied++
	}
	if len(writes) == 0 {
		return nil
	}
	for i, r := range tc.DoMulti(ctx, writes...) {
		if err := r.Error(); err != nil {
			hint := ""
			if strings.Contains(err.Error(), "payload version") {
				hint = " (the target's Redis must be as new as the source's)"
			}
			return opErr("migrate: write"+hint, writes[i].Commands()[1], err)
		}
	}
	return nil
}

// unknown counts and lists a key of no known shape: a source key (skipped),
// or a member of a pool's tag registry (dropped from the copy).
func (m *migration) unknown(key string, isKey bool) {
	m.rep.Unknown++
	if isKey {
		m.rep.Skipped++
	}
	if len(m.rep.UnknownKeys) < m.opts.Listed {
		m.rep.UnknownKeys = append(m.rep.UnknownKeys, key)
	}
}
