package fleet

// A worker config as JSON: encoded whole (configJSON), decoded keeping its
// numbers exact (decodeJSON, decodeObject), and patched by an RFC 7386
// merge patch (mergePatch), for PushConfig and UpdateConfig
// (worker_config.go).

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// configJSON encodes a whole config, which must be a JSON object.
func configJSON(config any) ([]byte, error) {
	var b []byte
	switch c := config.(type) {
	case nil:
		return []byte("{}"), nil
	case json.RawMessage:
		b = c
	case []byte:
		b = c
	default:
		var err error
		if b, err = json.Marshal(config); err != nil {
			return nil, fmt.Errorf("%w: cannot encode %T as JSON: %w", ErrInvalidConfig, config, err)
		}
	}
	if _, err := decodeObject(b); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return b, nil
}

// decodeJSON decodes one JSON value, numbers kept as json.Number.
func decodeJSON(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err == nil {
		return nil, errors.New("trailing data after the JSON value")
	}
	return v, nil
}

// decodeObject decodes a JSON object.
func decodeObject(b []byte) (map[string]any, error) {
	v, err := decodeJSON(b)
	if err != nil {
		return nil, err
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%s is not a JSON object", jsonKind(v))
	}
	return m, nil
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case []any:
		return "an array"
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case bool:
		return "a boolean"
	}
	return "the value"
}

func encodeJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// mergePatch applies an RFC 7386 merge patch to target.
func mergePatch(target, patch any) any {
	p, ok := patch.(map[string]any)
	if !ok {
		return patch
	}
	t, ok := target.(map[string]any)
	if !ok {
		t = map[string]any{}
	}
	for k, v := range p {
		if v == nil {
			delete(t, k)
			continue
		}
		t[k] = mergePatch(t[k], v)
	}
	return t
}
