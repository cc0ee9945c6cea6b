package fleettest

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// Cluster is a Redis Cluster of masters with no replicas, made of Servers.
type Cluster struct {
	// Nodes are the masters, each serving a share of the 16384 slots.
	Nodes []*Server
}

// StartCluster starts masters redis-server processes (three when masters <
// 3), joins them with redis-cli --cluster create, and waits until every node
// reports cluster_state:ok.
func StartCluster(ctx context.Context, masters int) (*Cluster, error) {
	if masters < 3 {
		masters = 3
	}
	c := &Cluster{}
	for range masters {
		s, err := StartServer(ctx, Config{Cluster: true})
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
	return c, nil
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

// Stop ends every node.
func (c *Cluster) Stop() {
	for _, n := range c.Nodes {
		n.Stop()
	}
}
