package fleet_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fleet-go/fleet"
	"github.com/fleet-go/fleet/fleettest"
	"github.com/fleet-go/fleet/internal/redistest"
)

type alert struct {
	Level string `json:"level"`
	N     int    `json:"n"`
}

// recv waits for one value on ch.
func recv[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	select {
	case v, ok := <-ch:
		if !ok {
			t.Fatal("channel closed")
		}
		return v
	case <-time.After(10 * time.Second):
		t.Fatal("nothing received in 10s")
	}
	panic("unreachable")
}

// closed waits until ch is closed, draining it.
func closed[T any](t *testing.T, ch <-chan T) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-deadline:
			t.Fatal("channel not closed in 10s")
		}
	}
}

func TestEventPublishSubscribe(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		sub, err := fleet.Subscribe[alert](c, e.F, "alerts", fleet.SubscribeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		channel := e.Prefix + "event:alerts"
		// The channel is event:<topic>: classic pub/sub on a single node,
		// sharded (SSUBSCRIBE) on the cluster.
		if tg.Cluster {
			m, err := e.Raw.Do(c, e.Raw.B().PubsubShardnumsub().Channel(channel).Build()).AsIntMap()
			if err != nil || m[channel] != 1 {
				t.Fatalf("PUBSUB SHARDNUMSUB = %v, %v; want 1", m, err)
			}
		} else {
			m, err := e.Raw.Do(c, e.Raw.B().PubsubNumsub().Channel(channel).Build()).AsIntMap()
			if err != nil || m[channel] != 1 {
				t.Fatalf("PUBSUB NUMSUB = %v, %v; want 1", m, err)
			}
		}
		for i := range 3 {
			if err := e.F.Publish(c, "alerts", alert{"warn", i}); err != nil {
				t.Fatal(err)
			}
		}
		for i := range 3 {
			if got := recv(t, sub.C()); got != (alert{"warn", i}) {
				t.Fatalf("got %+v, want n=%d", got, i)
			}
		}
		// Interop: a client of the documented schema publishes plain JSON on
		// event:<topic> (PUBLISH on a single node; SPUBLISH on the cluster).
		msg := `{"level":"raw","n":9}`
		if tg.Cluster {
			e.do(t, e.Raw.B().Spublish().Channel(channel).Message(msg).Build())
		} else {
			e.do(t, e.Raw.B().Publish().Channel(channel).Message(msg).Build())
		}
		if got := recv(t, sub.C()); got != (alert{"raw", 9}) {
			t.Fatalf("raw publish: got %+v", got)
		}
		// Undecodable messages are dropped and counted.
		for _, m := range []string{"not json", `"a string"`} {
			if tg.Cluster {
				e.do(t, e.Raw.B().Spublish().Channel(channel).Message(m).Build())
			} else {
				e.do(t, e.Raw.B().Publish().Channel(channel).Message(m).Build())
			}
		}
		_ = e.F.Publish(c, "alerts", alert{"after", 1})
		if got := recv(t, sub.C()); got != (alert{"after", 1}) {
			t.Fatalf("got %+v", got)
		}
		if n := sub.Undecodable(); n != 2 {
			t.Fatalf("Undecodable = %d, want 2", n)
		}
		if got := e.keys(t); len(got) != 0 {
			t.Fatalf("pub/sub left keys: %v", got)
		}
	})
}

func TestEventSlowSubscriberDrops(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		sub, err := fleet.Subscribe[int](c, e.F, "burst", fleet.SubscribeOptions{Buffer: 2})
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Close()
		// Nobody reads: the publisher never blocks, extra messages are dropped.
		start := time.Now()
		for i := range 50 {
			if err := e.F.Publish(c, "burst", i); err != nil {
				t.Fatal(err)
			}
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("publishing took %v", d)
		}
		waitFor(t, 5*time.Second, func() bool { return sub.Dropped() == 48 }, "Dropped = %d, want 48", later(func() any { return sub.Dropped() }))
		if a, b := recv(t, sub.C()), recv(t, sub.C()); a != 0 || b != 1 {
			t.Fatalf("kept %d, %d; want the first two", a, b)
		}
		// Reading again frees the buffer.
		_ = e.F.Publish(c, "burst", 99)
		if got := recv(t, sub.C()); got != 99 {
			t.Fatalf("got %d", got)
		}
	})
}

func TestEventSubscriptionEnds(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)

		// ctx ends: C closes, Err is ctx's error.
		sc, cancel := context.WithCancel(c)
		sub, err := fleet.Subscribe[int](sc, e.F, "end", fleet.SubscribeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cancel()
		closed(t, sub.C())
		<-sub.Done()
		if !errors.Is(sub.Err(), context.Canceled) {
			t.Fatalf("Err after cancel = %v", sub.Err())
		}

		// Close: C closes, Err is nil; Close is idempotent.
		sub, err = fleet.Subscribe[int](c, e.F, "end", fleet.SubscribeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if sub.Err() != nil {
			t.Fatalf("Err while running = %v", sub.Err())
		}
		sub.Close()
		sub.Close()
		closed(t, sub.C())
		if sub.Err() != nil {
			t.Fatalf("Err after Close = %v", sub.Err())
		}

		// The Fleet closes: C closes, Err is ErrClosed, and Close waited for it.
		f2 := openOn(t, tg, e.Prefix)
		sub, err = fleet.Subscribe[int](c, f2, "end", fleet.SubscribeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		_ = f2.Close()
		select {
		case <-sub.Done():
		default:
			t.Fatal("Fleet.Close returned before the subscription ended")
		}
		closed(t, sub.C())
		if !errors.Is(sub.Err(), fleet.ErrClosed) {
			t.Fatalf("Err after Fleet.Close = %v", sub.Err())
		}
		if _, err := fleet.Subscribe[int](c, f2, "end", fleet.SubscribeOptions{}); !errors.Is(err, fleet.ErrClosed) {
			t.Fatalf("Subscribe on a closed Fleet: %v", err)
		}
		if err := f2.Publish(c, "end", 1); !errors.Is(err, fleet.ErrClosed) {
			t.Fatalf("Publish on a closed Fleet: %v", err)
		}
	})
}

func TestEventBadInput(t *testing.T) {
	redistest.Each(t, func(t *testing.T, tg redistest.Target) {
		t.Parallel()
		e := open(t, tg)
		c := ctx(t)
		for _, topic := range []string{"", "a b", "{x}"} {
			if err := e.F.Publish(c, topic, 1); !errors.Is(err, fleet.ErrInvalidName) {
				t.Fatalf("Publish(%q): %v", topic, err)
			}
			if _, err := fleet.Subscribe[int](c, e.F, topic, fleet.SubscribeOptions{}); !errors.Is(err, fleet.ErrInvalidName) {
				t.Fatalf("Subscribe(%q): %v", topic, err)
			}
		}
		if err := e.F.Publish(c, "t", make(chan int)); !errors.Is(err, fleet.ErrInvalidArgument) {
			t.Fatalf("Publish of a channel: %v", err)
		}
		if _, err := fleet.Subscribe[int](c, e.F, "t", fleet.SubscribeOptions{Buffer: -1}); !errors.Is(err, fleet.ErrInvalidArgument) {
			t.Fatalf("negative buffer: %v", err)
		}
		cancelled, cancel := context.WithCancel(c)
		cancel()
		if err := e.F.Publish(cancelled, "t", 1); !errors.Is(err, context.Canceled) {
			t.Fatalf("Publish with a cancelled ctx: %v", err)
		}
		if _, err := fleet.Subscribe[int](cancelled, e.F, "t", fleet.SubscribeOptions{}); !errors.Is(err, context.Canceled) {
			t.Fatalf("Subscribe with a cancelled ctx: %v", err)
		}
	})
}

// A subscription survives a server restart: it resubscribes and gets what is
// published after.
func TestEventSubscriptionSurvivesRestart(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	srv, err := fleettest.StartServer(c, fleettest.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Stop)
	f, err := fleet.Open(c, fleet.Options{URL: srv.URL()})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sub, err := fleet.Subscribe[string](c, f, "restart", fleet.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if err := f.Publish(c, "restart", "before"); err != nil {
		t.Fatal(err)
	}
	if got := recv(t, sub.C()); got != "before" {
		t.Fatalf("got %q", got)
	}
	if err := srv.Restart(c); err != nil {
		t.Fatal(err)
	}
	// Publish until the resubscribed subscription hears one.
	deadline := time.Now().Add(20 * time.Second)
	for i := 0; ; i++ {
		_ = f.Publish(c, "restart", fmt.Sprint("after-", i))
		select {
		case got, ok := <-sub.C():
			if !ok {
				t.Fatalf("subscription ended: %v", sub.Err())
			}
			if got == "before" {
				t.Fatalf("got %q again", got)
			}
			return
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("no message after the restart")
		}
	}
}
