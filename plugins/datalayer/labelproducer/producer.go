// Package labelproducer is llm-d's label-producer (v0.11, Alpha): it copies pod labels into
// endpoint attributes, as text or as a number, so that attribute consumers
// (endpoint-attribute-weight-scorer, endpoint-attribute-scorer and -filter) can act on what a
// pod's labels say (GPU type, tier, node pool) without a metrics source.
//
// llm-d's producer attaches itself to endpoint-notification-source and stamps endpoints as
// they change; pdgate stamps every candidate before scheduling (PrepareData), which needs no
// data-layer wiring and works with an endpoints file as well as in Kubernetes.
package labelproducer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"

	"sigs.k8s.io/controller-runtime/pkg/log"
	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	fwkrc "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/requestcontrol"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/framework/pluginkit"
	"github.com/pdgate/pdgate/plugins/internal/scalar"
)

// Type is the plugin type name.
const Type = "label-producer"

// Mapping copies one pod label into one attribute.
type Mapping struct {
	Label        string `json:"label"`
	AttributeKey string `json:"attributeKey"`
	// ValueType is "string" (default) or "number".
	ValueType string `json:"valueType"`
}

// Parameters accept both shapes llm-d has shown: one mapping inline (label, attributeKey,
// valueType: the merged PR's form) or a list of them (labels: the later README's form).
type Parameters struct {
	Mapping
	Labels []Mapping `json:"labels"`
}

// Validate checks the parameters once decoded (pluginkit names the plugin in the error).
func (p *Parameters) Validate() error {
	inline := p.Mapping != Mapping{}
	switch {
	case inline && len(p.Labels) > 0:
		return errors.New("parameters label/attributeKey/valueType and labels are exclusive: use one form")
	case inline:
		return p.Mapping.validate("")
	case p.Labels == nil:
		return errors.New("parameter label: required (or a list under labels)")
	case len(p.Labels) == 0:
		return errors.New("parameter labels: must list at least one label")
	}
	keys := map[string]int{}
	for i, m := range p.Labels {
		field := fmt.Sprintf("labels[%d].", i)
		if err := m.validate(field); err != nil {
			return err
		}
		if j, dup := keys[m.AttributeKey]; dup {
			return fmt.Errorf("parameter %sattributeKey: %q is also labels[%d]'s; keys must be unique", field, m.AttributeKey, j)
		}
		keys[m.AttributeKey] = i
	}
	return nil
}

func (m Mapping) validate(field string) error {
	if m.Label == "" {
		return fmt.Errorf("parameter %slabel: required", field)
	}
	if m.AttributeKey == "" {
		return fmt.Errorf("parameter %sattributeKey: required", field)
	}
	if m.ValueType != "" && m.ValueType != "string" && m.ValueType != "number" {
		return fmt.Errorf("parameter %svalueType: %q must be \"string\" or \"number\"", field, m.ValueType)
	}
	return nil
}

// Mappings returns the configured mappings, the inline one as a list of one.
func (p Parameters) Mappings() []Mapping {
	if len(p.Labels) > 0 {
		return p.Labels
	}
	return []Mapping{p.Mapping}
}

// Text is a label copied in string mode. Consumers read it as a fmt.Stringer.
type Text string

// Clone implements fwkdl.Cloneable.
func (t Text) Clone() fwkdl.Cloneable { return t }

// String returns the label's value.
func (t Text) String() string { return string(t) }

// target is one mapping resolved: the label, whether it is a number, and the two keys it is
// written under: the bare attributeKey (consumers that name no producer, as llm-d's merged
// scorer) and "<attributeKey>/<instance>" (consumers that name this producer).
type target struct {
	label  string
	number bool
	keys   [2]string
}

// maxWarned bounds the remembered bad values (pods churn; past it, warnings start over).
const maxWarned = 4096

// Producer is label-producer.
type Producer struct {
	tn      fwkplugin.TypedName
	targets []target

	mu     sync.Mutex
	warned map[string]bool // endpoint, label and value already logged as not a number
}

var _ fwkrc.PrepareDataPlugin = (*Producer)(nil)

// Factory builds the producer.
func Factory(name string, raw json.RawMessage, _ fwkplugin.Handle) (fwkplugin.Plugin, error) {
	var p Parameters
	if err := pluginkit.Decode(Type, name, raw, &p); err != nil {
		return nil, err
	}
	pr := &Producer{tn: pluginkit.TypedName(Type, name), warned: map[string]bool{}}
	for _, m := range p.Mappings() {
		pr.targets = append(pr.targets, target{label: m.Label, number: m.ValueType == "number",
			keys: [2]string{m.AttributeKey, scalar.Key(m.AttributeKey, pr.tn.Name)}})
	}
	return pr, nil
}

// TypedName implements fwkplugin.Plugin.
func (p *Producer) TypedName() fwkplugin.TypedName { return p.tn }

// Produces declares every attribute written.
func (p *Producer) Produces() map[string]any {
	out := make(map[string]any, 2*len(p.targets))
	for _, t := range p.targets {
		var token any = Text("")
		if t.number {
			token = scalar.Value{}
		}
		for _, k := range t.keys {
			out[k] = token
		}
	}
	return out
}

// Consumes declares nothing.
func (p *Producer) Consumes() map[string]any { return nil }

// PrepareRequestData stamps every candidate. A value that is not a number in number mode is
// stored as 0 and logged once per endpoint and value; it is not returned, because an error
// here would stop the data producers after this one for every request.
func (p *Producer) PrepareRequestData(ctx context.Context, _ *fwksched.LLMRequest, eps []fwksched.Endpoint) error {
	for _, ep := range eps {
		if err := p.Stamp(ep); err != nil {
			p.warnOnce(ctx, ep, err)
		}
	}
	return nil
}

// Stamp writes the attributes the endpoint's labels give. A label the pod lacks writes
// nothing (consumers treat the attribute as missing). It returns an error naming every
// number-mode value that is not a finite number; those are stored as 0.
func (p *Producer) Stamp(ep fwksched.Endpoint) error {
	if ep == nil || ep.GetMetadata() == nil {
		return nil
	}
	labels := ep.GetMetadata().Labels
	var errs []error
	for _, t := range p.targets {
		v, ok := labels[t.label]
		if !ok {
			continue
		}
		var val fwkdl.Cloneable = Text(v)
		if t.number {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
				f = 0
				errs = append(errs, fmt.Errorf("label %s=%q is not a number; stored 0 under %s", t.label, v, t.keys[0]))
			}
			val = &scalar.Value{V: f}
		}
		for _, k := range t.keys {
			ep.Put(k, val)
		}
	}
	return errors.Join(errs...)
}

func (p *Producer) warnOnce(ctx context.Context, ep fwksched.Endpoint, err error) {
	id := ep.GetMetadata().NamespacedName.String() + "\x00" + err.Error()
	p.mu.Lock()
	seen := p.warned[id]
	if !seen {
		if len(p.warned) >= maxWarned {
			clear(p.warned)
		}
		p.warned[id] = true
	}
	p.mu.Unlock()
	if !seen {
		log.FromContext(ctx).Error(err, "label-producer: number-mode label is not a number", "plugin", p.tn.String(), "endpoint", ep.GetMetadata().NamespacedName.String())
	}
}
