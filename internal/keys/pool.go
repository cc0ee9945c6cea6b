package keys

// Pool is fleet:pool:<name> (hash: item id -> JSON {"p", "t", "x"}).
func (k Keys) Pool(name string) string { return k.join("fleet", "pool", k.tag(name)) }

// PoolClaim is fleet:pool:<name>:claim:<item> (string "1", TTL = hold).
func (k Keys) PoolClaim(name, item string) string { return k.Pool(name) + ":claim:" + item }

// PoolClaimPrefix is the part of every claim key of pool name before the item id.
func (k Keys) PoolClaimPrefix(name string) string { return k.Pool(name) + ":claim:" }

// PoolIndex holds the derived keys of one pool: indexes and claim owners
// that fleet adds beyond the documented keys, rebuilt from the pool hash by
// Pool.Sync. They live under fleet:pidx:<name> (tagged:
// fleet:pidx:{<name>}), a family apart from fleet:pool:<name>:..., so that no
// derived key can be mistaken for a documented claim key. In the tagged
// layout each carries the pool's tag, so it shares the pool hash's slot.
type PoolIndex struct {
	// Base is fleet:pidx:<name>: the prefix of every key below (with the
	// trailing ':'); scripts build tag index and owner keys from it.
	Base string
	// All is fleet:pidx:<name>:all (set of every indexed item id, free or
	// held).
	All string
	// Free is fleet:pidx:<name>:free (set of the indexed items with no
	// claim: the claim candidates).
	Free string
	// Held is fleet:pidx:<name>:held (zset: claimed item id -> the claim's
	// deadline in unix milliseconds, server clock).
	Held string
	// Bad is fleet:pidx:<name>:bad (set of hash entries that are not valid
	// items).
	Bad string
	// Foreign is fleet:pidx:<name>:foreign (string "1", TTL 24 h): another
	// client changed the pool without fleet's indexes lately.
	Foreign string
	// Fields is fleet:pidx:<name>:fields (string: JSON array of the tag
	// fields that have index sets).
	Fields string
	// Sweep is fleet:pidx:<name>:sweep (string "<phase>:<cursor>", TTL 1 h):
	// where the sweeper's reconcile of the pool stands.
	Sweep string
	// Exp is fleet:pidx:<name>:exp (zset: item id -> expires_at in unix
	// milliseconds; items without expiry are absent).
	Exp string
	// Tags is fleet:pidx:<name>:tags (set of the tag index keys in use).
	Tags string
	// Signal is fleet:pidx:<name>:sig (string, integer): bumped when an item
	// becomes claimable (put, release, a claim found ended, reindex), to
	// wake waiting claimers.
	Signal string
	// Scan is fleet:pidx:<name>:scan (string): the HSCAN cursor of the
	// incremental reindex that puts and claims run when the hash holds
	// items the index lacks.
	Scan string
}

// PoolIndex returns the derived keys of pool name.
func (k Keys) PoolIndex(name string) PoolIndex {
	base := k.join("fleet", "pidx", k.tag(name)) + ":"
	return PoolIndex{
		Base:    base,
		All:     base + "all",
		Free:    base + "free",
		Held:    base + "held",
		Bad:     base + "bad",
		Foreign: base + "foreign",
		Fields:  base + "fields",
		Sweep:   base + "sweep",
		Exp:     base + "exp",
		Tags:    base + "tags",
		Signal:  base + "sig",
		Scan:    base + "scan",
	}
}

// PoolTagIndex is fleet:pidx:<name>:t:<field>:<canon> (set of the free item
// ids whose tag field has the value canon stands for; only for the fields
// the tags type marks fleet:"index"). canon is the value's
// canonical form: "s" + the string (or "h" + its SHA-1 in hex when longer
// than 128 bytes), "T" or "F" for a boolean, "n" + the number (an integer
// in decimal below 1e15, else C's %.17g).
func (k Keys) PoolTagIndex(name, field, canon string) string {
	return k.PoolIndex(name).Base + "t:" + field + ":" + canon
}

// PoolOwner is fleet:pidx:<name>:own:<item> (string: the claim owner's
// random token, TTL = hold, set and deleted with the claim key). The claim
// key stays "1" as documented; this key lets only the owner end its claim.
func (k Keys) PoolOwner(name, item string) string { return k.PoolIndex(name).Base + "own:" + item }

// PoolToken is fleet:pidx:<name>:tok:<token> (string: the item id that the
// claim with this token took, TTL = hold plus a margin; or "~", a tombstone
// left by a claimer that gave up, which makes its late claim script take
// nothing).
func (k Keys) PoolToken(name, token string) string { return k.PoolIndex(name).Base + "tok:" + token }
