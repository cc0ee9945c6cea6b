// Package runone carries the root's hook that runs one task of a batch
// worker as a started worker's slot runs it, for fleettest/handlertest:
// the root (worker_one.go) sets the funcs at init, handlertest calls them.
// It imports nothing of fleet (nothing under internal/ can), so the
// worker's types cross it as any; the public API gains nothing.
package runone

import (
	"context"
	"time"
)

// Report is what one run of a task left that Redis no longer says once
// the task ended.
type Report struct {
	// TaskID is the id of the task that ran.
	TaskID string
	// End is what the worker's OnTaskEnd is told: nil when the task was
	// acked, else why it was not.
	End error
	// Progress are the values the task stored (Task.Progress, or a
	// middleware's TaskInfo.Progress), as JSON, in the order they were
	// stored.
	Progress [][]byte
	// Logs are the lines the run gave the task's logger (fleet.Logger),
	// a []fleet.LogLine; nil for none.
	Logs any
	// Duration is how long the run took, from the handler's start to the
	// end's reply.
	Duration time.Duration
}

var (
	// Run runs the next task of w's first queue in its first slot, as a
	// started worker's slot runs it; w is a *fleet.Worker of
	// fleet.NewBatchWorker, never started. Set by the root.
	Run func(ctx context.Context, w any) (Report, error)
	// Drop deletes every key of queue name of f (a *fleet.Fleet), and of
	// worker w's type (its keys and its output stream). Set by the root.
	Drop func(ctx context.Context, f any, name string, w any) error
)
