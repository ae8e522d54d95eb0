// Package labelselector implements llm-d's label-selector-filter (Kubernetes LabelSelector
// parameters; deprecated alias by-label-selector) and the deprecated by-label filter.
package labelselector

import (
	"context"
	"encoding/json"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/framework/pluginkit"
	"github.com/pdgate/pdgate/plugins/internal/deprecation"
)

// Plugin type names.
const (
	SelectorType       = "label-selector-filter"
	LegacySelectorType = "by-label-selector"
	ByLabelType        = "by-label"
)

// Selector is label-selector-filter: keeps endpoints whose labels match a Kubernetes
// LabelSelector (matchLabels AND matchExpressions).
type Selector struct {
	typedName fwkplugin.TypedName
	selector  labels.Selector
}

// SelectorFactory creates label-selector-filter.
func SelectorFactory(name string, raw json.RawMessage, handle fwkplugin.Handle) (fwkplugin.Plugin, error) {
	return newSelector(SelectorType, name, raw)
}

// LegacySelectorFactory creates the deprecated by-label-selector alias.
func LegacySelectorFactory(name string, raw json.RawMessage, handle fwkplugin.Handle) (fwkplugin.Plugin, error) {
	deprecation.Once(pluginkit.Context(handle), LegacySelectorType, "Deprecated: by-label-selector is deprecated, use label-selector-filter instead", "plugin", LegacySelectorType)
	return newSelector(LegacySelectorType, name, raw)
}

func newSelector(pluginType, name string, raw json.RawMessage) (*Selector, error) {
	if name == "" {
		return nil, fmt.Errorf("Selector: missing filter name")
	}
	var ls metav1.LabelSelector
	if err := pluginkit.Decode(pluginType, name, raw, &ls); err != nil {
		return nil, fmt.Errorf("%w (parameters are a Kubernetes LabelSelector with matchLabels/matchExpressions)", err)
	}
	sel, err := metav1.LabelSelectorAsSelector(&ls)
	if err != nil {
		return nil, fmt.Errorf("%s %q: invalid label selector: %w", pluginType, name, err)
	}
	return &Selector{typedName: fwkplugin.TypedName{Type: pluginType, Name: name}, selector: sel}, nil
}

// TypedName implements fwkplugin.Plugin.
func (s *Selector) TypedName() fwkplugin.TypedName { return s.typedName }

// String renders the selector.
func (s *Selector) String() string { return s.selector.String() }

// Filter implements fwksched.Filter.
func (s *Selector) Filter(ctx context.Context, _ *fwksched.CycleState, request *fwksched.LLMRequest, endpoints []fwksched.Endpoint) []fwksched.Endpoint {
	return filter(ctx, s.typedName, request, endpoints, func(l map[string]string) bool { return s.selector.Matches(labels.Set(l)) },
		"selector", s.selector.String())
}

// ByLabel is the deprecated by-label filter: keeps endpoints whose label value is one of
// validValues, and endpoints without the label when allowsNoLabel.
type ByLabel struct {
	typedName     fwkplugin.TypedName
	label         string
	valid         map[string]bool
	allowsNoLabel bool
}

// ByLabelParameters are by-label's parameters.
type ByLabelParameters struct {
	Label         string   `json:"label"`
	ValidValues   []string `json:"validValues"`
	AllowsNoLabel bool     `json:"allowsNoLabel"`
}

// ByLabelFactory creates by-label.
func ByLabelFactory(name string, raw json.RawMessage, handle fwkplugin.Handle) (fwkplugin.Plugin, error) {
	deprecation.Once(pluginkit.Context(handle), ByLabelType, "Deprecated: by-label is deprecated, use label-selector-filter instead", "plugin", ByLabelType)
	var p ByLabelParameters
	if err := pluginkit.Decode(ByLabelType, name, raw, &p); err != nil {
		return nil, err
	}
	return NewByLabel(name, p)
}

// NewByLabel validates and builds a by-label filter.
func NewByLabel(name string, p ByLabelParameters) (*ByLabel, error) {
	if name == "" {
		return nil, fmt.Errorf("ByLabel: missing filter name")
	}
	if p.Label == "" {
		return nil, fmt.Errorf("ByLabel: missing label name")
	}
	if len(p.ValidValues) == 0 && !p.AllowsNoLabel {
		return nil, fmt.Errorf("ByLabel: validValues is empty and no label is not allowed")
	}
	f := &ByLabel{typedName: fwkplugin.TypedName{Type: ByLabelType, Name: name}, label: p.Label, valid: map[string]bool{}, allowsNoLabel: p.AllowsNoLabel}
	for _, v := range p.ValidValues {
		f.valid[v] = true
	}
	return f, nil
}

// TypedName implements fwkplugin.Plugin.
func (f *ByLabel) TypedName() fwkplugin.TypedName { return f.typedName }

// Filter implements fwksched.Filter.
func (f *ByLabel) Filter(ctx context.Context, _ *fwksched.CycleState, request *fwksched.LLMRequest, endpoints []fwksched.Endpoint) []fwksched.Endpoint {
	return filter(ctx, f.typedName, request, endpoints, func(l map[string]string) bool {
		v, ok := l[f.label]
		if !ok {
			return f.allowsNoLabel
		}
		return f.valid[v]
	}, "label", f.label)
}

func filter(ctx context.Context, tn fwkplugin.TypedName, request *fwksched.LLMRequest, endpoints []fwksched.Endpoint,
	keep func(map[string]string) bool, kv ...any) []fwksched.Endpoint {
	out := make([]fwksched.Endpoint, 0, len(endpoints))
	for _, ep := range endpoints {
		if ep != nil && ep.GetMetadata() != nil && keep(ep.GetMetadata().Labels) {
			out = append(out, ep)
		}
	}
	if logger := pluginkit.DebugLogger(ctx); logger.Enabled() {
		id := ""
		if request != nil {
			id = request.RequestId
		}
		logger.Info("label filter", append([]any{"plugin", tn.String(), "requestID", id, "in", len(endpoints), "out", len(out)}, kv...)...)
	}
	return out
}
