// Package wake turns the server's client-side caching invalidations into
// wake-ups for the waits of this process (locks, semaphores, queues,
// pools, config and pause watchers), and keeps the state that lets cached
// reads see this process's own writes: dirty marks of keys written and
// read marks of keys read through the cache (reads.go), and the hand-over
// queue of a gate's waiters (handoff.go).
//
// It knows no fleet type: a key is a string, a wake-up a value on a
// channel, and a waiter of the hand-over queue anything that embeds a
// Place.
package wake

import (
	"sync"
	"sync/atomic"

	"github.com/redis/rueidis"
)

// Watcher turns the server's client-side caching invalidations into
// wake-ups. A waiter reads a key through the cache (the root's track),
// which makes the server promise one invalidation when the key next
// changes, expires or is deleted; the invalidation wakes the key's
// waiters. A nil invalidation (tracking was reset, a connection dropped)
// wakes everyone, since any change may have been missed. A Watcher is safe
// for concurrent use; make one with New.
type Watcher struct {
	mu    sync.Mutex
	gates map[string]*Gate

	// dirty holds keys this process wrote whose invalidation has not come
	// back yet (key -> when to stop waiting for it): until it does, the
	// local cache may still hold the value from before the write, so reads
	// of these keys go to the server. ndirty counts them, so that reads
	// skip the map while there are none.
	dirty  sync.Map
	ndirty atomic.Int64
	writes atomic.Int64

	// reads holds the keys that KV read through the cache lately (key ->
	// the monotonic clock reading, in the caller's nanoseconds, until which
	// the local cache may still hold them); see ReadCached and WroteCached
	// in reads.go.
	reads  sync.Map
	nreads atomic.Int64
}

// Gate is the wake-up point of one key. one wakes a single waiter (lock
// hand-off: waking all would make a herd); each listener's own channel wakes
// every listener. Get one with Watcher.Join.
type Gate struct {
	refs      int
	one       chan struct{}
	listeners map[chan struct{}]struct{}
	// handoff holds the waiters of this process that a releaser may hand
	// what it releases to, first come first served (a Lock's waiters), and
	// handovers how many hand-overs came in a row (handoff.go). Guarded by
	// Watcher.mu.
	handoff   []Waiter
	handovers int
}

// New returns a Watcher with no gates and no marks.
func New() *Watcher { return &Watcher{gates: make(map[string]*Gate)} }

// Join returns the gate of key, to wait on its one channel (Gate.One);
// Leave undoes it.
func (w *Watcher) Join(key string) *Gate {
	w.mu.Lock()
	defer w.mu.Unlock()
	g := w.gates[key]
	if g == nil {
		g = &Gate{one: make(chan struct{}, 1)}
		w.gates[key] = g
	}
	g.refs++
	return g
}

// Leave undoes one Join of key that returned g: the last one removes the
// gate.
func (w *Watcher) Leave(key string, g *Gate) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if g.refs--; g.refs == 0 && w.gates[key] == g {
		delete(w.gates, key)
	}
}

// Listen returns a channel that receives after each change of key, until
// stop is called. Wake-ups coalesce: the channel holds at most one.
func (w *Watcher) Listen(key string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	g := w.AddListener(key, ch)
	return ch, func() {
		w.RemoveListener(ch, g)
		w.Leave(key, g)
	}
}

// AddListener joins the gate of key (Join) and makes ch, which should have
// a buffer of one, receive its every wake-up without blocking, as Listen's
// channel does; one channel may listen to several keys. RemoveListener and
// Leave undo it.
func (w *Watcher) AddListener(key string, ch chan struct{}) *Gate {
	g := w.Join(key)
	w.mu.Lock()
	if g.listeners == nil {
		g.listeners = make(map[chan struct{}]struct{})
	}
	g.listeners[ch] = struct{}{}
	w.mu.Unlock()
	return g
}

// RemoveListener stops ch listening to every gate of gates, all at once;
// the caller then leaves each gate (Leave).
func (w *Watcher) RemoveListener(ch chan struct{}, gates ...*Gate) {
	w.mu.Lock()
	for _, g := range gates {
		delete(g.listeners, ch)
	}
	w.mu.Unlock()
}

func poke(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// One returns the channel that wakes a single waiter of the gate.
func (g *Gate) One() <-chan struct{} { return g.one }

// WakeOne wakes one waiter of the gate, if none is woken yet: a waiter that
// took a wake-up it does not use passes it on this way.
func (g *Gate) WakeOne() { poke(g.one) }

func (g *Gate) wake() {
	poke(g.one)
	for ch := range g.listeners {
		poke(ch)
	}
}

// WakeOne wakes one waiter of key, if any. Used when this process changed
// the key itself and invalidations are off.
func (w *Watcher) WakeOne(key string) {
	w.mu.Lock()
	if g := w.gates[key]; g != nil {
		poke(g.one)
	}
	w.mu.Unlock()
}

// PokeAll wakes every waiter and listener of key, for changes made by this
// process when invalidations are off.
func (w *Watcher) PokeAll(key string) {
	w.mu.Lock()
	if g := w.gates[key]; g != nil {
		g.wake()
	}
	w.mu.Unlock()
}

// OnInvalidations is the rueidis hook (it runs on the connection's reader,
// so it never blocks).
func (w *Watcher) OnInvalidations(msgs []rueidis.RedisMessage) {
	if msgs == nil {
		// Tracking was reset: the whole local cache is gone, and with it
		// anything stale.
		w.dirty.Range(func(k, _ any) bool { w.clean(k.(string)); return true })
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if msgs == nil {
		for _, g := range w.gates {
			g.wake()
		}
		return
	}
	for _, m := range msgs {
		k, err := m.ToString()
		if err != nil {
			continue
		}
		w.clean(k)
		if g := w.gates[k]; g != nil {
			g.wake()
		}
	}
}

// CloseAll wakes every waiter so that it sees the Fleet is closed.
func (w *Watcher) CloseAll() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, g := range w.gates {
		g.wake()
	}
}
