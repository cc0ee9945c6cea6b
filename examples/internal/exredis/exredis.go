// Package exredis gives the examples a Redis: FLEET_REDIS_URL when set, else
// a throwaway redis-server that the example starts and stops itself.
package exredis

import (
	"context"
	"fmt"
	"os"

	"github.com/redis/rueidis"

	"github.com/fleet-go/fleet"

	"github.com/fleet-go/fleet/fleettest"
)

// URL returns the Redis URL to use and a function that stops what was
// started (a no-op for FLEET_REDIS_URL).
func URL(ctx context.Context) (url string, stop func(), err error) {
	if url := os.Getenv("FLEET_REDIS_URL"); url != "" {
		return url, func() {}, nil
	}
	s, err := fleettest.StartServer(ctx, fleettest.Config{})
	if err != nil {
		return "", nil, fmt.Errorf("no FLEET_REDIS_URL, and no throwaway redis-server: %w", err)
	}
	fmt.Fprintf(os.Stderr, "using a throwaway redis-server on %s\n", s.Addr)
	return s.URL(), s.Stop, nil
}

// Cleanup deletes every key under prefix (SCAN on each node), so that an
// example leaves nothing behind on a server of yours.
func Cleanup(ctx context.Context, c rueidis.Client, prefix string) {
	for _, n := range c.Nodes() {
		var cursor uint64
		for {
			e, err := n.Do(ctx, n.B().Scan().Cursor(cursor).Match(prefix+"*").Count(1000).Build()).AsScanEntry()
			if err != nil {
				return
			}
			for _, k := range e.Elements {
				c.Do(ctx, c.B().Del().Key(k).Build())
			}
			if cursor = e.Cursor; cursor == 0 {
				break
			}
		}
	}
}

// Open opens a Fleet for the example called name, under a key prefix of its
// own (name and the process id), on URL's Redis. done closes the Fleet,
// deletes every key the example wrote, and stops a throwaway server.
func Open(ctx context.Context, name string) (f *fleet.Fleet, done func(), err error) {
	url, stop, err := URL(ctx)
	if err != nil {
		return nil, nil, err
	}
	prefix := fmt.Sprintf("example-%s-%d:", name, os.Getpid())
	if f, err = fleet.Open(ctx, fleet.Options{URL: url, Prefix: prefix}); err != nil {
		stop()
		return nil, nil, err
	}
	return f, func() {
		Cleanup(context.WithoutCancel(ctx), f.Client(), prefix)
		f.Close()
		stop()
	}, nil
}
