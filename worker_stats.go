package fleet

import (
	"bufio"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
)

// Hardware is the JSON of wkr:<type>:<id>:hardware, written at Start.
type Hardware struct {
	// Hostname is os.Hostname.
	Hostname string `json:"hostname"`
	// CPUs is runtime.NumCPU.
	CPUs int `json:"cpus"`
	// MemoryBytes is the machine's total memory (0 when unknown).
	MemoryBytes uint64 `json:"memory_bytes"`
	// OS and Arch are runtime.GOOS and runtime.GOARCH.
	OS   string `json:"os"`
	Arch string `json:"arch"`
	// GoVersion is runtime.Version.
	GoVersion string `json:"go_version"`
	// FleetVersion is the fleet module's version in the build ("(devel)"
	// when unknown).
	FleetVersion string `json:"fleet_version"`
	// PID is the process id.
	PID int `json:"pid"`
	// Kind is "loop" or "batch"; Slots is the number of slots (written
	// again by the heartbeat after SetSlots changed it).
	Kind  string `json:"kind"`
	Slots int    `json:"slots"`
	// StartedAt is when the worker started, unix seconds.
	StartedAt int64 `json:"started_at"`
	// Chunk is a chunk worker's ChunkOptions (NewChunkWorker); nil (left
	// out) for any other worker.
	Chunk *ChunkOptions `json:"chunk,omitempty"`
}

func (w *Worker) hardware() Hardware {
	host, _ := os.Hostname()
	w.sizeMu.Lock()
	slots := w.target
	if w.startedAt == 0 {
		w.startedAt = w.f.now().Unix()
	}
	started := w.startedAt
	w.sizeMu.Unlock()
	w.hwSlots.Store(int64(slots))
	return Hardware{Hostname: host, CPUs: runtime.NumCPU(), MemoryBytes: totalMemory(),
		OS: runtime.GOOS, Arch: runtime.GOARCH, GoVersion: runtime.Version(), FleetVersion: fleetVersion(),
		PID: os.Getpid(), Kind: w.kind, Slots: slots, StartedAt: started, Chunk: w.chunk}
}

func fleetVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "(devel)"
	}
	if bi.Main.Path == "github.com/fleet-go/fleet" {
		return bi.Main.Version
	}
	for _, d := range bi.Deps {
		if d.Path == "github.com/fleet-go/fleet" {
			return d.Version
		}
	}
	return "(devel)"
}

// totalMemory reads MemTotal from /proc/meminfo (Linux), else 0.
func totalMemory() uint64 {
	fh, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer fh.Close()
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err == nil {
				return kb * 1024
			}
		}
	}
	return 0
}

// WorkerStats is the JSON of wkr:<type>:<id>:stats, the last stats frame.
type WorkerStats struct {
	// TS is when the frame was made, unix seconds.
	TS int64 `json:"ts"`
	// State is the worker's state then.
	State WorkerState `json:"state"`
	// Gen is the gen of the config in use.
	Gen int64 `json:"gen"`
	// Slots is the number of slots in force (Worker.Slots); Busy how many
	// run a task (batch) or run at all (loop). After a shrink Busy may
	// stay above Slots until the tasks that ran then end.
	Slots int `json:"slots"`
	Busy  int `json:"busy"`
	// Done and Failed count tasks acked and tasks that failed (nacked,
	// panicked, or lost their lease) since Start; Emitted counts outputs.
	Done    int64 `json:"done"`
	Failed  int64 `json:"failed"`
	Emitted int64 `json:"emitted"`
	// PerSlot has one entry per slot, in slot order, and one for each slot
	// above the count (after a shrink) whose task still runs.
	PerSlot []SlotStats `json:"per_slot"`
}

// SlotStats is one slot's part of a stats frame.
type SlotStats struct {
	// Slot is the slot's index.
	Slot int `json:"slot"`
	// Busy, Done and Failed as in WorkerStats, for this slot.
	Busy   bool  `json:"busy"`
	Done   int64 `json:"done"`
	Failed int64 `json:"failed"`
	// Metrics holds what the automation recorded with Slot.Metric and
	// Slot.Count.
	Metrics map[string]float64 `json:"metrics"`
}

// Stats returns the worker's current stats frame, as the heartbeat writes
// it.
func (w *Worker) Stats() WorkerStats { return w.stats() }

func (w *Worker) stats() WorkerStats {
	states := w.slotStates()
	st := WorkerStats{TS: w.f.now().Unix(), State: w.stateNow(), Gen: w.Gen(), Slots: w.Slots(),
		Done: w.done.Load(), Failed: w.failed.Load(), Emitted: w.emitted.Load(), PerSlot: make([]SlotStats, len(states))}
	for i, s := range states {
		ss := SlotStats{Slot: s.index, Busy: s.busy.Load(), Done: s.done.Load(), Failed: s.failed.Load()}
		s.mu.Lock()
		ss.Metrics = make(map[string]float64, len(s.metrics))
		for k, v := range s.metrics {
			ss.Metrics[k] = v
		}
		s.mu.Unlock()
		if ss.Busy {
			st.Busy++
		}
		st.PerSlot[i] = ss
	}
	return st
}
