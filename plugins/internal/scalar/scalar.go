// Package scalar is the numeric endpoint attribute llm-d's generic endpoint-attribute filter
// and scorer read ("<DataType>/<producer>" keys, e.g. GPUUtilization/dcgm-extractor written by
// dcgm-extractor).
package scalar

import fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"

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
