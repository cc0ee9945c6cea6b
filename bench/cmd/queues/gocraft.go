package main

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/gocraft/work"
	"github.com/gomodule/redigo/redis"
)

// gocraftInst is gocraft/work in a namespace of its own, the Enqueuer and
// the WorkerPool on one redigo pool, as in its README. readme: the README's
// pool (MaxActive 5, MaxIdle 5, Wait) and its handler form, a method of a
// custom context type (called through reflection); else a pool as big as
// the goroutines that use it and the generic handler form, func(*Job)
// error.
type gocraftInst struct {
	pool   *redis.Pool
	enq    *work.Enqueuer
	ns     string
	readme bool
}

func openGocraft(readme bool) func(context.Context, env) (instance, error) {
	return func(_ context.Context, e env) (instance, error) {
		pool := &redis.Pool{
			MaxActive: 5,
			MaxIdle:   5,
			Wait:      true,
			Dial:      func() (redis.Conn, error) { return redis.Dial("tcp", e.addr) },
		}
		if !readme {
			// Every worker and its observer, the enqueuer's submitters and
			// the pool's own goroutines may each hold a connection.
			pool.MaxActive = 0 // no limit
			pool.MaxIdle = 4*e.c + 10
		}
		ns := fmt.Sprintf("bench%d", time.Now().UnixNano())
		return &gocraftInst{pool: pool, enq: work.NewEnqueuer(ns, pool), ns: ns, readme: readme}, nil
	}
}

func (s *gocraftInst) submit(_ context.Context, j job) error {
	_, err := s.enq.Enqueue("tiny", work.Q{"s": j.Seq, "t": j.T})
	return err
}

// gocraftTally is the window's tally for the README handler form, whose
// context type cannot carry it (gocraft/work makes a new one per job).
var gocraftTally atomic.Pointer[tally]

// gocraftCtx is the README form's custom context.
type gocraftCtx struct{}

// Handle is the README form's handler.
func (*gocraftCtx) Handle(j *work.Job) error { return gocraftHandle(gocraftTally.Load(), j) }

// gocraftHandle counts a job done: gocraft/work says nothing after it
// removes the job from its in-progress list, so a job is done when its
// handler returns nil.
func gocraftHandle(t *tally, j *work.Job) error {
	seq, at := j.ArgInt64("s"), j.ArgInt64("t")
	if err := j.ArgError(); err != nil {
		t.fail(err)
		return err
	}
	t.handled(int(seq), at)
	return nil
}

// consume starts a WorkerPool of concurrency w.
func (s *gocraftInst) consume(_ context.Context, w int, t *tally, _ bool) (func(), error) {
	wp := work.NewWorkerPool(gocraftCtx{}, uint(w), s.ns, s.pool)
	if s.readme {
		gocraftTally.Store(t)
		wp.Job("tiny", (*gocraftCtx).Handle)
	} else {
		wp.Job("tiny", func(j *work.Job) error { return gocraftHandle(t, j) })
	}
	wp.Start()
	return wp.Stop, nil
}

func (s *gocraftInst) close() { _ = s.pool.Close() }
