package fleetsql

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"time"

	"github.com/fleet-go/fleet"
)

// rowOptions is the options column: the per-task options of
// SubmitOptions that are set, as a JSON object of the fields below, in
// this order. A row without any holds NULL, as a row of SchemaVersion 1.
type rowOptions struct {
	Priority    int               `json:"priority,omitempty"`      // SubmitOptions.Priority
	MaxAttempts int               `json:"max_attempts,omitempty"`  // SubmitOptions.MaxAttempts
	TimeoutMS   int64             `json:"timeout_ms,omitempty"`    // SubmitOptions.Timeout, in ms (at least 1, as the core keeps it)
	ExpiresAtMS int64             `json:"expires_at_ms,omitempty"` // SubmitOptions.ExpiresAt, unix ms
	Metadata    map[string]string `json:"metadata,omitempty"`      // SubmitOptions.Metadata
	Group       string            `json:"group,omitempty"`         // SubmitOptions.Group
}

// encodeOptions returns the options column for opts: its JSON, or nil
// (NULL) when opts sets no per-task option.
func encodeOptions(opts fleet.SubmitOptions) (any, error) {
	r := rowOptions{Priority: opts.Priority, MaxAttempts: opts.MaxAttempts, Metadata: opts.Metadata, Group: opts.Group}
	if opts.Timeout > 0 {
		r.TimeoutMS = max(opts.Timeout.Milliseconds(), 1)
	}
	if !opts.ExpiresAt.IsZero() {
		r.ExpiresAtMS = opts.ExpiresAt.UnixMilli()
	}
	if r.Priority == 0 && r.MaxAttempts == 0 && r.TimeoutMS == 0 && r.ExpiresAtMS == 0 && len(r.Metadata) == 0 && r.Group == "" {
		return nil, nil
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // for the eyes of an operator: <, > and & as they are
	if err := enc.Encode(r); err != nil {
		return nil, fmt.Errorf("options: %w", err)
	}
	return string(bytes.TrimSuffix(b.Bytes(), []byte("\n"))), nil
}

// errBadOptions marks an options column that does not decode: the row
// goes to the dead rows.
var errBadOptions = errors.New("fleetsql: the options column does not decode")

// decodeOptions sets the per-task options of the options column s on
// opts. It is strict, as SubmitJSON is with a payload: unknown fields,
// trailing data and values out of range are refused (errBadOptions), so
// that a column edited by hand into something else is not half read. The
// values themselves are the core's to check, at the submit.
func decodeOptions(s string, opts *fleet.SubmitOptions) error {
	dec := json.NewDecoder(bytes.NewReader([]byte(s)))
	dec.DisallowUnknownFields()
	var r rowOptions
	if err := dec.Decode(&r); err != nil {
		return fmt.Errorf("%w: %w", errBadOptions, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("%w: trailing data after the JSON object", errBadOptions)
	}
	if r.TimeoutMS < 0 || r.TimeoutMS > math.MaxInt64/int64(time.Millisecond) {
		return fmt.Errorf("%w: timeout_ms %d out of range", errBadOptions, r.TimeoutMS)
	}
	opts.Priority, opts.MaxAttempts, opts.Metadata, opts.Group = r.Priority, r.MaxAttempts, r.Metadata, r.Group
	opts.Timeout = time.Duration(r.TimeoutMS) * time.Millisecond
	if r.ExpiresAtMS != 0 {
		opts.ExpiresAt = time.UnixMilli(r.ExpiresAtMS)
	}
	return nil
}
