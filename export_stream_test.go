package fleet

import "time"

// SetStreamClock replaces the clock of s, to push entries at chosen times.
func SetStreamClock[T any](s *Stream[T], now func() time.Time) { s.now = now }
