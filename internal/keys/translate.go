package keys

import "strings"

// Family names a shape of key: one row of docs/SCHEMA.md (documented or
// derived). Migrations count keys and elements per family.
type Family string

// The families of keys, one per shape in docs/SCHEMA.md.
const (
	FamKV              Family = "kv"                     // fleet:kv:<ns>:<key>
	FamCounter         Family = "counter"                // fleet:counter:<name>
	FamLock            Family = "lock"                   // fleet:lock:<name>
	FamFence           Family = "fence"                  // fleet:fence:<lock> (derived)
	FamLockTomb        Family = "locktomb"               // fleet:locktomb:<lock> (derived, short-lived)
	FamLimit           Family = "limit"                  // fleet:limit:<name> (optional, short-lived)
	FamSem             Family = "sem"                    // fleet:sem:<name> (optional, short-lived)
	FamSemTomb         Family = "semtomb"                // fleet:semtomb:<name> (optional, short-lived)
	FamCatalog         Family = "catalog"                // fleet:catalog
	FamMeta            Family = "meta"                   // fleet:meta (derived: the layout marker)
	FamMigrate         Family = "migrate"                // fleet:migrate (derived: a migration's progress record)
	FamQueues          Family = "queues"                 // fleet:queues (derived)
	FamPools           Family = "pools"                  // fleet:pools (derived)
	FamQueuePending    Family = "queue"                  // fleet:queue:<name>
	FamQueueProcessing Family = "queue:processing"       // fleet:queue:<name>:processing
	FamQueueBody       Family = "queue:processing:body"  // fleet:queue:<name>:processing:body
	FamQueueLease      Family = "queue:processing:lease" // ... (derived)
	FamQueueScheduled  Family = "queue:scheduled"        // fleet:queue:<name>:scheduled
	FamQueueDead       Family = "queue:dead"             // fleet:queue:<name>:dead
	FamQueueDedup      Family = "queue:dedup"            // ... (derived)
	FamQueuePolicy     Family = "queue:policy"           // ... (derived)
	FamQueueCall       Family = "queue:call"             // fleet:queue:<name>:call:<prefix> (derived, short-lived)
	FamQueueShards     Family = "queue:shards"           // fleet:queue:<name>:shards (derived, tagged only)
	FamQueuePermits    Family = "queue:permits"          // fleet:queue:<name>:permits (derived; shard 0 only)
	FamQueueHistMinute Family = "queue:hist:m"           // fleet:queue:<name>:hist:m:<hour> (derived, expiring)
	FamQueueHistDay    Family = "queue:hist:d"           // fleet:queue:<name>:hist:d:<day> (derived, expiring)
	// The keys of priorities, groups and GlobalConcurrency (derived;
	// QueueSuffixes): the three ending in ":" are prefixes of a group's
	// keys, whose name is the Key's Item.
	FamQueuePrio         Family = "queue:prio"     // fleet:queue:<name>:prio
	FamQueueGroups       Family = "queue:groups"   // fleet:queue:<name>:groups
	FamQueueGroupState   Family = "queue:gstate"   // fleet:queue:<name>:gstate
	FamQueueGroupBlocked Family = "queue:gblocked" // fleet:queue:<name>:gblocked
	FamQueueGroupLimits  Family = "queue:glimits"  // fleet:queue:<name>:glimits
	FamQueueGroupPaused  Family = "queue:gpaused"  // fleet:queue:<name>:gpaused
	FamQueueRunning      Family = "queue:running"  // fleet:queue:<name>:running
	FamQueueGroup        Family = "queue:g"        // fleet:queue:<name>:g:<group>
	FamQueueGroupRun     Family = "queue:grun"     // fleet:queue:<name>:grun:<group>
	FamQueueGroupRate    Family = "queue:grate"    // fleet:queue:<name>:grate:<group> (short-lived)
	FamQueueSignal       Family = "queue:signal"   // fleet:queue:<name>:signal
	FamQueueGroupPending Family = "queue:gpending" // fleet:queue:<name>:gpending
	// The keys of flows and progress (docs/FLOWS.md): flow and fout are
	// prefixes of a task's keys, whose id is the Key's Item.
	FamQueueFlow      Family = "queue:flow"     // fleet:queue:<name>:flow:<id>
	FamQueueFlowOut   Family = "queue:fout"     // fleet:queue:<name>:fout:<id>
	FamQueueOutbox    Family = "queue:outbox"   // fleet:queue:<name>:outbox
	FamQueueWaiting   Family = "queue:waiting"  // fleet:queue:<name>:waiting
	FamQueueProgress  Family = "queue:progress" // fleet:queue:<name>:progress
	FamQueueRetained  Family = "queue:retained" // fleet:queue:<name>:retained (derived)
	FamQueueMeta      Family = "queue:meta"     // fleet:queue:<name>:meta:<key>:<canon> (derived; Item "<key>:<canon>")
	FamQueueLog       Family = "queue:log"      // fleet:queue:<name>:log:<id> (derived)
	FamQueueSteps     Family = "queue:steps"    // fleet:queue:<name>:steps:<id> (derived)
	FamFlow           Family = "flow"           // fleet:flow:<id>
	FamFlowMembers    Family = "flow:m"         // fleet:flow:<id>:m
	FamFlows          Family = "flows"          // fleet:flows (derived)
	FamPool           Family = "pool"           // fleet:pool:<name>
	FamPoolClaim      Family = "pool:claim"     // fleet:pool:<name>:claim:<item>
	FamPoolAll        Family = "pidx:all"       // fleet:pidx:<pool>:all (derived)
	FamPoolExp        Family = "pidx:exp"       // fleet:pidx:<pool>:exp (derived)
	FamPoolTags       Family = "pidx:tags"      // fleet:pidx:<pool>:tags (derived; members are key names)
	FamPoolSignal     Family = "pidx:sig"       // fleet:pidx:<pool>:sig (derived)
	FamPoolScan       Family = "pidx:scan"      // fleet:pidx:<pool>:scan (derived)
	FamPoolTagIndex   Family = "pidx:t"         // fleet:pidx:<pool>:t:<field>:<canon> (derived)
	FamPoolOwner      Family = "pidx:own"       // fleet:pidx:<pool>:own:<item> (derived)
	FamPoolFree       Family = "pidx:free"      // fleet:pidx:<pool>:free (derived)
	FamPoolHeld       Family = "pidx:held"      // fleet:pidx:<pool>:held (derived)
	FamPoolBad        Family = "pidx:bad"       // fleet:pidx:<pool>:bad (derived)
	FamPoolForeign    Family = "pidx:foreign"   // fleet:pidx:<pool>:foreign (derived)
	FamPoolFields     Family = "pidx:fields"    // fleet:pidx:<pool>:fields (derived)
	FamPoolSweep      Family = "pidx:sweep"     // fleet:pidx:<pool>:sweep (derived)
	FamPoolToken      Family = "pidx:tok"       // fleet:pidx:<pool>:tok:<token> (derived)
	FamWorkerHardware Family = "wkr:hardware"   // wkr:<type>:<id>:hardware
	FamWorkerConfig   Family = "wkr:config"     // wkr:<type>:<id>:config
	FamWorkerGen      Family = "wkr:gen"        // wkr:<type>:<id>:gen
	FamWorkerState    Family = "wkr:state"      // wkr:<type>:<id>:state
	FamWorkerStats    Family = "wkr:stats"      // wkr:<type>:<id>:stats
	FamWorkers        Family = "wkrs"           // wkrs:<type>
	FamAllWorkers     Family = "wkrs:all"       // wkrs:all
	FamStream         Family = "stream"         // stream:<type>
)

var (
	singles = map[string]Family{"catalog": FamCatalog, "meta": FamMeta, "migrate": FamMigrate, "queues": FamQueues, "pools": FamPools, "flows": FamFlows}
	// queueTails maps what follows a queue's name to its key's family.
	queueTails = map[string]Family{
		"":                  FamQueuePending,
		":processing":       FamQueueProcessing,
		":processing:body":  FamQueueBody,
		":processing:lease": FamQueueLease,
		":scheduled":        FamQueueScheduled,
		":dead":             FamQueueDead,
		":dedup":            FamQueueDedup,
		":policy":           FamQueuePolicy,
		":shards":           FamQueueShards,
		":permits":          FamQueuePermits,
	}
	workerFields = map[string]Family{
		"hardware": FamWorkerHardware,
		"config":   FamWorkerConfig,
		"gen":      FamWorkerGen,
		"state":    FamWorkerState,
		"stats":    FamWorkerStats,
	}
)

// Key is a key name taken apart: its family and the names in it. Which
// fields are set depends on the family: Name is the entity (kv namespace,
// counter, lock, queue, pool, type of a worker, worker set or stream), ID
// the worker id, Item the pool item id or kv key, Field and Canon a pool
// tag index's tag field and canonical value.
type Key struct {
	Family Family
	Name   string
	ID     string
	Item   string
	Field  string
	Canon  string
	// Shard is the shard of a sharded queue's key (tagged layout; 0: the
	// queue's own keys).
	Shard int
}

// Parse takes apart key, a key name in this layout and under this prefix.
// It reports false for a key of no shape in docs/SCHEMA.md, and for one
// whose names Check refuses: such a key is never guessed at.
func (k Keys) Parse(key string) (Key, bool) {
	rest, ok := strings.CutPrefix(key, k.prefix)
	if !ok {
		return Key{}, false
	}
	var p Key
	switch {
	case strings.HasPrefix(rest, "fleet:"):
		p, ok = k.parseFleet(rest[len("fleet:"):])
	case strings.HasPrefix(rest, "wkrs:"):
		p, ok = parseWorkers(rest[len("wkrs:"):])
	case strings.HasPrefix(rest, "wkr:"):
		p, ok = k.parseWorker(rest[len("wkr:"):])
	case strings.HasPrefix(rest, "stream:"):
		p = Key{Family: FamStream, Name: rest[len("stream:"):]}
		ok = Check(KindStream, p.Name) == nil
	default:
		return Key{}, false
	}
	if !ok {
		return Key{}, false
	}
	// A key is of this layout only if this layout spells it back the same.
	if s, good := k.Spell(p); !good || s != key {
		return Key{}, false
	}
	return p, true
}

// entity splits an entity name off rest: the text up to the first ':' in
// the compat layout, or a whole "{name}" in the tagged one. tail is what
// follows the entity (with its leading ':'), or "".
func (k Keys) entity(rest string) (name, tail string, ok bool) {
	if k.tagged {
		if !strings.HasPrefix(rest, "{") {
			return "", "", false
		}
		end := strings.IndexByte(rest, '}')
		if end < 0 {
			return "", "", false
		}
		return rest[1:end], rest[end+1:], true
	}
	if i := strings.IndexByte(rest, ':'); i >= 0 {
		return rest[:i], rest[i:], true
	}
	return rest, "", true
}

func (k Keys) parseFleet(rest string) (Key, bool) {
	fam, rest, _ := strings.Cut(rest, ":")
	switch fam {
	case "catalog", "meta", "migrate", "queues", "pools", "flows":
		if rest != "" {
			return Key{}, false
		}
		return Key{Family: singles[fam]}, true
	case "kv":
		ns, key, ok := strings.Cut(rest, ":")
		return Key{Family: FamKV, Name: ns, Item: key}, ok && Check(KindNamespace, ns) == nil && Check(KindKey, key) == nil
	case "counter":
		return Key{Family: FamCounter, Name: rest}, Check(KindCounter, rest) == nil
	case "lock", "fence", "locktomb":
		name := rest
		if k.tagged {
			if len(rest) < 2 || rest[0] != '{' || rest[len(rest)-1] != '}' {
				return Key{}, false
			}
			name = rest[1 : len(rest)-1]
		}
		f := map[string]Family{"lock": FamLock, "fence": FamFence, "locktomb": FamLockTomb}[fam]
		return Key{Family: f, Name: name}, Check(KindLock, name) == nil
	case "limit", "sem", "semtomb":
		name := rest
		if k.tagged {
			if len(rest) < 2 || rest[0] != '{' || rest[len(rest)-1] != '}' {
				return Key{}, false
			}
			name = rest[1 : len(rest)-1]
		}
		if fam == "limit" {
			return Key{Family: FamLimit, Name: name}, Check(KindLimiter, name) == nil
		}
		f := map[string]Family{"sem": FamSem, "semtomb": FamSemTomb}[fam]
		return Key{Family: f, Name: name}, Check(KindSemaphore, name) == nil
	case "queue":
		name, tail, ok := k.entity(rest)
		shard := 0
		if ok && k.tagged && Check(KindQueue, name) != nil {
			name, shard, ok = ParseShardTag(name) // a shard's key (QueueShard)
		}
		if !ok || Check(KindQueue, name) != nil {
			return Key{}, false
		}
		if call, ok := strings.CutPrefix(tail, ":call:"); ok {
			return Key{Family: FamQueueCall, Name: name, Item: call, Shard: shard}, Check(KindItem, call) == nil
		}
		for _, h := range []struct {
			tail string
			fam  Family
		}{{":hist:m:", FamQueueHistMinute}, {":hist:d:", FamQueueHistDay}} {
			if at, ok := strings.CutPrefix(tail, h.tail); ok {
				return Key{Family: h.fam, Name: name, Item: at}, shard == 0 && histBucket(at)
			}
		}
		for _, x := range QueueSuffixes {
			if strings.HasSuffix(x.Suffix, ":") {
				if g, ok := strings.CutPrefix(tail, x.Suffix); ok {
					kind := KindGroup
					if x.Flow {
						kind = KindItem // a task id
					}
					if x.Family == FamQueueMeta {
						// "<key>:<canon>": a metadata key, then its value as MetaCanon spells it.
						mk, canon, ok := strings.Cut(g, ":")
						return Key{Family: x.Family, Name: name, Item: g, Shard: shard},
							ok && Check(KindGroup, mk) == nil && canon != "" && (canon == "s" || Check(KindItem, canon) == nil)
					}
					return Key{Family: x.Family, Name: name, Item: g, Shard: shard}, Check(kind, g) == nil
				}
			} else if tail == x.Suffix {
				return Key{Family: x.Family, Name: name, Shard: shard}, true
			}
		}
		f, known := queueTails[tail]
		return Key{Family: f, Name: name, Shard: shard}, known && !(f == FamQueueShards && (shard > 0 || !k.tagged)) && !(f == FamQueuePermits && shard > 0)
	case "flow":
		id, tail, ok := k.entity(rest)
		if !ok || Check(KindFlow, id) != nil {
			return Key{}, false
		}
		switch tail {
		case "":
			return Key{Family: FamFlow, Name: id}, true
		case ":m":
			return Key{Family: FamFlowMembers, Name: id}, true
		}
		return Key{}, false
	case "pool":
		name, tail, ok := k.entity(rest)
		if !ok || Check(KindPool, name) != nil {
			return Key{}, false
		}
		if tail == "" {
			return Key{Family: FamPool, Name: name}, true
		}
		item, ok := strings.CutPrefix(tail, ":claim:")
		return Key{Family: FamPoolClaim, Name: name, Item: item}, ok && Check(KindItem, item) == nil
	case "pidx":
		name, tail, ok := k.entity(rest)
		if !ok || Check(KindPool, name) != nil || !strings.HasPrefix(tail, ":") {
			return Key{}, false
		}
		tail = tail[1:]
		switch tail {
		case "all":
			return Key{Family: FamPoolAll, Name: name}, true
		case "exp":
			return Key{Family: FamPoolExp, Name: name}, true
		case "tags":
			return Key{Family: FamPoolTags, Name: name}, true
		case "sig":
			return Key{Family: FamPoolSignal, Name: name}, true
		case "scan":
			return Key{Family: FamPoolScan, Name: name}, true
		case "free":
			return Key{Family: FamPoolFree, Name: name}, true
		case "held":
			return Key{Family: FamPoolHeld, Name: name}, true
		case "bad":
			return Key{Family: FamPoolBad, Name: name}, true
		case "foreign":
			return Key{Family: FamPoolForeign, Name: name}, true
		case "fields":
			return Key{Family: FamPoolFields, Name: name}, true
		case "sweep":
			return Key{Family: FamPoolSweep, Name: name}, true
		}
		if tok, ok := strings.CutPrefix(tail, "tok:"); ok {
			return Key{Family: FamPoolToken, Name: name, Item: tok}, Check(KindItem, tok) == nil
		}
		if item, ok := strings.CutPrefix(tail, "own:"); ok {
			return Key{Family: FamPoolOwner, Name: name, Item: item}, Check(KindItem, item) == nil
		}
		if fc, ok := strings.CutPrefix(tail, "t:"); ok {
			field, canon, ok := strings.Cut(fc, ":")
			// canon spells any tag value: only its emptiness is wrong.
			return Key{Family: FamPoolTagIndex, Name: name, Field: field, Canon: canon}, ok && canon != "" && Check(KindField, field) == nil
		}
	}
	return Key{}, false
}

func parseWorkers(rest string) (Key, bool) {
	if rest == "all" {
		return Key{Family: FamAllWorkers}, true
	}
	return Key{Family: FamWorkers, Name: rest}, Check(KindType, rest) == nil
}

func (k Keys) parseWorker(rest string) (Key, bool) {
	var typ, id, field string
	if k.tagged {
		tid, tail, ok := k.entity(rest)
		if !ok || !strings.HasPrefix(tail, ":") {
			return Key{}, false
		}
		typ, id, ok = strings.Cut(tid, ":")
		if !ok {
			return Key{}, false
		}
		field = tail[1:]
	} else {
		parts := strings.Split(rest, ":")
		if len(parts) != 3 {
			return Key{}, false
		}
		typ, id, field = parts[0], parts[1], parts[2]
	}
	f, known := workerFields[field]
	return Key{Family: f, Name: typ, ID: id}, known && Check(KindType, typ) == nil && Check(KindWorker, id) == nil
}

// Spell returns the key name of p in this layout and under this prefix,
// through the one helper of its family; false for an unknown family.
func (k Keys) Spell(p Key) (string, bool) {
	if p.Shard > 0 && !k.tagged {
		return "", false // the compat layout has no shards
	}
	q := func() Queue { return k.QueueShard(p.Name, p.Shard) }
	x := func() PoolIndex { return k.PoolIndex(p.Name) }
	w := func() Worker { return k.Worker(p.Name, p.ID) }
	switch p.Family {
	case FamKV:
		return k.KV(p.Name, p.Item), true
	case FamCounter:
		return k.Counter(p.Name), true
	case FamLock:
		return k.Lock(p.Name), true
	case FamFence:
		return k.LockFence(p.Name), true
	case FamLockTomb:
		return k.LockTomb(p.Name), true
	case FamLimit:
		return k.Limit(p.Name), true
	case FamSem:
		return k.Sem(p.Name), true
	case FamSemTomb:
		return k.SemTomb(p.Name), true
	case FamCatalog:
		return k.Catalog(), true
	case FamMeta:
		return k.Meta(), true
	case FamMigrate:
		return k.Migrate(), true
	case FamQueues:
		return k.Queues(), true
	case FamFlows:
		return k.Flows(), true
	case FamFlow:
		return k.Flow(p.Name).Record, true
	case FamFlowMembers:
		return k.Flow(p.Name).Members, true
	case FamPools:
		return k.Pools(), true
	case FamQueuePending:
		return q().Pending, true
	case FamQueueProcessing:
		return q().Processing, true
	case FamQueueBody:
		return q().Body, true
	case FamQueueLease:
		return q().Lease, true
	case FamQueueScheduled:
		return q().Scheduled, true
	case FamQueueDead:
		return q().Dead, true
	case FamQueueDedup:
		return q().Dedup, true
	case FamQueuePolicy:
		return q().Policy, true
	case FamQueueCall:
		return q().Call + p.Item, true
	case FamQueueShards:
		return k.Queue(p.Name).Shards, k.tagged && p.Shard == 0
	case FamQueuePermits:
		return k.Queue(p.Name).Permits, p.Shard == 0
	case FamQueueHistMinute:
		return k.Queue(p.Name).HistMinute + p.Item, p.Shard == 0 && histBucket(p.Item)
	case FamQueueHistDay:
		return k.Queue(p.Name).HistDay + p.Item, p.Shard == 0 && histBucket(p.Item)
	case FamQueuePrio, FamQueueGroups, FamQueueGroupState, FamQueueGroupBlocked, FamQueueGroupLimits, FamQueueGroupPaused,
		FamQueueRunning, FamQueueGroup, FamQueueGroupRun, FamQueueGroupRate, FamQueueSignal, FamQueueGroupPending,
		FamQueueFlow, FamQueueFlowOut, FamQueueOutbox, FamQueueWaiting, FamQueueProgress, FamQueueRetained, FamQueueMeta, FamQueueLog, FamQueueSteps:
		qk := q()
		for _, x := range QueueSuffixes {
			if x.Family == p.Family {
				return *x.Key(&qk) + p.Item, true
			}
		}
	case FamPool:
		return k.Pool(p.Name), true
	case FamPoolClaim:
		return k.PoolClaim(p.Name, p.Item), true
	case FamPoolAll:
		return x().All, true
	case FamPoolExp:
		return x().Exp, true
	case FamPoolTags:
		return x().Tags, true
	case FamPoolSignal:
		return x().Signal, true
	case FamPoolScan:
		return x().Scan, true
	case FamPoolTagIndex:
		return k.PoolTagIndex(p.Name, p.Field, p.Canon), true
	case FamPoolOwner:
		return k.PoolOwner(p.Name, p.Item), true
	case FamPoolFree:
		return x().Free, true
	case FamPoolHeld:
		return x().Held, true
	case FamPoolBad:
		return x().Bad, true
	case FamPoolForeign:
		return x().Foreign, true
	case FamPoolFields:
		return x().Fields, true
	case FamPoolSweep:
		return x().Sweep, true
	case FamPoolToken:
		return k.PoolToken(p.Name, p.Item), true
	case FamWorkerHardware:
		return w().Hardware, true
	case FamWorkerConfig:
		return w().Config, true
	case FamWorkerGen:
		return w().Gen, true
	case FamWorkerState:
		return w().State, true
	case FamWorkerStats:
		return w().Stats, true
	case FamWorkers:
		return k.Workers(p.Name), true
	case FamAllWorkers:
		return k.AllWorkers(), true
	case FamStream:
		return k.Stream(p.Name), true
	}
	return "", false
}

// Translate re-spells key, a key of this layout and prefix, in the layout
// and prefix of to. It reports false for a key Parse does not know.
func (k Keys) Translate(key string, to Keys) (string, bool) {
	p, ok := k.Parse(key)
	if !ok {
		return "", false
	}
	return to.Spell(p)
}

// Migrate is fleet:migrate (hash; derived): the progress record of a
// migration into this database (per source node its SCAN cursor, the
// counts so far, and the source it reads). It is never copied by a
// migration, and can be deleted once the migration is done.
func (k Keys) Migrate() string { return k.join("fleet", "migrate") }

// histBucket reports whether s spells a history bucket's start: unix
// seconds, decimal digits without a leading zero.
func histBucket(s string) bool {
	if s == "" || len(s) > 12 || (s[0] == '0' && s != "0") {
		return false
	}
	for i := range len(s) {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
