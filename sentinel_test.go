package fleet_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/fleettest"
)

// Sentinel options that cannot work are refused with ErrInvalidOptions
// before any connection.
func TestSentinelBadOptions(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		opts fleet.Options
		want string
	}{
		{fleet.Options{Sentinel: fleet.SentinelOptions{Addrs: []string{"127.0.0.1:26379"}}}, "Sentinel.MasterSet is empty"},
		{fleet.Options{URL: "redis://127.0.0.1:6379", Sentinel: fleet.SentinelOptions{MasterSet: "m"}}, "needs Sentinel.Addrs"},
		{fleet.Options{URL: "redis://127.0.0.1:6379", Sentinel: fleet.SentinelOptions{Addrs: []string{"127.0.0.1:26379"}, MasterSet: "m"}}, "exactly one of URL, Addrs, Client and Sentinel.Addrs (2 set)"},
		{fleet.Options{Sentinel: fleet.SentinelOptions{Addrs: []string{"nohostport"}, MasterSet: "m"}}, `"nohostport" is not host:port`},
		{fleet.Options{Sentinel: fleet.SentinelOptions{Addrs: []string{"127.0.0.1:26379"}, MasterSet: "a b"}}, "holds white space"},
		{fleet.Options{URL: "redis://127.0.0.1:6379", Sentinel: fleet.SentinelOptions{Password: "x"}}, "need Sentinel.Addrs or a redis-sentinel:// URL"},
		{fleet.Options{URL: "redis-sentinel:///fleet"}, "names no sentinel"},
		{fleet.Options{URL: "redis-sentinel://127.0.0.1:26379"}, "the path must be /masterset"},
		{fleet.Options{URL: "redis-sentinel://127.0.0.1:26379/a/1/2"}, "the path must be /masterset"},
		{fleet.Options{URL: "redis-sentinel://127.0.0.1:26379/a/x"}, `database "x" is not a number`},
		{fleet.Options{URL: "sentinel://127.0.0.1:26379/a"}, "or redis-sentinel://"},
	} {
		_, err := fleet.Open(ctx(t), c.opts)
		if !errors.Is(err, fleet.ErrInvalidOptions) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Open(%+v) = %v; want ErrInvalidOptions, %q", c.opts, err, c.want)
		}
	}
}

// With no sentinel answering, Open fails with ErrUnavailable naming every
// sentinel address and the master set, in both forms.
func TestSentinelUnreachable(t *testing.T) {
	t.Parallel()
	p1, _ := fleettest.FreePort()
	p2, _ := fleettest.FreePort()
	a1, a2 := fmt.Sprintf("127.0.0.1:%d", p1), fmt.Sprintf("127.0.0.1:%d", p2)
	for _, o := range []fleet.Options{
		{URL: "redis-sentinel://" + a1 + "," + a2 + "/fleet"},
		{Sentinel: fleet.SentinelOptions{Addrs: []string{a1, a2}, MasterSet: "fleet"}},
	} {
		_, err := fleet.Open(ctx(t), o)
		if !errors.Is(err, fleet.ErrUnavailable) || !strings.Contains(err.Error(), "sentinels "+a1+","+a2+` (master set "fleet")`) {
			t.Errorf("Open(%+v) = %v; want ErrUnavailable naming %s,%s", o, err, a1, a2)
		}
	}
}

// cutReplication opens the window that asynchronous replication leaves:
// it freezes the replica (DEBUG SLEEP 3) and cuts its link from the
// master, so that the master's next writes reach no replica, and returns
// 500 ms later (the caller then kills the master) with a channel that
// gets the sleep's end.
func cutReplication(t *testing.T, st *fleettest.Sentinel) <-chan error {
	t.Helper()
	m, err := st.Master(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	rep := st.Servers[0]
	if rep == m {
		rep = st.Servers[1]
	}
	slept := make(chan error, 1)
	go func() { _, err := rep.Cli(context.Background(), "debug", "sleep", "3"); slept <- err }()
	time.Sleep(200 * time.Millisecond) // let the replica fall asleep (not asserted on)
	if _, err := m.Cli(ctx(t), "client", "kill", "type", "replica"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // writes go on, unreplicated (not asserted on)
	return slept
}

// startSentinel starts a Sentinel setup stopped when the test ends.
func startSentinel(t *testing.T) *fleettest.Sentinel {
	t.Helper()
	st, err := fleettest.StartSentinel(ctx(t), fleettest.SentinelConfig{Args: []string{"--enable-debug-command", "local"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Stop)
	return st
}

// Each way of naming the sentinels reaches the master: a redis-sentinel://
// URL, SentinelOptions, and rueidis' redis://...?master_set= form. An
// unknown master set is ErrUnavailable naming it; MinReplicas above the
// master's replicas is refused.
func TestSentinelOpen(t *testing.T) {
	t.Parallel()
	st := startSentinel(t)
	m, err := st.Master(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	addrs := st.Addrs()
	for i, o := range []fleet.Options{
		{URL: st.URL()},
		{Sentinel: fleet.SentinelOptions{Addrs: addrs, MasterSet: "fleet"}},
		{URL: "redis://" + addrs[0] + "?addr=" + addrs[1] + "&master_set=fleet"},
	} {
		o.Prefix = fmt.Sprintf("so%d:", i)
		o.MinReplicas, o.ReplicaTimeout = 1, 10*time.Second
		f, err := fleet.Open(ctx(t), o)
		if err != nil {
			t.Fatalf("Open(%+v): %v", o, err)
		}
		if err := f.KV("ns").Set(ctx(t), "k", "v", 0); err != nil {
			t.Fatal(err)
		}
		f.Close()
		if v := cli(t, m, "get", o.Prefix+"fleet:kv:ns:k"); v != `"v"` && v != "v" {
			t.Fatalf("form %d: the master holds %q at %sfleet:kv:ns:k; want v", i, v, o.Prefix)
		}
	}
	_, err = fleet.Open(ctx(t), fleet.Options{URL: strings.TrimSuffix(st.URL(), "fleet") + "nosuchset"})
	if !errors.Is(err, fleet.ErrUnavailable) || !strings.Contains(err.Error(), "nosuchset") {
		t.Fatalf("Open with an unknown master set = %v; want ErrUnavailable naming it", err)
	}
	_, err = fleet.Open(ctx(t), fleet.Options{URL: st.URL(), MinReplicas: 2})
	if !errors.Is(err, fleet.ErrInvalidOptions) || !strings.Contains(err.Error(), "has 1 replicas") {
		t.Fatalf("Open with MinReplicas 2 = %v; want ErrInvalidOptions, has 1 replicas", err)
	}
}

// Consumers and submitters keep running through a failover made by SIGKILL
// of the master, without reopening anything: the Fleet follows the
// sentinels to the promoted replica. Just before the kill the replica is
// frozen and cut off, so that the master's last writes reach no replica;
// the test reports the acknowledged submits lost and the acks that came
// back (without MinReplicas, both may be above 0).
func TestSentinelFailoverUnderLoad(t *testing.T) {
	t.Parallel()
	st := startSentinel(t)
	f, err := fleet.Open(ctx(t), fleet.Options{URL: st.URL(), Prefix: "fo:"})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	l := newFailLoad(f, "jobs")
	l.start(2, 2, 0)
	defer l.stop()
	l.waitAcks(t, "jobs", 0, 500, "before the failover")
	slept := cutReplication(t, st)
	old, err := st.KillMaster(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	if err := <-slept; err != nil {
		t.Fatal(err)
	}
	if _, err := st.WaitFailover(ctx(t), old.Addr); err != nil {
		t.Fatal(err)
	}
	promoted := time.Since(killed)
	subs, acks := l.submittedCount(), l.acks["jobs"].Load()
	// Both sides resume by themselves on the new master.
	waitFor(t, time.Minute, func() bool { return l.submittedCount() >= subs+500 }, "submitters did not resume after the failover")
	l.waitAcks(t, "jobs", acks, 500, "after the failover")
	resumed := time.Since(killed)
	lost, cameBack := l.finish(t)
	t.Logf("sentinel failover: promoted after %v, load resumed after %v; %d submits acknowledged, %d lost; %d acks came back; %d submit and %d ack errors",
		promoted.Round(time.Millisecond), resumed.Round(time.Millisecond), l.submittedCount(), lost["jobs"], cameBack["jobs"], l.submitErr.Load(), l.ackErr.Load())
}

// 10,000 tasks, the master killed (SIGKILL) after 3,000 acknowledged
// submits, with MinReplicas 1 and without; just before, the replica is
// frozen and its link cut, so that the master's last writes reach no
// replica. With MinReplicas 1 no acknowledged submit is lost; without it,
// the test reports how many were.
func TestSentinelDurability(t *testing.T) {
	t.Parallel()
	for _, min := range []int{1, 0} {
		t.Run(fmt.Sprintf("MinReplicas=%d", min), func(t *testing.T) {
			t.Parallel()
			st := startSentinel(t)
			f, err := fleet.Open(ctx(t), fleet.Options{URL: st.URL(), Prefix: "du:", MinReplicas: min, ReplicaTimeout: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			const total = 10000
			l := newFailLoad(f, "jobs")
			l.start(8, 0, total)
			defer l.stop()
			waitFor(t, time.Minute, func() bool { return l.submittedCount() >= 3000 }, "3000 submits never acknowledged")
			atCut := l.submittedCount()
			slept := cutReplication(t, st)
			old, err := st.KillMaster(ctx(t))
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("MinReplicas %d: %d submits acknowledged in the 0.7 s before the master's kill (replica frozen, then cut off)", min, l.submittedCount()-atCut)
			if err := <-slept; err != nil {
				t.Fatal(err)
			}
			if _, err := st.WaitFailover(ctx(t), old.Addr); err != nil {
				t.Fatal(err)
			}
			// The killed master comes back, empty, as a replica of the new
			// one: MinReplicas 1 can be met again.
			if err := st.Rejoin(context.Background(), old); err != nil {
				t.Fatal(err)
			}
			waitFor(t, 2*time.Minute, func() bool { return l.submittedCount() == total }, "the %d submits were never all acknowledged", total)
			// Read what the queue holds, the sweeper stopped, through a handle
			// whose lease outlasts the reading.
			l.stop()
			q := fleet.NewQueue[int](f, "jobs", fleet.QueueOptions{Lease: 5 * time.Minute, MaxAttempts: 100})
			held := map[int]bool{}
			// Five minutes, not ctx's one: beside CPU hogs, a drain of every
			// submit with a WAIT on each ack ran out of a minute.
			c, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			for {
				tasks, err := q.Reserve(c, 200, 0)
				if err != nil {
					t.Fatal(err)
				}
				if len(tasks) == 0 {
					break
				}
				for _, tk := range tasks {
					held[tk.Payload] = true
					if err := tk.Ack(c); err != nil {
						t.Fatal(err)
					}
				}
			}
			lost := 0
			for p := range total {
				if !held[p] {
					lost++
				}
			}
			t.Logf("MinReplicas %d: %d of %d acknowledged submits lost; %d submit errors (ErrNotDurable or ErrUnavailable, retried)", min, lost, total, l.submitErr.Load())
			if min > 0 && lost != 0 {
				t.Fatalf("MinReplicas %d lost %d acknowledged submits; want 0", min, lost)
			}
		})
	}
}

// With passwords on the data nodes and on the sentinels, fleet reaches the
// master in both forms (the URL's ":pw@" and ?sentinel_password=, and
// Options.Password with SentinelOptions.Password), and follows a failover
// with them. A wrong or missing password, to the master or to the
// sentinels, is refused at Open with ErrAuth.
func TestSentinelPasswords(t *testing.T) {
	t.Parallel()
	const pw, spw = `data pw:/@"x\`, "sentinel pw&? #\"q"
	st, err := fleettest.StartSentinel(ctx(t), fleettest.SentinelConfig{Password: pw, SentinelPassword: spw})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Stop)
	if !strings.Contains(st.URL(), "sentinel_password=") {
		t.Fatalf("URL %q carries no sentinel password", st.URL())
	}
	byURL, err := fleet.Open(ctx(t), fleet.Options{URL: st.URL()})
	if err != nil {
		t.Fatalf("Open(%s): %v", st.URL(), err)
	}
	t.Cleanup(func() { _ = byURL.Close() })
	byOpts, err := fleet.Open(ctx(t), fleet.Options{Password: pw,
		Sentinel: fleet.SentinelOptions{Addrs: st.Addrs(), MasterSet: st.MasterSet, Password: spw}})
	if err != nil {
		t.Fatalf("Open with SentinelOptions: %v", err)
	}
	t.Cleanup(func() { _ = byOpts.Close() })
	if err := byURL.KV("pw").Set(ctx(t), "k", "v1", 0); err != nil {
		t.Fatal(err)
	}
	if got, ok, err := byOpts.KV("pw").GetString(ctx(t), "k"); err != nil || !ok || got != "v1" {
		t.Fatalf("get through the other Fleet: %q %v %v", got, ok, err)
	}

	for name, o := range map[string]fleet.Options{
		"wrong master password": {Password: "nope", Sentinel: fleet.SentinelOptions{Addrs: st.Addrs(), MasterSet: st.MasterSet, Password: spw}},
		"no master password":    {Sentinel: fleet.SentinelOptions{Addrs: st.Addrs(), MasterSet: st.MasterSet, Password: spw}},
		"wrong sentinel password": {Password: pw,
			Sentinel: fleet.SentinelOptions{Addrs: st.Addrs(), MasterSet: st.MasterSet, Password: "nope"}},
		"no sentinel password": {Password: pw, Sentinel: fleet.SentinelOptions{Addrs: st.Addrs(), MasterSet: st.MasterSet}},
	} {
		f, err := fleet.Open(ctx(t), o)
		if err == nil {
			_ = f.Close()
		}
		if !errors.Is(err, fleet.ErrAuth) {
			t.Errorf("%s: Open = %v; want ErrAuth", name, err)
		}
	}

	old, err := st.KillMaster(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.WaitFailover(ctx(t), old.Addr); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, func() bool {
		return byURL.KV("pw").Set(ctx(t), "k", "v2", 0) == nil
	}, "no write through the new master")
	waitFor(t, 30*time.Second, func() bool {
		got, ok, err := byOpts.KV("pw").GetString(ctx(t), "k")
		return err == nil && ok && got == "v2"
	}, "the other Fleet never read the write on the new master")
}
