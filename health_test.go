package fleet_test

import (
	"testing"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/fleettest"
	"github.com/fleet-go/fleet/internal/redistest"
)

func codes(r fleet.HealthReport) map[string]int {
	out := map[string]int{}
	for _, p := range r.Problems {
		out[p.Code]++
	}
	return out
}

func TestHealth(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	// A server set up as fleet wants it: healthy.
	good, err := fleettest.StartServer(c, fleettest.Config{AppendOnly: true, Args: []string{"--maxmemory-policy", "noeviction"}})
	if err != nil {
		t.Fatal(err)
	}
	defer good.Stop()
	f, err := fleet.Open(c, fleet.Options{URL: good.URL()})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := f.Health(c)
	if err != nil {
		t.Fatal(err)
	}
	if !r.OK() || len(r.Nodes) != 1 || !r.Nodes[0].AOF || r.Nodes[0].MaxmemoryPolicy != "noeviction" || r.Nodes[0].Version == "" {
		t.Fatalf("healthy server reported %+v", r)
	}

	// AOF off and an evicting policy, with caching off: three problems.
	bad, err := fleettest.StartServer(c, fleettest.Config{Args: []string{"--maxmemory-policy", "allkeys-lru"}})
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Stop()
	fb, err := fleet.Open(c, fleet.Options{URL: bad.URL(), DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	defer fb.Close()
	r, err = fb.Health(c)
	if err != nil {
		t.Fatal(err)
	}
	if got := codes(r); len(got) != 3 || got[fleet.HealthAOFOff] != 1 || got[fleet.HealthEviction] != 1 || got[fleet.HealthNoTracking] != 1 {
		t.Fatalf("problems %v", r.Problems)
	}

	// The test cluster: every slot served, AOF off on each of three masters.
	fc, err := fleet.Open(c, fleet.Options{URL: redistest.ClusterURL(t), Prefix: redistest.Prefix(t, redistest.Targets(t)[2])})
	if err != nil {
		t.Fatal(err)
	}
	defer fc.Close()
	r, err = fc.Health(c)
	if err != nil {
		t.Fatal(err)
	}
	if got := codes(r); r.Slots != 16384 || len(r.Nodes) != 3 || got[fleet.HealthAOFOff] != 3 || got[fleet.HealthClusterSlots] != 0 {
		t.Fatalf("cluster report %+v", r)
	}
}

// A cluster with a master gone serves fewer slots: Health says so.
func TestHealthClusterSlotsMissing(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	cl, err := fleettest.StartCluster(c, 3)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Stop()
	f, err := fleet.Open(c, fleet.Options{Addrs: cl.Addrs()})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// Take slot 0 away from its owner.
	for _, n := range cl.Nodes {
		_, _ = n.Cli(c, "cluster", "delslots", "0")
	}
	waitFor(t, 10e9, func() bool {
		r, err := f.Health(c)
		return err == nil && codes(r)[fleet.HealthClusterSlots] == 1 && r.Slots == 16383
	}, "Health never reported the missing slot")
}
