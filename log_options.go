package fleet

// The bounds of per-task logs (QueueOptions.Logs) and what Lookup reads
// back (TaskRecord.Logs); log.go is the machinery.

import (
	"encoding/json"
	"fmt"
	"time"
)

const (
	// DefaultLogLines bounds the lines one run of a task keeps
	// (LogOptions.Lines).
	DefaultLogLines = 100
	// DefaultLogBytes bounds the bytes of one run's lines, as JSON
	// (LogOptions.Bytes).
	DefaultLogBytes = 16 << 10
	// DefaultLogRuns is how many runs' logs a task keeps, the newest
	// (LogOptions.Runs).
	DefaultLogRuns = 10
	// MaxLogBytes bounds LogOptions.Bytes.
	MaxLogBytes = 1 << 20
)

// LogOptions bound a task's log (QueueOptions.Logs): the lines a handler
// writes with the task's logger (Logger, Task.Logger), kept with the task
// one entry per run. A line past a bound is not kept; the run's entry
// counts it (TaskLog.Dropped).
type LogOptions struct {
	// Lines bounds the lines one run keeps. Negative: the queue keeps no
	// logs, and the task's logger discards what it is given. Defaults to
	// DefaultLogLines.
	Lines int
	// Bytes bounds the bytes of one run's lines, each as the JSON object
	// it is kept as. At most MaxLogBytes. Defaults to DefaultLogBytes.
	Bytes int
	// Runs is how many runs' entries a task keeps, the newest. Defaults to
	// DefaultLogRuns.
	Runs int
}

func (o LogOptions) withDefaults() (LogOptions, error) {
	switch {
	case o.Bytes < 0 || o.Bytes > MaxLogBytes:
		return o, fmt.Errorf("%w: QueueOptions.Logs.Bytes %d is not in [0, %d]", ErrInvalidOptions, o.Bytes, MaxLogBytes)
	case o.Runs < 0:
		return o, fmt.Errorf("%w: QueueOptions.Logs.Runs %d is negative", ErrInvalidOptions, o.Runs)
	}
	if o.Lines == 0 {
		o.Lines = DefaultLogLines
	}
	if o.Bytes == 0 {
		o.Bytes = DefaultLogBytes
	}
	if o.Runs == 0 {
		o.Runs = DefaultLogRuns
	}
	return o, nil
}

// TaskLog is the log of one run of a task (TaskRecord.Logs).
type TaskLog struct {
	// Attempt is the run's attempt: 1 for the first run, one more after
	// each failed run (a snoozed or released run is followed by one of the
	// same attempt).
	Attempt int `json:"attempt"`
	// Worker is the worker ("type|id") that ran it, empty for a task
	// reserved by a Reserve of your own.
	Worker string `json:"worker,omitempty"`
	// At is when the run ended and its entry was written (this process's
	// clock where it ran).
	At time.Time `json:"at,omitzero"`
	// Lines are the run's lines, in order.
	Lines []LogLine `json:"lines,omitempty"`
	// Dropped counts the lines past LogOptions' bounds, not kept.
	Dropped int `json:"dropped,omitempty"`
	// Sealed is the key id of an entry that this process could not open
	// (the queue seals its logs: QueueOptions.Sealer, Options.OpenWith):
	// its other fields are then empty.
	Sealed string `json:"sealed,omitempty"`
}

// LogLine is one line of a task's log: what a handler gave the task's
// logger.
type LogLine struct {
	// Time is when it was written.
	Time time.Time `json:"time"`
	// Level is its level, as slog spells it ("INFO", "WARN+2").
	Level string `json:"level"`
	// Message is its message.
	Message string `json:"msg"`
	// Attrs are its attributes, as JSON values (groups are objects).
	Attrs map[string]json.RawMessage `json:"attrs,omitempty"`
}
