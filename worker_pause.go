package fleet

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/fleet-go/fleet/internal/mono"
)

// pauseGate is a batch worker's view of one queue's paused flag, shared by
// its fetcher (before each reserve) and its slots (before each take with
// an ack, takeQueue): the flag as last read, kept until the key's
// invalidation (ch) or until the local cache's entry would have ended
// (its PTTL, at most CacheTTL), so a check costs neither Redis nor a
// cache lookup while the flag does not change, and is never staler than
// the cached read. Without caching it is read at most once per ConfigPoll
// (and at once after this process changed it). Safe for concurrent use.
type pauseGate struct {
	f      *Fleet
	key    string
	every  time.Duration
	ch     <-chan struct{}
	stop   func()
	paused atomic.Bool
	until  atomic.Int64 // mono.Now until which paused holds; 0: read again
}

func newPauseGate(f *Fleet, key string, every time.Duration) *pauseGate {
	ch, stop := f.watch.Listen(key)
	return &pauseGate{f: f, key: key, every: every, ch: ch, stop: stop}
}

// check reports whether the queue is paused now (as far as one can know
// without a round trip, when caching is off).
func (g *pauseGate) check(ctx context.Context) bool {
	select {
	case <-g.ch: // the key changed (its invalidation, or this process without caching)
		g.stale()
	default:
	}
	now := mono.Now()
	if now < g.until.Load() {
		return g.paused.Load()
	}
	res := g.f.client.DoCache(ctx, g.f.client.B().Get().Key(g.key).Cache(), g.f.cacheTTL)
	v, err := res.ToString()
	if err != nil && !rueidis.IsRedisNil(err) {
		return g.paused.Load() // keep what was known; the reserve reports the failure
	}
	hold := g.every
	if g.f.cache {
		hold = time.Duration(max(res.CachePTTL(), 0)) * time.Millisecond
	}
	g.paused.Store(err == nil && v != "")
	g.until.Store(now + int64(hold))
	return g.paused.Load()
}

// stale makes the next check read the flag.
func (g *pauseGate) stale() { g.until.Store(0) }
