package fleet

import (
	"context"
	"time"
)

// SchedulerRound returns a function that runs one round of a scheduler of
// f (RunScheduler's loop body) at the time given, for the benchmarks.
func SchedulerRound(f *Fleet) func(ctx context.Context, now time.Time) error {
	s := &scheduler{f: f, opts: SchedulerOptions{Poll: time.Second}, handled: map[string]int64{}}
	return func(ctx context.Context, now time.Time) error {
		_, err := s.round(ctx, now)
		return err
	}
}
