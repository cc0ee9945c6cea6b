package fleet

import (
	"fmt"
	"slices"
	"strings"
)

// BadMember is a stream member that Pop or Peek could not decode: text that
// is not a fleet envelope, or whose data does not decode into the stream's
// type. Raw is the member as stored, so nothing popped is lost unseen.
type BadMember struct {
	// Raw is the member as stored.
	Raw string
	// Score is its score (unix seconds).
	Score float64
	// Err says why it did not decode.
	Err error
}

// StreamDecodeError is returned by Stream.Pop and Stream.Peek when some
// members did not decode. The entries that did decode are returned with it;
// the bad ones are listed here (Pop has removed them from the stream).
// errors.Is(err, ErrDecode) is true.
type StreamDecodeError struct {
	// Stream is the stream's type name.
	Stream string
	// Members lists the members that did not decode, in stream order.
	Members []BadMember
}

// Error names the stream and the first bad member.
func (e *StreamDecodeError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "fleet: stream %q: %d member(s) do not decode", e.Stream, len(e.Members))
	if len(e.Members) > 0 {
		raw := e.Members[0].Raw
		if len(raw) > 64 {
			raw = raw[:64] + "..."
		}
		fmt.Fprintf(&b, "; first %q: %v", raw, e.Members[0].Err)
	}
	return b.String()
}

// Is reports true for ErrDecode.
func (e *StreamDecodeError) Is(target error) bool { return target == ErrDecode }

// CatalogDecodeError is returned by Fleet.Catalog when some stored entries
// are not the JSON of a catalog entry. The entries that decoded are returned
// with it. errors.Is(err, ErrDecode) is true.
type CatalogDecodeError struct {
	// Types maps each bad entry's type to why it did not decode.
	Types map[string]error
}

// Error lists the bad types.
func (e *CatalogDecodeError) Error() string {
	names := make([]string, 0, len(e.Types))
	for t := range e.Types {
		names = append(names, t)
	}
	slices.Sort(names)
	return fmt.Sprintf("fleet: catalog: %d entr(ies) do not decode: %s", len(names), strings.Join(names, ", "))
}

// Is reports true for ErrDecode.
func (e *CatalogDecodeError) Is(target error) bool { return target == ErrDecode }
