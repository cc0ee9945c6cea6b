package fleettest

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// Cluster is a Redis Cluster made of Servers: masters, and replicas when
// started with ClusterConfig.Replicas.
type Cluster struct {
	// Nodes are the masters it started with, each serving a share of the
	// 16384 slots. After a failover one of them may be a replica, or dead.
	Nodes []*Server
	// Replicas[i] are the replicas of Nodes[i] (empty without replicas).
	Replicas [][]*Server
}

// ClusterConfig describes a Redis Cluster to start.
type ClusterConfig struct {
	// Masters is the number of masters. Defaults to 3 (also when < 3).
	Masters int
	// Replicas is the number of replicas of each master. Defaults to 0.
	Replicas int
	// NodeTimeout is the cluster-node-timeout: how long a master may be
	// unreachable before a replica takes over. Defaults to 5 s, or 1.5 s
	// with replicas, so that a failover takes a few seconds.
	NodeTimeout time.Duration
	// Args are extra redis-server arguments for every node.
	Args []string
}

// StartCluster starts masters redis-server processes (three when masters <
// 3), joins them with redis-cli --cluster create, and waits until every node
// reports cluster_state:ok. StartClusterWith adds replicas.
func StartCluster(ctx context.Context, masters int) (*Cluster, error) {
	return StartClusterWith(ctx, ClusterConfig{Masters: masters})
}

// StartClusterWith starts a cluster as cfg says: the masters first (as
// StartCluster does), then cfg.Replicas replicas of each, and waits until
// each replica is in sync with its master and every node reports
// cluster_state:ok.
func StartClusterWith(ctx context.Context, cfg ClusterConfig) (*Cluster, error) {
	masters := max(cfg.Masters, 3)
	timeout := cfg.NodeTimeout
	if timeout <= 0 && cfg.Replicas > 0 {
		timeout = 1500 * time.Millisecond
	}
	c := &Cluster{}
	for range masters {
		s, err := StartServer(ctx, Config{Cluster: true, ClusterNodeTimeout: timeout, Args: append(append([]string(nil), replArgs...), cfg.Args...)})
		if err != nil {
			c.Stop()
			return nil, err
		}
		c.Nodes = append(c.Nodes, s)
	}
	args := []string{"--cluster", "create"}
	args = append(args, c.Addrs()...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if _, err := c.Nodes[0].Cli(ctx, args...); err != nil {
		c.Stop()
		return nil, err
	}
	if err := c.waitOK(ctx); err != nil {
		c.Stop()
		return nil, err
	}
	if cfg.Replicas > 0 {
		if err := c.addReplicas(ctx, cfg.Replicas, timeout, cfg.Args); err != nil {
			c.Stop()
			return nil, err
		}
	}
	return c, nil
}

// replArgs make a full sync start at once (Redis 7 waits 5 s for more
// replicas by default).
var replArgs = []string{"--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0"}

func (c *Cluster) addReplicas(ctx context.Context, per int, timeout time.Duration, args []string) error {
	c.Replicas = make([][]*Server, len(c.Nodes))
	for i, m := range c.Nodes {
		id, err := m.Cli(ctx, "cluster", "myid")
		if err != nil {
			return err
		}
		for range per {
			r, err := StartServer(ctx, Config{Cluster: true, ClusterNodeTimeout: timeout, Args: append(append([]string(nil), replArgs...), args...)})
			if err != nil {
				return err
			}
			c.Replicas[i] = append(c.Replicas[i], r)
			if _, err := m.Cli(ctx, "--cluster", "add-node", r.Addr, m.Addr, "--cluster-slave", "--cluster-master-id", id); err != nil {
				return err
			}
		}
		if err := waitReplicas(ctx, m, per); err != nil {
			return err
		}
	}
	return c.waitOK(ctx)
}

// All returns every server of the cluster, masters and replicas.
func (c *Cluster) All() []*Server {
	out := append([]*Server(nil), c.Nodes...)
	for _, rs := range c.Replicas {
		out = append(out, rs...)
	}
	return out
}

// KillMaster ends Nodes[i] with SIGKILL, as a crash would. WaitPromoted
// waits for its replica to take over; Restart brings it back (it then
// rejoins as a replica).
func (c *Cluster) KillMaster(i int) { c.Nodes[i].Kill() }

// WaitPromoted waits, up to a minute (or ctx), until a replica of Nodes[i]
// says it is a master and every live node reports cluster_state:ok, and
// returns the new master.
func (c *Cluster) WaitPromoted(ctx context.Context, i int) (*Server, error) {
	if i >= len(c.Replicas) || len(c.Replicas[i]) == 0 {
		return nil, fmt.Errorf("fleettest: node %d has no replica to promote", i)
	}
	var promoted *Server
	err := poll(ctx, time.Minute, func(ctx context.Context) error {
		promoted = nil
		for _, r := range c.Replicas[i] {
			if role, err := Role(ctx, r); err == nil && role == "master" {
				promoted = r
			}
		}
		if promoted == nil {
			return fmt.Errorf("no replica of %s is a master yet", c.Nodes[i].Addr)
		}
		for _, n := range c.All() {
			if Ping(ctx, n.Addr) != nil {
				continue // the dead master
			}
			info, err := n.Cli(ctx, "cluster", "info")
			if err != nil {
				return err
			}
			if !strings.Contains(info, "cluster_state:ok") {
				return fmt.Errorf("%s is not cluster_state:ok", n.Addr)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("fleettest: replica of %s not promoted: %w", c.Nodes[i].Addr, err)
	}
	return promoted, nil
}

func (c *Cluster) waitOK(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for _, n := range c.Nodes {
		for {
			info, err := n.Cli(ctx, "cluster", "info")
			if err == nil && strings.Contains(info, "cluster_state:ok") {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("fleettest: cluster node %s never reached cluster_state:ok: %w", n.Addr, ctx.Err())
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	return nil
}

// Addrs returns every node's address.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		out[i] = n.Addr
	}
	return out
}

// Stop ends every node, replicas too.
func (c *Cluster) Stop() {
	for _, n := range c.All() {
		n.Stop()
	}
}
