package report

import (
	"bytes"
	"encoding"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
)

// finiteJSON returns v in a form encoding/json can always write: every NaN or infinite
// float (an empty percentile, max/min over a pod that got nothing, a ratio to a zero
// baseline) becomes null. Benchmark data is full of such values and encoding/json refuses
// them outright, which used to lose a whole run's report at the last step. Field names,
// omitempty, "-", embedded structs and json.Marshaler types follow encoding/json's rules;
// object keys keep their declaration order.
func finiteJSON(v any) (any, error) {
	return finiteValue(reflect.ValueOf(v))
}

var (
	marshalerType     = reflect.TypeFor[json.Marshaler]()
	textMarshalerType = reflect.TypeFor[encoding.TextMarshaler]()
)

func finiteValue(v reflect.Value) (any, error) {
	if !v.IsValid() {
		return nil, nil
	}
	if (v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface) && v.IsNil() {
		return nil, nil
	}
	if v.CanInterface() && v.Type().Implements(marshalerType) {
		// A type with its own encoding (time.Time, Series) decides for itself.
		b, err := v.Interface().(json.Marshaler).MarshalJSON()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", v.Type(), err)
		}
		return json.RawMessage(b), nil
	}
	if v.Kind() != reflect.Pointer && v.CanAddr() && v.CanInterface() && v.Addr().Type().Implements(marshalerType) {
		return finiteValue(v.Addr())
	}
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		return finiteValue(v.Elem())
	case reflect.Float32, reflect.Float64:
		if f := v.Float(); math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, nil
		} else if v.Kind() == reflect.Float32 {
			return float32(f), nil
		} else {
			return f, nil
		}
	case reflect.Struct:
		return finiteStruct(v)
	case reflect.Map:
		return finiteMap(v)
	case reflect.Slice:
		if v.IsNil() {
			return nil, nil
		}
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return v.Bytes(), nil // []byte: base64, as encoding/json writes it
		}
		fallthrough
	case reflect.Array:
		out := make([]any, v.Len())
		for i := range out {
			e, err := finiteValue(v.Index(i))
			if err != nil {
				return nil, err
			}
			out[i] = e
		}
		return out, nil
	case reflect.Bool:
		return v.Bool(), nil
	case reflect.String:
		return v.String(), nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return v.Int(), nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return v.Uint(), nil
	default:
		return nil, fmt.Errorf("unsupported type %s", v.Type())
	}
}

// object is a JSON object whose keys keep their order.
type object []member

type member struct {
	key   string
	value any
}

func (o object) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, m := range o {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(m.key)
		b.Write(k)
		b.WriteByte(':')
		val, err := json.Marshal(m.value)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", m.key, err)
		}
		b.Write(val)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

func finiteStruct(v reflect.Value) (object, error) {
	t := v.Type()
	// A field declared in this struct hides a promoted one of the same name.
	own := map[string]bool{}
	for i := range t.NumField() {
		if name, ok := fieldName(t.Field(i)); ok {
			own[name] = true
		}
	}
	var out object
	for i := range t.NumField() {
		f := t.Field(i)
		fv := v.Field(i)
		if embeddedStruct(f) {
			if fv.Kind() == reflect.Pointer {
				if fv.IsNil() {
					continue
				}
				fv = fv.Elem()
			}
			inner, err := finiteStruct(fv)
			if err != nil {
				return nil, err
			}
			for _, m := range inner {
				if !own[m.key] {
					out = append(out, m)
				}
			}
			continue
		}
		name, ok := fieldName(f)
		if !ok {
			continue
		}
		_, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if strings.Contains(","+opts+",", ",omitempty,") && emptyValue(fv) {
			continue
		}
		e, err := finiteValue(fv)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		out = append(out, member{name, e})
	}
	return out, nil
}

// embeddedStruct reports whether f is an untagged embedded struct whose fields are promoted.
func embeddedStruct(f reflect.StructField) bool {
	tag := f.Tag.Get("json")
	if !f.Anonymous || tag == "-" {
		return false
	}
	if name, _, _ := strings.Cut(tag, ","); name != "" {
		return false
	}
	ft := f.Type
	if ft.Kind() == reflect.Pointer {
		ft = ft.Elem()
	}
	return ft.Kind() == reflect.Struct && !ft.Implements(marshalerType) && !reflect.PointerTo(ft).Implements(marshalerType)
}

// fieldName is the JSON key of a field written as itself (false for skipped fields and
// promoted embeddings).
func fieldName(f reflect.StructField) (string, bool) {
	tag := f.Tag.Get("json")
	if tag == "-" || !f.IsExported() || embeddedStruct(f) {
		return "", false
	}
	if name, _, _ := strings.Cut(tag, ","); name != "" {
		return name, true
	}
	return f.Name, true
}

func finiteMap(v reflect.Value) (any, error) {
	if v.IsNil() {
		return nil, nil
	}
	keys := make([]string, 0, v.Len())
	vals := map[string]reflect.Value{}
	for it := v.MapRange(); it.Next(); {
		k, err := mapKey(it.Key())
		if err != nil {
			return nil, err
		}
		keys = append(keys, k)
		vals[k] = it.Value()
	}
	// encoding/json sorts map keys; so do we, so that two runs' files diff cleanly.
	slices.Sort(keys)
	out := make(object, 0, len(keys))
	for _, k := range keys {
		e, err := finiteValue(vals[k])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", k, err)
		}
		out = append(out, member{k, e})
	}
	return out, nil
}

func mapKey(k reflect.Value) (string, error) {
	if k.Kind() == reflect.String {
		return k.String(), nil
	}
	if k.Type().Implements(textMarshalerType) {
		b, err := k.Interface().(encoding.TextMarshaler).MarshalText()
		return string(b), err
	}
	switch k.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return strconv.FormatInt(k.Int(), 10), nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return strconv.FormatUint(k.Uint(), 10), nil
	}
	return "", fmt.Errorf("unsupported map key type %s", k.Type())
}

// emptyValue is encoding/json's omitempty test.
func emptyValue(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Array, reflect.Map, reflect.Slice, reflect.String:
		return v.Len() == 0
	case reflect.Bool,
		reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64,
		reflect.Interface, reflect.Pointer:
		return v.IsZero()
	}
	return false
}
