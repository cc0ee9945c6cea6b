package fleet

import (
	"context"
	"time"
)

// SetFlowTimings makes f's sweeps pass on the ends left in an outbox after
// driveAfter, and resolve submits left uncommitted after grace (instead of
// flowDriveAfter and SweeperOptions.SubmitGrace), so that tests of the recovery take
// no minute.
func SetFlowTimings(f *Fleet, driveAfter, grace time.Duration) {
	f.flowEnds().mu.Lock()
	f.flowEnds().driveAfter, f.flowEnds().grace = driveAfter, grace
	f.flowEnds().mu.Unlock()
}

// StopFlowDriver makes f pass on no end of its own, as if its process died
// right after each end step: only a sweeper passes them on.
func StopFlowDriver(f *Fleet) {
	f.flowEnds().mu.Lock()
	f.flowEnds().off = true
	f.flowEnds().mu.Unlock()
}

// SubmitFlowUntil submits fl as Submit does, but stops after step (1 open,
// 2 put, 3 watch, 4 commit) as if its process died there: nothing of the
// rest is done, nothing undone.
func SubmitFlowUntil(ctx context.Context, fl *Flow, step int) error {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	p, err := fl.plan()
	if err != nil {
		return err
	}
	fl.submitted = true
	p.stopAt = step
	return fl.f.submitPlan(ctx, p)
}
