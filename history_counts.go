package fleet

// What a Fleet counted for the queues' history and has not yet added
// (history.go adds it): types of their own, which the Fleet holds.

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
)

// histCounts is one queue's counts since the last flush, and the minute
// (unix s) of this process's last depth sample.
type histCounts struct {
	done, retried, dead atomic.Int64
	sampled             atomic.Int64
}

// history is a Fleet's counts, per queue name, not yet added.
type history struct {
	every  time.Duration // < 0: off
	queues sync.Map      // queue name -> *histCounts
	start  sync.Once

	mu     sync.Mutex  // one flush at a time; guards the fields below
	id     string      // this Fleet's field in the day buckets, "s:<random>"
	seq    int64       // the last batch's sequence number
	last   time.Time   // the last flush
	unsent []histBatch // batches not known to be added, sent again as they were
}

// histBatch is one queue's counts (and depth sample) as one flush sent
// them: sent again unchanged, with its sequence number, until its script
// answers, so that each is added once (history_add.lua skips a batch whose
// number its day bucket has seen).
type histBatch struct {
	c      *histCounts
	queue  string
	minute int64 // the depth sample's minute, 0 for none
	exec   rueidis.LuaExec
}

// noHistory is the history of a Fleet that Open did not make: off.
var noHistory = &history{every: -1}
