package fleettest_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fleet-go/fleet/fleettest"
)

// StartSentinel starts a master in sync with its replica, watched by three
// sentinels; a SIGKILL of the master makes them promote the replica, and
// the killed master, restarted, comes back as a replica of the new one.
func TestSentinelFailover(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	st, err := fleettest.StartSentinel(c, fleettest.SentinelConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Stop()
	if len(st.Servers) != 2 || len(st.Sentinels) != 3 {
		t.Fatalf("%d servers and %d sentinels; want 2 and 3", len(st.Servers), len(st.Sentinels))
	}
	m, err := st.Master(c)
	if err != nil || m != st.Servers[0] {
		t.Fatalf("Master = %v, %v; want the first server", m, err)
	}
	if n, err := fleettest.OnlineReplicas(c, m); err != nil || n != 1 {
		t.Fatalf("OnlineReplicas = %d, %v; want 1", n, err)
	}
	if want := "redis-sentinel://" + strings.Join(st.Addrs(), ",") + "/fleet"; st.URL() != want {
		t.Fatalf("URL = %s; want %s", st.URL(), want)
	}
	if _, err := m.Cli(c, "set", "k", "v"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Cli(c, "wait", "1", "5000"); err != nil {
		t.Fatal(err)
	}
	killed, err := st.KillMaster(c)
	if err != nil || killed != m {
		t.Fatalf("KillMaster = %v, %v", killed, err)
	}
	start := time.Now()
	nm, err := st.WaitFailover(c, m.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("failover took %v", time.Since(start))
	if nm != st.Servers[1] {
		t.Fatalf("new master %s; want the replica %s", nm.Addr, st.Servers[1].Addr)
	}
	if v, err := nm.Cli(c, "get", "k"); err != nil || v != "v" {
		t.Fatalf("GET k on the new master = %q, %v; want v", v, err)
	}
	if err := st.Rejoin(c, killed); err != nil {
		t.Fatal(err)
	}
	if err := st.WaitReplicas(c, 1); err != nil {
		t.Fatal(err)
	}
	if role, err := fleettest.Role(c, killed); err != nil || role != "slave" {
		t.Fatalf("restarted master's role = %q, %v; want slave", role, err)
	}
}

// StartClusterWith starts three masters with a replica each; a SIGKILL of
// one master makes its replica take its slots over.
func TestClusterReplicaPromoted(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	cl, err := fleettest.StartClusterWith(c, fleettest.ClusterConfig{Replicas: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Stop()
	if len(cl.Nodes) != 3 || len(cl.Replicas) != 3 || len(cl.All()) != 6 {
		t.Fatalf("%d masters, %d replica sets, %d servers; want 3, 3, 6", len(cl.Nodes), len(cl.Replicas), len(cl.All()))
	}
	for i, rs := range cl.Replicas {
		if role, err := fleettest.Role(c, rs[0]); err != nil || role != "slave" {
			t.Fatalf("replica of node %d: role %q, %v", i, role, err)
		}
		if n, err := fleettest.OnlineReplicas(c, cl.Nodes[i]); err != nil || n != 1 {
			t.Fatalf("node %d: %d replicas online, %v; want 1", i, n, err)
		}
	}
	cl.KillMaster(1)
	start := time.Now()
	nm, err := cl.WaitPromoted(c, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("promotion took %v", time.Since(start))
	if nm != cl.Replicas[1][0] {
		t.Fatalf("promoted %s; want %s", nm.Addr, cl.Replicas[1][0].Addr)
	}
	ctx2, cancel := context.WithTimeout(c, 10*time.Second)
	defer cancel()
	if out, err := nm.Cli(ctx2, "cluster", "info"); err != nil || !strings.Contains(out, "cluster_state:ok") {
		t.Fatalf("cluster info on the new master: %v %s", err, out)
	}
}
