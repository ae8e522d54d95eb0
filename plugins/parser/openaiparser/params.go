package openaiparser

import (
	"encoding/json"
	"fmt"

	"github.com/pdgate/pdgate/plugins/framework/pluginkit"
)

// Payload modes.
const (
	// ModeMap hands the director a PayloadMap (so model rewrites, the model check and GIE's
	// per-model metrics work unchanged) whose large values are the original JSON bytes.
	ModeMap = "map"
	// ModeRaw hands the director the original bytes (RawPayload): nothing is re-encoded.
	ModeRaw = "raw"
)

// DefaultRawValueBytes is the size above which a top-level value stays undecoded in map mode.
const DefaultRawValueBytes = 1024

// Params are the plugin's parameters.
type Params struct {
	// Payload is "map" (default) or "raw".
	Payload string `json:"payload"`
	// RawValueBytes: in map mode, top-level values whose JSON text is longer than this many
	// bytes stay json.RawMessage instead of being decoded into Go values. 0 means the default.
	RawValueBytes int `json:"rawValueBytes"`
}

// withDefaults fills unset fields.
func (p Params) withDefaults() Params {
	if p.Payload == "" {
		p.Payload = ModeMap
	}
	if p.RawValueBytes == 0 {
		p.RawValueBytes = DefaultRawValueBytes
	}
	return p
}

// validate names the plugin and the offending field.
func (p Params) validate(name string) error {
	switch p.Payload {
	case ModeMap, ModeRaw:
	default:
		return fmt.Errorf("%s %q: parameter payload=%q: must be %q or %q", Type, name, p.Payload, ModeMap, ModeRaw)
	}
	if p.RawValueBytes < 0 {
		return fmt.Errorf("%s %q: parameter rawValueBytes=%d: must be >= 0", Type, name, p.RawValueBytes)
	}
	return nil
}

// parseParams decodes raw parameters strictly (unknown fields are errors).
func parseParams(name string, raw json.RawMessage) (Params, error) {
	var p Params
	if err := pluginkit.Decode(Type, name, raw, &p); err != nil {
		return Params{}, err
	}
	p = p.withDefaults()
	if err := p.validate(name); err != nil {
		return Params{}, err
	}
	return p, nil
}
