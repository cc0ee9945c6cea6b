package fleet

import (
	"context"
	"errors"
	"testing"
)

// TestCancelWatch: a cancel heard before the handler started cancels it as
// it starts; one heard while it runs cancels it at once; a finished
// handler is forgotten; the memory of cancels stays bounded.
func TestCancelWatch(t *testing.T) {
	cw := newCancelWatch()
	cw.cancel("early")
	ctx, cancel := context.WithCancelCause(context.Background())
	done := cw.start("early", cancel)
	if !errors.Is(context.Cause(ctx), ErrCanceled) {
		t.Fatalf("early cancel: cause %v", context.Cause(ctx))
	}
	done()
	ctx2, cancel2 := context.WithCancelCause(context.Background())
	done2 := cw.start("late", cancel2)
	if ctx2.Err() != nil {
		t.Fatal("cancelled before any cancel")
	}
	cw.cancel("late")
	if !errors.Is(context.Cause(ctx2), ErrCanceled) {
		t.Fatalf("late cancel: cause %v", context.Cause(ctx2))
	}
	done2()
	if len(cw.running) != 0 || len(cw.heard) != 0 {
		t.Fatalf("left: %v %v", cw.running, cw.heard)
	}
	for i := range cancelMemoryMax + 10 {
		cw.cancel(string(rune('a'+i%26)) + string(rune(i)))
	}
	if len(cw.heard) > cancelMemoryMax {
		t.Fatalf("%d cancels remembered", len(cw.heard))
	}
}
