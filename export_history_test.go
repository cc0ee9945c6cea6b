package fleet

import (
	"context"
	"time"
)

// SetDefaultHistoryFlush sets Options.HistoryFlush's default for the
// Fleets opened after it (TestMain turns the history off: see there).
func SetDefaultHistoryFlush(d time.Duration) { defaultHistoryFlush = d }

// FlushHistory runs one flush of f's history now (with a depth sample of
// each queue not sampled this minute), as the flusher does; it reports
// how many batches are still unsent.
func FlushHistory(ctx context.Context, f *Fleet) int {
	f.flushHistoryOnce(ctx, true)
	h := f.history()
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.unsent)
}
