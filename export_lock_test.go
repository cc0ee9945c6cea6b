package fleet

import (
	"context"
	"time"
)

// AbandonLockNow runs the abandon script for token once, as the background
// abandon of an acquire whose ctx ended in flight does (with a tombstone for
// hold plus the margin). It returns 1 when it freed the lock.
func AbandonLockNow(ctx context.Context, l *Lock, token string, hold time.Duration) (int64, error) {
	return lockAbandonScript.Exec(ctx, l.f.client, []string{l.key, l.fence, l.tomb},
		[]string{token, millis(hold + lockTombMargin)}).AsInt64()
}

// TryLockAs runs the acquire script once for a chosen token, as a late
// script of an abandoned call would run: nil when not taken.
func TryLockAs(ctx context.Context, l *Lock, token string, hold time.Duration) (*Lease, error) {
	lease, _, err := l.try(ctx, token, hold)
	return lease, err
}

// LockTombMargin is how much longer than hold a tombstone holds.
const LockTombMargin = lockTombMargin
