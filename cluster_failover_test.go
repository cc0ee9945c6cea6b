package fleet_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/fleettest"
)

// queueOn returns a queue name whose keys (tagged layout: the name is the
// hash tag) live on master m of the cluster.
func queueOn(t *testing.T, m *fleettest.Server, i int) string {
	t.Helper()
	for n := range 1000 {
		name := fmt.Sprintf("q%d-%d", i, n)
		out := cli(t, m, "exists", "{"+name+"}")
		if !strings.Contains(out, "MOVED") {
			return name
		}
	}
	t.Fatalf("no queue name found on %s", m.Addr)
	return ""
}

// A cluster of three masters with a replica each loses one master to
// SIGKILL under load, its replica frozen and cut off just before (so that
// the master's last writes reach no replica): the consumers of the queues on the other masters go
// on during the failover window, those of the failed master's queue resume
// by themselves once its replica is promoted (and, with MinReplicas 1,
// once the killed node is back as a replica). With MinReplicas 1 no
// acknowledged submit is lost; the test reports the counts either way.
func TestClusterFailoverUnderLoad(t *testing.T) {
	t.Parallel()
	for _, min := range []int{1, 0} {
		t.Run(fmt.Sprintf("MinReplicas=%d", min), func(t *testing.T) {
			t.Parallel()
			// A node timeout of 3 s, not fleettest's 1.5 s, so that a master
			// stalled beside CPU hogs keeps its place. (Open's refusals here,
			// "a master with 0 replicas", were Open asking the replicas its
			// client had come to see: TestMinReplicasClusterReplicasSeen.)
			cl, err := fleettest.StartClusterWith(ctx(t), fleettest.ClusterConfig{Replicas: 1, NodeTimeout: 3 * time.Second, Args: []string{"--enable-debug-command", "local"}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(cl.Stop)
			names := make([]string, len(cl.Nodes))
			for i, m := range cl.Nodes {
				names[i] = queueOn(t, m, i)
			}
			f, err := fleet.Open(ctx(t), fleet.Options{Addrs: cl.Addrs(), Prefix: "cf:", MinReplicas: min, ReplicaTimeout: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			l := newFailLoad(f, names...)
			l.start(1, 1, 0)
			defer l.stop()
			for _, n := range names {
				l.waitAcks(t, n, 0, 200, "before the failover")
			}
			const dead = 1
			before := map[string]int64{}
			for _, n := range names {
				before[n] = l.acks[n].Load()
			}
			// Open the window that asynchronous replication leaves: freeze the
			// failing master's replica (DEBUG SLEEP) and cut its link, so that
			// the master's last writes reach no replica before it dies.
			rep := cl.Replicas[dead][0]
			slept := make(chan error, 1)
			go func() { _, err := rep.Cli(context.Background(), "debug", "sleep", "2"); slept <- err }()
			time.Sleep(200 * time.Millisecond) // let the replica fall asleep (not asserted on)
			if _, err := cl.Nodes[dead].Cli(ctx(t), "client", "kill", "type", "replica"); err != nil {
				t.Fatal(err)
			}
			atCut := l.submittedCount()
			time.Sleep(500 * time.Millisecond) // submits go on, unreplicated (not asserted on)
			for _, n := range names {
				before[n] = l.acks[n].Load()
			}
			cl.KillMaster(dead)
			killed := time.Now()
			t.Logf("MinReplicas %d: %d submits acknowledged (all queues) between the replica's cut and the master's kill", min, l.submittedCount()-atCut)
			if err := <-slept; err != nil {
				t.Fatal(err)
			}
			if _, err := cl.WaitPromoted(ctx(t), dead); err != nil {
				t.Fatal(err)
			}
			window := time.Since(killed)
			for i, n := range names {
				if i == dead {
					continue
				}
				// Progress during the failover window, on every other master.
				if got := l.acks[n].Load() - before[n]; got <= 0 {
					t.Errorf("queue %s on a live master acked %d tasks during the %v failover window; want > 0", n, got, window)
				}
			}
			if err := cl.Nodes[dead].Restart(ctx(t)); err != nil { // it rejoins as a replica
				t.Fatal(err)
			}
			at := l.acks[names[dead]].Load()
			l.waitAcks(t, names[dead], at, 200, "after the promotion")
			resumed := time.Since(killed)
			for i, n := range names {
				if i != dead {
					l.waitAcks(t, n, before[n], 400, "through the failover")
				}
			}
			lost, cameBack := l.finish(t)
			t.Logf("cluster, MinReplicas %d: promoted after %v, failed master's queue resumed after %v; %d submits acknowledged; lost %v; acks came back %v; %d submit and %d ack errors",
				min, window.Round(time.Millisecond), resumed.Round(time.Millisecond), l.submittedCount(), lost, cameBack, l.submitErr.Load(), l.ackErr.Load())
			if min > 0 {
				for n, k := range lost {
					if k != 0 {
						t.Errorf("MinReplicas %d: queue %s lost %d acknowledged submits; want 0", min, n, k)
					}
				}
			}
		})
	}
}
