// Package fleet gives a fleet of workers its shared state over Redis: typed
// task queues with leases, retries and dead letters; pools of claimable
// items with exclusive leases; locks, counters and namespaced values; bounded
// output streams; an event bus; and a worker runtime. It is a library, not a
// daemon: what a master process would do (sweeping expired reservations,
// pushing config) are functions the host process calls.
//
// # Connecting
//
// [Open] connects from a Redis URL (redis://, rediss:// for TLS, user and
// password for ACL, a database number), from a list of addresses, or wraps a
// rueidis client the caller owns. It detects a Redis Cluster and picks the key
// layout: [LayoutCompat], the documented keys byte for byte, on a single node;
// [LayoutTagged], with a hash tag per queue, pool, lock and worker, on a
// cluster. [Options.Prefix] goes before every key. A [Fleet] is safe for
// concurrent use; [Fleet.Close] ends every goroutine it started.
//
// # Primitives
//
//   - [Fleet.KV]: namespaced values with optional TTLs; reads go through
//     client-side caching, so a repeated read costs no round trip and a write
//     anywhere reaches the next read through the server's invalidation.
//   - [Fleet.Counter]: an atomic integer.
//   - [Fleet.Lock]: a token lease with a fencing token; waiters wake when
//     the holder releases; [Lock.Do] runs a function under the lock and can
//     keep the lease alive while it runs.
//   - [Fleet.Limiter]: a fleet-wide GCRA rate limiter on the server's clock;
//     [QueueOptions.RateLimit] limits a queue's reserves with one, and a
//     handler's [RateLimited] puts its task back uncounted.
//   - [Fleet.Semaphore]: at most n holders at once, each a [Lease] that a
//     crashed holder loses after its hold.
//
// # Queues, pools, streams, events
//
//   - [NewQueue]: typed task queues: validated submits (one, many, delayed,
//     deduplicated), an atomic reserve with a lease only its owner can end,
//     retries with backoff, dead letters; [RunSweeper] recovers expired
//     leases; [Fleet.SubmitJSON] serves a REST endpoint.
//   - [NewPool]: tagged items with expiry, exclusive claims with leases,
//     filters checked against the tags type ([Eq]), mark-bad, waiting
//     claims, and claims that read only their smallest tag index.
//   - [NewStream]: a bounded output stream; [Fleet.Publish] and [Subscribe]:
//     the event bus; [Fleet.PublishCatalog]: JSON Schemas of each automation.
//
// # Workers
//
// [NewLoopWorker] and [NewBatchWorker] host an automation in slots, with
// registration, heartbeats, stats, and config pushed by generation
// ([Fleet.UpdateConfig], [Fleet.PushConfig]).
//
// # Operations
//
// [Fleet.Health], [Fleet.Sync], the admin functions ([Fleet.RemoveWorker],
// [Fleet.PurgeType], [Fleet.DropPool], [Fleet.Workers], [Fleet.Overview],
// dead letters by queue name), [Migrate] between layouts, and the layout
// marker that [Open] checks. cmd/fleetctl puts them on the command line.
// Reads for dashboards ([Fleet.PendingTasks], [Fleet.ScheduledTasks],
// [Fleet.Registered], [Fleet.StatsFrames], [Fleet.PoolTagCounts],
// [Fleet.StreamTail]) serve package fleetui, a dashboard that the host
// mounts as an http.Handler.
//
// # Names
//
// Names never hold '{', '}', white space or control characters; a name that
// stands between other parts of a key (a KV namespace, a queue, a pool, a
// type, a worker id) never holds ':', and types and worker ids never hold
// '|'. A bad name gives [ErrInvalidName] from every call of its handle (and
// from its Err method), naming the bad name; nothing is written.
//
// # Errors
//
// Errors wrap sentinels that errors.Is can test ([ErrWrongType],
// [ErrUnavailable], [ErrNotObtained], [ErrNotHeld], ...) together with their
// cause: a Redis error, a network error, or the context's error. A missing
// value is a result (ok false), not an error.
package fleet
