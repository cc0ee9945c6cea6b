package fault

import (
	"errors"
	"fmt"
	"testing"
)

// A sentinel's text is "fleet: " and what; the engine's sentinels keep the
// texts fleet's errors always had.
func TestMessage(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{New("closed", nil), "fleet: closed"},
		{LeaseLost, "fleet: lease lost"},
		{Canceled, "fleet: task canceled"},
	} {
		if got := c.err.Error(); got != c.want {
			t.Errorf("Error() = %q, want %q", got, c.want)
		}
	}
}

// A sentinel with a parent is also its parent, not the other way round,
// and no sentinel is another of the same text.
func TestIsParent(t *testing.T) {
	parent := New("not found", nil)
	child := New("no such task", parent)
	if !errors.Is(child, parent) {
		t.Error("errors.Is(child, parent) = false")
	}
	if errors.Is(parent, child) {
		t.Error("errors.Is(parent, child) = true")
	}
	if errors.Is(New("lease lost", nil), LeaseLost) {
		t.Error("a second sentinel of the same text is LeaseLost")
	}
	if errors.Is(LeaseLost, Canceled) || errors.Is(Canceled, LeaseLost) {
		t.Error("LeaseLost and Canceled are each other")
	}
}

// errors.Is and errors.As see a sentinel through wrapping, %w and
// errors.Join alike.
func TestWrapped(t *testing.T) {
	parent := New("not found", nil)
	child := New("no such queue", parent)
	wrapped := fmt.Errorf("queue %q: %w", "q", child)
	joined := errors.Join(errors.New("other"), fmt.Errorf("extend: %w", LeaseLost))
	if !errors.Is(wrapped, child) || !errors.Is(wrapped, parent) {
		t.Errorf("errors.Is through %%w: child %v, parent %v", errors.Is(wrapped, child), errors.Is(wrapped, parent))
	}
	if !errors.Is(joined, LeaseLost) {
		t.Error("errors.Is(joined, LeaseLost) = false")
	}
	var s *Sentinel
	if !errors.As(joined, &s) || s != LeaseLost {
		t.Errorf("errors.As(joined, *Sentinel) = %v", s)
	}
	if errors.As(errors.New("fleet: lease lost"), new(*Sentinel)) {
		t.Error("an error of the same text is a *Sentinel")
	}
}
