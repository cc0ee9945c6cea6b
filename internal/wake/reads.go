package wake

import (
	"context"
	"sync/atomic"
	"time"
)

// Reading one's own writes through the client-side cache: a key this
// process wrote is dirty until the write's invalidation comes back (Wrote,
// Stale, Settle), and KV writes mark only keys it read through the cache
// lately (ReadCached, WroteCached). How KV uses them: kv.go in the root
// package.

// dirtyFor bounds how long a written key is read past the cache when its
// invalidation never comes (the key was not cached, so none is sent).
const dirtyFor = time.Second

// dirtyMark is the dirty entry of one key: until when to wait for its
// invalidation, and a channel closed when it arrives.
type dirtyMark struct {
	until  time.Time
	done   chan struct{}
	waited atomic.Bool // a read already waited for it in vain (Settle)
}

// Wrote marks key as written by this process: reads skip the local cache
// until the key's invalidation arrives.
func (w *Watcher) Wrote(key string) {
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

// Stale reports whether a cached read of key might miss this process's own
// last write.
func (w *Watcher) Stale(key string) bool {
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

// Settle waits up to max for the invalidation of a dirty key, which the
// server sends as it runs the write, so that the read after a write can go
// through the cache. A mark waited for in vain once is not waited for again.
func (w *Watcher) Settle(ctx context.Context, key string, max time.Duration) {
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

func (w *Watcher) clean(key string) {
	if v, ok := w.dirty.LoadAndDelete(key); ok {
		close(v.(*dirtyMark).done)
		w.ndirty.Add(-1)
	}
}

// cachedSlack is how much longer than the cache TTL a noted read is kept:
// rueidis counts an entry's TTL from when the reply arrived, after the
// read was noted.
const cachedSlack = 10 * time.Second

// ReadCached notes that key is about to be read through the client-side
// cache, which may then hold it for up to ttl. now is the caller's
// monotonic clock, in nanoseconds (WroteCached must read the same clock).
func (w *Watcher) ReadCached(key string, ttl time.Duration, now int64) {
	if v, ok := w.reads.Load(key); ok && v.(int64)-now > int64(ttl/2)+int64(cachedSlack) {
		return // noted lately: good for at least another ttl/2
	}
	if _, loaded := w.reads.Swap(key, now+int64(ttl+cachedSlack)); !loaded && w.nreads.Add(1)%1024 == 0 {
		w.pruneReads(now)
	}
}

// pruneReads forgets reads whose cached copies have surely expired.
func (w *Watcher) pruneReads(now int64) {
	w.reads.Range(func(k, v any) bool {
		if v.(int64) < now && w.reads.CompareAndDelete(k, v) {
			w.nreads.Add(-1)
		}
		return true
	})
}

// WroteCached marks key, about to be written by this process, dirty (see
// Wrote) when the local cache may hold it. now is read on the clock that
// ReadCached was given.
func (w *Watcher) WroteCached(key string, now int64) {
	if v, ok := w.reads.Load(key); ok && v.(int64) > now {
		w.Wrote(key)
	}
}
