package wake

// The hand-over queue of a gate: the waiters of this process that a
// releasing holder of the same process may pass what it releases to
// straight (a Lock's waiters, lockWaiter in the root's lock_wait.go), in
// one round trip instead of a release and an acquire.

// maxHandovers bounds how many times in a row a lock passes straight from a
// holder to a waiter of the same process; then a plain release lets the
// waiters of other processes have their turn.
const maxHandovers = 8

// Place is a waiter's place in a gate's hand-over queue: whether it is
// queued, and whether a holder picked it (assigned). A Waiter embeds it;
// its fields are guarded by the Watcher's lock.
type Place struct {
	assigned bool
	queued   bool
}

func (p *Place) place() *Place { return p }

// Waiter is a waiter of the hand-over queue: a pointer to a struct that
// embeds a Place, and carries whatever the hand-over delivers to it.
type Waiter interface{ place() *Place }

// Enqueue puts x at the back (or, when it lost a hand-over, the front) of
// the gate's waiters. A waiter already queued stays where it is.
func (w *Watcher) Enqueue(g *Gate, x Waiter, front bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	p := x.place()
	if p.queued {
		return
	}
	p.queued, p.assigned = true, false
	if front {
		g.handoff = append([]Waiter{x}, g.handoff...)
	} else {
		g.handoff = append(g.handoff, x)
	}
}

// Dequeue takes x out of the gate's waiters and reports whether a holder
// had already picked it (Pick), in which case a delivery to x is coming.
func (w *Watcher) Dequeue(g *Gate, x Waiter) (assigned bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	p := x.place()
	if p.queued {
		for i, y := range g.handoff {
			if y == x {
				g.handoff = append(g.handoff[:i], g.handoff[i+1:]...)
				break
			}
		}
		p.queued = false
	}
	return p.assigned
}

// Pick takes the first waiter of key for a hand-over, or returns nil when
// there is none or what key guards was handed over maxHandovers times in a
// row (which resets the count). The waiter picked is assigned: its
// Dequeue reports it.
func (w *Watcher) Pick(key string) Waiter {
	w.mu.Lock()
	defer w.mu.Unlock()
	g := w.gates[key]
	if g == nil || len(g.handoff) == 0 {
		return nil
	}
	if g.handovers >= maxHandovers {
		g.handovers = 0
		return nil
	}
	g.handovers++
	x := g.handoff[0]
	g.handoff = g.handoff[1:]
	p := x.place()
	p.queued, p.assigned = false, true
	return x
}
