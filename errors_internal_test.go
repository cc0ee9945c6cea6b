package fleet

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"
)

// A dial that timed out is ErrUnavailable, though the net package's timeout
// error also says it is context.DeadlineExceeded; a ctx that ended is not.
func TestClassifyDialTimeout(t *testing.T) {
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	_, err := (&net.Dialer{}).DialContext(ctx, "tcp", "127.0.0.1:1")
	if err == nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("dial with an expired deadline = %v; want a timeout that is DeadlineExceeded", err)
	}
	if got := opErr("lock acquire", "l", err); !errors.Is(got, ErrUnavailable) {
		t.Fatalf("opErr(dial timeout) = %v, want ErrUnavailable", got)
	}
	if got := opErr("lock acquire", "l", context.DeadlineExceeded); errors.Is(got, ErrUnavailable) || !errors.Is(got, context.DeadlineExceeded) {
		t.Fatalf("opErr(ctx deadline) = %v, want the ctx error alone", got)
	}
}
