package pluginkit

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// Validator is implemented by parameter types that check themselves once decoded.
type Validator interface {
	Validate() error
}

// IsEmpty reports whether raw parameters mean "use the defaults": absent, null or {}.
func IsEmpty(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	if len(t) == 0 || string(t) == "null" {
		return true
	}
	var m map[string]json.RawMessage
	return t[0] == '{' && json.Unmarshal(t, &m) == nil && len(m) == 0
}

// Decode decodes a plugin's parameters into into, which holds the defaults on entry.
//
// Absent, null and {} leave into as it is. Anything else must be one JSON object whose fields
// into declares (json tags); an unknown field, a wrong type or trailing data is an error
// naming pluginType, the instance name and the field. When into implements Validator, Validate
// runs afterwards (on the defaults too), and its error is wrapped the same way.
func Decode(pluginType, name string, raw json.RawMessage, into any) error {
	if !IsEmpty(raw) {
		if err := decodeStrict(raw, into); err != nil {
			return Errorf(pluginType, name, "invalid parameters: %w", err)
		}
	}
	if v, ok := into.(Validator); ok {
		if err := v.Validate(); err != nil {
			return Errorf(pluginType, name, "invalid parameters: %w", err)
		}
	}
	return nil
}

// NoParameters is Decode for a plugin that declares none: absent, null and {} are accepted,
// any field is an error naming it.
func NoParameters(pluginType, name string, raw json.RawMessage) error {
	if IsEmpty(raw) {
		return nil
	}
	var fields map[string]json.RawMessage
	if err := decodeStrict(raw, &fields); err != nil {
		return Errorf(pluginType, name, "invalid parameters: %w", err)
	}
	for f := range fields {
		return Errorf(pluginType, name, "takes no parameters, got field %q", f)
	}
	return nil
}

// decodeStrict decodes one JSON object, rejecting unknown fields and trailing data.
func decodeStrict(raw json.RawMessage, into any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(into); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("trailing data after the parameters object")
	}
	return nil
}

// Errorf formats an error about one plugin instance: "<type> "<name>": <message>", so every
// configuration error says which plugin of the list it is about.
func Errorf(pluginType, name, format string, args ...any) error {
	return fmt.Errorf("%s %q: "+format, append([]any{pluginType, name}, args...)...)
}
