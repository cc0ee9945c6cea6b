package fleettest_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/fleettest"
)

// A fleet opened through the sentinels follows a failover: a write that
// MinReplicas 1 made wait for the replica survives the master's SIGKILL.
func ExampleStartSentinel() {
	ctx := context.Background()
	st, err := fleettest.StartSentinel(ctx, fleettest.SentinelConfig{}) // a master, a replica, three sentinels
	if err != nil {
		log.Fatal(err)
	}
	defer st.Stop()

	f, err := fleet.Open(ctx, fleet.Options{URL: st.URL(), MinReplicas: 1, ReplicaTimeout: 5 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	kv := f.KV("example")
	if err := kv.Set(ctx, "k", "before the failover", 0); err != nil {
		log.Fatal(err)
	}

	old, err := st.KillMaster(ctx)
	if err != nil {
		log.Fatal(err)
	}
	promoted, err := st.WaitFailover(ctx, old.Addr)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("the replica is the master:", promoted == st.Servers[1])

	v, ok, err := kv.GetString(ctx, "k")
	fmt.Println(v, ok, err)
	// Output:
	// the replica is the master: true
	// before the failover true <nil>
}

// A cluster of three masters with a replica each; a master killed, its
// replica takes its slots over.
func ExampleStartClusterWith() {
	ctx := context.Background()
	cl, err := fleettest.StartClusterWith(ctx, fleettest.ClusterConfig{Replicas: 1})
	if err != nil {
		log.Fatal(err)
	}
	defer cl.Stop()
	fmt.Println(len(cl.Nodes), "masters,", len(cl.All())-len(cl.Nodes), "replicas")

	cl.KillMaster(0)
	promoted, err := cl.WaitPromoted(ctx, 0)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("promoted its replica:", promoted == cl.Replicas[0][0])
	// Output:
	// 3 masters, 3 replicas
	// promoted its replica: true
}
