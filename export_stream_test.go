package fleet

import "time"

// SetStreamClock replaces the clock of s, to push entries at chosen times.
func SetStreamClock[T any](s *Stream[T], now func() time.Time) { s.now = now }

// SetClock replaces the clock f reads where a value is only this process's
// own (stats frames, hardware): a test sets it off to prove that no value
// compared across processes comes from it.
func SetClock(f *Fleet, now func() time.Time) { f.now = now }
