package fleet

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/fleet-go/fleet/internal/keys"
)

// DefaultReplicaTimeout bounds how long a write waits for
// Options.MinReplicas replicas to confirm it.
const DefaultReplicaTimeout = time.Second

type minReplicasKey struct{}

// WithMinReplicas returns a ctx under which fleet's writes wait for n
// replicas to confirm them, as Options.MinReplicas does for every call:
// it overrides Options.MinReplicas for the calls made with ctx, both ways
// (n = 0 makes them wait for none). A negative n makes the calls fail with
// ErrInvalidArgument. Background work of the Fleet (the sweeper, worker
// heartbeats) keeps Options.MinReplicas.
func WithMinReplicas(ctx context.Context, n int) context.Context {
	perCall.Store(true)
	return context.WithValue(ctx, minReplicasKey{}, n)
}

// perCall says whether WithMinReplicas was ever called in this process:
// until it is, no call looks for it in its ctx (a walk up the ctx chain
// on every command).
var perCall atomic.Bool

// durableClient is the rueidis client a Fleet with MinReplicas (or any
// Fleet, for WithMinReplicas) sends through: it sends WAIT n timeout right
// after each write, on the same connection (one DoMulti, WAIT pinned to
// the write's slot on a cluster), and fails the write with ErrNotDurable
// when fewer than n replicas confirm it. Reads (read-only commands,
// EVALSHA_RO, cached reads), blocking commands, PUBLISH and connection
// commands go through untouched. A NOSCRIPT reply to EVALSHA passes
// through too, so that rueidis.Lua.Exec resends the script with EVAL (and
// that one waits).
type durableClient struct {
	rueidis.Client
	min     int
	timeout int64 // ms
	cluster bool
}

// newDurableClient wraps c. min may be 0: WithMinReplicas can still ask
// for replicas per call.
func newDurableClient(c rueidis.Client, min int, timeout time.Duration) *durableClient {
	return &durableClient{Client: c, min: min, timeout: timeout.Milliseconds(),
		cluster: c.Mode() == rueidis.ClientModeCluster}
}

// need is the number of replicas calls under ctx wait for.
func (d *durableClient) need(ctx context.Context) (int, error) {
	if ctx == nil || !perCall.Load() {
		return d.min, nil
	}
	if n, ok := ctx.Value(minReplicasKey{}).(int); ok {
		if n < 0 {
			return 0, fmt.Errorf("%w: WithMinReplicas(%d) is negative", ErrInvalidArgument, n)
		}
		return n, nil
	}
	return d.min, nil
}

// noWait lists the commands that rueidis does not mark read-only but that
// store nothing worth waiting for (connection, server and pub/sub
// commands).
var noWait = map[string]bool{
	"PING": true, "SCRIPT": true, "CLIENT": true, "INFO": true, "WAIT": true, "WAITAOF": true,
	"PUBLISH": true, "SPUBLISH": true, "CLUSTER": true, "CONFIG": true, "HELLO": true, "AUTH": true,
	"SELECT": true, "READONLY": true, "READWRITE": true, "ASKING": true, "QUIT": true, "RESET": true,
	"MULTI": true, "DISCARD": true, "WATCH": true, "UNWATCH": true, "TIME": true, "ROLE": true,
	"PUBSUB": true, "ECHO": true, "DBSIZE": true, "COMMAND": true, "LASTSAVE": true, "MEMORY": true,
	"SLOWLOG": true, "LATENCY": true, "DEBUG": true,
}

// waits reports whether cmd writes, so that it waits for replicas, and the
// slot WAIT goes to (on a cluster; ok is false for a keyless write there,
// which has no node to pin WAIT to).
func (d *durableClient) waits(cmd *rueidis.Completed) (slot uint16, ok bool) {
	if cmd.IsEmpty() || cmd.IsReadOnly() || cmd.IsBlock() || cmd.IsPipe() || cmd.NoReply() {
		return 0, false
	}
	if cs := cmd.Commands(); noWait[strings.ToUpper(cs[0])] {
		return 0, false
	}
	slot = cmd.Slot() &^ (1 << 15) // rueidis' NoSlot flag, set off a cluster
	if d.cluster && slot >= 16384 {
		return 0, false // keyless on a cluster
	}
	return slot, true
}

func (d *durableClient) wait(n int, slot uint16) rueidis.Completed {
	w := d.Client.B().Wait().Numreplicas(int64(n)).Timeout(d.timeout).Build()
	if d.cluster {
		w = w.SetSlot(slotKey(slot))
	}
	return w
}

// Do sends cmd, and WAIT after it when it writes. Every command fleet sends
// is pinned (never recycled by rueidis): rueidis puts a command back in
// its pool once a reply came, and when the reply came on a new connection
// (the first one broke while it wrote the command, and rueidis sent it
// again) the old connection's writer read it with no happens-before edge
// to the reuse, which the race detector reports (TestLinearizable saw it,
// as redis-server restarted under EVALSHA).
func (d *durableClient) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	cmd = cmd.Pin()
	n, err := d.need(ctx)
	if err != nil {
		return rueidis.NewErrorResult(err)
	}
	if n == 0 {
		return d.Client.Do(ctx, cmd)
	}
	slot, ok := d.waits(&cmd)
	if !ok {
		return d.Client.Do(ctx, cmd)
	}
	rs := d.Client.DoMulti(ctx, cmd, d.wait(n, slot))
	return d.confirm(rs[0], rs[1], n)
}

// DoMulti sends multi, and after it one WAIT (one per slot written, on a
// cluster) when one of them writes. A write whose WAIT falls short fails
// with ErrNotDurable.
func (d *durableClient) DoMulti(ctx context.Context, multi ...rueidis.Completed) []rueidis.RedisResult {
	for i := range multi {
		multi[i] = multi[i].Pin() // see Do
	}
	n, err := d.need(ctx)
	if err != nil {
		out := make([]rueidis.RedisResult, len(multi))
		for i := range out {
			out[i] = rueidis.NewErrorResult(err)
		}
		return out
	}
	if n == 0 {
		return d.Client.DoMulti(ctx, multi...)
	}
	const none = -1
	waitOf := make([]int, len(multi)) // index in slots of each write's WAIT, or none
	var slots []uint16
	for i := range multi {
		waitOf[i] = none
		slot, ok := d.waits(&multi[i])
		if !ok {
			continue
		}
		if !d.cluster {
			slot = 0 // one WAIT covers every write on the connection
		}
		j := slices.Index(slots, slot)
		if j < 0 {
			j = len(slots)
			slots = append(slots, slot)
		}
		waitOf[i] = j
	}
	if len(slots) == 0 {
		return d.Client.DoMulti(ctx, multi...)
	}
	all := make([]rueidis.Completed, 0, len(multi)+len(slots))
	all = append(all, multi...)
	for _, s := range slots {
		all = append(all, d.wait(n, s))
	}
	rs := d.Client.DoMulti(ctx, all...)
	out := rs[:len(multi)]
	for i, j := range waitOf {
		if j != none {
			out[i] = d.confirm(out[i], rs[len(multi)+j], n)
		}
	}
	return out
}

// Nodes wraps each node's client too, so that work visiting every node
// (the sweeper, Migrate) waits as well.
func (d *durableClient) Nodes() map[string]rueidis.Client {
	nodes := d.Client.Nodes()
	out := make(map[string]rueidis.Client, len(nodes))
	for a, c := range nodes {
		out[a] = &durableClient{Client: c, min: d.min, timeout: d.timeout}
	}
	return out
}

// confirm returns the write's result w, or ErrNotDurable when its WAIT
// reply wt counts fewer than n replicas.
func (d *durableClient) confirm(w, wt rueidis.RedisResult, n int) rueidis.RedisResult {
	if err := w.Error(); err != nil && !rueidis.IsRedisNil(err) {
		return w // the write failed (NOSCRIPT too): nothing to confirm
	}
	got, err := wt.AsInt64()
	if err != nil {
		return rueidis.NewErrorResult(fmt.Errorf("%w: WAIT %d after the write: %w", ErrNotDurable, n, err))
	}
	if got < int64(n) {
		return rueidis.NewErrorResult(fmt.Errorf("%w: %d of %d replicas confirmed the write within %d ms", ErrNotDurable, got, n, d.timeout))
	}
	return w
}

// slotKeys[s] is a key in slot s, for pinning a keyless WAIT to a slot.
var slotKeys = sync.OnceValue(func() []string {
	out := make([]string, 16384)
	left := len(out)
	for i := 0; left > 0; i++ {
		tag := strconv.Itoa(i)
		if s := keys.Slot(tag); out[s] == "" {
			out[s] = "{" + tag + "}"
			left--
		}
	}
	return out
})

func slotKey(slot uint16) string { return slotKeys()[slot&16383] }

// checkReplicas refuses MinReplicas above the replicas each master has
// (INFO replication: connected_slaves), naming the master.
// A master short of replicas is asked again every 50 ms for up to wait (a
// replica whose link is being re-established, under load or after a
// failover, connects within it) before Open refuses.
func (f *Fleet) checkReplicas(ctx context.Context, min int, wait time.Duration) error {
	addrs, nodes := f.nodes()
	deadline := time.Now().Add(wait)
	for _, a := range addrs {
		c := nodes[a]
		if d, ok := c.(*durableClient); ok {
			c = d.Client
		}
		for {
			info, err := c.Do(ctx, c.B().Info().Section("replication").Build()).ToString()
			if err != nil {
				return connectErr([]string{a}, err)
			}
			got, role := -1, ""
			for line := range strings.SplitSeq(info, "\n") {
				line = strings.TrimSpace(line)
				if v, ok := strings.CutPrefix(line, "connected_slaves:"); ok {
					got, _ = strconv.Atoi(v)
				} else if v, ok := strings.CutPrefix(line, "role:"); ok {
					role = v
				}
			}
			// A replica is not a master to check: the client's nodes list the
			// replicas once CLUSTER SLOTS does (gossip spreads them a moment
			// after they join), and a master a failover has just turned into a
			// replica stays listed until the client's view catches up.
			if got >= min || (role != "" && role != "master") {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%w: MinReplicas is %d but the master %s has %d replicas (INFO replication connected_slaves, after %v): every write would fail with ErrNotDurable; add replicas or lower MinReplicas", ErrInvalidOptions, min, a, max(got, 0), wait)
			}
			select {
			case <-ctx.Done():
				return connectErr([]string{a}, ctx.Err())
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	return nil
}

// DoCache reads cmd through the client-side cache, pinned (see Do).
func (d *durableClient) DoCache(ctx context.Context, cmd rueidis.Cacheable, ttl time.Duration) rueidis.RedisResult {
	return d.Client.DoCache(ctx, cmd.Pin(), ttl)
}

// DoMultiCache reads multi through the client-side cache, pinned (see Do).
func (d *durableClient) DoMultiCache(ctx context.Context, multi ...rueidis.CacheableTTL) []rueidis.RedisResult {
	for i := range multi {
		multi[i].Cmd = multi[i].Cmd.Pin()
	}
	return d.Client.DoMultiCache(ctx, multi...)
}
