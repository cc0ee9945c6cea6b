package keys

// Pool is fleet:pool:<name> (hash: item id -> JSON {"p", "t", "x"}).
func (k Keys) Pool(name string) string { return k.join("fleet", "pool", k.tag(name)) }

// PoolClaim is fleet:pool:<name>:claim:<item> (string "1", TTL = hold).
func (k Keys) PoolClaim(name, item string) string { return k.Pool(name) + ":claim:" + item }

// PoolClaimPrefix is the part of every claim key of pool name before the item id.
func (k Keys) PoolClaimPrefix(name string) string { return k.Pool(name) + ":claim:" }
