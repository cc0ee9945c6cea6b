package fleettest

import (
	"context"

	"fmt"
	"os"
	"sync"

	"github.com/redis/rueidis"
	"github.com/redis/rueidis/rueidiscompat"
	tcredis "github.com/testcontainers/testcontainers-go/modules/redis"
)

// Redis is a single Redis node for a test, from wherever one could be had
// (see Start), with a client for assertions. Its methods are safe for
// concurrent use.
type Redis struct {
	url    string
	from   string
	client rueidis.Client
	compat rueidiscompat.Cmdable
	stop   func()
	once   sync.Once
}

// Start gives a test a single Redis node, the way fleet's own tests get
// theirs, trying in order:
//   - the server of FLEET_REDIS_URL, when set (Close leaves it running);
//   - a redis-server from PATH, on a free port (StartServer);
//   - a container of the redis:7 image, through testcontainers-go's redis
//     module, where Docker works.
//
// It returns an error naming what was tried when none works (errors.Is
// ErrNoRedisServer when neither PATH nor Docker had one). Close the Redis
// when the test ends. Tests sharing one server should keep their keys apart
// (a prefix per test) rather than flush it.
func Start(ctx context.Context) (*Redis, error) {
	if url := os.Getenv("FLEET_REDIS_URL"); url != "" {
		return newRedis(url, "FLEET_REDIS_URL", nil)
	}
	pathErr := Available()
	if pathErr == nil {
		s, err := StartServer(ctx, Config{})
		if err != nil {
			return nil, err
		}
		return newRedis(s.URL(), "redis-server on PATH", s.Stop)
	}
	c, err := tcredis.Run(ctx, "redis:7")
	if err != nil {
		return nil, fmt.Errorf("%w; Docker failed too: %w", pathErr, err)
	}
	stop := func() { _ = c.Terminate(context.Background()) }
	url, err := c.ConnectionString(ctx)
	if err != nil {
		stop()
		return nil, err
	}
	return newRedis(url, "Docker (redis:7)", stop)
}

func newRedis(url, from string, stop func()) (*Redis, error) {
	opt, err := rueidis.ParseURL(url)
	if err != nil {
		if stop != nil {
			stop()
		}
		return nil, fmt.Errorf("fleettest: %s: %w", from, err)
	}
	opt.DisableCache = true // assertions read the server, never a local copy
	client, err := rueidis.NewClient(opt)
	if err != nil {
		if stop != nil {
			stop()
		}
		return nil, fmt.Errorf("fleettest: connect to %s (%s): %w", url, from, err)
	}
	return &Redis{url: url, from: from, client: client, compat: rueidiscompat.NewAdapter(client), stop: stop}, nil
}

// URL returns the node's URL, redis://host:port, for fleet.Options.URL.
func (r *Redis) URL() string { return r.url }

// From says where the node came from: "FLEET_REDIS_URL", "redis-server on
// PATH" or "Docker (redis:7)".
func (r *Redis) From() string { return r.from }

// Client returns a rueidis client of the node, without client-side caching.
func (r *Redis) Client() rueidis.Client { return r.client }

// Compat returns a go-redis style client of the node (rueidiscompat), to
// assert what a test left in Redis the way the documented schema spells it:
//
//	v, err := srv.Compat().HGetAll(ctx, "wkr:pages:w1:state").Result()
//
// It reads the server, never a cached copy.
func (r *Redis) Compat() rueidiscompat.Cmdable { return r.compat }

// Close closes the clients and stops the node when Start started it (a
// server of FLEET_REDIS_URL keeps running). Close is idempotent.
func (r *Redis) Close() {
	r.once.Do(func() {
		r.client.Close()
		if r.stop != nil {
			r.stop()
		}
	})
}
