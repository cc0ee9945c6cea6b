package fleet

import (
	"crypto/sha1"
	"encoding"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// tagField is one field of a pool's tags type, by its JSON name.
type tagField struct {
	name      string
	typ       reflect.Type
	omitEmpty bool
	why       string // why the field cannot be filtered, "" when it can
	indexed   bool   // marked fleet:"index": the pool keeps index sets of it
}

var (
	jsonMarshaler = reflect.TypeFor[json.Marshaler]()
	textMarshaler = reflect.TypeFor[encoding.TextMarshaler]()
)

// tagFields lists the JSON fields of struct type t, following encoding/json:
// exported fields, json tag names, "-" skipped, untagged embedded structs
// promoted (the shallower field wins).
func tagFields(t reflect.Type) map[string]tagField {
	out := make(map[string]tagField)
	var walk func(t reflect.Type, depth int, seen map[string]int)
	walk = func(t reflect.Type, depth int, seen map[string]int) {
		for i := range t.NumField() {
			sf := t.Field(i)
			tag := sf.Tag.Get("json")
			if tag == "-" {
				continue
			}
			name, opts, _ := strings.Cut(tag, ",")
			ft := sf.Type
			if sf.Anonymous && name == "" {
				et := ft
				if et.Kind() == reflect.Pointer {
					et = et.Elem()
				}
				if et.Kind() == reflect.Struct {
					walk(et, depth+1, seen)
					continue
				}
			}
			if !sf.IsExported() {
				continue
			}
			if name == "" {
				name = sf.Name
			}
			if d, ok := seen[name]; ok && d <= depth {
				continue
			}
			seen[name] = depth
			f := tagField{name: name, typ: ft, omitEmpty: hasOpt(opts, "omitempty") || hasOpt(opts, "omitzero"),
				indexed: hasOpt(sf.Tag.Get("fleet"), "index")}
			switch {
			case hasOpt(opts, "string"):
				f.why = "is encoded with the ,string option"
			case ft.Implements(jsonMarshaler) || reflect.PointerTo(ft).Implements(jsonMarshaler) ||
				ft.Implements(textMarshaler) || reflect.PointerTo(ft).Implements(textMarshaler):
				f.why = "has its own JSON encoding"
			case strings.Contains(name, ":") || len(name) > 128:
				f.why = "has a JSON name with ':' or longer than 128 bytes, which the index cannot hold"
			default:
				switch ft.Kind() {
				case reflect.String, reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
					reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Float32, reflect.Float64:
				default:
					f.why = "is a " + ft.Kind().String() + ", not a string, bool or number"
				}
			}
			out[name] = f
		}
	}
	walk(t, 0, make(map[string]int))
	return out
}

// indexedFields returns the JSON array of the fields marked fleet:"index",
// sorted, or an error naming a marked field that cannot be indexed.
func indexedFields(fields map[string]tagField) (string, error) {
	var names []string
	for _, f := range fields {
		if !f.indexed {
			continue
		}
		if f.why != "" {
			return "", fmt.Errorf("%w: tag field %q is marked fleet:\"index\" but cannot be indexed: it %s", ErrInvalidArgument, f.name, f.why)
		}
		names = append(names, f.name)
	}
	slices.Sort(names)
	b, _ := json.Marshal(names)
	if names == nil {
		b = []byte("[]")
	}
	return string(b), nil
}

func hasOpt(opts, want string) bool {
	for o := range strings.SplitSeq(opts, ",") {
		if o == want {
			return true
		}
	}
	return false
}

// canonOf checks value against field f and returns its canonical form, the
// one lib_pool.lua's canon gives the JSON-decoded tag (internal/keys
// PoolTagIndex).
func (f tagField) canonOf(value any) (string, error) {
	bad := func(format string, args ...any) (string, error) {
		return "", fmt.Errorf("%w: field %q (%s): %s", ErrFilterType, f.name, f.typ, fmt.Sprintf(format, args...))
	}
	if f.why != "" {
		return bad("cannot be matched: it %s", f.why)
	}
	if value == nil {
		return bad("nil value")
	}
	v := reflect.ValueOf(value)
	var c string
	switch fk, vk := f.typ.Kind(), v.Kind(); {
	case fk == reflect.String && vk == reflect.String:
		if !utf8.ValidString(v.String()) {
			// Stored tags are JSON, where invalid UTF-8 becomes U+FFFD: such
			// a filter could never match.
			return bad("value %q is not valid UTF-8", v.String())
		}
		c = canonString(v.String())
	case fk == reflect.Bool && vk == reflect.Bool:
		c = "F"
		if v.Bool() {
			c = "T"
		}
	case isInt(fk) || isUint(fk):
		z := reflect.New(f.typ).Elem()
		switch {
		case isInt(vk) && isInt(fk) && !z.OverflowInt(v.Int()):
			c = canonNumber(float64(v.Int()))
		case isInt(vk) && isUint(fk) && v.Int() >= 0 && !z.OverflowUint(uint64(v.Int())):
			c = canonNumber(float64(v.Int()))
		case isUint(vk) && isUint(fk) && !z.OverflowUint(v.Uint()):
			c = canonNumber(float64(v.Uint()))
		case isUint(vk) && isInt(fk) && v.Uint() <= math.MaxInt64 && !z.OverflowInt(int64(v.Uint())):
			c = canonNumber(float64(v.Uint()))
		case isInt(vk) || isUint(vk):
			return bad("%v (%T) is out of range", value, value)
		default:
			return bad("%v is a %T, not an integer", value, value)
		}
	case fk == reflect.Float32 || fk == reflect.Float64:
		var x float64
		switch {
		case isInt(vk):
			x = float64(v.Int())
		case isUint(vk):
			x = float64(v.Uint())
		case vk == reflect.Float32 || vk == reflect.Float64:
			x = v.Float()
		default:
			return bad("%v is a %T, not a number", value, value)
		}
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return bad("%v cannot be stored as JSON", x)
		}
		if fk == reflect.Float32 {
			// JSON holds a float32 in its shortest 32-bit form; read back
			// as a float64, that is what the index holds.
			x, _ = strconv.ParseFloat(strconv.FormatFloat(x, 'g', -1, 32), 64)
		}
		c = canonNumber(x)
	default:
		return bad("%v is a %T", value, value)
	}
	if f.omitEmpty && v.IsZero() {
		return bad("the zero value %v never matches: omitempty leaves it out of the stored tags", value)
	}
	return c, nil
}

func isInt(k reflect.Kind) bool { return k >= reflect.Int && k <= reflect.Int64 }

func isUint(k reflect.Kind) bool { return k >= reflect.Uint && k <= reflect.Uintptr }

func canonString(s string) string {
	if len(s) > 128 {
		h := sha1.Sum([]byte(s))
		return "h" + hex.EncodeToString(h[:])
	}
	return "s" + s
}

// canonNumber mirrors lib_pool.lua: an integer below 1e15 in decimal, else
// %.17g (Go's 'g' with 17 digits spells it as C does).
func canonNumber(x float64) string {
	if x == math.Trunc(x) && math.Abs(x) < 1e15 {
		return "n" + strconv.FormatInt(int64(x), 10)
	}
	return "n" + strconv.FormatFloat(x, 'g', 17, 64)
}
