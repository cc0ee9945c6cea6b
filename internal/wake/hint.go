package wake

import (
	"time"

	"github.com/redis/rueidis"
)

// HintTTL is how long a cached read that only tells a waiter when to look
// again (a queue's pending length and signal, a pool's or semaphore's
// count, a lock's holder) is kept: such a read returns nothing to the
// caller, and a stale one costs at most a poll, so it need not refetch
// every CacheTTL (which would add a round trip every 2 s to each idle
// waiter).
const HintTTL = time.Minute

// NoTTL marks a cached read of a key that never has a TTL of its own (a
// queue's pending list, signal and dead letters, a pool's items): rueidis
// then sends CLIENT CACHING yes and the read alone, without the MULTI,
// PTTL and EXEC that it wraps a read in to follow the key's TTL, so that
// arming an idle waiter costs 2 commands instead of 5. The server's
// invalidation still ends the entry at once; an expiry would not (the
// entry would live out its ttl), which is why a key with a TTL (a lock, a
// semaphore's holders) is never read so.
func NoTTL(c rueidis.Cacheable) rueidis.Cacheable { return c.ToStaticTTL() }
