package engine

import (
	"context"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/fleet-go/fleet/internal/keys"
	"github.com/fleet-go/fleet/internal/wake"
)

// Env is what the engine needs of the Fleet it runs in: the connection and
// the keys, the wake-ups, the hooks it tells what became of the tasks it
// ended, and the Fleet's life (the goroutines it may start, and when they
// must end). The root makes one per Fleet (open.go) and hands it every
// queue core it makes (Env.Queue). Its fields are set before the first
// core is made and never change after.
type Env struct {
	Client rueidis.Client
	Keys   keys.Keys
	Watch  *wake.Watcher
	// Cache says invalidations reach this process: cached reads and the
	// wake-ups from them work (without, WakeLocal wakes local waiters).
	Cache bool
	Hooks Hooks
	// Alive returns the Fleet's ErrClosed after Close, and ctx's error once
	// it is done.
	Alive func(ctx context.Context) error
	// Closed reports whether Close began stopping background work.
	Closed func() bool
	// Spawn runs fn in a goroutine that Close waits for, and reports
	// whether it did (none once Close began).
	Spawn func(fn func()) bool
	// Abandon undoes, in the background, a call whose outcome is unknown:
	// it runs undo until one run gets an answer, bound passes or the Fleet
	// closes. what names the call in logs.
	Abandon func(what string, bound time.Duration, undo func(ctx context.Context) error)
	// Life is a ctx that ends when Close begins stopping background work,
	// for calls made on behalf of callers who each wait on a ctx of their
	// own (callgroup.go).
	Life context.Context

	looks sync.Map // queue name (or name:shard) -> *schedLook (look.go)
}
