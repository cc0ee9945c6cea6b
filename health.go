package fleet

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/rueidis"
)

// Health problem codes, stable for scripts.
const (
	// HealthAOFOff: appendonly is off, so configs, gens, pools and queues
	// do not survive a restart.
	HealthAOFOff = "aof-off"
	// HealthEviction: maxmemory-policy is not noeviction, so Redis may evict
	// leases, tasks and pool items under memory pressure.
	HealthEviction = "eviction-policy"
	// HealthNoTracking: client-side caching is off (no RESP3 client
	// tracking, or turned off), so reads cost round trips and waits poll.
	HealthNoTracking = "no-client-tracking"
	// HealthClusterSlots: not every cluster slot is served, or the cluster
	// state is not ok.
	HealthClusterSlots = "cluster-slots"
)

// HealthProblem is one thing that would lose data or break fleet.
type HealthProblem struct {
	// Code names the kind of problem: one of the Health* constants.
	Code string `json:"code"`
	// Node is the address of the node it was found on; empty for a
	// problem of the whole deployment (caching off, cluster slots).
	Node string `json:"node,omitempty"`
	// Message says what was found and why it matters, for a person.
	Message string `json:"message"`
}

// NodeHealth is what Health read off one node.
type NodeHealth struct {
	// Addr is the node's address, host:port.
	Addr string `json:"addr"`
	// Version is the server's version (INFO redis_version).
	Version string `json:"version"`
	// AOF reports whether the append-only file is on (INFO aof_enabled).
	AOF bool `json:"aof"`
	// MaxmemoryPolicy is the eviction policy (INFO maxmemory_policy);
	// fleet wants noeviction.
	MaxmemoryPolicy string `json:"maxmemory_policy"`
	// UsedMemory is the memory the server has allocated, in bytes (INFO
	// used_memory).
	UsedMemory int64 `json:"used_memory"`
	// Keys counts the keys of every database on the node (INFO keyspace),
	// fleet's and others'.
	Keys int64 `json:"keys"`
}

// HealthReport is the result of Health. It is healthy when Problems is
// empty.
type HealthReport struct {
	// Layout is the key layout this Fleet uses.
	Layout Layout `json:"layout"`
	// Cluster reports whether the server is a Redis Cluster.
	Cluster bool `json:"cluster"`
	// Cache reports whether client-side caching works on this Fleet
	// (invalidations reach it); without it reads cost round trips and
	// waits poll.
	Cache bool `json:"client_cache"`
	// Slots counts the cluster slots served (CLUSTER INFO
	// cluster_slots_ok), of 16384; 0 on a single node.
	Slots int `json:"slots_ok,omitempty"`
	// Nodes has one entry per node read: the single node, or every master
	// of the cluster.
	Nodes []NodeHealth `json:"nodes"`
	// OutsidePrefix reports whether this Fleet's user can reach keys
	// outside its prefix (Options.Prefix): Health reads a random key name
	// outside the prefix (EXISTS) on every master, and a NOPERM on each
	// means an ACL fences the user to the prefix (ACLRules). True means a
	// tenant's Fleet could read, and maybe write, other tenants' keys. It
	// is false with no prefix: the Fleet then owns the whole database and
	// has no outside. It is not a problem (OK ignores it): one database
	// per deployment, and tests under a prefix, need no ACL.
	OutsidePrefix bool `json:"outside_prefix"`
	// Problems lists what would lose data or break fleet; empty (never
	// nil) when healthy.
	Problems []HealthProblem `json:"problems"`
}

// OK reports whether no problem was found.
func (r HealthReport) OK() bool { return len(r.Problems) == 0 }

// Health reads every node's INFO (and CLUSTER INFO on a cluster) and reports
// what would lose data or break fleet: AOF off, a maxmemory-policy other than
// noeviction, client-side caching off, cluster slots not all served. It
// also tells whether the Fleet's user can reach keys outside its prefix
// (HealthReport.OutsidePrefix). An error means Health could not read a
// node; problems are not errors.
func (f *Fleet) Health(ctx context.Context) (HealthReport, error) {
	r := HealthReport{Layout: f.layout, Cluster: f.cluster, Cache: f.cache, Problems: []HealthProblem{}}
	if err := f.alive(ctx); err != nil {
		return r, err
	}
	addrs, nodes := f.nodes()
	for _, addr := range addrs {
		n := nodes[addr]
		text, err := n.Do(ctx, n.B().Info().Section("server", "persistence", "memory", "keyspace", "replication").Build()).ToString()
		if err != nil {
			return r, opErr("health", addr, err)
		}
		info := parseInfo(text)
		if info["role"] == "slave" {
			continue // a replica follows its master's data
		}
		nh := NodeHealth{Addr: addr, Version: info["redis_version"], AOF: info["aof_enabled"] == "1", MaxmemoryPolicy: info["maxmemory_policy"]}
		nh.UsedMemory, _ = strconv.ParseInt(info["used_memory"], 10, 64)
		for k, v := range info {
			if strings.HasPrefix(k, "db") { // db0:keys=3,expires=0,avg_ttl=0
				if kv, ok := strings.CutPrefix(v, "keys="); ok {
					n, _ := strconv.ParseInt(strings.SplitN(kv, ",", 2)[0], 10, 64)
					nh.Keys += n
				}
			}
		}
		r.Nodes = append(r.Nodes, nh)
		if prefix := f.keys.Prefix(); prefix != "" && !r.OutsidePrefix {
			reach, err := outsideReach(ctx, n, prefix)
			if err != nil {
				return r, opErr("health", addr, err)
			}
			r.OutsidePrefix = reach
		}
		if !nh.AOF {
			r.Problems = append(r.Problems, HealthProblem{Code: HealthAOFOff, Node: addr,
				Message: "appendonly is off: configs, gens, pools and queues are lost on restart (set appendonly yes, appendfsync everysec)"})
		}
		if nh.MaxmemoryPolicy != "" && nh.MaxmemoryPolicy != "noeviction" {
			r.Problems = append(r.Problems, HealthProblem{Code: HealthEviction, Node: addr,
				Message: fmt.Sprintf("maxmemory-policy is %s: Redis may evict leases, tasks and pool items (set noeviction)", nh.MaxmemoryPolicy)})
		}
	}
	if !f.cache {
		r.Problems = append(r.Problems, HealthProblem{Code: HealthNoTracking,
			Message: "client-side caching is off (no RESP3 client tracking, DisableCache, or a caller-owned client): reads cost round trips and waits poll"})
	}
	if f.cluster {
		var text string
		var err error
		for _, addr := range addrs {
			n := nodes[addr]
			if text, err = n.Do(ctx, n.B().ClusterInfo().Build()).ToString(); err == nil {
				break
			}
		}
		if err != nil {
			return r, opErr("health", "cluster info", err)
		}
		info := parseInfo(text)
		r.Slots, _ = strconv.Atoi(info["cluster_slots_ok"])
		if info["cluster_state"] != "ok" || r.Slots != 16384 {
			r.Problems = append(r.Problems, HealthProblem{Code: HealthClusterSlots,
				Message: fmt.Sprintf("cluster_state is %s and %d of 16384 slots are served", info["cluster_state"], r.Slots)})
		}
	}
	return r, nil
}

// outsideReach reports whether node n lets this connection's user read a
// key outside prefix: EXISTS of a random key name that does not start
// with prefix. NOPERM means an ACL fences it; a redirection (MOVED, ASK)
// means the ACL let it through, since Redis checks ACLs first.
func outsideReach(ctx context.Context, n rueidis.Client, prefix string) (bool, error) {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	key := "fleet-outside-probe:" + hex.EncodeToString(b[:])
	if strings.HasPrefix(key, prefix) {
		key = string([]byte{prefix[0] + 1}) + key // starts with another byte than prefix
	}
	err := n.Do(ctx, n.B().Exists().Key(key).Build()).Error()
	var re *rueidis.RedisError
	switch {
	case err == nil:
		return true, nil
	case errors.As(err, &re) && strings.HasPrefix(re.Error(), "NOPERM"):
		return false, nil
	case errors.As(err, &re) && (strings.HasPrefix(re.Error(), "MOVED") || strings.HasPrefix(re.Error(), "ASK")):
		return true, nil
	}
	return false, err
}

// parseInfo reads "key:value" lines of INFO and CLUSTER INFO.
func parseInfo(text string) map[string]string {
	out := make(map[string]string)
	text = strings.TrimPrefix(text, "txt:") // a RESP3 verbatim string's format
	for line := range strings.SplitSeq(text, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && !strings.HasPrefix(k, "#") {
			out[k] = v
		}
	}
	return out
}
