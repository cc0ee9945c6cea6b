package fleet

// The flow driver's state, which the Fleet holds (Fleet.flows); what it
// does with it is flow_drive.go's.

import (
	"sync"
	"time"

	"github.com/fleet-go/fleet/internal/engine"
)

// flowDriver passes on, in the background, the ends of the tracked tasks
// that this process ended (added by the engine's hooks, taskRunEnded and
// flowAcked, and by the calls that end tasks: Fleet.passOn): one
// goroutine (Fleet.driveLoop), started at the first end and ended by
// Close, batches them. An end it cannot pass on (an error, Close) stays in
// its outbox for the sweeper.
type flowDriver struct {
	mu      sync.Mutex
	pend    map[*engine.Queue][]string // the ends waiting, by their shard's engine core
	running bool
	wake    chan struct{}
	// Test hooks (export_flow_test.go): off drops what is added (as if the
	// process died right after its end steps); driveAfter and grace, when
	// set, replace flowDriveAfter and SweeperOptions.SubmitGrace for this
	// Fleet's sweeps.
	off               bool
	driveAfter, grace time.Duration
}

// add records the end of task id of shard c. ok is false when the driver
// drops what is added (off); start says the caller must start the loop,
// and call stopped if it cannot.
func (d *flowDriver) add(c *engine.Queue, id string) (start, ok bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.off {
		return false, false
	}
	if d.pend == nil {
		d.pend = map[*engine.Queue][]string{}
		d.wake = make(chan struct{}, 1)
	}
	d.pend[c] = append(d.pend[c], id)
	start = !d.running
	d.running = true
	return start, true
}

// stopped records that the loop did not start (Close began).
func (d *flowDriver) stopped() {
	d.mu.Lock()
	d.running = false
	d.mu.Unlock()
}

// take returns what waits, and empties it.
func (d *flowDriver) take() map[*engine.Queue][]string {
	d.mu.Lock()
	defer d.mu.Unlock()
	p := d.pend
	d.pend = map[*engine.Queue][]string{}
	return p
}
