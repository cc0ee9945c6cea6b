package fleet

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
)

// watcher turns the server's client-side caching invalidations into wake-ups.
// A waiter reads a key through the cache (track), which makes the server
// promise one invalidation when the key next changes, expires or is deleted;
// the invalidation wakes the key's waiters. A nil invalidation (tracking was
// reset, a connection dropped) wakes everyone, since any change may have been
// missed.
type watcher struct {
	mu    sync.Mutex
	gates map[string]*gate

	// dirty holds keys this process wrote whose invalidation has not come
	// back yet (key -> when to stop waiting for it): until it does, the
	// local cache may still hold the value from before the write, so reads
	// of these keys go to the server. ndirty counts them, so that reads
	// skip the map while there are none.
	dirty  sync.Map
	ndirty atomic.Int64
	writes atomic.Int64

	// reads holds the keys that KV read through the cache lately (key ->
	// monoNow until which the local cache may still hold them);
	// see readCached and wroteCached in kv.go.
	reads  sync.Map
	nreads atomic.Int64
}

// dirtyFor bounds how long a written key is read past the cache when its
// invalidation never comes (the key was not cached, so none is sent).
const dirtyFor = time.Second

// dirtyMark is the dirty entry of one key: until when to wait for its
// invalidation, and a channel closed when it arrives.
type dirtyMark struct {
	until  time.Time
	done   chan struct{}
	waited atomic.Bool // a read already waited for it in vain (settle)
}

// wrote marks key as written by this process: reads skip the local cache
// until the key's invalidation arrives.
func (w *watcher) wrote(key string) {
	if old, loaded := w.dirty.Swap(key, &dirtyMark{until: time.Now().Add(dirtyFor), done: make(chan struct{})}); !loaded {
		w.ndirty.Add(1)
	} else {
		close(old.(*dirtyMark).done) // its waiters look again, and find the new mark
	}
	if w.writes.Add(1)%256 == 0 {
		now := time.Now()
		w.dirty.Range(func(k, v any) bool {
			if now.After(v.(*dirtyMark).until) && w.dirty.CompareAndDelete(k, v) {
				w.ndirty.Add(-1)
			}
			return true
		})
	}
}

// stale reports whether a cached read of key might miss this process's own
// last write.
func (w *watcher) stale(key string) bool {
	if w.ndirty.Load() == 0 {
		return false
	}
	v, ok := w.dirty.Load(key)
	if !ok {
		return false
	}
	if time.Now().After(v.(*dirtyMark).until) {
		if w.dirty.CompareAndDelete(key, v) {
			w.ndirty.Add(-1)
		}
		return false
	}
	return true
}

// settle waits up to max for the invalidation of a dirty key, which the
// server sends as it runs the write, so that the read after a write can go
// through the cache. A mark waited for in vain once is not waited for again.
func (w *watcher) settle(ctx context.Context, key string, max time.Duration) {
	v, ok := w.dirty.Load(key)
	if !ok {
		return
	}
	m := v.(*dirtyMark)
	if m.waited.Load() {
		return
	}
	t := time.NewTimer(max)
	defer t.Stop()
	select {
	case <-m.done:
	case <-t.C:
		m.waited.Store(true)
	case <-ctx.Done():
	}
}

func (w *watcher) clean(key string) {
	if v, ok := w.dirty.LoadAndDelete(key); ok {
		close(v.(*dirtyMark).done)
		w.ndirty.Add(-1)
	}
}

// gate is the wake-up point of one key. one wakes a single waiter (lock
// hand-off: waking all would make a herd); each listener's own channel wakes
// every listener.
type gate struct {
	refs      int
	one       chan struct{}
	listeners map[chan struct{}]struct{}
	// handoff holds the waiters of this process that a releaser may hand
	// what it releases to, first come first served (a Lock's waiters,
	// *lockWaiter: lock_wait.go), and handovers how many hand-overs came in
	// a row. Guarded by watcher.mu.
	handoff   []any
	handovers int
}

func newWatcher() *watcher { return &watcher{gates: make(map[string]*gate)} }

// join returns the gate of key, to wait on its one channel; leave undoes it.
func (w *watcher) join(key string) *gate {
	w.mu.Lock()
	defer w.mu.Unlock()
	g := w.gates[key]
	if g == nil {
		g = &gate{one: make(chan struct{}, 1)}
		w.gates[key] = g
	}
	g.refs++
	return g
}

func (w *watcher) leave(key string, g *gate) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if g.refs--; g.refs == 0 && w.gates[key] == g {
		delete(w.gates, key)
	}
}

// listen returns a channel that receives after each change of key, until
// stop is called. Wake-ups coalesce: the channel holds at most one.
func (w *watcher) listen(key string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	g := w.join(key)
	w.mu.Lock()
	if g.listeners == nil {
		g.listeners = make(map[chan struct{}]struct{})
	}
	g.listeners[ch] = struct{}{}
	w.mu.Unlock()
	return ch, func() {
		w.mu.Lock()
		delete(g.listeners, ch)
		w.mu.Unlock()
		w.leave(key, g)
	}
}

func poke(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

func (g *gate) wake() {
	poke(g.one)
	for ch := range g.listeners {
		poke(ch)
	}
}

// wakeOne wakes one waiter of key, if any. Used when this process changed
// the key itself and invalidations are off.
func (w *watcher) wakeOne(key string) {
	w.mu.Lock()
	if g := w.gates[key]; g != nil {
		poke(g.one)
	}
	w.mu.Unlock()
}

// pokeAll wakes every waiter and listener of key, for changes made by this
// process when invalidations are off.
func (w *watcher) pokeAll(key string) {
	w.mu.Lock()
	if g := w.gates[key]; g != nil {
		g.wake()
	}
	w.mu.Unlock()
}

// onInvalidations is the rueidis hook (it runs on the connection's reader,
// so it never blocks).
func (w *watcher) onInvalidations(msgs []rueidis.RedisMessage) {
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

// closeAll wakes every waiter so that it sees the Fleet is closed.
func (w *watcher) closeAll() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, g := range w.gates {
		g.wake()
	}
}
