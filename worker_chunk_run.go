package fleet

// This file is the chunk worker's machinery (NewChunkWorker): the batch
// workers' fetcher (worker_fetch.go) reserves for the tasks the worker may
// hold, one goroutine gathers them into chunks as they come (gather), and
// the slots run the chunks and end their tasks (handle): the acks in one
// script call per shard, the failures as a batch worker's (endFailed,
// worker_task.go).

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/fleet-go/fleet/internal/engine"
	"github.com/fleet-go/fleet/internal/lease"
)

// errChunkStopped is what OnTaskEnd is told of a task that a stop found in
// a chunk too small to go: handed back uncounted.
var errChunkStopped = errors.New("fleet: released uncounted: the worker stopped before its chunk had MinSize tasks")

// chunker is the machinery of one chunk worker: a runner whose free
// tokens count the tasks the worker may hold ((slots + 1) * MaxSize: a
// chunk per slot, and one being gathered), whose fetcher reserves them,
// and whose tasks one goroutine gathers into chunks for the slots.
type chunker[C, O, P any] struct {
	*runner[C, O, P]
	a      ChunkAutomation[C, O, P]
	co     ChunkOptions
	chunks chan *Chunk[P] // unbuffered: a chunk goes when a slot is free
	// taken holds the tasks that the slots' acks took (ackAll) for the
	// gatherer: never full (their places in the worker's hands are the
	// acked tasks'), never closed.
	taken chan *Task[P]
	mu    sync.Mutex // guards gone
	gone  bool       // the gatherer is done: the slots release what they take
}

// spawnChunks starts a chunk worker's goroutines: the slots, the
// gatherer and the fetcher (Worker.spawn).
func spawnChunks[C, O, P any](w *Worker, q *Queue[P], co ChunkOptions, a ChunkAutomation[C, O, P], stream *Stream[O], run, soft context.Context) bool {
	hold := (len(w.slots) + 1) * co.MaxSize
	b := &runner[C, O, P]{w: w, q: q, free: make(chan struct{}, hold), tasks: make(chan *Task[P], hold),
		cancels: newCancelWatch(), commitCtx: context.WithoutCancel(run), owner: w.name()}
	b.fetch = newFetcher(b, []*Queue[P]{q}, []int{1}, false)
	c := &chunker[C, O, P]{runner: b, a: a, co: co, chunks: make(chan *Chunk[P]), taken: make(chan *Task[P], hold)}
	w.startCancels(run, q.name, b.cancels)
	for range hold {
		b.free <- struct{}{}
	}
	for _, st := range w.slots {
		s := &Slot[C, O]{w: w, st: st, stream: stream}
		if !w.goSlot(func() {
			for ch := range c.chunks {
				c.handle(run, soft, s, ch)
			}
		}) {
			return false
		}
	}
	if !w.goSlot(func() { c.gather(run) }) {
		close(c.chunks)
		return false
	}
	if !w.goSlot(func() { b.fetch.fetch(run, soft) }) {
		close(b.tasks)
		return false
	}
	return true
}

// gathering is the chunk that the gatherer fills.
type gathering[P any] struct {
	cur   *Chunk[P]
	late  bool // MaxWait passed since cur's first task
	timer *time.Timer
	due   <-chan time.Time // the timer's, while cur waits for MaxWait
}

// gather makes chunks of the tasks the fetcher reserves, as they come, and
// hands each to a free slot: once it holds MinSize tasks (MaxSize when as
// many are at hand), or any once MaxWait passed since its first. It never
// polls: it waits on the fetcher's tasks, a free slot and MaxWait's timer.
// When the fetcher is done (Stop began), a chunk of MinSize goes, a
// smaller one is released; at a hard stop (run ended), every task in hand
// is released.
func (c *chunker[C, O, P]) gather(run context.Context) {
	defer close(c.chunks)
	g := &gathering[P]{timer: time.NewTimer(time.Hour)}
	g.timer.Stop()
	defer g.timer.Stop()
	in := c.tasks
	for {
		n := 0
		if g.cur != nil {
			n = len(g.cur.Tasks)
		}
		ready := n > 0 && (n >= c.co.MinSize || g.late)
		full := n >= c.co.MaxSize
		if ready && !full {
			// Take what is at hand before the chunk goes.
			select {
			case t, ok := <-in:
				if !ok {
					c.flush(run, g)
					return
				}
				c.add(run, g, t)
				continue
			case t := <-c.taken:
				c.add(run, g, t)
				continue
			default:
			}
		}
		var out chan<- *Chunk[P]
		if ready {
			out = c.chunks
		}
		recv, took := in, c.taken
		if full {
			recv, took = nil, nil
		}
		select {
		case t, ok := <-recv:
			if !ok {
				c.flush(run, g)
				return
			}
			c.add(run, g, t)
		case t := <-took:
			c.add(run, g, t)
		case out <- g.cur:
			g.cur, g.late, g.due = nil, false, nil
			g.timer.Stop()
		case <-g.due:
			g.late, g.due = true, nil
		case <-run.Done():
			c.flush(run, g)
			return
		}
	}
}

// add takes t into the chunk being gathered, its lease kept alive from
// now on, unless it may not start (admit: its lease ran out, or it
// expired). The chunk's first task starts MaxWait's timer.
func (c *chunker[C, O, P]) add(run context.Context, g *gathering[P], t *Task[P]) {
	margin := lease.Margin(t.core.opts.Lease)
	if err := c.startable(run, t, margin); err != nil {
		c.ended(t, err)
		return
	}
	kept := lease.Start(run, c.leaseKeep(t, margin))
	h := &chunkHeld{kept: kept, ctx: kept.Wrap(kept.Ctx()), unwatch: c.cancels.start(t.ID, kept.CancelFunc())}
	if g.cur == nil {
		g.cur = &Chunk[P]{Tasks: make([]*Task[P], 0, c.co.MaxSize), keeps: make([]*chunkHeld, 0, c.co.MaxSize)}
		g.late = c.co.MaxWait == 0
		if !g.late {
			g.timer.Reset(c.co.MaxWait)
			g.due = g.timer.C
		}
	}
	g.cur.Tasks = append(g.cur.Tasks, t)
	g.cur.keeps = append(g.cur.keeps, h)
}

// flush ends the gathering at a stop: the chunk in hand goes to a slot
// when it holds MinSize tasks and run has not ended, else its tasks are
// released uncounted, as are those the fetcher left after a hard stop.
func (c *chunker[C, O, P]) flush(run context.Context, g *gathering[P]) {
	c.mu.Lock()
	c.gone = true
	c.mu.Unlock()
	if ch := g.cur; ch != nil {
		g.cur = nil
		sent := false
		if len(ch.Tasks) >= c.co.MinSize && run.Err() == nil {
			select {
			case c.chunks <- ch:
				sent = true
			case <-run.Done():
			}
		}
		if !sent {
			why := errChunkStopped
			if run.Err() != nil {
				why = run.Err()
			}
			for i, t := range ch.Tasks {
				c.drop(ch.keeps[i])
				err := why
				if cerr := c.release(t.r); cerr != nil {
					err = cerr
				}
				c.ended(t, err)
			}
		}
	}
	for t := range c.tasks { // after a hard stop: what the fetcher handed over last
		c.giveBack(run, t)
	}
	for {
		select {
		case t := <-c.taken:
			c.giveBack(run, t)
		default:
			return
		}
	}
}

// giveBack releases t, which a stop found unstarted.
func (c *chunker[C, O, P]) giveBack(run context.Context, t *Task[P]) {
	err := run.Err()
	if err == nil {
		err = errChunkStopped
	}
	if cerr := c.release(t.r); cerr != nil {
		err = cerr
	}
	c.ended(t, err)
}

// handOver hands the tasks that a slot's ack took to the gatherer, or
// releases them when it is done (a stop).
func (c *chunker[C, O, P]) handOver(run context.Context, ts []*Task[P]) {
	c.mu.Lock()
	gone := c.gone
	if !gone {
		for _, t := range ts {
			c.taken <- t // never blocks: their places are the acked tasks'
		}
	}
	c.mu.Unlock()
	if gone {
		for _, t := range ts {
			c.giveBack(run, t)
		}
	}
}

// drop stops keeping a task's lease and watching its cancels.
func (c *chunker[C, O, P]) drop(h *chunkHeld) {
	h.kept.Stop()
	h.unwatch()
	h.kept.Cancel(nil)
}

// ended tells OnTaskEnd of t's end, and frees its place in the worker's
// hands for the fetcher.
func (c *chunker[C, O, P]) ended(t *Task[P], err error) {
	if c.w.opts.OnTaskEnd != nil {
		c.w.opts.OnTaskEnd(t.ID, err)
	}
	c.freed(1)
}

// freed gives n places in the worker's hands back to the fetcher.
func (c *chunker[C, O, P]) freed(n int) {
	for range n {
		select {
		case c.free <- struct{}{}:
		default:
		}
	}
}

// handle runs chunk ch in slot s, then ends each task by its outcome (its
// mark, else the handler's): the acks in one call per shard (ackAll), the
// failures as a batch worker's (endFailed), side by side so that they
// share the calls of the queue's group commit.
func (c *chunker[C, O, P]) handle(run, soft context.Context, s *Slot[C, O], ch *Chunk[P]) {
	w := c.w
	s.st.busy.Store(true)
	defer s.st.busy.Store(false)
	ch.mu.Lock()
	ch.marks = make([]chunkMark, len(ch.Tasks))
	ch.mu.Unlock()
	hctx, cancel := run, context.CancelFunc(func() {})
	if to := w.opts.TaskTimeout; to > 0 {
		hctx, cancel = context.WithTimeoutCause(run, to, w.timeoutCause)
	}
	err := protect(func() error { return c.a.HandleChunk(hctx, s, ch) })
	cause := context.Cause(hctx)
	cancel()
	outs := ch.outcomes(err)
	causes := make([]error, len(ch.Tasks))
	var acks []int
	for i, h := range ch.keeps {
		h.kept.Stop()
		_ = h.ctx.Err() // a lease that ran out on the clock ends the task's ctx now
		causes[i] = context.Cause(h.kept.Ctx())
		if causes[i] == nil {
			causes[i] = cause
		}
		if outs[i] == nil {
			acks = append(acks, i)
		}
	}
	ends := make([]error, len(ch.Tasks))
	for _, i := range acks {
		c.writeLog(run, ch.Tasks[i], true)
	}
	aerrs, next := c.ackAll(run, soft, ch.Tasks, acks)
	for k, aerr := range aerrs {
		i := acks[k]
		if aerr != nil {
			aerr = within("task "+ch.Tasks[i].ID+": ack", endErr(aerr))
			c.failed(s, aerr)
			ends[i] = aerr
			continue
		}
		s.st.done.Add(1)
		w.done.Add(1)
		w.succeed()
	}
	var wg sync.WaitGroup
	for i, t := range ch.Tasks {
		if outs[i] == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.writeLog(run, t, false)
			ends[i] = c.endFailed(run, s, t, outs[i], causes[i])
		}()
	}
	wg.Wait()
	for i, t := range ch.Tasks {
		c.drop(ch.keeps[i])
		if w.opts.OnTaskEnd != nil {
			w.opts.OnTaskEnd(t.ID, ends[i])
		}
	}
	// The places of the tasks the acks took are the acked ones'; the rest
	// go back to the fetcher at once, so that it reserves for them together.
	c.freed(len(ch.Tasks) - len(next))
	if len(next) > 0 {
		c.handOver(run, next)
	}
}

// ackAll acks the tasks of ts at idx, in one script call per shard (up
// to engine.MaxCommit acks a call: the ack step of the scripts, as the
// group commit's), and returns each one's error, in idx's order. While
// the queue has more (takeQueue, as a batch worker's slot takes its next
// task with its ack: its queue not known empty nor paused), the call takes as many tasks as it acks, which it
// returns for the gatherer; else the fetcher reserves. The calls wait
// whatever run does, bounded by endTimeout.
func (c *chunker[C, O, P]) ackAll(run, soft context.Context, ts []*Task[P], idx []int) ([]error, []*Task[P]) {
	errs := make([]error, len(idx))
	if len(idx) == 0 {
		return errs, nil
	}
	ctx, cancel := context.WithTimeout(c.commitCtx, endTimeout)
	defer cancel()
	var next []*Task[P]
	var from *Queue[P]
	if soft.Err() == nil {
		if q := c.fetch.takeNext(); q != nil && q.e.TakesWithAcks(run) && !c.fetch.pausedNow(run, q) {
			from = q
		}
	}
	var cores []*engine.Queue
	byCore := map[*engine.Queue][]int{} // the places in idx of each shard's tasks
	for k, i := range idx {
		core := ts[i].r.Queue()
		if _, ok := byCore[core]; !ok {
			cores = append(cores, core)
		}
		byCore[core] = append(byCore[core], k)
	}
	for _, core := range cores {
		ks := byCore[core]
		for len(ks) > 0 {
			part := ks[:min(len(ks), engine.MaxCommit)]
			ks = ks[len(part):]
			rs := make([]*engine.Reservation, len(part))
			for j, k := range part {
				rs[j] = ts[idx[k]].r
			}
			req := engine.Req{Acks: rs}
			if from != nil && from.e == core {
				req.N, req.Owner, req.WantLeft = len(part), c.owner, true
				from = nil
			}
			res, err := core.Reserve(ctx, req)
			replied := len(res.Acks) == len(rs)
			for j, k := range part {
				code := engine.EndLost
				if replied {
					code = res.Acks[j]
				}
				errs[k] = opErr("ack", ts[idx[k]].core.name, rs[j].Acked(run, code, replied, err))
			}
			if req.N > 0 {
				next = c.took(ctx, run, req.N, res, err, replied)
			}
		}
	}
	return errs, next
}

// took reads what the take of an ack call got (n asked): its tasks
// decoded (a poison payload is buried), and the fetcher told when the
// queue turned out empty, or the take failed.
func (c *chunker[C, O, P]) took(ctx, run context.Context, n int, res engine.Reserved, err error, replied bool) []*Task[P] {
	var next []*Task[P]
	if len(res.Tasks) > 0 {
		next, _ = c.q.decodeAll(ctx, res.Tasks)
	}
	switch {
	case err != nil && replied:
		c.w.log.Warn("fleet: worker reserve failed", "queue", c.q.name, "err", err)
		c.fetch.tookNone(run, c.q.name, res)
	case err == nil && (len(res.Tasks) < n || res.Drained):
		c.fetch.tookNone(run, c.q.name, res)
	}
	return next
}
