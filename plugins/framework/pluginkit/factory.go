package pluginkit

import (
	"encoding/json"

	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
)

// Build is the body of a factory whose plugin is its validated parameters put together: parse
// decodes and validates raw (its errors name the instance), build constructs instance name.
func Build[C any, P fwkplugin.Plugin](name string, raw json.RawMessage,
	parse func(name string, raw json.RawMessage) (C, error), build func(name string, c C) P) (fwkplugin.Plugin, error) {
	c, err := parse(name, raw)
	if err != nil {
		return nil, err
	}
	return build(name, c), nil
}

// TypedName is instance name of pluginType; a plugin built without a name (a test, a tool) is
// named after its type.
func TypedName(pluginType, name string) fwkplugin.TypedName {
	if name == "" {
		name = pluginType
	}
	return fwkplugin.TypedName{Type: pluginType, Name: name}
}
