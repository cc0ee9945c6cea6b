package fleet

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"github.com/invopop/jsonschema"
	"github.com/redis/rueidis"

	"github.com/fleet-go/fleet/internal/keys"
)

var catalogReplaceScript = newScript("catalog_replace.lua")

// CatalogEntry declares the Go types of one automation type, for
// PublishCatalog: the config it takes, the output it emits, and the task
// payload it consumes. A nil type (TaskPayload of a loop automation, which
// takes no tasks) is published as JSON null. Describe and DescribeLoop
// build one from type parameters.
type CatalogEntry struct {
	// Type is the automation type, as in stream:<type> and wkr:<type>:...
	Type string
	// Config is the type of the automation's config.
	Config reflect.Type
	// Output is the type of what the automation emits onto its stream.
	Output reflect.Type
	// TaskPayload is the type of its task payloads; nil when it takes none.
	TaskPayload reflect.Type
}

// Describe declares an automation type whose config is a C, whose output is
// an O and whose task payload is a P.
func Describe[C, O, P any](typ string) CatalogEntry {
	return CatalogEntry{Type: typ, Config: reflect.TypeFor[C](), Output: reflect.TypeFor[O](), TaskPayload: reflect.TypeFor[P]()}
}

// DescribeLoop declares an automation type that takes no tasks (a loop
// automation): its task_payload is published as null.
func DescribeLoop[C, O any](typ string) CatalogEntry {
	return CatalogEntry{Type: typ, Config: reflect.TypeFor[C](), Output: reflect.TypeFor[O]()}
}

// CatalogSchemas is one published entry of the catalog: the JSON Schema
// (draft 2020-12) of each declared type. TaskPayload is nil for a type that
// takes no tasks (stored as null). Its JSON is the stored value:
// {"config": ..., "output": ..., "task_payload": ...}.
type CatalogSchemas struct {
	// Config is the JSON Schema of the config.
	Config json.RawMessage `json:"config"`
	// Output is the JSON Schema of the output.
	Output json.RawMessage `json:"output"`
	// TaskPayload is the JSON Schema of the task payload, nil when none.
	TaskPayload json.RawMessage `json:"task_payload"`
}

// PublishCatalog replaces the whole catalog (fleet:catalog, a hash of type
// -> CatalogSchemas JSON) with entries, in one script: a reader sees the
// old catalog or the new one, never a mix or an empty one. With no entries
// it clears the catalog.
//
// Schemas are generated from the Go types by github.com/invopop/jsonschema
// (json and jsonschema tags), with no $id, properties beyond those declared
// allowed, and references to named struct types under $defs. The
// validator/v10 tags of struct fields are carried over where JSON Schema
// can say the same: required -> the object's required list (and only
// those, or jsonschema:"required" ones, are listed); min, max, len, gte, lte
// -> minimum/maximum for numbers, minLength/maxLength for strings,
// minItems/maxItems for slices and arrays, minProperties/maxProperties for
// maps; gt, lt -> exclusiveMinimum/exclusiveMaximum for numbers; oneof ->
// enum; email, url, uri, uuid, hostname, ipv4, ipv6 -> format; dive applies
// the tags after it to the elements. Other tags are left out.
//
// It returns ErrInvalidName for a bad type name, ErrInvalidArgument for a
// repeated type or a Go type no schema can be made of, and ErrWrongType,
// changing nothing, when fleet:catalog is not a hash.
func (f *Fleet) PublishCatalog(ctx context.Context, entries ...CatalogEntry) error {
	if err := f.alive(ctx); err != nil {
		return opErr("publish catalog", "", err)
	}
	args := make([]string, 0, 2*len(entries))
	seen := make(map[string]bool, len(entries))
	for _, e := range entries {
		if err := keys.Check(keys.KindType, e.Type); err != nil {
			return opErr("publish catalog", e.Type, err)
		}
		if seen[e.Type] {
			return opErr("publish catalog", e.Type, fmt.Errorf("%w: type listed twice", ErrInvalidArgument))
		}
		seen[e.Type] = true
		b, err := e.schemas()
		if err != nil {
			return opErr("publish catalog", e.Type, err)
		}
		args = append(args, e.Type, string(b))
	}
	f.watch.Wrote(f.keys.Catalog()) // before the write: its invalidation may come before the reply
	return opErr("publish catalog", "", catalogReplaceScript.Exec(ctx, f.client, []string{f.keys.Catalog()}, args).Error())
}

// schemas returns the stored JSON of the entry.
func (e CatalogEntry) schemas() ([]byte, error) {
	var out CatalogSchemas
	var err error
	if out.Config, err = JSONSchema(e.Config); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if out.Output, err = JSONSchema(e.Output); err != nil {
		return nil, fmt.Errorf("output: %w", err)
	}
	if out.TaskPayload, err = JSONSchema(e.TaskPayload); err != nil {
		return nil, fmt.Errorf("task payload: %w", err)
	}
	return json.Marshal(out)
}

// JSONSchema returns the JSON Schema of Go type t as PublishCatalog stores
// it, validator tags included; nil for a nil t. It returns
// ErrInvalidArgument for a type no schema can be made of (a channel, a
// func).
func JSONSchema(t reflect.Type) (_ json.RawMessage, err error) {
	if t == nil {
		return nil, nil
	}
	base := t
	for base.Kind() == reflect.Pointer {
		base = base.Elem()
	}
	switch base.Kind() {
	case reflect.Chan, reflect.Func, reflect.UnsafePointer, reflect.Complex64, reflect.Complex128:
		return nil, fmt.Errorf("%w: %v has no JSON form", ErrInvalidArgument, t)
	}
	defer func() {
		if p := recover(); p != nil { // the reflector panics on some types
			err = fmt.Errorf("%w: no JSON Schema for %v: %v", ErrInvalidArgument, t, p)
		}
	}()
	r := &jsonschema.Reflector{
		Anonymous:                  true,
		ExpandedStruct:             true,
		AllowAdditionalProperties:  true,
		RequiredFromJSONSchemaTags: true,
	}
	s := r.ReflectFromType(t)
	w := validateWalker{root: s, seen: map[reflect.Type]bool{}}
	w.walk(base, s)
	if len(s.Definitions) == 0 {
		s.Definitions = nil
	}
	b, err := json.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("%w: JSON Schema of %v: %w", ErrInvalidArgument, t, err)
	}
	return b, nil
}

// validateWalker walks a Go type and its generated schema together, adding
// what the validator tags say.
type validateWalker struct {
	root *jsonschema.Schema
	seen map[reflect.Type]bool // struct types already done (shared $defs, recursion)
}

// resolve follows a $ref into the root's $defs and unwraps a nullable oneOf.
func (w *validateWalker) resolve(s *jsonschema.Schema) *jsonschema.Schema {
	if s == nil {
		return nil
	}
	if name, ok := strings.CutPrefix(s.Ref, "#/$defs/"); ok {
		return w.root.Definitions[name]
	}
	if len(s.OneOf) == 2 && s.OneOf[1].Type == "null" {
		return w.resolve(s.OneOf[0])
	}
	return s
}

func (w *validateWalker) walk(t reflect.Type, s *jsonschema.Schema) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if s = w.resolve(s); s == nil {
		return
	}
	switch t.Kind() {
	case reflect.Struct:
		if w.seen[t] || s.Properties == nil {
			return
		}
		w.seen[t] = true
		w.fields(t, s)
	case reflect.Slice, reflect.Array:
		w.walk(t.Elem(), s.Items)
	case reflect.Map:
		w.walk(t.Elem(), s.AdditionalProperties)
	}
}

// fields applies the tags of t's fields to the properties of s, flattening
// embedded structs as encoding/json does.
func (w *validateWalker) fields(t reflect.Type, s *jsonschema.Schema) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || strings.Split(f.Tag.Get("jsonschema"), ",")[0] == "-" {
			continue
		}
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if f.Anonymous && name == "" && ft.Kind() == reflect.Struct {
			w.fields(ft, s)
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		prop, ok := s.Properties.Get(name)
		if !ok {
			continue
		}
		if tag := f.Tag.Get("validate"); tag != "" {
			applyValidate(s, name, ft, w.resolveLocal(prop), tag)
		}
		w.walk(ft, prop)
	}
}

// resolveLocal unwraps a nullable oneOf but leaves a $ref alone: bounds go
// on the property, never on a shared definition.
func (w *validateWalker) resolveLocal(s *jsonschema.Schema) *jsonschema.Schema {
	if len(s.OneOf) == 2 && s.OneOf[1].Type == "null" {
		return s.OneOf[0]
	}
	return s
}

// applyValidate sets on prop (the schema of field name of parent, of Go
// type t) what a validate tag says.
func applyValidate(parent *jsonschema.Schema, name string, t reflect.Type, prop *jsonschema.Schema, tag string) {
	rules := strings.Split(tag, ",")
	for i, rule := range rules {
		if strings.Contains(rule, "|") {
			continue // an alternative: no single JSON Schema keyword says it
		}
		key, val, _ := strings.Cut(rule, "=")
		switch key {
		case "required":
			if parent != nil && !contains(parent.Required, name) {
				parent.Required = append(parent.Required, name)
			}
		case "dive":
			// The rest applies to the elements.
			et, items := elem(t, prop)
			if items != nil && items.Ref == "" {
				applyValidate(nil, "", et, items, strings.Join(rules[i+1:], ","))
			}
			return
		case "min", "gte":
			setBound(prop, t, val, true, false)
		case "max", "lte":
			setBound(prop, t, val, false, false)
		case "gt":
			setBound(prop, t, val, true, true)
		case "lt":
			setBound(prop, t, val, false, true)
		case "len":
			setBound(prop, t, val, true, false)
			setBound(prop, t, val, false, false)
		case "oneof":
			prop.Enum = oneOf(t, val)
		case "email", "hostname", "ipv4", "ipv6", "uuid":
			prop.Format = key
		case "url", "uri":
			prop.Format = "uri"
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// elem returns the element type and schema of a slice, array or map.
func elem(t reflect.Type, s *jsonschema.Schema) (reflect.Type, *jsonschema.Schema) {
	switch t.Kind() {
	case reflect.Slice, reflect.Array:
		et := t.Elem()
		for et.Kind() == reflect.Pointer {
			et = et.Elem()
		}
		return et, s.Items
	case reflect.Map:
		et := t.Elem()
		for et.Kind() == reflect.Pointer {
			et = et.Elem()
		}
		return et, s.AdditionalProperties
	}
	return nil, nil
}

func isNumber(k reflect.Kind) bool {
	switch k {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64:
		return true
	}
	return false
}

// setBound sets a lower (low) or upper bound, exclusive or not, in the
// keyword that fits t's kind. A value that is not a number is left out.
func setBound(s *jsonschema.Schema, t reflect.Type, val string, low, exclusive bool) {
	switch {
	case isNumber(t.Kind()):
		if _, err := strconv.ParseFloat(val, 64); err != nil {
			return
		}
		n := json.Number(val)
		switch {
		case low && exclusive:
			s.ExclusiveMinimum = n
		case low:
			s.Minimum = n
		case exclusive:
			s.ExclusiveMaximum = n
		default:
			s.Maximum = n
		}
	case exclusive:
		// gt/lt on lengths: n+1 / n-1.
		u, err := strconv.ParseUint(val, 10, 64)
		if err != nil || (!low && u == 0) {
			return
		}
		if low {
			u++
		} else {
			u--
		}
		setLen(s, t, u, low)
	default:
		u, err := strconv.ParseUint(val, 10, 64)
		if err != nil {
			return
		}
		setLen(s, t, u, low)
	}
}

func setLen(s *jsonschema.Schema, t reflect.Type, u uint64, low bool) {
	switch t.Kind() {
	case reflect.String:
		if low {
			s.MinLength = &u
		} else {
			s.MaxLength = &u
		}
	case reflect.Slice, reflect.Array:
		if low {
			s.MinItems = &u
		} else {
			s.MaxItems = &u
		}
	case reflect.Map:
		if low {
			s.MinProperties = &u
		} else {
			s.MaxProperties = &u
		}
	}
}

// oneOf parses a validator oneof list: space separated, 'quoted' for
// values with spaces; numbers for number fields.
func oneOf(t reflect.Type, val string) []any {
	var words []string
	for rest := strings.TrimSpace(val); rest != ""; rest = strings.TrimSpace(rest) {
		if rest[0] == '\'' {
			if end := strings.IndexByte(rest[1:], '\''); end >= 0 {
				words = append(words, rest[1:1+end])
				rest = rest[2+end:]
				continue
			}
		}
		w, r, _ := strings.Cut(rest, " ")
		words, rest = append(words, w), r
	}
	out := make([]any, 0, len(words))
	for _, w := range words {
		if isNumber(t.Kind()) {
			if _, err := strconv.ParseFloat(w, 64); err == nil {
				out = append(out, json.Number(w))
				continue
			}
		}
		out = append(out, w)
	}
	return out
}

// Catalog returns every published entry, by type. Reads go through
// client-side caching: a repeated read costs no round trip, and a publish
// anywhere reaches the next read through the server's invalidation.
// Entries that are not the JSON of a CatalogSchemas are left out and
// reported in a *CatalogDecodeError (errors.Is ErrDecode) returned with the
// others. An unpublished catalog is an empty map.
func (f *Fleet) Catalog(ctx context.Context) (map[string]CatalogSchemas, error) {
	if err := f.alive(ctx); err != nil {
		return nil, opErr("catalog", "", err)
	}
	c, key := f.client, f.keys.Catalog()
	var res rueidis.RedisResult
	if f.cache && !f.watch.Stale(key) {
		res = c.DoCache(ctx, c.B().Hgetall().Key(key).Cache(), f.cacheTTL)
	} else {
		res = c.Do(ctx, c.B().Hgetall().Key(key).Build())
	}
	m, err := res.AsStrMap()
	if err != nil {
		return nil, opErr("catalog", "", err)
	}
	out := make(map[string]CatalogSchemas, len(m))
	var bad map[string]error
	for typ, v := range m {
		s, err := decodeSchemas(v)
		if err != nil {
			if bad == nil {
				bad = map[string]error{}
			}
			bad[typ] = err
			continue
		}
		out[typ] = s
	}
	if bad != nil {
		return out, &CatalogDecodeError{Types: bad}
	}
	return out, nil
}

// CatalogSchemas returns the published entry of type typ, through
// client-side caching like Catalog. A type not in the catalog gives ok
// false and no error; an entry that does not decode gives ErrDecode.
func (f *Fleet) CatalogSchemas(ctx context.Context, typ string) (_ CatalogSchemas, ok bool, err error) {
	if err := keys.Check(keys.KindType, typ); err != nil {
		return CatalogSchemas{}, false, opErr("catalog", typ, err)
	}
	if err := f.alive(ctx); err != nil {
		return CatalogSchemas{}, false, opErr("catalog", typ, err)
	}
	c, key := f.client, f.keys.Catalog()
	var res rueidis.RedisResult
	if f.cache && !f.watch.Stale(key) {
		res = c.DoCache(ctx, c.B().Hget().Key(key).Field(typ).Cache(), f.cacheTTL)
	} else {
		res = c.Do(ctx, c.B().Hget().Key(key).Field(typ).Build())
	}
	v, err := res.ToString()
	if rueidis.IsRedisNil(err) {
		return CatalogSchemas{}, false, nil
	}
	if err != nil {
		return CatalogSchemas{}, false, opErr("catalog", typ, err)
	}
	s, err := decodeSchemas(v)
	if err != nil {
		return CatalogSchemas{}, false, opErr("catalog", typ, fmt.Errorf("%w: %w", ErrDecode, err))
	}
	return s, true, nil
}

var jsonNull = []byte("null")

func decodeSchemas(v string) (CatalogSchemas, error) {
	var s CatalogSchemas
	if err := json.Unmarshal([]byte(v), &s); err != nil {
		return s, err
	}
	if bytes.Equal(s.Config, jsonNull) {
		s.Config = nil
	}
	if bytes.Equal(s.Output, jsonNull) {
		s.Output = nil
	}
	if bytes.Equal(s.TaskPayload, jsonNull) {
		s.TaskPayload = nil
	}
	return s, nil
}
