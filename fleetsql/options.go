package fleetsql

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/fleet-go/fleet"
)

// taskOptions are the per-task options of fleet.SubmitOptions as the
// outbox's options column holds them (a JSON object of those set; the
// column is NULL when none is).
type taskOptions struct {
	Priority    int               `json:"priority,omitempty"`
	MaxAttempts int               `json:"max_attempts,omitempty"`
	TimeoutMS   int64             `json:"timeout_ms,omitempty"`
	ExpiresAtMS int64             `json:"expires_at_ms,omitempty"`
	Meta        map[string]string `json:"meta,omitempty"`
	Group       string            `json:"group,omitempty"`
}

// encodeOptions spells the per-task options of opts for the options
// column: NULL when none is set.
func encodeOptions(opts fleet.SubmitOptions) (any, error) {
	t := taskOptions{Priority: opts.Priority, MaxAttempts: opts.MaxAttempts, Meta: opts.Metadata, Group: opts.Group}
	if opts.Timeout > 0 {
		t.TimeoutMS = max(opts.Timeout.Milliseconds(), 1)
	}
	if !opts.ExpiresAt.IsZero() {
		t.ExpiresAtMS = opts.ExpiresAt.UnixMilli()
	}
	if t.Priority == 0 && t.MaxAttempts == 0 && t.TimeoutMS == 0 && t.ExpiresAtMS == 0 && len(t.Meta) == 0 && t.Group == "" {
		return nil, nil
	}
	b, err := json.Marshal(t)
	if err != nil {
		return nil, err
	}
	return string(b), nil
}

// apply sets the per-task options of the options column col on opts; a
// column that does not decode (edited by hand) is an error that names it.
func applyOptions(col sql.NullString, opts *fleet.SubmitOptions) error {
	if !col.Valid || col.String == "" {
		return nil
	}
	var t taskOptions
	if err := json.Unmarshal([]byte(col.String), &t); err != nil {
		return fmt.Errorf("%w: the options column does not decode: %w", fleet.ErrInvalidArgument, err)
	}
	opts.Priority, opts.MaxAttempts, opts.Metadata, opts.Group = t.Priority, t.MaxAttempts, t.Meta, t.Group
	if t.TimeoutMS > 0 {
		opts.Timeout = time.Duration(t.TimeoutMS) * time.Millisecond
	}
	if t.ExpiresAtMS != 0 {
		opts.ExpiresAt = time.UnixMilli(t.ExpiresAtMS)
	}
	return nil
}
