package fleet

import (
	"context"
	"time"
)

// TrySemaphoreAs runs the acquire script once for a chosen token, as a
// late script of an abandoned call would run: nil when not taken.
func TrySemaphoreAs(ctx context.Context, s *Semaphore, token string, hold time.Duration) (*Lease, error) {
	lease, _, err := s.try(ctx, token, hold)
	return lease, err
}

// LimitAllowScript is the limiter's script, for benchmarks against a bare
// EVALSHA of it.
var LimitAllowScript = linker.Text("limit_allow.lua")
