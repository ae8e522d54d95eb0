// Package disaggheaders writes the routing headers the decode pod's sidecar reads
// (x-prefiller-host-port, x-encoder-hosts-ports and pdgate's prefill-pod hints) from a
// scheduling result. It holds the shared writer used by disagg-profile-handler, and the two
// deprecated llm-d PreRequest plugins disagg-headers-handler and prefill-header-handler.
package disaggheaders

import (
	"context"
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/log"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/podmodel"
	"github.com/pdgate/pdgate/plugins/protocol"
)

// Labels read from the picked prefill endpoint. The EPP mirrors pod annotations into endpoint
// labels under protocol.AnnotationLabelPrefix, so the annotation form is read first.
const (
	LabelEngine          = "model.aibrix.ai/engine"
	LabelGIEEngineType   = "inference.networking.k8s.io/engine-type"
	LabelKVConnectorType = "model.aibrix.ai/kv-connector-type"
	KeyBootstrapPort     = "model.aibrix.ai/sglang-bootstrap-port"
)

// Written describes what Write put on the request, for logs and traces.
type Written struct {
	Prefill  string // host:port of the prefill endpoint, "" when the stage did not run
	Encoders string // comma-joined host:port list, "" when the stage did not run
}

// Write sets the routing headers from result. Every routing header is first deleted so that a
// value that reached the map by any path (client, earlier plugin) can never survive: a stage
// that did not run leaves its header absent, which the EPP's ext_proc server turns into an
// explicit RemoveHeaders entry. When a prefill endpoint was picked, the first one is written
// (IPv6 bracketed) together with its SGLang bootstrap port, engine and KV connector when the
// pod carries them; all encode endpoints are written comma-joined without spaces. The one
// exception to the deletion is x-data-parallel-host-port: pd-profile-handler owns it and sets it
// in ProcessResults, before this runs (a client copy never gets here: the EPP's ext_proc server
// drops every routing header a client sends).
func Write(request *fwksched.LLMRequest, result *fwksched.SchedulingResult, prefillProfile, encodeProfile string) Written {
	var w Written
	if request == nil {
		return w
	}
	if request.Headers == nil {
		request.Headers = map[string]string{}
	}
	for _, h := range protocol.RoutingHeaders {
		if h != protocol.HeaderDataParallelHostPort {
			deleteFold(request.Headers, h)
		}
	}
	if result == nil {
		return w
	}
	if pr := result.ProfileResults[prefillProfile]; pr != nil && len(pr.TargetEndpoints) > 0 && pr.TargetEndpoints[0] != nil {
		md := pr.TargetEndpoints[0].GetMetadata()
		if md != nil {
			w.Prefill = protocol.FormatHostPort(md.Address, md.Port)
			request.Headers[protocol.HeaderPrefillerHostPort] = w.Prefill
			if v := labelOrAnnotation(md.Labels, KeyBootstrapPort); v != "" {
				request.Headers[protocol.HeaderPrefillerBootstrapPort] = v
			}
			if v := firstLabel(md.Labels, LabelEngine, protocol.AnnotationLabelPrefix+LabelEngine, LabelGIEEngineType); v != "" {
				// podmodel's spelling (vllm, sglang, trtllm) when it knows the engine.
				if e, ok := podmodel.ParseEngine(v); ok {
					v = string(e)
				}
				request.Headers[protocol.HeaderPrefillerEngine] = v
			}
			if v := labelOrAnnotation(md.Labels, LabelKVConnectorType); v != "" {
				request.Headers[protocol.HeaderPrefillerKVConnector] = v
			}
		}
	}
	if er := result.ProfileResults[encodeProfile]; er != nil && len(er.TargetEndpoints) > 0 {
		parts := make([]string, 0, len(er.TargetEndpoints))
		for _, ep := range er.TargetEndpoints {
			if ep == nil || ep.GetMetadata() == nil {
				continue
			}
			parts = append(parts, protocol.FormatHostPort(ep.GetMetadata().Address, ep.GetMetadata().Port))
		}
		if len(parts) > 0 {
			w.Encoders = strings.Join(parts, ",")
			request.Headers[protocol.HeaderEncoderHostsPorts] = w.Encoders
		}
	}
	return w
}

// LogWritten logs the outcome at debug verbosity.
func LogWritten(ctx context.Context, plugin string, request *fwksched.LLMRequest, w Written) {
	if request == nil {
		return
	}
	log.FromContext(ctx).V(1).Info("disaggregation headers written", "plugin", plugin,
		"requestID", request.RequestId, "prefill", w.Prefill, "encoders", w.Encoders)
}

func labelOrAnnotation(labels map[string]string, key string) string {
	return firstLabel(labels, protocol.AnnotationLabelPrefix+key, key)
}

func firstLabel(labels map[string]string, keys ...string) string {
	for _, k := range keys {
		if v := strings.TrimSpace(labels[k]); v != "" {
			return v
		}
	}
	return ""
}

// deleteFold removes key from m in any letter case: header maps built from client requests
// keep the case the client sent.
func deleteFold(m map[string]string, key string) {
	delete(m, key)
	for k := range m {
		if strings.EqualFold(k, key) {
			delete(m, k)
		}
	}
}
