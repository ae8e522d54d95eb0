// Package routingheaders writes the routing headers the decode pod's sidecar reads
// (x-prefiller-host-port, x-encoder-hosts-ports, x-pdgate-decoder-port and pdgate's
// prefill-pod hints) from a scheduling result. It is the one writer that
// disagg-profile-handler and the deprecated llm-d PreRequest plugins disagg-headers-handler
// and prefill-header-handler (plugins/requestcontrol/disaggheaders) share, kept in a library so that no
// plugin imports another.
package routingheaders

import (
	"context"
	"strconv"
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/log"
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/framework/pluginkit"
	"github.com/pdgate/pdgate/plugins/lib/pdknobs"
	"github.com/pdgate/pdgate/plugins/lib/podmodel"
	"github.com/pdgate/pdgate/plugins/wire/protocol"
)

// Written describes what Write put on the request, for logs and traces.
type Written struct {
	Prefill  string // host:port of the prefill endpoint, "" when the stage did not run
	Encoders string // comma-joined host:port list, "" when the stage did not run
	Decoder  string // the decode pick's declared engine port, "" when it declares none
}

// Write sets the routing headers from result. Every routing header is first deleted so that a
// value that reached the map by any path (client, earlier plugin) can never survive: a stage
// that did not run leaves its header absent, which the EPP's ext_proc server turns into an
// explicit RemoveHeaders entry. Every value comes from plugins/lib/podmodel, the one reader of pod
// labels, so the writer never forwards a value the pod model refused and every leg goes to
// the pod's model.aibrix.ai/port when it declares one:
//   - prefill: the first endpoint's host:port (IPv6 bracketed), with its SGLang bootstrap
//     port, engine and KV connector when the pod declares them, and an alternate of the same
//     roleset when the profile picked more than one endpoint (the sidecar's one retry);
//   - encode: every endpoint, comma-joined without spaces;
//   - decode: the primary profile's first endpoint's engine port (x-pdgate-decoder-port) when
//     the pod declares a valid model.aibrix.ai/port other than the endpoint's port; the EPP
//     still routes the request to the endpoint's port (the sidecar), which sends its decode
//     leg to this port;
//   - the sidecar knobs of the request's model.aibrix.ai/config profile.
//
// The one exception to the deletion is x-data-parallel-host-port: pd-profile-handler owns it
// and sets it in ProcessResults, before this runs (a client copy never gets here: the EPP's
// ext_proc server drops every routing header a client sends).
func Write(request *fwksched.LLMRequest, result *fwksched.SchedulingResult, prefillProfile, encodeProfile string) Written {
	var w Written
	if request == nil {
		return w
	}
	if request.Headers == nil {
		request.Headers = map[string]string{}
	}
	dropRoutingHeaders(request.Headers)
	if result == nil {
		return w
	}
	if pr := result.ProfileResults[prefillProfile]; pr != nil && len(pr.TargetEndpoints) > 0 && pr.TargetEndpoints[0] != nil &&
		pr.TargetEndpoints[0].GetMetadata() != nil {
		w.Prefill = writePrefill(request.Headers, pr.TargetEndpoints)
	}
	if port := decoderPort(result); port != "" {
		w.Decoder = port
		request.Headers[protocol.HeaderDecoderPort] = port
	}
	if er := result.ProfileResults[encodeProfile]; er != nil && len(er.TargetEndpoints) > 0 {
		parts := make([]string, 0, len(er.TargetEndpoints))
		for _, ep := range er.TargetEndpoints {
			if ep == nil || ep.GetMetadata() == nil {
				continue
			}
			pod := pods.FromEndpoint(logger, ep)
			parts = append(parts, protocol.FormatHostPort(pod.Address, pod.Port))
		}
		if len(parts) > 0 {
			w.Encoders = strings.Join(parts, ",")
			request.Headers[protocol.HeaderEncoderHostsPorts] = w.Encoders
		}
	}
	if v := sidecarKnobs(request, result); v != "" {
		request.Headers[protocol.HeaderSidecarKnobs] = v
	}
	return w
}

// writePrefill writes the prefill headers for eps[0] (non-nil, with metadata) and returns its
// host:port.
func writePrefill(h map[string]string, eps []fwksched.Endpoint) string {
	pod := pods.FromEndpoint(logger, eps[0])
	Report(pod)
	target := protocol.FormatHostPort(pod.Address, pod.Port)
	h[protocol.HeaderPrefillerHostPort] = target
	if pod.BootstrapPortDeclared {
		h[protocol.HeaderPrefillerBootstrapPort] = strconv.Itoa(pod.BootstrapPort)
	}
	if pod.EngineDeclared {
		h[protocol.HeaderPrefillerEngine] = string(pod.Engine)
	}
	if pod.KVConnector != "" {
		h[protocol.HeaderPrefillerKVConnector] = pod.KVConnector
	}
	// The alternate must hand KV over the same way: same roleset (AIBrix pairs within one),
	// same engine, connector and bootstrap port, and a different address.
	for _, ep := range eps[1:] {
		if ep == nil || ep.GetMetadata() == nil {
			continue
		}
		alt := pods.FromEndpoint(logger, ep)
		at := protocol.FormatHostPort(alt.Address, alt.Port)
		if alt.Routable && alt.Roleset == pod.Roleset && alt.Engine == pod.Engine && alt.KVConnector == pod.KVConnector &&
			alt.BootstrapPort == pod.BootstrapPort && at != target {
			h[protocol.HeaderPrefillerAlternateHostPort] = at
			break
		}
	}
	return target
}

// decoderPort is the engine port the decode pick (the primary profile's first endpoint: every
// profile handler makes decode primary) declares in model.aibrix.ai/port, "" when it declares
// none or an invalid one (podmodel refuses it, and Report logs it once).
func decoderPort(result *fwksched.SchedulingResult) string {
	dr := result.ProfileResults[result.PrimaryProfileName]
	if dr == nil || len(dr.TargetEndpoints) == 0 || dr.TargetEndpoints[0] == nil || dr.TargetEndpoints[0].GetMetadata() == nil {
		return ""
	}
	pod := pods.FromEndpoint(logger, dr.TargetEndpoints[0])
	Report(pod)
	// A label naming the port the request is already routed to (the pool's target port: the
	// sidecar, or an engine without one; the chart labels pods so) redirects nothing, and
	// sent on it would make the sidecar call itself.
	if !pod.PortDeclared || pod.Port == dr.TargetEndpoints[0].GetMetadata().Port {
		return ""
	}
	return pod.Port
}

// sidecarKnobs resolves the request's model.aibrix.ai/config profile from the picked pods
// (the model-level config, as the scheduling plugins read it) and formats the sidecar knobs it
// sets; "" when none.
func sidecarKnobs(request *fwksched.LLMRequest, result *fwksched.SchedulingResult) string {
	var buf [4]fwksched.Endpoint // the picks of a request's stages, on the stack
	eps := buf[:0]
	for _, pr := range result.ProfileResults {
		if pr != nil {
			eps = append(eps, pr.TargetEndpoints...)
		}
	}
	cfg := podmodel.ModelConfigOfEndpoints(eps)
	if cfg == nil {
		return ""
	}
	_, prof := cfg.Resolve(protocol.HeaderValue(request.Headers, protocol.HeaderConfigProfile), podmodel.RequestHints(request))
	return pdknobs.SidecarOverrides(prof, func(msg string) {
		logger.Info("AIBrix sidecar knob ignored", "detail", msg)
	}).String()
}

// logger is the package's logger: Write is called from PreRequest hooks of two plugins and
// has no context of its own; each message is logged once per process (podmodel.Report,
// pdknobs' once-per-value warnings).
var logger = log.Log.WithName("routingheaders")

// pods resolves the picked endpoints' pod records once per metadata object (the EPP publishes
// metadata copy-on-write), not on every request.
var pods podmodel.Cache

// Report logs a picked pod's invalid labels once per pod and value.
func Report(pod podmodel.Pod) { podmodel.Report(logger, pod) }

// LogWritten logs the outcome at debug verbosity. It runs on every request: the plugin's name
// and the fields are built only when the level is on (a disabled Info still boxes its
// arguments).
func LogWritten(ctx context.Context, plugin fwkplugin.TypedName, request *fwksched.LLMRequest, w Written) {
	if request == nil {
		return
	}
	if logger := pluginkit.DebugLogger(ctx); logger.Enabled() {
		logger.Info("disaggregation headers written", "plugin", plugin.String(),
			"requestID", request.RequestId, "prefill", w.Prefill, "encoders", w.Encoders, "decoderPort", w.Decoder)
	}
}

// dropRoutingHeaders removes the routing headers Write owns from m in any letter case (header
// maps built from client requests keep the case the client sent), in one pass over m: a pass
// per header name cost 26,000 instructions a request on the EPP's request path.
func dropRoutingHeaders(m map[string]string) {
	for k := range m {
		for _, h := range protocol.RoutingHeaders {
			if h != protocol.HeaderDataParallelHostPort && strings.EqualFold(k, h) {
				delete(m, k)
				break
			}
		}
	}
}
