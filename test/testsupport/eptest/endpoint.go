// Package eptest builds the endpoints plugin unit tests hand to filters, scorers, profile
// handlers and extractors, in place of one hand-written builder per test file. It is apart from
// package testsupport so that suites which must not link GIE (the sidecar's) can use the rest.
package eptest

import (
	"k8s.io/apimachinery/pkg/types"
	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/lib/podmodel"
)

// Spec describes an endpoint for unit tests. Unset fields stay unset, so a test says
// exactly what the plugin under test may read.
type Spec struct {
	Name, Namespace string // the endpoint's NamespacedName
	PodName         string
	Address, Port   string
	// Role, when set, is written as the llm-d.ai/role label (the pod model's key).
	Role   string
	Labels map[string]string
	// Metrics are the endpoint's core metrics; nil means empty metrics unless NoMetrics.
	Metrics   *fwkdl.Metrics
	NoMetrics bool
	// Attributes are put on the endpoint (engine metrics, prefix match, topology...).
	Attributes map[string]fwkdl.Cloneable
}

func (s Spec) metadata() *fwkdl.EndpointMetadata {
	labels := s.Labels
	if s.Role != "" {
		labels = make(map[string]string, len(s.Labels)+1)
		for k, v := range s.Labels {
			labels[k] = v
		}
		labels[podmodel.LabelLLMDRole] = s.Role
	}
	return &fwkdl.EndpointMetadata{NamespacedName: types.NamespacedName{Namespace: s.Namespace, Name: s.Name},
		PodName: s.PodName, Address: s.Address, Port: s.Port, Labels: labels}
}

func (s Spec) metrics() *fwkdl.Metrics {
	switch {
	case s.NoMetrics:
		return nil
	case s.Metrics != nil:
		return s.Metrics
	default:
		return fwkdl.NewMetrics()
	}
}

// Scheduling builds a scheduling endpoint (what filters, scorers and profile handlers receive).
func Scheduling(s Spec) fwksched.Endpoint {
	ep := fwksched.NewEndpoint(s.metadata(), s.metrics(), nil)
	for k, v := range s.Attributes {
		ep.Put(k, v)
	}
	return ep
}

// Data builds a data-layer endpoint (what extractors and admission read).
func Data(s Spec) fwkdl.Endpoint {
	ep := fwkdl.NewEndpoint(s.metadata(), s.metrics())
	for k, v := range s.Attributes {
		ep.GetAttributes().Put(k, v)
	}
	return ep
}
