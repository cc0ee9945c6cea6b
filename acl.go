package fleet

import (
	"fmt"
	"strings"
)

// ACLRole names what a Redis ACL user made by ACLRules may do with one
// tenant's Fleet (docs/ACL.md).
type ACLRole string

// The roles of ACLRules.
const (
	// ACLWorker runs batch workers, the sweeper, flows and every primitive
	// (queues, pools, locks, semaphores, limiters, KV, counters, streams,
	// events) of its tenant: it may read and write every key under the
	// prefix and use every channel under it.
	ACLWorker ACLRole = "worker"
	// ACLSubmitter submits tasks and flows, waits on them, cancels them and
	// reads its tenant's keys: it may write only the queue and flow keys
	// (fleet:queue:*, fleet:queues, fleet:flow:*, fleet:flows) and read
	// the rest under the prefix. It cannot register a worker, push a
	// config, publish the catalog, take a lock or a pool item, or write
	// KV, counters or streams. Redis ACLs fence keys, not scripts: a
	// submitter may run any of fleet's queue scripts (or any Lua, through
	// EVAL) on its queue keys, and it may read the lease tokens, so it
	// could end a task it does not hold.
	ACLSubmitter ACLRole = "submitter"
	// ACLOperator is ACLWorker plus what an operator's tools need (fleetctl,
	// the dashboard's actions, Sync, Migrate within the prefix, Health):
	// SCAN, DBSIZE, DUMP and RESTORE, ROLE, CLIENT INFO, MEMORY USAGE.
	// SCAN lists key names of the whole database, other tenants' too:
	// Redis does not filter it by key patterns.
	ACLOperator ACLRole = "operator"
	// ACLReader only reads its tenant's keys (%R~ patterns and read-only
	// commands and scripts): for a read-only dashboard (fleetui with
	// ReadOnly) or a monitor. Open it with Options.NoMarkerWrite.
	ACLReader ACLRole = "reader"
)

// ACLRoles lists every role of ACLRules.
func ACLRoles() []ACLRole {
	return []ACLRole{ACLWorker, ACLSubmitter, ACLOperator, ACLReader}
}

// The commands of the ACL roles, found from fleet's code (every command it
// sends, every command its scripts call) and checked against a real server
// with ACL LOG (acl_test.go). Each list is a slice of Redis command names
// as ACL SETUSER spells them ("client|tracking").
var (
	// aclConnect is what rueidis sends on connect (HELLO with AUTH and
	// SETNAME, CLIENT TRACKING, SELECT, READONLY on a replica, the
	// cluster's topology; its CLIENT SETINFO may fail, and is left out so
	// that the rules load on Redis 7.0, which has no such command) and
	// what every Fleet sends whatever its role: PING, TIME, WAIT
	// (Options.MinReplicas), INFO (Health; the replicas' check of
	// MinReplicas), CLIENT CACHING with MULTI and EXEC (a client-side
	// cached read, OPTIN tracking).
	aclConnect = []string{
		"hello", "auth", "ping", "select", "readonly",
		"client|setname", "client|tracking", "client|caching",
		"cluster|slots", "cluster|shards", "cluster|info",
		"info", "time", "wait", "multi", "exec", "discard",
	}
	// aclRead is every read of a key: fleet's own, and its scripts'.
	aclRead = []string{
		"get", "mget", "strlen", "exists", "type", "pttl", "expiretime", "pexpiretime",
		"hget", "hgetall", "hmget", "hlen", "hkeys", "hexists", "hscan",
		"smembers", "sismember", "scard", "sscan", "srandmember",
		"zrange", "zrangebyscore", "zcard", "zcount", "zscore", "zmscore", "zscan",
		"lrange", "llen", "lindex", "xlen",
	}
	// aclWrite is every write of a key.
	aclWrite = []string{
		"set", "mset", "del", "unlink", "incr", "incrby", "decr", "decrby",
		"pexpire", "pexpireat", "expireat", "persist",
		"hset", "hsetnx", "hdel", "hincrby",
		"sadd", "srem",
		"rpush", "lpush", "linsert", "lpop", "rpop", "lmove", "lrem", "lset", "ltrim",
		"zadd", "zrem", "zpopmin", "zremrangebyscore", "zremrangebyrank", "zremrangebylex",
	}
	// aclScripts runs fleet's Lua: EVALSHA first, EVAL on NOSCRIPT
	// (internal/script; a pipeline of scripts too, so no SCRIPT LOAD).
	aclScripts = []string{"evalsha", "eval", "evalsha_ro", "eval_ro"}
	// aclScriptsRO runs only the read-only scripts.
	aclScriptsRO = []string{"evalsha_ro", "eval_ro"}
	// aclPubSub is the event bus (Publish, Subscribe; sharded on a cluster).
	aclPubSub = []string{
		"publish", "spublish", "subscribe", "ssubscribe", "unsubscribe", "sunsubscribe",
		"pubsub|numsub", "pubsub|shardnumsub",
	}
	// aclSubscribe is the event bus for a reader: it listens, never says.
	aclSubscribe = []string{"subscribe", "ssubscribe", "unsubscribe", "sunsubscribe"}
	// aclOperate is what the operator's tools add: Sync and Migrate scan
	// for keys, Migrate copies them (DUMP, RESTORE) and checks its
	// source and target (INFO, ROLE, DBSIZE, CLIENT INFO).
	aclOperate = []string{"scan", "dbsize", "dump", "restore", "role", "client|info", "memory|usage"}
)

// The families a submitter writes, after the prefix.
var aclSubmitterKeys = []string{"fleet:queue:*", "fleet:queues", "fleet:flow:*", "fleet:flows"}

// ACLRules returns the rules of an ACL SETUSER command that fence a Redis
// user to one tenant's Fleet: the Fleet opened with Options.Prefix prefix,
// and role's part in it. The rules reset the user's keys, channels and
// commands, then allow only the commands role needs (never KEYS, FLUSHALL,
// CONFIG, DEBUG, MONITOR, SHUTDOWN or any other admin command), keys
// matching prefix* (or a part of them) and channels matching prefix*.
// They name neither the user nor its state or password: a caller writes
// "ACL SETUSER <user> on ><password>" followed by the rules, on every node
// of a cluster (ACLs are per node; fleetctl acl prints the line).
//
// Redis 7 or later (or Valkey) is needed for %R~ patterns (ACLReader,
// ACLSubmitter) and command subcommands. What ACLs can and cannot fence is
// in docs/ACL.md: a user can run any Lua on the keys it may write, and
// SCAN (ACLOperator only) lists other tenants' key names.
//
// It returns ErrInvalidArgument for an empty prefix (a user of every key
// is not fenced; give it +@all ~* instead), a prefix with a glob character
// (* ? [ ] \), a brace, white space or a control character, and an
// unknown role.
func ACLRules(prefix string, role ACLRole) ([]string, error) {
	switch {
	case prefix == "":
		return nil, fmt.Errorf("%w: ACL rules need a prefix: without one a Fleet uses every key of the database, which no key pattern fences", ErrInvalidArgument)
	case strings.ContainsAny(prefix, `*?[]\`):
		return nil, fmt.Errorf("%w: prefix %q holds a glob character (* ? [ ] \\), which an ACL key pattern would read as a pattern", ErrInvalidArgument, prefix)
	case strings.ContainsAny(prefix, "{}") || strings.IndexFunc(prefix, func(r rune) bool { return r <= ' ' || r == 0x7f }) >= 0:
		return nil, fmt.Errorf("%w: prefix %q holds a brace, white space or a control character, which Open refuses", ErrInvalidArgument, prefix)
	}
	var cmds [][]string
	var keyRules []string
	channels := "&" + prefix + "*"
	switch role {
	case ACLWorker:
		cmds = [][]string{aclConnect, aclRead, aclWrite, aclScripts, aclPubSub}
		keyRules = []string{"~" + prefix + "*"}
	case ACLOperator:
		cmds = [][]string{aclConnect, aclRead, aclWrite, aclScripts, aclPubSub, aclOperate}
		keyRules = []string{"~" + prefix + "*"}
	case ACLSubmitter:
		cmds = [][]string{aclConnect, aclRead, aclWrite, aclScripts, aclPubSub}
		for _, fam := range aclSubmitterKeys {
			keyRules = append(keyRules, "~"+prefix+fam)
		}
		keyRules = append(keyRules, "%R~"+prefix+"*")
	case ACLReader:
		cmds = [][]string{aclConnect, aclRead, aclScriptsRO, aclSubscribe}
		keyRules = []string{"%R~" + prefix + "*"}
	default:
		return nil, fmt.Errorf("%w: ACL role %q is not one of worker, submitter, operator, reader", ErrInvalidArgument, role)
	}
	rules := []string{"resetkeys", "resetchannels", "-@all"}
	for _, list := range cmds {
		for _, c := range list {
			rules = append(rules, "+"+c)
		}
	}
	rules = append(rules, keyRules...)
	return append(rules, channels), nil
}
