package fleet

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// checkSchema checks v, a JSON value decoded with json.Number, against the
// JSON Schema schema, as PublishCatalog stores them (JSONSchema), and
// returns each failure as "<path> (<rule>)", the path in JSON names
// ("depth", "proxy.port", "tags[2]"). It knows the keywords JSONSchema
// writes: $ref into $defs, oneOf/anyOf, type, properties, required,
// additionalProperties, items, enum, the numeric bounds, minLength,
// maxLength, minItems, maxItems, minProperties and maxProperties; others
// (format among them) are not checked. A null value passes, as the worker's
// decoding leaves the Go zero value for it and its validate tags judge.
func checkSchema(schema []byte, v any) ([]string, error) {
	var root map[string]any
	if err := json.Unmarshal(schema, &root); err != nil {
		return nil, fmt.Errorf("schema: %w", err)
	}
	c := schemaCheck{root: root}
	c.check(root, v, "", 0)
	return c.fails, nil
}

type schemaCheck struct {
	root  map[string]any
	fails []string
}

func (c *schemaCheck) fail(path, rule string, args ...any) {
	if path == "" {
		path = "(the config)"
	}
	c.fails = append(c.fails, path+" ("+fmt.Sprintf(rule, args...)+")")
}

// passes reports whether v meets s, without recording failures.
func (c *schemaCheck) passes(s map[string]any, v any, depth int) bool {
	sub := schemaCheck{root: c.root}
	sub.check(s, v, "", depth)
	return len(sub.fails) == 0
}

func (c *schemaCheck) check(s map[string]any, v any, path string, depth int) {
	if s == nil || v == nil || depth > 64 {
		return
	}
	if ref, ok := s["$ref"].(string); ok {
		if name, ok := strings.CutPrefix(ref, "#/$defs/"); ok {
			defs, _ := c.root["$defs"].(map[string]any)
			d, _ := defs[name].(map[string]any)
			c.check(d, v, path, depth+1)
		}
	}
	for _, k := range []string{"oneOf", "anyOf"} {
		if alts, ok := s[k].([]any); ok && len(alts) > 0 {
			if !slices.ContainsFunc(alts, func(a any) bool { m, _ := a.(map[string]any); return c.passes(m, v, depth+1) }) {
				c.fail(path, "fits none of its schemas")
			}
		}
	}
	if !c.checkType(s["type"], v, path) {
		return
	}
	if enum, ok := s["enum"].([]any); ok && !slices.ContainsFunc(enum, func(e any) bool { return jsonEqual(e, v) }) {
		vals := make([]string, len(enum))
		for i, e := range enum {
			b, _ := json.Marshal(e)
			vals[i] = string(b)
		}
		c.fail(path, "one of %s", strings.Join(vals, " "))
	}
	switch x := v.(type) {
	case json.Number:
		n, err := x.Float64()
		if err != nil {
			return
		}
		if b, ok := bound(s, "minimum"); ok && n < b {
			c.fail(path, "minimum %v", b)
		}
		if b, ok := bound(s, "maximum"); ok && n > b {
			c.fail(path, "maximum %v", b)
		}
		if b, ok := bound(s, "exclusiveMinimum"); ok && n <= b {
			c.fail(path, "above %v", b)
		}
		if b, ok := bound(s, "exclusiveMaximum"); ok && n >= b {
			c.fail(path, "below %v", b)
		}
	case string:
		c.length(s, "minLength", "maxLength", utf8.RuneCountInString(x), path)
	case []any:
		c.length(s, "minItems", "maxItems", len(x), path)
		if items, ok := s["items"].(map[string]any); ok {
			for i, e := range x {
				c.check(items, e, fmt.Sprintf("%s[%d]", path, i), depth+1)
			}
		}
	case map[string]any:
		c.length(s, "minProperties", "maxProperties", len(x), path)
		props, _ := s["properties"].(map[string]any)
		if req, ok := s["required"].([]any); ok {
			for _, r := range req {
				if name, ok := r.(string); ok {
					if _, has := x[name]; !has {
						c.fail(join(path, name), "required")
					}
				}
			}
		}
		names := make([]string, 0, len(x))
		for k := range x {
			names = append(names, k)
		}
		slices.Sort(names)
		for _, k := range names {
			if p, ok := props[k].(map[string]any); ok {
				c.check(p, x[k], join(path, k), depth+1)
				continue
			}
			switch ap := s["additionalProperties"].(type) {
			case bool:
				if !ap {
					c.fail(join(path, k), "unknown field")
				}
			case map[string]any:
				c.check(ap, x[k], join(path, k), depth+1)
			}
		}
	}
}

// checkType checks the type keyword, and reports whether v has the type
// (the other keywords are only checked then).
func (c *schemaCheck) checkType(t any, v any, path string) bool {
	var types []string
	switch x := t.(type) {
	case string:
		types = []string{x}
	case []any:
		for _, e := range x {
			if s, ok := e.(string); ok {
				types = append(types, s)
			}
		}
	default:
		return true
	}
	if slices.ContainsFunc(types, func(name string) bool { return hasType(name, v) }) {
		return true
	}
	c.fail(path, "must be %s, not %s", strings.Join(types, " or "), kindName(v))
	return false
}

func kindName(v any) string {
	for _, name := range []string{"number", "string", "boolean", "array", "object"} {
		if hasType(name, v) {
			return name
		}
	}
	return "null"
}

func hasType(name string, v any) bool {
	switch x := v.(type) {
	case json.Number:
		if name == "integer" {
			_, err := strconv.ParseInt(x.String(), 10, 64)
			return err == nil
		}
		return name == "number"
	case string:
		return name == "string"
	case bool:
		return name == "boolean"
	case []any:
		return name == "array"
	case map[string]any:
		return name == "object"
	}
	return false
}

func (c *schemaCheck) length(s map[string]any, lo, hi string, n int, path string) {
	if b, ok := bound(s, lo); ok && float64(n) < b {
		c.fail(path, "%s %v", lo, b)
	}
	if b, ok := bound(s, hi); ok && float64(n) > b {
		c.fail(path, "%s %v", hi, b)
	}
}

func bound(s map[string]any, k string) (float64, bool) {
	f, ok := s[k].(float64)
	return f, ok && !math.IsNaN(f)
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// jsonEqual compares a schema's enum value (decoded as float64) with a
// config value (decoded with json.Number).
func jsonEqual(e, v any) bool {
	if n, ok := v.(json.Number); ok {
		f, err := n.Float64()
		ef, isNum := e.(float64)
		return err == nil && isNum && f == ef
	}
	a, _ := json.Marshal(e)
	b, _ := json.Marshal(v)
	return string(a) == string(b)
}
