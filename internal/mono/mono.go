// Package mono is fleet's monotonic clock: a reading is nanoseconds since
// an epoch taken when the process started, immune to wall clock steps.
// Lease deadlines are measured with it.
package mono

import "time"

// epoch anchors Now.
var epoch = time.Now()

// Now is the time on this process's monotonic clock, in nanoseconds
// since epoch: what lease deadlines are measured with, immune to wall
// clock steps.
func Now() int64 { return int64(time.Since(epoch)) }

// Time spells a Now reading as a time.Time: now plus the time until it, so
// that its monotonic reading compares on the monotonic clock (time.Until,
// Before) and its wall reading is right by the wall clock of now, whatever
// steps that clock took since the process started.
func Time(ns int64) time.Time {
	now := time.Now()
	return now.Add(time.Duration(ns - int64(now.Sub(epoch))))
}
