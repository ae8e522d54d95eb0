// Package scalar is the numeric endpoint attribute llm-d's generic endpoint-attribute filter
// and scorer read ("<DataType>/<producer>" keys, e.g. GPUUtilization/dcgm-extractor written by
// dcgm-extractor).
package scalar

import (
	"encoding/json"

	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"

	"github.com/pdgate/pdgate/plugins/framework/pluginkit"
)

// Value is one numeric attribute value.
type Value struct{ V float64 }

// Clone implements fwkdl.Cloneable.
func (v *Value) Clone() fwkdl.Cloneable {
	if v == nil {
		return nil
	}
	c := *v
	return &c
}

// Key is llm-d's attribute key string "<attribute>/<producer>".
func Key(attribute, producer string) string { return attribute + "/" + producer }

// ParamError is a reader's configuration error: it names the plugin instance and the
// parameter, so the filter and the scorer word their errors alike.
func ParamError(pluginType, name, field, why string) error {
	return pluginkit.Errorf(pluginType, name, "parameter %s: %s", field, why)
}

// ReaderKey is the key a reader's parameters name. Both halves are required; attrField is the
// parameter that names the attribute, which llm-d's filter and scorer spell differently
// ("attribute", "attributeKey").
func ReaderKey(pluginType, name, attrField, attribute, producer string) (string, error) {
	if attribute == "" {
		return "", ParamError(pluginType, name, attrField, "required")
	}
	if producer == "" {
		return "", ParamError(pluginType, name, "producer", "required")
	}
	return Key(attribute, producer), nil
}

// ReaderParams are a reader plugin's parameters: Source names the attribute and its producer,
// and attrField, the parameter that holds the attribute (see ReaderKey).
type ReaderParams interface {
	Source() (attrField, attribute, producer string)
}

// Reader is what endpoint-attribute-filter and -scorer build first, the same way: the
// instance's name and the key it reads. They embed it.
type Reader struct {
	tn fwkplugin.TypedName
	// Key is the attribute key read (Key(attribute, producer)).
	Key string
}

// ParseReader decodes raw into p (pluginkit.Decode: p holds the defaults) and builds instance
// name of pluginType reading the key p names.
func ParseReader(pluginType, name string, raw json.RawMessage, p ReaderParams) (Reader, error) {
	if err := pluginkit.Decode(pluginType, name, raw, p); err != nil {
		return Reader{}, err
	}
	attrField, attribute, producer := p.Source()
	key, err := ReaderKey(pluginType, name, attrField, attribute, producer)
	if err != nil {
		return Reader{}, err
	}
	return Reader{tn: pluginkit.TypedName(pluginType, name), Key: key}, nil
}

// TypedName implements fwkplugin.Plugin.
func (r *Reader) TypedName() fwkplugin.TypedName { return r.tn }

// ParamError is ParamError for this instance.
func (r *Reader) ParamError(field, why string) error {
	return ParamError(r.tn.Type, r.tn.Name, field, why)
}

// Getter carries attributes (scheduling and data-layer endpoints).
type Getter interface {
	Get(key string) (fwkdl.Cloneable, bool)
}

// Read returns the value under key.
func Read(g Getter, key string) (float64, bool) {
	if g == nil {
		return 0, false
	}
	c, ok := g.Get(key)
	if !ok {
		return 0, false
	}
	v, ok := c.(*Value)
	if !ok || v == nil {
		return 0, false
	}
	return v.V, true
}
