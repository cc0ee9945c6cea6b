package keys

import "testing"

// TestTranslate re-spells one key of every family of docs/SCHEMA.md both
// ways between the layouts, across prefixes, with ':' in last segments.
func TestTranslate(t *testing.T) {
	rows := []struct {
		fam            Family
		compat, tagged string // without prefix
	}{
		{FamKV, "fleet:kv:ns:key", "fleet:kv:ns:key"},
		{FamKV, "fleet:kv:ns:a:b:c", "fleet:kv:ns:a:b:c"},
		{FamCounter, "fleet:counter:hits:2024:05", "fleet:counter:hits:2024:05"},
		{FamLock, "fleet:lock:job", "fleet:lock:{job}"},
		{FamLock, "fleet:lock:job:a:b", "fleet:lock:{job:a:b}"},
		{FamFence, "fleet:fence:job:a", "fleet:fence:{job:a}"},
		{FamLockTomb, "fleet:locktomb:job", "fleet:locktomb:{job}"},
		{FamLimit, "fleet:limit:example.org", "fleet:limit:{example.org}"},
		{FamLimit, "fleet:limit:fetch:a:b", "fleet:limit:{fetch:a:b}"},
		{FamSem, "fleet:sem:acct:42", "fleet:sem:{acct:42}"},
		{FamSemTomb, "fleet:semtomb:acct", "fleet:semtomb:{acct}"},
		{FamCatalog, "fleet:catalog", "fleet:catalog"},
		{FamMeta, "fleet:meta", "fleet:meta"},
		{FamMigrate, "fleet:migrate", "fleet:migrate"},
		{FamQueues, "fleet:queues", "fleet:queues"},
		{FamPools, "fleet:pools", "fleet:pools"},
		{FamQueuePending, "fleet:queue:q", "fleet:queue:{q}"},
		{FamQueueProcessing, "fleet:queue:q:processing", "fleet:queue:{q}:processing"},
		{FamQueueBody, "fleet:queue:q:processing:body", "fleet:queue:{q}:processing:body"},
		{FamQueueLease, "fleet:queue:q:processing:lease", "fleet:queue:{q}:processing:lease"},
		{FamQueueScheduled, "fleet:queue:q:scheduled", "fleet:queue:{q}:scheduled"},
		{FamQueueDead, "fleet:queue:q:dead", "fleet:queue:{q}:dead"},
		{FamQueueDedup, "fleet:queue:q:dedup", "fleet:queue:{q}:dedup"},
		{FamQueuePolicy, "fleet:queue:q:policy", "fleet:queue:{q}:policy"},
		{FamQueueCall, "fleet:queue:q:call:Ab_x.", "fleet:queue:{q}:call:Ab_x."},
		{FamQueueHistMinute, "fleet:queue:q:hist:m:1764835200", "fleet:queue:{q}:hist:m:1764835200"},
		{FamQueueHistDay, "fleet:queue:q:hist:d:1764806400", "fleet:queue:{q}:hist:d:1764806400"},
		{FamQueuePrio, "fleet:queue:q:prio", "fleet:queue:{q}:prio"},
		{FamQueueRetained, "fleet:queue:q:retained", "fleet:queue:{q}:retained"},
		{FamQueueMeta, "fleet:queue:q:meta:tenant:sacme", "fleet:queue:{q}:meta:tenant:sacme"},
		{FamQueueLog, "fleet:queue:q:log:0193a0c4-1b2c-7d3e-8f40-112233445566", "fleet:queue:{q}:log:0193a0c4-1b2c-7d3e-8f40-112233445566"},
		{FamQueuePermits, "fleet:queue:q:permits", "fleet:queue:{q}:permits"},
		{FamQueueSteps, "fleet:queue:q:steps:0193a0c4-1b2c-7d3e-8f40-112233445566", "fleet:queue:{q}:steps:0193a0c4-1b2c-7d3e-8f40-112233445566"},
		{FamQueueGroups, "fleet:queue:q:groups", "fleet:queue:{q}:groups"},
		{FamQueueGroupState, "fleet:queue:q:gstate", "fleet:queue:{q}:gstate"},
		{FamQueueGroupBlocked, "fleet:queue:q:gblocked", "fleet:queue:{q}:gblocked"},
		{FamQueueGroupLimits, "fleet:queue:q:glimits", "fleet:queue:{q}:glimits"},
		{FamQueueGroupPaused, "fleet:queue:q:gpaused", "fleet:queue:{q}:gpaused"},
		{FamQueueRunning, "fleet:queue:q:running", "fleet:queue:{q}:running"},
		{FamQueueGroup, "fleet:queue:q:g:site-7", "fleet:queue:{q}:g:site-7"},
		{FamQueueGroupRun, "fleet:queue:q:grun:site-7", "fleet:queue:{q}:grun:site-7"},
		{FamQueueGroupRate, "fleet:queue:q:grate:site-7", "fleet:queue:{q}:grate:site-7"},
		{FamQueueSignal, "fleet:queue:q:signal", "fleet:queue:{q}:signal"},
		{FamQueueGroupPending, "fleet:queue:q:gpending", "fleet:queue:{q}:gpending"},
		{FamPool, "fleet:pool:p", "fleet:pool:{p}"},
		{FamPoolClaim, "fleet:pool:p:claim:item", "fleet:pool:{p}:claim:item"},
		{FamPoolClaim, "fleet:pool:p:claim:a:claim:b", "fleet:pool:{p}:claim:a:claim:b"},
		{FamPoolAll, "fleet:pidx:p:all", "fleet:pidx:{p}:all"},
		{FamPoolExp, "fleet:pidx:p:exp", "fleet:pidx:{p}:exp"},
		{FamPoolTags, "fleet:pidx:p:tags", "fleet:pidx:{p}:tags"},
		{FamPoolSignal, "fleet:pidx:p:sig", "fleet:pidx:{p}:sig"},
		{FamPoolScan, "fleet:pidx:p:scan", "fleet:pidx:{p}:scan"},
		{FamPoolTagIndex, "fleet:pidx:p:t:region:seu:west", "fleet:pidx:{p}:t:region:seu:west"},
		{FamPoolTagIndex, "fleet:pidx:p:t:ok:T", "fleet:pidx:{p}:t:ok:T"},
		{FamPoolTagIndex, "fleet:pidx:p:t:name:s{x} y", "fleet:pidx:{p}:t:name:s{x} y"},
		{FamPoolOwner, "fleet:pidx:p:own:a:b", "fleet:pidx:{p}:own:a:b"},
		{FamPoolFree, "fleet:pidx:p:free", "fleet:pidx:{p}:free"},
		{FamPoolHeld, "fleet:pidx:p:held", "fleet:pidx:{p}:held"},
		{FamPoolBad, "fleet:pidx:p:bad", "fleet:pidx:{p}:bad"},
		{FamPoolForeign, "fleet:pidx:p:foreign", "fleet:pidx:{p}:foreign"},
		{FamPoolFields, "fleet:pidx:p:fields", "fleet:pidx:{p}:fields"},
		{FamPoolSweep, "fleet:pidx:p:sweep", "fleet:pidx:{p}:sweep"},
		{FamPoolToken, "fleet:pidx:p:tok:Ab-_1", "fleet:pidx:{p}:tok:Ab-_1"},
		{FamWorkerHardware, "wkr:cam:w1:hardware", "wkr:{cam:w1}:hardware"},
		{FamWorkerConfig, "wkr:cam:w1:config", "wkr:{cam:w1}:config"},
		{FamWorkerGen, "wkr:cam:w1:gen", "wkr:{cam:w1}:gen"},
		{FamWorkerState, "wkr:cam:w1:state", "wkr:{cam:w1}:state"},
		{FamWorkerStats, "wkr:cam:w1:stats", "wkr:{cam:w1}:stats"},
		{FamWorkers, "wkrs:cam", "wkrs:cam"},
		{FamAllWorkers, "wkrs:all", "wkrs:all"},
		{FamStream, "stream:cam", "stream:cam"},
		{FamStream, "stream:cam:out", "stream:cam:out"},
	}
	for _, pp := range [][2]string{{"", ""}, {"a:", "b:"}, {"old:", ""}, {"", "new:x:"}} {
		compat, tagged := New(pp[0], false), New(pp[1], true)
		for _, r := range rows {
			for _, dir := range []struct {
				from, to       Keys
				src, want, how string
			}{
				{compat, tagged, pp[0] + r.compat, pp[1] + r.tagged, "compat->tagged"},
				{tagged, compat, pp[1] + r.tagged, pp[0] + r.compat, "tagged->compat"},
				{compat, New(pp[1], false), pp[0] + r.compat, pp[1] + r.compat, "compat->compat"},
				{tagged, New(pp[0], true), pp[1] + r.tagged, pp[0] + r.tagged, "tagged->tagged"},
			} {
				p, ok := dir.from.Parse(dir.src)
				if !ok || p.Family != r.fam {
					t.Errorf("%s: Parse(%q) = %+v, %v; want family %s", dir.how, dir.src, p, ok, r.fam)
					continue
				}
				if got, ok := dir.from.Translate(dir.src, dir.to); !ok || got != dir.want {
					t.Errorf("%s: Translate(%q) = %q, %v; want %q", dir.how, dir.src, got, ok, dir.want)
				}
			}
		}
	}
}

// TestTranslateSpellsLikeHelpers checks that a parsed key names the same
// entity the helpers were given.
func TestTranslateSpellsLikeHelpers(t *testing.T) {
	for _, k := range []Keys{New("", false), New("p:", true)} {
		p, ok := k.Parse(k.PoolTagIndex("pl", "f", "sa:b"))
		if !ok || p.Name != "pl" || p.Field != "f" || p.Canon != "sa:b" {
			t.Errorf("tag index: %+v %v", p, ok)
		}
		p, ok = k.Parse(k.Worker("t", "i").Gen)
		if !ok || p.Name != "t" || p.ID != "i" {
			t.Errorf("worker: %+v %v", p, ok)
		}
		p, ok = k.Parse(k.KV("ns", "a:b"))
		if !ok || p.Name != "ns" || p.Item != "a:b" {
			t.Errorf("kv: %+v %v", p, ok)
		}
	}
}

// TestTranslateUnknown refuses keys of no documented shape, names Check
// refuses, and keys of the other layout or another prefix.
func TestTranslateUnknown(t *testing.T) {
	compat, tagged := New("x:", false), New("x:", true)
	for _, c := range []struct {
		k   Keys
		key string
	}{
		{compat, "x:fleet:other"},
		{compat, "x:fleet:catalog:more"},
		{compat, "x:fleet:kv:nokey"},
		{compat, "x:fleet:kv:ns:"},
		{compat, "x:fleet:counter:"},
		{compat, "x:fleet:queue:q:bogus"},
		{compat, "x:fleet:queue:q:processing:other"},
		{compat, "x:fleet:queue:q:hist:m:"},     // no bucket
		{compat, "x:fleet:queue:q:hist:m:0123"}, // a leading zero
		{compat, "x:fleet:queue:q:hist:d:17e9"}, // not digits
		{compat, "x:fleet:queue:q:hist:x:17"},   // no such resolution
		{compat, "x:fleet:pool:p:claim:"},
		{compat, "x:fleet:pool:p:other"},
		{compat, "x:fleet:pidx:p"},
		{compat, "x:fleet:pidx:p:weird"},
		{compat, "x:fleet:pidx:p:t:field"},
		{compat, "x:fleet:pidx:p:t:field:"},
		{compat, "x:wkr:t:i"},
		{compat, "x:wkr:t:i:j:config"},
		{compat, "x:wkr:t:i:cpu"},
		{compat, "x:wkrs:a:b"},
		{compat, "x:wkrs:a|b"},
		{compat, "x:stream:"},
		{compat, "x:fleet:queue:{q}"},        // a tagged key under a compat source
		{compat, "x:fleet:lock:{l}"},         // idem
		{compat, "x:fleet:kv:n s:k"},         // white space in a name
		{compat, "y:fleet:catalog"},          // another prefix
		{compat, "x:other:thing"},            // no family
		{tagged, "x:fleet:queue:q"},          // a compat key under a tagged source
		{tagged, "x:fleet:queue:{q"},         // unclosed tag
		{tagged, "x:fleet:queue:{}"},         // empty name
		{tagged, "x:fleet:queue:{q}x"},       // text after the tag
		{tagged, "x:fleet:queue:{a:b}:dead"}, // ':' in a segment
		{tagged, "x:fleet:lock:l"},
		{tagged, "x:fleet:lock:{l}:x"},
		{tagged, "x:wkr:t:i:config"},
		{tagged, "x:wkr:{ti}:config"},
		{tagged, "x:wkr:{t:i}"},
		{tagged, "x:wkr:{t:i:j}:config"},
		{tagged, "x:fleet:pidx:{p}"},
		{tagged, tagged.QueueShard("q", 1).Pending + ":hist:m:60"}, // a shard keeps no history
	} {
		if p, ok := c.k.Parse(c.key); ok {
			t.Errorf("tagged=%v Parse(%q) = %+v, want unknown", c.k.Tagged(), c.key, p)
		}
		if got, ok := c.k.Translate(c.key, New("", !c.k.Tagged())); ok {
			t.Errorf("Translate(%q) = %q, want unknown", c.key, got)
		}
	}
	if _, ok := compat.Spell(Key{Family: "nope"}); ok {
		t.Error("Spell of an unknown family succeeded")
	}
}
