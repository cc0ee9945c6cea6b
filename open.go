package fleet

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/fleet-go/fleet/internal/engine"
	"github.com/fleet-go/fleet/internal/keys"
	"github.com/fleet-go/fleet/internal/wake"
)

// Defaults of Options.
const (
	// DefaultCacheTTL is how stale a client-side cached read may be at
	// most (Options.CacheTTL). The server's invalidation keeps a cached
	// value fresh far sooner, as long as it is heard.
	DefaultCacheTTL = 2 * time.Second
	// DefaultDialTimeout bounds connecting to a node.
	DefaultDialTimeout = 5 * time.Second
)

// Options configures Open. The zero value of each field means its default;
// exactly one of URL, Addrs and Client must be set.
type Options struct {
	// URL is a Redis URL: redis://[user:password@]host:port[/db], or
	// rediss:// for TLS. More cluster seeds go in repeated addr= query
	// parameters (redis://h1:7000?addr=h2:7001). Through Redis Sentinel:
	// redis-sentinel://[user:password@]s1:26379,s2:26379/masterset[/db],
	// where user and password are the master's and the query parameters
	// sentinel_username and sentinel_password the sentinels' (TLS:
	// rediss-sentinel://); redis://s1:26379?addr=s2:26379&master_set=name
	// works too.
	URL string
	// Addrs lists "host:port" seeds: one node, or some nodes of a cluster.
	Addrs []string
	// Client wraps a rueidis client that the caller owns: Close does not
	// close it. fleet cannot hook invalidations into a client it did not
	// build, so waits (locks, claims, configs) fall back to polling with
	// backoff on it.
	Client rueidis.Client

	// Username is the ACL user to authenticate as. It overrides the URL's.
	// Defaults to none (the default user).
	Username string
	// Password authenticates the user (ACL) or against requirepass. It
	// overrides the URL's. Defaults to none.
	Password string
	// TLSConfig turns TLS on with this configuration (custom CA, client
	// certificates). Without it, rediss:// uses the system roots.
	TLSConfig *tls.Config
	// DB selects a database number on a single node. Defaults to 0 or the
	// URL's.
	DB int

	// Layout picks the key layout. Defaults to LayoutAuto. LayoutCompat on a
	// cluster is refused with ErrLayout.
	Layout Layout
	// Prefix goes before every key and channel, to isolate tests or several
	// fleets in one database. It may not hold '{', '}', white space or
	// control characters. Defaults to none.
	Prefix string

	// DisableCache turns off client-side caching, for servers without RESP3
	// client tracking. Reads then always go to the server.
	DisableCache bool
	// CacheTTL bounds how stale a cached read may be. A value read through
	// the client-side cache (KV reads; the catalog, the schedules, a
	// queue's pause flag and a worker's config generation; the end records
	// Queue.Wait reads) is served only until CacheTTL after the send of
	// the read that fetched it from the server; after that the next read
	// goes to the server again. So a cached read returns a value that was
	// current less than CacheTTL before it, however late the server's
	// invalidation is, and while this Fleet hears nothing from the server
	// (a stalled or partitioned connection) it serves cached values for at
	// most CacheTTL: then its reads wait on the server, until their ctx
	// ends or the connection is found dead (ErrUnavailable). Within that
	// bound, a read sees every write made through its own Fleet (read your
	// writes), and a write by another process once its invalidation
	// arrives (tens of microseconds on a local network). WithFreshReads
	// gives a read that always goes to the server. (Cached reads that only
	// tell a waiter when to look again, such as a queue's length, keep
	// their entries up to a minute: a stale one costs a poll, not a wrong
	// answer.) Defaults to DefaultCacheTTL (2s).
	CacheTTL time.Duration
	// DialTimeout bounds connecting to a node. Defaults to DefaultDialTimeout.
	DialTimeout time.Duration
	// Logger receives what background work has to say. Defaults to silent.
	Logger *slog.Logger
	// OpenWith opens the sealed values (QueueOptions.Sealer) of queues
	// this process made no Queue for, when it reads them to show them:
	// Lookup, the lists of tasks and dead letters, WatchProgress, and so
	// the dashboard (fleetui) and fleetctl (--keys). It seals nothing. A
	// Queue made with a Sealer opens with its own. Defaults to none: such
	// values are shown sealed.
	OpenWith Sealer
	// NoMarkerWrite makes Open check an existing layout marker (fleet:meta)
	// but leave a missing one unwritten, so that opening writes nothing:
	// for a dry run (fleetctl migrate --dry-run opens its target so) or a
	// look at a database that must stay untouched. Defaults to false: Open
	// writes the marker on first use.
	NoMarkerWrite bool
	// Observer is told of submits, task ends, lock and claim waits, for
	// metrics and tracing (see Observer; the fleetotel package makes one).
	// Open keeps a copy. Defaults to none.
	Observer *Observer

	// Sentinel connects through Redis Sentinel (see SentinelOptions), as
	// a redis-sentinel:// URL does. Defaults to none.
	Sentinel SentinelOptions
	// MinReplicas makes every write that fleet sends (every command or
	// script that is not read-only: Submit, Ack, Nack, Reserve, pool Put
	// and claims, locks, KV, counters, the sweeper's requeues) wait until
	// this many replicas confirm it (Redis WAIT, on the same connection
	// right after the write), and fail with ErrNotDurable when they do not
	// within ReplicaTimeout. WithMinReplicas overrides it per call. Open
	// refuses, with ErrInvalidOptions, more than the replicas each master
	// has, once they had ReplicaTimeout to connect (a replica whose link
	// to its master is being re-established, as under load or after a
	// failover, is waited for that long). Defaults to 0: writes return as
	// soon as the master has them.
	MinReplicas int
	// ReplicaTimeout bounds how long a write waits for MinReplicas
	// replicas. Defaults to DefaultReplicaTimeout.
	ReplicaTimeout time.Duration
	// HistoryFlush is how often this Fleet adds the task ends it counted
	// (its acks, nacks, dead letters and sweeps) to the queues' history
	// (Queue.History; one script per queue counted, plus a depth sample of
	// each once a minute). A negative value keeps no history. Defaults to
	// DefaultHistoryFlush (5s).
	HistoryFlush time.Duration
}

// Open connects to Redis, detects a cluster, and picks the key layout.
// It gives up when ctx ends (or after DialTimeout), returning ctx's error.
// It returns ErrInvalidOptions for options it cannot use (a URL without
// redis://, a database number the server does not have, a server that
// does not speak the Redis protocol), ErrAuth when the server refuses the
// credentials, ErrLayout for compat on a cluster, and ErrUnavailable when
// no node answers. A failed TLS handshake says that the port may be plain
// text.
func Open(ctx context.Context, opts Options) (*Fleet, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := opts.validate(); err != nil {
		return nil, err
	}
	f := &Fleet{
		cacheTTL: opts.CacheTTL,
		log:      opts.Logger,
		watch:    wake.New(),
		done:     make(chan struct{}),
		now:      time.Now,
		obs:      copyObserver(opts.Observer),
		openWith: opts.OpenWith,
	}
	f.hist = newHistory(opts.HistoryFlush)
	f.life, f.endLife = context.WithCancel(context.Background())
	if f.cacheTTL == 0 {
		f.cacheTTL = DefaultCacheTTL
	}
	if f.log == nil {
		f.log = slog.New(slog.DiscardHandler)
	}
	if opts.Client != nil {
		f.client = opts.Client
	} else {
		co, err := opts.clientOption()
		if err != nil {
			return nil, err
		}
		co.OnInvalidations = f.watch.OnInvalidations
		client, co, err := f.connectClient(ctx, co)
		if err != nil {
			if co.Sentinel.MasterSet != "" {
				return nil, connectErr(sentinelWhere(co), err)
			}
			return nil, connectErr(co.InitAddress, err)
		}
		f.client, f.owned, f.cache = client, true, !co.DisableCache
	}
	f.cluster = f.client.Mode() == rueidis.ClientModeCluster
	f.raw = f.client
	timeout := opts.ReplicaTimeout
	if timeout == 0 {
		timeout = DefaultReplicaTimeout
	}
	f.client = newDurableClient(f.client, opts.MinReplicas, timeout)
	f.layout = opts.Layout
	switch {
	case f.layout == LayoutAuto && f.cluster:
		f.layout = LayoutTagged
	case f.layout == LayoutAuto:
		f.layout = LayoutCompat
	case f.layout == LayoutCompat && f.cluster:
		f.closeClient()
		return nil, fmt.Errorf("%w: the compat layout spreads one queue's keys over many slots, which a Redis Cluster cannot script; use LayoutTagged (or LayoutAuto), and Migrate a compat database first", ErrLayout)
	}
	f.keys = keys.New(opts.Prefix, f.layout == LayoutTagged)
	f.eng = &engine.Env{Client: f.client, Keys: f.keys, Watch: f.watch, Cache: f.cache,
		Hooks: engine.Hooks{Acked: f.flowAcked, Ended: f.taskRunEnded},
		Alive: f.alive, Closed: f.closed.Load, Spawn: f.spawn, Abandon: f.abandon, Life: f.life}
	if err := f.client.Do(ctx, f.client.B().Ping().Build()).Error(); err != nil {
		f.closeClient()
		return nil, connectErr(nil, err)
	}
	if opts.MinReplicas > 0 {
		if err := f.checkReplicas(ctx, opts.MinReplicas, timeout); err != nil {
			f.closeClient()
			return nil, err
		}
	}
	if err := f.checkMarker(ctx, !opts.NoMarkerWrite); err != nil {
		f.closeClient()
		return nil, err
	}
	return f, nil
}

func (o *Options) validate() error {
	set := 0
	if o.URL != "" {
		set++
	}
	if len(o.Addrs) > 0 {
		set++
	}
	if o.Client != nil {
		set++
	}
	if len(o.Sentinel.Addrs) > 0 {
		set++
	}
	if set != 1 {
		return fmt.Errorf("%w: set exactly one of URL, Addrs, Client and Sentinel.Addrs (%d set)", ErrInvalidOptions, set)
	}
	if err := o.validateSentinel(); err != nil {
		return err
	}
	if o.MinReplicas < 0 || o.ReplicaTimeout < 0 {
		return fmt.Errorf("%w: MinReplicas (%d) and ReplicaTimeout (%v) may not be negative", ErrInvalidOptions, o.MinReplicas, o.ReplicaTimeout)
	}
	switch o.Layout {
	case LayoutAuto, LayoutCompat, LayoutTagged:
	default:
		return fmt.Errorf("%w: Layout %q is not compat, tagged or empty", ErrInvalidOptions, o.Layout)
	}
	if strings.ContainsAny(o.Prefix, "{}") || strings.IndexFunc(o.Prefix, func(r rune) bool { return r <= ' ' || r == 0x7f }) >= 0 {
		return fmt.Errorf("%w: Prefix %q holds a brace, white space or a control character", ErrInvalidOptions, o.Prefix)
	}
	if o.CacheTTL < 0 || o.DialTimeout < 0 || o.DB < 0 {
		return fmt.Errorf("%w: CacheTTL, DialTimeout and DB may not be negative", ErrInvalidOptions)
	}
	return nil
}

func (o *Options) clientOption() (rueidis.ClientOption, error) {
	var co rueidis.ClientOption
	if isSentinelURL(o.URL) {
		var err error
		if co, err = parseSentinelURL(o.URL); err != nil {
			return co, err
		}
	} else if o.URL != "" {
		if err := checkURL(o.URL); err != nil {
			return co, err
		}
		var err error
		if co, err = rueidis.ParseURL(o.URL); err != nil {
			return co, fmt.Errorf("%w: URL: %w", ErrInvalidOptions, err)
		}
	} else if len(o.Addrs) > 0 {
		co.InitAddress = append([]string(nil), o.Addrs...)
	}
	if o.Username != "" {
		co.Username = o.Username
	}
	if o.Password != "" {
		co.Password = o.Password
	}
	if o.DB != 0 {
		co.SelectDB = o.DB
	}
	if o.TLSConfig != nil {
		cfg := o.TLSConfig.Clone()
		if cfg.ServerName == "" && co.TLSConfig != nil {
			cfg.ServerName = co.TLSConfig.ServerName
		}
		co.TLSConfig = cfg
	}
	co.DisableCache = co.DisableCache || o.DisableCache
	co.ClientName = "fleet"
	co.Dialer.Timeout = o.DialTimeout
	if co.Dialer.Timeout == 0 {
		co.Dialer.Timeout = DefaultDialTimeout
	}
	if o.sentinel() {
		o.applySentinel(&co)
	}
	return co, nil
}
