// Package dataparallelprofile is llm-d's deprecated data-parallel-profile-handler, honoured so
// llm-d's dp-epp-config.yaml runs unchanged. It runs the one configured profile; the picked
// endpoint is a data-parallel rank (GIE makes one endpoint per InferencePool targetPorts entry,
// "<pod>-rank-<i>"); the handler sends the gateway to the pod's primaryPort (the routing
// sidecar) and names the rank's own host:port in x-data-parallel-host-port, which the sidecar
// dispatches on. llm-d deprecated it for single-profile-handler with Istio >= 1.28.1, which
// routes straight to the rank port; pdgate logs that once.
package dataparallelprofile

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"sigs.k8s.io/controller-runtime/pkg/log"
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/framework/pluginkit"
	"github.com/pdgate/pdgate/plugins/internal/deprecation"
	"github.com/pdgate/pdgate/plugins/wire/protocol"
)

// Type is the plugin type name.
const Type = "data-parallel-profile-handler"

// DefaultPrimaryPort is llm-d's default.
const DefaultPrimaryPort = 8000

// Parameters are llm-d's parameters.
type Parameters struct {
	// PrimaryPort is the port the gateway is sent to (the sidecar's), 1..65535.
	PrimaryPort *int `json:"primaryPort"`
}

// ParseParameters decodes strictly and validates; primaryPort 0 is an error (llm-d would
// route to port "0").
func ParseParameters(name string, raw json.RawMessage) (int, error) {
	var p Parameters
	if err := pluginkit.Decode(Type, name, raw, &p); err != nil {
		return 0, err
	}
	port := DefaultPrimaryPort
	if p.PrimaryPort != nil {
		port = *p.PrimaryPort
	}
	if port < 1 || port > 65535 {
		return 0, fmt.Errorf("%s %q: parameter primaryPort=%d: must be between 1 and 65535", Type, name, port)
	}
	return port, nil
}

// Handler is data-parallel-profile-handler.
type Handler struct {
	tn          fwkplugin.TypedName
	primaryPort string
}

var _ fwksched.ProfileHandler = (*Handler)(nil)

// Factory builds the handler and logs the deprecation once.
func Factory(name string, raw json.RawMessage, handle fwkplugin.Handle) (fwkplugin.Plugin, error) {
	port, err := ParseParameters(name, raw)
	if err != nil {
		return nil, err
	}
	deprecation.Once(pluginkit.Context(handle), Type,
		"Deprecated: "+Type+" is honoured for llm-d configs; use single-profile-handler with Istio >= 1.28.1 (the gateway routes to the rank port directly)",
		"plugin", name)
	return New(name, port), nil
}

// New builds the handler.
func New(name string, primaryPort int) *Handler {
	return &Handler{tn: pluginkit.TypedName(Type, name), primaryPort: strconv.Itoa(primaryPort)}
}

// TypedName implements fwkplugin.Plugin.
func (h *Handler) TypedName() fwkplugin.TypedName { return h.tn }

// Pick runs the single configured profile once; any other number of profiles is an error
// (logged) and schedules nothing, as in llm-d.
func (h *Handler) Pick(ctx context.Context, _ *fwksched.CycleState, _ *fwksched.LLMRequest,
	profiles map[string]fwksched.SchedulerProfile, results map[string]*fwksched.ProfileRunResult) map[string]fwksched.SchedulerProfile {
	if len(profiles) != 1 {
		log.FromContext(ctx).Error(nil, Type+" needs exactly one scheduling profile", "plugin", h.tn.String(), "profiles", len(profiles))
		return map[string]fwksched.SchedulerProfile{}
	}
	if len(results) > 0 {
		return map[string]fwksched.SchedulerProfile{}
	}
	return profiles
}

// CheckProfiles refuses a config with other than one profile at startup (llm-d only finds out
// on the first request).
func (h *Handler) CheckProfiles(names []string) error {
	if len(names) != 1 {
		return fmt.Errorf("%s %q: needs exactly one scheduling profile, the config has %d", Type, h.tn.Name, len(names))
	}
	return nil
}

// ProcessResults writes the first pick's rank host:port into x-data-parallel-host-port and
// returns the picks with their port rewritten to primaryPort.
func (h *Handler) ProcessResults(_ context.Context, _ *fwksched.CycleState, request *fwksched.LLMRequest,
	results map[string]*fwksched.ProfileRunResult) (*fwksched.SchedulingResult, error) {
	if request == nil {
		return nil, fmt.Errorf("request is nil")
	}
	for name, r := range results {
		if r == nil || len(r.TargetEndpoints) == 0 {
			return nil, fmt.Errorf("profile %q found no endpoint", name)
		}
		md := r.TargetEndpoints[0].GetMetadata()
		if request.Headers == nil {
			request.Headers = map[string]string{}
		}
		request.Headers[protocol.HeaderDataParallelHostPort] = protocol.FormatHostPort(md.Address, md.Port)
		out := &fwksched.ProfileRunResult{}
		for _, ep := range r.TargetEndpoints {
			info := ep.GetMetadata().Clone()
			info.Port = h.primaryPort
			out.TargetEndpoints = append(out.TargetEndpoints, fwksched.NewEndpoint(info, ep.GetMetrics().Clone(), ep.Clone()))
		}
		return &fwksched.SchedulingResult{PrimaryProfileName: name, ProfileResults: map[string]*fwksched.ProfileRunResult{name: out}}, nil
	}
	return nil, fmt.Errorf("no profile ran")
}
