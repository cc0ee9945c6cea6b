package keys

import "strings"

// Pools is fleet:pools (set of pool names; derived): the pool registry that
// lets Sync, RemovePool's callers and an operator find every pool without
// scanning the keyspace. Like fleet:queues it is not tagged, so on a cluster
// it lives in another slot than any pool's keys and no pool script touches
// it. It can be rebuilt by scanning for fleet:pool:* keys.
func (k Keys) Pools() string { return k.join("fleet", "pools") }

// The SCAN patterns of the families that registries index. Each is the
// prefix (glob-escaped) plus the family's fixed start; a key it matches is
// read back by the matching Parse function, which refuses keys of other
// shapes.

// QueuePattern matches every key of every queue: fleet:queue:*.
func (k Keys) QueuePattern() string { return Glob(k.prefix) + "fleet:queue:*" }

// PoolPattern matches every pool hash and claim key: fleet:pool:*.
func (k Keys) PoolPattern() string { return Glob(k.prefix) + "fleet:pool:*" }

// WorkersPattern matches every worker index set: wkrs:* (wkrs:all too).
func (k Keys) WorkersPattern() string { return Glob(k.prefix) + "wkrs:*" }

// WorkerPattern matches every key of the workers of type typ:
// wkr:<type>:* (tagged: wkr:{<type>:*). typ must pass Check.
func (k Keys) WorkerPattern(typ string) string {
	if k.tagged {
		return Glob(k.prefix) + "wkr:{" + Glob(typ) + ":*"
	}
	return Glob(k.prefix) + "wkr:" + Glob(typ) + ":*"
}

// QueueName returns the queue whose key key is (fleet:queue:<name> or one of
// its suffixed keys), in this layout. ok is false for any other key.
func (k Keys) QueueName(key string) (string, bool) {
	p, ok := k.Parse(key)
	switch {
	case !ok:
		return "", false
	case p.Family == FamQueuePending, strings.HasPrefix(string(p.Family), "queue:"):
		return p.Name, true
	}
	return "", false
}

// PoolName returns the pool whose hash or claim key key is. ok is false for
// any other key.
func (k Keys) PoolName(key string) (string, bool) {
	p, ok := k.Parse(key)
	if !ok || (p.Family != FamPool && p.Family != FamPoolClaim) {
		return "", false
	}
	return p.Name, true
}

// WorkersType returns the type whose index set wkrs:<type> key is. ok is
// false for wkrs:all and for any other key.
func (k Keys) WorkersType(key string) (string, bool) {
	p, ok := k.Parse(key)
	if !ok || p.Family != FamWorkers {
		return "", false
	}
	return p.Name, true
}

// Glob escapes the characters that SCAN MATCH treats as a pattern
// (* ? [ ] \), so that s matches itself.
func Glob(s string) string {
	if !strings.ContainsAny(s, `*?[]\`) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		switch r {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
