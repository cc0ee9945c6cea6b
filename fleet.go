package fleet

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"

	"github.com/fleet-go/fleet/internal/engine"
	"github.com/fleet-go/fleet/internal/keys"
	"github.com/fleet-go/fleet/internal/wake"
)

// Layout is a key layout (SCHEMA.md).
type Layout string

const (
	// LayoutAuto picks compat on a single node and tagged on a cluster.
	LayoutAuto Layout = ""
	// LayoutCompat spells the documented keys byte for byte, so fleet shares
	// a single node with any client that follows the documented schema.
	LayoutCompat Layout = "compat"
	// LayoutTagged puts a hash tag on each queue, pool, lock and worker, so
	// every script's keys share one slot: required on a Redis Cluster.
	LayoutTagged Layout = "tagged"
)

// Fleet is a connection to the shared state of one fleet. It is safe for
// concurrent use; the primitives it hands out share its connection.
type Fleet struct {
	client   rueidis.Client
	raw      rueidis.Client // client without durableClient, for Client()
	owned    bool
	keys     keys.Keys
	layout   Layout
	cluster  bool
	cache    bool // invalidations reach us: cached reads and wake-ups work
	cacheTTL time.Duration
	log      *slog.Logger
	watch    *wake.Watcher
	queues   sync.Map         // queue name -> the codec of the Queue[T] made in this process (queue.go)
	now      func() time.Time // this process's clock, for values no other process compares
	obs      *Observer        // Options.Observer's copy, or nil (observe.go)
	openWith Sealer           // Options.OpenWith (seal.go)
	eng      *engine.Env      // the queue engine's view of this Fleet, with the hooks it tells the layers above it (internal/engine; made by Open)
	flows    flowDriver       // passes on the ends of tracked tasks (flow_driver.go; flow_drive.go drives it)
	progress sync.Map         // progress hash key -> the sweep's HSCAN cursor (flow_drive.go)
	hist     *history         // task ends counted, not yet added to the history (history.go)

	workersMu sync.Mutex
	workers   map[stopper]struct{} // started and not yet stopped: Close stops them first
	closing   bool                 // Close began: no worker may start

	closed    atomic.Bool
	closeOnce sync.Once
	spawnMu   sync.Mutex    // orders spawn's wg.Add before Close's wg.Wait
	done      chan struct{} // closed by Close: background work ends
	life      context.Context
	endLife   context.CancelFunc // cancels life, right after done closes
	wg        sync.WaitGroup
}

// Layout returns the key layout in use.
func (f *Fleet) Layout() Layout { return f.layout }

// Cluster reports whether the server is a Redis Cluster.
func (f *Fleet) Cluster() bool { return f.cluster }

// Client returns the underlying rueidis client, for commands fleet does not
// wrap. Keys written through it are the caller's business; its writes do
// not wait for Options.MinReplicas.
func (f *Fleet) Client() rueidis.Client { return f.raw }

// Close stops the workers started on this Fleet first, as Stop does with a
// deadline of their StopGrace (they take no new task, the tasks in hand
// get StopGrace to finish and can still be acked, nacked or released; one
// still running then is cancelled and released uncounted), then ends every
// goroutine the Fleet started and closes the client it built (never a
// client passed in Options.Client). Calls after Close return ErrClosed.
// Close is idempotent.
func (f *Fleet) Close() error {
	f.closeOnce.Do(func() {
		f.workersMu.Lock()
		f.closing = true
		ws := make([]stopper, 0, len(f.workers))
		for w := range f.workers {
			ws = append(ws, w)
		}
		f.workersMu.Unlock()
		var wg sync.WaitGroup
		for _, w := range ws {
			wg.Go(w.stopForClose)
		}
		wg.Wait()
		f.spawnMu.Lock()
		f.closed.Store(true)
		f.spawnMu.Unlock()
		close(f.done)
		f.endLife()
		f.watch.CloseAll()
		f.wg.Wait()
		f.closeClient()
	})
	return nil
}

func (f *Fleet) closeClient() {
	if f.owned {
		f.client.Close()
	}
}

// stopper is a started worker, as Close stops it (Worker.stopForClose).
type stopper interface{ stopForClose() }

// keepWorker records a started worker, for Close; false once Close began.
func (f *Fleet) keepWorker(w stopper) bool {
	f.workersMu.Lock()
	defer f.workersMu.Unlock()
	if f.closing {
		return false
	}
	if f.workers == nil {
		f.workers = map[stopper]struct{}{}
	}
	f.workers[w] = struct{}{}
	return true
}

func (f *Fleet) dropWorker(w stopper) {
	f.workersMu.Lock()
	delete(f.workers, w)
	f.workersMu.Unlock()
}

// alive returns ErrClosed after Close, and ctx's error once it is done.
func (f *Fleet) alive(ctx context.Context) error {
	if f.closed.Load() {
		return ErrClosed
	}
	return ctx.Err()
}

// spawn runs fn in a goroutine that Close waits for, and reports whether it
// did: once Close has begun it runs nothing. fn must return soon after
// f.done closes.
func (f *Fleet) spawn(fn func()) bool {
	f.spawnMu.Lock()
	defer f.spawnMu.Unlock()
	if f.closed.Load() {
		return false
	}
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		fn()
	}()
	return true
}

// abandonEvery paces the tries of an abandon; abandonTry bounds one.
const (
	abandonEvery = 150 * time.Millisecond
	abandonTry   = time.Second
)

// abandon undoes, in the background, a call whose outcome is unknown (its
// ctx ended, or its connection broke, while its script was in flight):
// undo runs an idempotent script that hands back what the call took, or
// leaves a tombstone that makes the late script take nothing. It runs undo
// every abandonEvery until one run gets an answer (an error reply too),
// until bound has passed, or until the Fleet closes; each run ends when the
// Fleet closes, so Close does not wait on it. what names the call in logs.
func (f *Fleet) abandon(what string, bound time.Duration, undo func(ctx context.Context) error) {
	until := time.Now().Add(bound)
	f.spawn(func() {
		base, stop := context.WithCancel(context.Background())
		defer stop()
		go func() {
			select {
			case <-f.done:
				stop()
			case <-base.Done():
			}
		}()
		for {
			ctx, cancel := context.WithTimeout(base, abandonTry)
			err := undo(ctx)
			cancel()
			if !outcomeUnknown(err) {
				if err != nil {
					f.log.Warn("fleet: abandon failed", "call", what, "err", err)
				}
				return
			}
			if base.Err() != nil || time.Now().After(until) {
				f.log.Warn("fleet: abandon gave up: what the call took stays held until its lease runs out", "call", what, "err", err)
				return
			}
			t := time.NewTimer(abandonEvery)
			select {
			case <-base.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
	})
}

// nodes returns the client's nodes (every master of a cluster, or the one
// node) sorted by address, for work that visits each node in turn.
func (f *Fleet) nodes() ([]string, map[string]rueidis.Client) {
	nodes := f.client.Nodes()
	addrs := make([]string, 0, len(nodes))
	for a := range nodes {
		addrs = append(addrs, a)
	}
	slices.Sort(addrs)
	return addrs, nodes
}

// hintTTL and noTTL are the cached reads of waiters (internal/wake).
const hintTTL = wake.HintTTL

var noTTL = wake.NoTTL

// track reads key through the client-side cache so that the server sends an
// invalidation when it next changes. It returns the cached or fresh value
// (nil when the key does not exist), at most CacheTTL stale.
func (f *Fleet) track(ctx context.Context, key string) (*string, error) {
	return f.trackFor(ctx, key, f.cacheTTL)
}

// hint is track for a read that only says when to look again (hintTTL).
func (f *Fleet) hint(ctx context.Context, key string) (*string, error) {
	return f.trackFor(ctx, key, hintTTL)
}

func (f *Fleet) trackFor(ctx context.Context, key string, ttl time.Duration) (*string, error) {
	res := f.client.DoCache(ctx, f.client.B().Get().Key(key).Cache(), ttl)
	s, err := res.ToString()
	if rueidis.IsRedisNil(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &s, nil
}
