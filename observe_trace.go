package fleet

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"

	"github.com/fleet-go/fleet/internal/taskbody"
)

// A task's trace context travels in its body as the optional "trace"
// object (SCHEMA.md): written at submit when an Observer returns one, read
// back at reserve for TaskInfo.Trace and Task.TraceContext.

// traceField spells the body field `,"trace":{...}` for a trace context,
// or "" for none. Keys are sorted, as encoding/json sorts them.
func traceField(tr map[string]string) string {
	if len(tr) == 0 {
		return ""
	}
	var b strings.Builder
	n := len(`,"trace":{}`)
	for k, v := range tr {
		n += len(k) + len(v) + 6 // quotes, colon, comma: exact when nothing needs escaping
	}
	b.Grow(n)
	b.WriteString(`,"trace":{`)
	if len(tr) == 1 { // the usual traceparent alone: nothing to sort
		for k, v := range tr {
			taskbody.WriteJSONString(&b, k)
			b.WriteByte(':')
			taskbody.WriteJSONString(&b, v)
		}
		b.WriteByte('}')
		return b.String()
	}
	for i, k := range slices.Sorted(maps.Keys(tr)) {
		if i > 0 {
			b.WriteByte(',')
		}
		taskbody.WriteJSONString(&b, k)
		b.WriteByte(':')
		taskbody.WriteJSONString(&b, tr[k])
	}
	b.WriteByte('}')
	return b.String()
}

// decodeTrace reads a body's "trace" field: nil when it is missing or is
// not an object of strings.
func decodeTrace(raw json.RawMessage) map[string]string {
	if len(raw) == 0 {
		return nil
	}
	m, ok := decodeFlat(raw)
	if !ok && json.Unmarshal(raw, &m) != nil {
		return nil
	}
	if len(m) == 0 {
		return nil
	}
	return m
}

// decodeFlat reads {"k":"v",...} spelled as traceField spells it: no white
// space, no escapes, ASCII. Anything else is not ok, for encoding/json to
// read (or refuse).
func decodeFlat(b []byte) (map[string]string, bool) {
	if len(b) < 2 || b[0] != '{' || b[len(b)-1] != '}' {
		return nil, false
	}
	b = b[1 : len(b)-1]
	m := make(map[string]string, 2)
	for len(b) > 0 {
		k, rest, ok := flatString(b)
		if !ok || len(rest) == 0 || rest[0] != ':' {
			return nil, false
		}
		v, rest, ok := flatString(rest[1:])
		if !ok {
			return nil, false
		}
		m[k] = v
		if len(rest) == 0 {
			break
		}
		if rest[0] != ',' || len(rest) == 1 {
			return nil, false
		}
		b = rest[1:]
	}
	return m, true
}

// flatString reads a JSON string without escapes at the start of b.
func flatString(b []byte) (string, []byte, bool) {
	if len(b) < 2 || b[0] != '"' {
		return "", nil, false
	}
	for i := 1; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			return string(b[1:i]), b[i+1:], true
		case c == '\\' || c < 0x20 || c > 0x7e:
			return "", nil, false
		}
	}
	return "", nil, false
}
