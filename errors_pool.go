package fleet

import (
	"errors"
	"fmt"
	"strings"
)

// Errors of Pool, testable with errors.Is.
var (
	// ErrUnknownField is returned (through Query.Err, Claim, List) for a
	// filter on a field that the pool's tags type does not have, by its
	// JSON name. (In fleet's own design this is a TypeError.)
	ErrUnknownField = errors.New("fleet: unknown tag field")
	// ErrFilterType is returned for a filter value whose type does not fit
	// the field, or a filter on a field that cannot be matched exactly
	// (not a string, bool or number; a ':' in its name). (In fleet's own
	// design this is a ValueError.)
	ErrFilterType = errors.New("fleet: filter value does not fit the tag field")
	// ErrBadItem is what a BadItemsError is: entries of the pool hash that
	// are not valid items (not JSON, fields missing or of the wrong type, a
	// payload or tags that do not decode into the pool's types). They are
	// never handed out.
	ErrBadItem = errors.New("fleet: bad pool item")
)

// BadItemsError reports the entries of a pool hash that List skipped
// because they are not valid items (another client wrote them, or the
// types changed). errors.Is(err, ErrBadItem) is true for it. The items
// List returns alongside it are all good.
type BadItemsError struct {
	// Pool is the pool's name.
	Pool string
	// IDs lists the bad entries' item ids.
	IDs []string
	// Causes holds why each is bad: Causes[i] is the reason of IDs[i].
	Causes []error
}

// Error lists the bad entries, at most five of them.
func (e *BadItemsError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "fleet: pool %q: %d bad item(s) skipped", e.Pool, len(e.IDs))
	for i, id := range e.IDs {
		if i == 5 {
			b.WriteString("; ...")
			break
		}
		fmt.Fprintf(&b, "; %q: %v", id, e.Causes[i])
	}
	return b.String()
}

// Is reports whether target is ErrBadItem.
func (e *BadItemsError) Is(target error) bool { return target == ErrBadItem }

// poolErr is opErr for pool calls: pool sentinels pass through without the
// classification that opErr would add to an error it does not know.
func poolErr(op, name string, err error) error {
	if err == nil {
		return nil
	}
	for _, s := range []error{ErrUnknownField, ErrFilterType, ErrPayloadTooLarge, ErrLeaseLost, ErrBadItem} {
		if errors.Is(err, s) {
			return fmt.Errorf("fleet: %s %q: %w", op, name, err)
		}
	}
	return opErr(op, name, err)
}
