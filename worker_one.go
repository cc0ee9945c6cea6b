package fleet

// This file runs one task of a batch worker in one slot, the way a started
// worker's slot runs it (handle, worker_task.go: the lease kept alive, the
// timeouts, the middleware, the ends), without starting the worker: for
// fleettest/handlertest's Run, through internal/runone, so that the public
// API gains nothing and there is no second way to run a task.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fleet-go/fleet/internal/engine"
	"github.com/fleet-go/fleet/internal/runone"
)

func init() {
	runone.Run = func(ctx context.Context, w any) (runone.Report, error) {
		wk, ok := w.(*Worker)
		switch {
		case !ok || wk == nil:
			return runone.Report{}, fmt.Errorf("%w: not a *Worker", ErrInvalidArgument)
		case wk.err != nil:
			return runone.Report{}, wk.err
		case wk.one == nil:
			return runone.Report{}, fmt.Errorf("%w: not a batch worker", ErrInvalidArgument)
		}
		return wk.one(ctx)
	}
	runone.Drop = func(ctx context.Context, f any, name string, w any) error {
		fl, ok := f.(*Fleet)
		wk, wok := w.(*Worker)
		if !ok || fl == nil || !wok || wk == nil {
			return fmt.Errorf("%w: Drop needs a *Fleet and a *Worker", ErrInvalidArgument)
		}
		return dropQueue(ctx, fl, name, wk)
	}
}

// runOne reserves the next task of q (for worker w, whose name its token
// carries) and runs it in w's first slot with a, as the slot of a started
// worker does (runner.handle), but with no fetcher behind it and no next
// task taken with the ack: the slot's soft ctx has ended. ctx is the run
// ctx of a started worker: when it ends, the handler's ctx ends and the
// task is released uncounted, as a hard stop does. The config the slot
// sees is WorkerOptions.Config, decoded and validated as a first Start
// does; nothing of the worker is registered, and the last_error that a
// failed task writes (wkr:<type>:<id>:state) is deleted after.
func runOne[C, O, P any](ctx context.Context, w *Worker, q *Queue[P], a BatchAutomation[C, O, P], stream *Stream[O]) (runone.Report, error) {
	var rep runone.Report
	if err := w.f.alive(ctx); err != nil {
		return rep, err
	}
	raw, err := configJSON(w.opts.Config)
	if err != nil {
		return rep, err
	}
	val, err := w.decode(raw)
	if err != nil {
		return rep, err
	}
	w.cfg.Store(&configSnap{val: val, raw: raw})
	b := &runner[C, O, P]{w: w, q: q, a: a, free: make(chan struct{}, 1), tasks: make(chan *Task[P], 1),
		cancels: newCancelWatch(), commitCtx: context.WithoutCancel(ctx), owner: w.name()}
	b.fetch = newFetcher(b, []*Queue[P]{q}, []int{1}, false)
	tasks, _, err := q.reserveTasks(ctx, engine.Req{N: 1, Owner: w.name()})
	if err != nil {
		return rep, err
	}
	if len(tasks) == 0 {
		return rep, fmt.Errorf("%w: no task is ready in queue %s", ErrTaskNotFound, q.name)
	}
	t := tasks[0]
	var mu sync.Mutex
	t.progressed = func(v []byte) {
		mu.Lock()
		rep.Progress = append(rep.Progress, v)
		mu.Unlock()
	}
	if l := t.taskLog(); l != nil {
		l.seen = func(lines []byte) { rep.Logs = parseLines(lines) } // on this goroutine, before handle returns
	}
	soft, cancel := context.WithCancel(ctx)
	cancel() // no next task with the ack
	s := &Slot[C, O]{w: w, st: w.slots[0], stream: stream}
	start := time.Now()
	_, end := b.handle(ctx, soft, s, t)
	mu.Lock()
	defer mu.Unlock()
	rep.TaskID, rep.End, rep.Duration = t.ID, end, time.Since(start)
	dctx, dcancel := context.WithTimeout(context.WithoutCancel(ctx), endTimeout)
	defer dcancel()
	c := w.f.client
	if derr := c.Do(dctx, c.B().Del().Key(w.k.State).Build()).Error(); derr != nil {
		return rep, fmt.Errorf("delete %s: %w", w.k.State, derr)
	}
	return rep, nil
}

// dropQueue deletes every key of queue name (all its shards' keys share
// the prefix of its pending list; shards past 0 exist only in the tagged
// layout, under tags of their own, which it deletes too) and its entry in
// the queue registry, and the keys of worker w (never registered by
// runOne, but a failure writes its state) and its output stream. First
// f forgets the queue: its codec (NewQueue's) and its history counts,
// which no later flush adds (a flush would write the queue's history keys
// again, and sample its depth each minute). Each node is scanned,
// replicas included, so it is O(keys): for a test's throwaway queue,
// never a live one.
func dropQueue(ctx context.Context, f *Fleet, name string, w *Worker) error {
	f.queues.Delete(name)
	if h := f.history(); h.every >= 0 {
		h.mu.Lock() // no flush is under way: none sends the queue's counts after this
		h.queues.Delete(name)
		h.unsent = slices.DeleteFunc(h.unsent, func(b histBatch) bool { return b.queue == name })
		h.mu.Unlock()
	}
	c := f.client
	base := f.keys.Queue(name).Pending
	found := []string{base}
	patterns := []string{globEscape(base+":") + "*"}
	if f.keys.Tagged() {
		// fleet:queue:{<name>:<i>:<s>}...: the shards past 0 (ShardTag).
		sh := f.keys.QueueShard(name, 1).Pending
		patterns = append(patterns, globEscape(sh[:strings.LastIndex(sh, "{")+1]+name+":")+"*")
	}
	for _, n := range c.Nodes() {
		for _, p := range patterns {
			var cursor uint64
			for {
				e, err := n.Do(ctx, n.B().Scan().Cursor(cursor).Match(p).Count(1000).Build()).AsScanEntry()
				if err != nil {
					return err
				}
				found = append(found, e.Elements...)
				if cursor = e.Cursor; cursor == 0 {
					break
				}
			}
		}
	}
	found = append(found, w.k.Hardware, w.k.Config, w.k.Gen, w.k.State, w.k.Stats, f.keys.Stream(w.opts.Type))
	var errs []error
	for _, k := range found {
		if err := c.Do(ctx, c.B().Del().Key(k).Build()).Error(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := c.Do(ctx, c.B().Srem().Key(f.keys.Queues()).Member(name).Build()).Error(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// globEscape escapes the characters that SCAN's MATCH reads as a pattern.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
