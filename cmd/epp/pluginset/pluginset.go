// Package pluginset registers every plugin type the pdgate EPP knows (GIE's in-tree plugins,
// then pdgate's) and loads EndpointPickerConfig documents of both accepted apiVersions. The EPP
// and `pdgate validate` share it so that what validates is exactly what runs.
package pluginset

import (
	"fmt"
	"regexp"
	"sync"

	"github.com/go-logr/logr"
	"sigs.k8s.io/yaml"

	configapi "sigs.k8s.io/gateway-api-inference-extension/apix/config/v1alpha1"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/config/loader"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/datalayer"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/flowcontrol"
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"

	"github.com/pdgate/pdgate/plugins"
)

// APIVersion values an EndpointPickerConfig may carry.
const (
	GIEAPIVersion  = "inference.networking.x-k8s.io/v1alpha1"
	LLMDAPIVersion = "llm-d.ai/v1alpha1"
	// LLMDV1APIVersion is the apiVersion llm-d's deploy configs carry since they left alpha;
	// the schema is the same.
	LLMDV1APIVersion = "llm-d.ai/v1"
)

var once sync.Once

// RegisterAll registers GIE's feature gates and in-tree plugins, then every pdgate plugin, so
// that a pdgate type never gets silently replaced by an in-tree one. It is idempotent.
func RegisterAll() {
	once.Do(func() {
		loader.RegisterFeatureGate(datalayer.ExperimentalDatalayerFeatureGate)
		loader.RegisterFeatureGate(datalayer.EnableLegacyMetricsFeatureGate)
		loader.RegisterFeatureGate(flowcontrol.FeatureGate)
		for _, r := range inTree {
			fwkplugin.Register(r.typeName, r.factory)
		}
		plugins.RegisterAll()
	})
}

// InTreeTypeNames lists the GIE in-tree plugin types the EPP registers, in registration order.
func InTreeTypeNames() []string {
	out := make([]string, len(inTree))
	for i, r := range inTree {
		out[i] = r.typeName
	}
	return out
}

var apiVersionLine = regexp.MustCompile(`("?apiVersion"?\s*:\s*)(["']?)llm-d\.ai/v1(?:alpha1)?(["']?)`)

// LoadRaw decodes a config (phase one of GIE's loader). llm-d's apiVersion is rewritten to
// GIE's and llm-d's newer keys are mapped onto GIE's schema (adaptSchema, llmdschema.go)
// before decoding; everything else stays under GIE's strict decoder. An empty input yields
// GIE's default config.
func LoadRaw(configBytes []byte, logger logr.Logger) (*configapi.EndpointPickerConfig, map[string]bool, error) {
	RegisterAll()
	llmd := false
	if len(configBytes) > 0 {
		v := apiVersionOf(configBytes)
		llmd = v == LLMDAPIVersion || v == LLMDV1APIVersion
	}
	rewritten, err := normalizeAPIVersion(configBytes)
	if err != nil {
		return nil, nil, err
	}
	if rewritten, err = adaptSchema(rewritten, llmd, logger); err != nil {
		return nil, nil, err
	}
	raw, gates, err := loader.LoadRawConfig(rewritten, logger)
	if err != nil {
		return nil, nil, fmt.Errorf("config: %w", err)
	}
	return raw, gates, nil
}

func normalizeAPIVersion(b []byte) ([]byte, error) {
	if len(b) == 0 {
		return b, nil
	}
	var head header
	// Lenient here on purpose: only the apiVersion matters; GIE's strict decoder runs next.
	if err := yaml.Unmarshal(b, &head); err != nil {
		return nil, fmt.Errorf("config: not a YAML/JSON document: %w", err)
	}
	switch head.APIVersion {
	case GIEAPIVersion, "":
		return b, nil
	case LLMDAPIVersion, LLMDV1APIVersion:
		// Rewrite the occurrence that is the document's apiVersion: the text may also appear
		// inside a string or a plugin parameter, which must stay untouched.
		for _, loc := range apiVersionLine.FindAllSubmatchIndex(b, -1) {
			out := make([]byte, 0, len(b)+32)
			out = append(out, b[:loc[3]]...)
			out = append(out, b[loc[4]:loc[5]]...)
			out = append(out, GIEAPIVersion...)
			out = append(out, b[loc[6]:loc[7]]...)
			out = append(out, b[loc[1]:]...)
			if apiVersionOf(out) == GIEAPIVersion {
				return out, nil
			}
		}
		return nil, fmt.Errorf("config: apiVersion %s found but not rewritable; write it as a plain 'apiVersion: %s' line", head.APIVersion, head.APIVersion)
	default:
		return nil, fmt.Errorf("config: apiVersion %q is not supported; use %s, %s or %s", head.APIVersion, GIEAPIVersion, LLMDAPIVersion, LLMDV1APIVersion)
	}
}

type header struct {
	APIVersion string `json:"apiVersion"`
}

func apiVersionOf(b []byte) string {
	var h header
	if yaml.Unmarshal(b, &h) != nil {
		return ""
	}
	return h.APIVersion
}
