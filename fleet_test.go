package fleet_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/fleettest"
	"github.com/fleet-go/fleet/internal/redistest"
)

func TestOpenPicksLayout(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	single, cluster := redistest.SingleURL(t), redistest.ClusterURL(t)
	cases := []struct {
		url     string
		layout  fleet.Layout
		want    fleet.Layout
		cluster bool
		err     error
	}{
		{single, fleet.LayoutAuto, fleet.LayoutCompat, false, nil},
		{single, fleet.LayoutTagged, fleet.LayoutTagged, false, nil},
		{single, fleet.LayoutCompat, fleet.LayoutCompat, false, nil},
		{cluster, fleet.LayoutAuto, fleet.LayoutTagged, true, nil},
		{cluster, fleet.LayoutTagged, fleet.LayoutTagged, true, nil},
		{cluster, fleet.LayoutCompat, "", true, fleet.ErrLayout},
	}
	for i, tc := range cases {
		prefix := "open-layout-" + strconv.Itoa(i) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36) + ":"
		f, err := fleet.Open(c, fleet.Options{URL: tc.url, Layout: tc.layout, Prefix: prefix})
		if !errors.Is(err, tc.err) {
			t.Fatalf("Open(%s, %q) = %v, want %v", tc.url, tc.layout, err, tc.err)
		}
		if err != nil {
			continue
		}
		if f.Layout() != tc.want || f.Cluster() != tc.cluster {
			t.Errorf("Open(%s, %q): layout %q cluster %v; want %q %v", tc.url, tc.layout, f.Layout(), f.Cluster(), tc.want, tc.cluster)
		}
		f.Close()
		redistest.DeletePrefix(tc.url, prefix)
	}
}

func TestOpenBadOptions(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	url := redistest.SingleURL(t)
	cases := map[string]fleet.Options{
		"nothing":       {},
		"url and addrs": {URL: url, Addrs: []string{"127.0.0.1:1"}},
		"bad scheme":    {URL: "http://127.0.0.1:6379"},
		"bad db":        {URL: url + "/notanumber"},
		"bad layout":    {URL: url, Layout: "sideways"},
		"brace prefix":  {URL: url, Prefix: "a{b}:"},
		"space prefix":  {URL: url, Prefix: "a b:"},
		"negative ttl":  {URL: url, CacheTTL: -time.Second},
	}
	for name, o := range cases {
		if _, err := fleet.Open(c, o); !errors.Is(err, fleet.ErrInvalidOptions) {
			t.Errorf("%s: Open = %v, want ErrInvalidOptions", name, err)
		}
	}
	cancelled, cancel := context.WithCancel(c)
	cancel()
	if _, err := fleet.Open(cancelled, fleet.Options{URL: url}); !errors.Is(err, context.Canceled) {
		t.Errorf("Open with a cancelled ctx = %v", err)
	}
	port, _ := fleettest.FreePort()
	_, err := fleet.Open(c, fleet.Options{Addrs: []string{"127.0.0.1:" + strconv.Itoa(port)}, DialTimeout: time.Second})
	if !errors.Is(err, fleet.ErrUnavailable) {
		t.Errorf("Open on a closed port = %v, want ErrUnavailable", err)
	}
}

// A caller-owned client stays open after Close; calls after Close fail.
func TestCloseOwnership(t *testing.T) {
	t.Parallel()
	tg := redistest.Targets(t)[0]
	c := ctx(t)
	opt, _ := rueidis.ParseURL(tg.URL)
	opt.DisableCache = true
	client, err := rueidis.NewClient(opt)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	prefix := redistest.Prefix(t, tg)
	f, err := fleet.Open(c, fleet.Options{Client: client, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Counter("n").Incr(c); err != nil {
		t.Fatal(err)
	}
	// A lock waiter on a caller-owned client polls, and Close ends its wait.
	if _, err := f.Lock("l").Acquire(c, fleet.LockOptions{Hold: time.Minute}); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() {
		_, err := f.Lock("l").Acquire(c, fleet.LockOptions{Hold: time.Second, Wait: time.Minute})
		waited <- err
	}()
	time.Sleep(50 * time.Millisecond)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-waited:
		if !errors.Is(err, fleet.ErrClosed) {
			t.Fatalf("waiter after Close: %v, want ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end a lock wait")
	}
	if err := f.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := f.Counter("n").Incr(c); !errors.Is(err, fleet.ErrClosed) {
		t.Fatalf("Incr after Close = %v, want ErrClosed", err)
	}
	if _, _, err := f.KV("ns").Get(c, "k"); !errors.Is(err, fleet.ErrClosed) {
		t.Fatalf("Get after Close = %v, want ErrClosed", err)
	}
	if err := client.Do(c, client.B().Ping().Build()).Error(); err != nil {
		t.Fatalf("the caller's client was closed: %v", err)
	}
}

func TestBadNamesChangeNothing(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		bad := []string{"", "a{b", "a}b", "{x}", "has space", "tab\there", "nl\n", "nul\x00", "bell\a", strings.Repeat("x", 513), "bad\xffutf8"}
		for _, name := range bad {
			if err := e.F.KV(name).Set(c, "k", "v", 0); !errors.Is(err, fleet.ErrInvalidName) {
				t.Errorf("KV(%q).Set = %v", name, err)
			}
			if err := e.F.KV("ns").Set(c, name, "v", 0); !errors.Is(err, fleet.ErrInvalidName) {
				t.Errorf("KV key %q: Set = %v", name, err)
			}
			if _, err := e.F.Counter(name).Incr(c); !errors.Is(err, fleet.ErrInvalidName) {
				t.Errorf("Counter(%q).Incr = %v", name, err)
			}
			if _, err := e.F.Lock(name).Acquire(c, fleet.LockOptions{Hold: time.Second}); !errors.Is(err, fleet.ErrInvalidName) {
				t.Errorf("Lock(%q).Acquire = %v", name, err)
			}
			if e.F.Lock(name).Err() == nil || e.F.Counter(name).Err() == nil || e.F.KV(name).Err() == nil {
				t.Errorf("Err() nil for %q", name)
			}
		}
		// A namespace is a middle segment: ':' would let ns "a:b" key "c"
		// collide with ns "a" key "b:c".
		if err := e.F.KV("a:b").Set(c, "c", "v", 0); !errors.Is(err, fleet.ErrInvalidName) {
			t.Errorf("KV(a:b) = %v", err)
		}
		// Last segments may hold ':' (the convention of the documented schema).
		if err := e.F.KV("a").Set(c, "b:c", "v", 0); err != nil {
			t.Errorf("KV key b:c: %v", err)
		}
		err := e.F.Counter("has space").Err()
		if err == nil || !strings.Contains(err.Error(), `"has space"`) {
			t.Errorf("the error does not name the bad name: %v", err)
		}
		if _, err := e.F.Lock("ok").Acquire(c, fleet.LockOptions{Hold: 0}); !errors.Is(err, fleet.ErrInvalidArgument) {
			t.Errorf("hold 0: %v", err)
		}
		if _, err := e.F.Lock("ok").Acquire(c, fleet.LockOptions{Hold: -time.Second}); !errors.Is(err, fleet.ErrInvalidArgument) {
			t.Errorf("hold < 0: %v", err)
		}
		if _, err := e.F.Lock("ok").Acquire(c, fleet.LockOptions{Hold: time.Second, Wait: -1}); !errors.Is(err, fleet.ErrInvalidArgument) {
			t.Errorf("wait < 0: %v", err)
		}
		cancelled, cancel := context.WithCancel(c)
		cancel()
		if _, err := e.F.Counter("ok").Incr(cancelled); !errors.Is(err, context.Canceled) {
			t.Errorf("Incr with a cancelled ctx: %v", err)
		}
		if err := e.F.KV("ns").Set(cancelled, "k2", "v", 0); !errors.Is(err, context.Canceled) {
			t.Errorf("Set with a cancelled ctx: %v", err)
		}
		if _, err := e.F.Lock("ok").Acquire(cancelled, fleet.LockOptions{Hold: time.Second}); !errors.Is(err, context.Canceled) {
			t.Errorf("Acquire with a cancelled ctx: %v", err)
		}
		if got := e.keys(t); len(got) != 1 || got[0] != e.Prefix+"fleet:kv:a:b:c" {
			t.Fatalf("refused calls wrote keys: %v", got)
		}
	})
}

// SCRIPT FLUSH, and a restarted server, never break a call: EVALSHA falls
// back to EVAL, and the client reconnects.
func TestScriptsSurviveFlushAndRestart(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	s, f := ownServer(t, fleet.Options{})
	lk := f.Lock("flush")
	use := func(step string) {
		t.Helper()
		var err error
		for range 50 { // a restart drops the connection; a few calls may see it
			var l *fleet.Lease
			if l, err = lk.Acquire(c, fleet.LockOptions{Hold: time.Second}); err == nil {
				err = l.Release(c)
			}
			if err == nil {
				break
			}
			if !errors.Is(err, fleet.ErrUnavailable) {
				t.Fatalf("%s: %v", step, err)
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
	}
	use("first use")
	if _, err := s.Cli(c, "script", "flush"); err != nil {
		t.Fatal(err)
	}
	use("after SCRIPT FLUSH")
	if err := s.Restart(c); err != nil {
		t.Fatal(err)
	}
	use("after a restart")
	if err := f.KV("ns").Set(c, "k", "v", 0); err != nil {
		t.Fatal(err)
	}
}

// The server going away mid-call gives ErrUnavailable, not a hang.
func TestServerGoneIsUnavailable(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	s, f := ownServer(t, fleet.Options{DialTimeout: time.Second})
	if err := f.KV("ns").Set(c, "k", "v", 0); err != nil {
		t.Fatal(err)
	}
	// A call waiting on the server when it dies (CLIENT PAUSE holds writes).
	if _, err := s.Cli(c, "client", "pause", "10000", "write"); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		_, err := f.Counter("n").Incr(c)
		errc <- err
	}()
	time.Sleep(100 * time.Millisecond)
	s.Kill()
	select {
	case err := <-errc:
		if !errors.Is(err, fleet.ErrUnavailable) {
			t.Fatalf("Incr cut off mid-call = %v, want ErrUnavailable", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a call cut off mid-call hangs")
	}
	cc, cancel := context.WithTimeout(c, 5*time.Second)
	defer cancel()
	if _, err := f.Counter("n").Incr(cc); !errors.Is(err, fleet.ErrUnavailable) {
		t.Fatalf("Incr with the server gone = %v, want ErrUnavailable", err)
	}
	if _, _, err := f.KV("ns").Get(cc, "other"); !errors.Is(err, fleet.ErrUnavailable) {
		t.Fatalf("Get with the server gone = %v, want ErrUnavailable", err)
	}
	if _, err := f.Lock("l").Acquire(cc, fleet.LockOptions{Hold: time.Second}); !errors.Is(err, fleet.ErrUnavailable) {
		t.Fatalf("Acquire with the server gone = %v, want ErrUnavailable", err)
	}
}

// Errors that have nothing to do with the network are not ErrUnavailable,
// since callers retry on it.
func TestOnlyNetworkErrorsAreUnavailable(t *testing.T) {
	e := open(t, redistest.Targets(t)[0])
	type tags struct {
		Region string `json:"region"`
	}
	p := fleet.NewPool[string, tags](e.F, "opts", fleet.PoolOptions{PruneBatch: -1})
	if _, err := p.Put(ctx(t), "x", tags{}, 0); !errors.Is(err, fleet.ErrInvalidOptions) || errors.Is(err, fleet.ErrUnavailable) {
		t.Errorf("Put with bad options = %v", err)
	}
	err := e.F.Lock("stolen").Do(ctx(t), fleet.LockOptions{Hold: 300 * time.Millisecond, KeepAlive: true}, func(c context.Context, l *fleet.Lease) error {
		e.do(t, e.Raw.B().Set().Key(e.key("fleet:lock:stolen", "fleet:lock:{stolen}")).Value("thief").Build())
		<-c.Done()
		return nil
	})
	if !errors.Is(err, fleet.ErrLeaseLost) || errors.Is(err, fleet.ErrUnavailable) {
		t.Errorf("Do after losing the lock = %v", err)
	}
}

// ownServer starts a redis-server for this test alone (to flush, restart
// or kill it) and opens a Fleet on it with opts; both end with the test.
func ownServer(t *testing.T, opts fleet.Options) (*fleettest.Server, *fleet.Fleet) {
	t.Helper()
	s, err := fleettest.StartServer(ctx(t), fleettest.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	opts.URL = s.URL()
	f, err := fleet.Open(ctx(t), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return s, f
}
