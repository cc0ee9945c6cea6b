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
//   - [Fleet.KV]: namespaced values with optional TTLs, stored as JSON (a
//     string as a JSON string; []byte and json.RawMessage as they are);
//     reads go through
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
//     retries with backoff, dead letters; [Fleet.RunSweeper] recovers expired
//     leases; [Fleet.SubmitJSON] serves a REST endpoint.
//   - [NewPool]: tagged items with expiry, exclusive claims with leases,
//     filters checked against the tags type ([Eq]), mark-bad, waiting
//     claims, and claims that read only their smallest tag index.
//   - [NewStream]: a bounded output stream whose members are the outputs'
//     JSON, as documented ([StreamOptions.Envelope] adds an id and a time
//     to each, for streams only fleet reads); [Fleet.Publish] and [Subscribe]:
//     the event bus; [Fleet.PublishCatalog]: JSON Schemas of each automation.
//
// # Workers
//
// [NewLoopWorker] and [NewBatchWorker] host an automation in slots, with
// registration, heartbeats, stats, and config pushed by generation
// ([Fleet.UpdateConfig], [Fleet.PushConfig]). [TaskFunc] makes a batch
// automation of a plain func(ctx, payload) error. [Worker.SetSlots], or a
// pushed config's "slots" member, resizes a running batch worker's slots.
// [NewChunkWorker] hands its handler many tasks at once ([ChunkOptions],
// [ChunkFunc], [Chunk]), each marked acked or failed, the acks of a chunk
// in one script call. Shutting down: Start's
// ctx (a signal ctx), [Worker.Stop], [WorkerOptions.StopGrace] and
// [Fleet.Close], as docs/SHUTDOWN.md shows.
//
// # Task control
//
//   - [AddSchedule] with [Every] or [Cron], and [RunScheduler] in any number
//     of processes: periodic tasks, one per tick, with a policy for missed
//     ticks ([MissedRunOnce], [MissedSkip]); [Fleet.Schedules],
//     [Fleet.PauseSchedule], [Fleet.RemoveSchedule].
//   - [SubmitOptions.UniqueFor]: a dedup key held for a window after the
//     task; a duplicate gets a [DuplicateError].
//   - [SubmitOptions.Replace] and [SubmitOptions.Debounce]: a submit with a
//     dedup key gives the waiting task that holds it the new payload,
//     keeping its id ([ErrTaskRunning] when it runs); a debounce also moves
//     its start to [Debounce.Window] after the last submit, within
//     [Debounce.MaxWait] of the first.
//   - [Queue.Cancel]: a waiting task is removed, a running one is cancelled
//     on its worker (cause [ErrCanceled]) and dead-lettered.
//   - [Queue.Lookup], [QueueOptions.Retention], [Task.SetResult],
//     [BatchResultFunc], [ResultOf]: a task's state and its result.
//   - [QueueOptions.IndexMeta] and [Queue.FindByMeta]: the tasks whose
//     metadata has a key set to a value, in any state, a page at a time.
//   - [Queue.Pause] (by name: [Fleet.Queue]): workers reserve nothing from a
//     paused queue; submits go on.
//   - [NewPriorityWorker]: one worker over several queues, by strict
//     priority or by weight.
//   - Per-task options in [SubmitOptions] (Priority, MaxAttempts, Backoff,
//     Timeout, ExpiresAt, Metadata), per task in [Queue.SubmitManyWith].
//   - Retries: [QueueOptions.Backoff] is exponential (the default), fixed,
//     linear or a func ([Backoff], [ParseBackoff]), stored with the queue's
//     policy so every process and sweeper apply it; a handler's
//     [RetryAfter] sets one retry's delay, counting the attempt (unlike
//     [Task.Snooze] and [RateLimited]).
//   - Groups: [SubmitOptions.Group] and [QueueOptions.Groups] make one queue
//     fair between tenants, with each group's concurrency and rate
//     ([GroupLimits], [Queue.SetGroupLimit], [Queue.PauseGroup],
//     [Queue.Groups]); [QueueOptions.GlobalConcurrency] bounds the queue's
//     running tasks fleet-wide; [QueueStats.Latency] is the age of the
//     longest-waiting task that goes next.
//   - [WorkerOptions.Middleware]: wrap handlers ([Middleware], [Handler]);
//     the first is the outermost.
//   - Flows: [NewFlow], [AddStep], [Flow.Submit], [SubmitOptions.After]
//     ([DependOn], [Steps], [Ignoring]): tasks that wait for other tasks in
//     any queue, released once every dependency succeeded, their results
//     read with [ResultOf]; [FailDependent] and [IgnoreFailure] per edge;
//     [Fleet.CancelFlow], [Fleet.FlowStatus]. docs/FLOWS.md is the design.
//   - Batches: [Fleet.NewBatch], [BatchAdd], [Batch.Close], callbacks
//     ([NewCallback]) that run once when every task ended.
//   - [Task.Progress], [Queue.WatchProgress]: a running task's progress.
//   - [Logger], [QueueOptions.Logs]: per-task logs, a handler's slog lines
//     kept with the task, one entry per run ([TaskRecord.Logs]).
//   - [Queue.Wait], and [ResultOf] with [Await]: block until a task ends.
//
// # Operations
//
// [Fleet.Health], [Fleet.Sync], the admin functions ([Fleet.RemoveWorker],
// [Fleet.RemoveType], [Fleet.RemovePool], [Fleet.Workers], [Fleet.Overview],
// any queue by name through [Fleet.Queue]), [Fleet.MigrateTo] between layouts, and the layout
// marker that [Open] checks. cmd/fleetctl puts them on the command line.
// Reads for dashboards ([Queue.Pending], [Queue.Scheduled],
// [Fleet.Registered], [Fleet.StatsFrames], [Fleet.PoolTagCounts],
// [Fleet.StreamTail]) serve package fleetui, a dashboard that the host
// mounts as an http.Handler.
//
// # Sealed payloads
//
// [QueueOptions].Sealer seals a queue's payloads, results and progress
// before they reach Redis; [NewKeyring] makes one with AES-256-GCM and keys
// by id, so that keys rotate with no downtime. A worker that cannot open a
// payload ([ErrSealed]) dead-letters the task once; readers without the key
// ([Options].OpenWith) see the value sealed ([SealedKeyID]).
//
// # Observing
//
// [Options.Observer] takes hooks ([Observer]) that a Fleet calls on each
// submit, task end, lock wait and pool claim wait; a submit hook may return
// a trace context that goes into the task's body (the optional "trace"
// field), and worker middleware reads it back ([TaskInfo].Trace). Module
// github.com/fleet-go/fleet/fleetotel builds them over OpenTelemetry.
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
// [ErrUnavailable], [ErrNotObtained], [ErrLeaseLost], ...) together with their
// cause: a Redis error, a network error, or the context's error. A missing
// value is a result (ok false), not an error. A payload over its limit is
// [ErrPayloadTooLarge] for queues and pools alike.
//
// # Testing
//
// Package fleettest gives tests a Redis the way fleet's own tests get
// theirs (FLEET_REDIS_URL, a redis-server on PATH, or Docker), with a
// go-redis style client for assertions; its package handlertest runs a
// batch handler once, as a worker would, and returns its outcome.
package fleet
