package fleet

import (
	"context"
	"time"

	"github.com/redis/rueidis"
)

// pauseGate is a batch worker's view of its queue's paused flag: read
// through the client-side cache, so checking it before each reserve costs
// Redis nothing while it does not change; without caching it is read at
// most once per ConfigPoll.
type pauseGate struct {
	f      *Fleet
	key    string
	every  time.Duration
	ch     <-chan struct{}
	stop   func()
	paused bool
	read   time.Time
}

func newPauseGate(f *Fleet, key string, every time.Duration) *pauseGate {
	ch, stop := f.watch.Listen(key)
	return &pauseGate{f: f, key: key, every: every, ch: ch, stop: stop}
}

// check reports whether the queue is paused now (as far as one can know
// without a round trip, when caching is off).
func (g *pauseGate) check(ctx context.Context) bool {
	if !g.f.cache {
		select {
		case <-g.ch: // this process changed it
			g.read = time.Time{}
		default:
		}
		if time.Since(g.read) < g.every {
			return g.paused
		}
	}
	v, err := g.f.client.DoCache(ctx, g.f.client.B().Get().Key(g.key).Cache(), g.f.cacheTTL).ToString()
	if err != nil && !rueidis.IsRedisNil(err) {
		return g.paused // keep what was known; the reserve reports the failure
	}
	g.paused, g.read = err == nil && v != "", time.Now()
	return g.paused
}
