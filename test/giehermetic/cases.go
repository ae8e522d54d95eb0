// Package giehermetic holds GIE v1.5.0's hermetic integration cases (test/integration/epp/
// common_tests.go and hermetic_test.go in the GIE module) as data pdgate's suites share: GIE's
// test configs, the objects of its hermetic manifest, its pod states, its request sequences and
// its exact expected ext_proc responses and metrics, plus the reduction of an ext_proc exchange
// to what it means to the gateway, the client and the model server (Outcome), which is where
// pdgate's documented differences (cmd/epp/README.md) are normalised.
//
// test/conformance (stock GIE and pdgate in process) and test/integration/hermetic (bin/epp in
// Kubernetes mode, black-box) use it. It is a test helper: it builds protobuf messages and
// Kubernetes objects, and never imports testing.
package giehermetic

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	envoyCorev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extProcPb "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	envoyTypePb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/gateway-api-inference-extension/apix/v1alpha2"
	reqcommon "sigs.k8s.io/gateway-api-inference-extension/pkg/common/request"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/metadata"
	"sigs.k8s.io/gateway-api-inference-extension/test/integration"
)

// PoolName is the InferencePool of GIE's hermetic manifest.
const PoolName = "vllm-qwen3-32b-pool"

// Model names of GIE's hermetic suite.
const (
	ModelMyModel         = "my-model"
	ModelMyModelTarget   = "my-model-12345"
	ModelSQLLora         = "sql-lora"
	ModelSQLLoraTarget   = "sql-lora-1fdg2"
	ModelSheddable       = "sql-lora-sheddable"
	ModelSheddableTarget = "sql-lora-1fdg3"
	ModelDirect          = "direct-model"
	ModelToBeWritten     = "model-to-be-rewritten"
	ModelAfterRewrite    = "rewritten-model"
	ObjectivePriority4   = "inference-objective-with-priority-4"
)

// DefaultConfig is GIE's hermetic default config (test/integration/epp/testdata/
// default-config.yaml in the GIE module).
const DefaultConfig = `apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
  - type: queue-scorer
  - type: kv-cache-utilization-scorer
  - type: prefix-cache-scorer
  - type: lora-affinity-scorer
  - type: openai-parser
schedulingProfiles:
  - name: default
    plugins:
      - pluginRef: queue-scorer
      - pluginRef: kv-cache-utilization-scorer
      - pluginRef: prefix-cache-scorer
      - pluginRef: lora-affinity-scorer
parser:
  pluginRef: openai-parser
featureGates:
  - enableLegacyMetrics
`

// PassthroughConfig is the config of GIE's "passthrough parser success" case.
const PassthroughConfig = `apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
  - type: queue-scorer
  - type: kv-cache-utilization-scorer
  - type: passthrough-parser
schedulingProfiles:
  - name: default
    plugins:
      - pluginRef: queue-scorer
      - pluginRef: kv-cache-utilization-scorer
parser:
  pluginRef: passthrough-parser
featureGates:
  - enableLegacyMetrics
`

func prio(p int) *int { return &p }

// Objectives are the InferenceObjectives of GIE's hermetic manifest
// (test/testdata/inferencepool-with-model-hermetic.yaml in the GIE module) in namespace ns, as
// typed objects for in-process datastores (a suite with an API server creates the file itself).
func Objectives(ns string) []*v1alpha2.InferenceObjective {
	obj := func(name string, priority *int) *v1alpha2.InferenceObjective {
		return &v1alpha2.InferenceObjective{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: v1alpha2.InferenceObjectiveSpec{Priority: priority,
				PoolRef: v1alpha2.PoolObjectReference{Name: PoolName}},
		}
	}
	return []*v1alpha2.InferenceObjective{
		obj(ModelSQLLora, prio(2)),
		obj(ModelSheddable, nil),
		obj(ModelMyModel, prio(2)),
		obj(ModelDirect, prio(2)),
		obj(ObjectivePriority4, prio(4)),
	}
}

// Rewrite is the manifest's InferenceModelRewrite "rewrite-test" in namespace ns.
func Rewrite(ns string) *v1alpha2.InferenceModelRewrite {
	return &v1alpha2.InferenceModelRewrite{
		ObjectMeta: metav1.ObjectMeta{Name: "rewrite-test", Namespace: ns},
		Spec: v1alpha2.InferenceModelRewriteSpec{
			PoolRef: &v1alpha2.PoolObjectReference{Name: PoolName},
			Rules: []v1alpha2.InferenceModelRewriteRule{{
				Matches: []v1alpha2.Match{{Model: &v1alpha2.ModelMatch{Value: ModelToBeWritten}}},
				Targets: []v1alpha2.TargetModel{{ModelRewrite: ModelAfterRewrite}},
			}},
		},
	}
}

// PodState is one model-server pod: GIE's hermetic P(index, queue, kv, models...).
type PodState struct {
	Index        int
	QueueSize    int
	KVCacheUsage float64
	ActiveModels []string
}

// P mirrors GIE's hermetic P(): pod-<index>, GIE's 192.168.1.<index+1>:8000.
func P(idx, queue int, kv float64, models ...string) PodState {
	return PodState{Index: idx, QueueSize: queue, KVCacheUsage: kv, ActiveModels: models}
}

// Name is the pod's name in GIE's suite.
func (p PodState) Name() string { return fmt.Sprintf("pod-%d", p.Index) }

// ResponseOnly is GIE's ReqResponseOnly: the response phase as Envoy sends it to ext_proc,
// response headers as raw values, then the body frames, the last one ending the stream.
func ResponseOnly(headers map[string]string, chunks ...string) []*extProcPb.ProcessingRequest {
	hs := &envoyCorev3.HeaderMap{}
	for k, v := range headers {
		hs.Headers = append(hs.Headers, &envoyCorev3.HeaderValue{Key: k, RawValue: []byte(v)})
	}
	out := []*extProcPb.ProcessingRequest{{Request: &extProcPb.ProcessingRequest_ResponseHeaders{
		ResponseHeaders: &extProcPb.HttpHeaders{Headers: hs}}}}
	for i, c := range chunks {
		out = append(out, &extProcPb.ProcessingRequest{Request: &extProcPb.ProcessingRequest_ResponseBody{
			ResponseBody: &extProcPb.HttpBody{Body: []byte(c), EndOfStream: i == len(chunks)-1}}})
	}
	return out
}

// Case is one case of GIE's hermetic suite, with GIE's exact expectations.
type Case struct {
	Name string
	// ConfigText is the case's EndpointPickerConfig; empty: DefaultConfig.
	ConfigText string
	Requests   []*extProcPb.ProcessingRequest
	Pods       []PodState
	// WantResponses are GIE's expected ext_proc responses, the first len(WantResponses) the
	// stream returns (GIE's harness reads no more). Nil: GIE asserts nothing about them.
	WantResponses []*extProcPb.ProcessingResponse
	// WantMetrics are GIE's expected metric families in Prometheus text form, by name,
	// compared like GIE's GatherAndCompare (the whole family, HELP and TYPE included).
	WantMetrics map[string]string
	// WaitForModel is the objective GIE waits for before sending (default ModelMyModel).
	WaitForModel string
	// RequiresCRDs: the case needs GIE's InferenceModelRewrite.
	RequiresCRDs bool
	// WantSpans are GIE's expected OpenTelemetry spans.
	WantSpans []string
}

// Config is the case's config text.
func (c Case) Config() string {
	if c.ConfigText == "" {
		return DefaultConfig
	}
	return c.ConfigText
}

// GIEAddress is where GIE's suite puts pod index i: 192.168.1.<i+1>:8000.
func GIEAddress(i int) string { return fmt.Sprintf("192.168.1.%d:8000", i+1) }

// Cases are GIE v1.5.0's commonTestCases then hermeticTests (its "Standard" execution mode,
// CRDs installed, so priorities are the objectives'), in GIE's order. GIE's list holds "no
// backend pods available" and "request missing model field" twice (common and hermetic, equal);
// they appear once. addr places pod index i (GIE: GIEAddress); subset hints and expected
// destinations use it, including index 98 for GIE's 192.168.1.99:8000, a pod that does not
// exist.
func Cases(addr func(podIndex int) string) []Case {
	logger := logr.Discard()
	return []Case{
		// --- common_tests.go ---
		{
			Name:          "select lower queue and kv cache",
			Requests:      integration.ReqLLM(logger, "test1", ModelMyModel, ModelMyModelTarget),
			Pods:          []PodState{P(0, 3, 0.2), P(1, 0, 0.1), P(2, 10, 0.2)},
			WantResponses: ExpectRouteTo(addr(1), ModelMyModelTarget, "test1"),
			WantMetrics: map[string]string{
				"inference_objective_request_total": MetricReqTotal(ModelMyModel, ModelMyModelTarget, 2),
				"inference_pool_ready_pods":         MetricReadyPods(3),
			},
			WantSpans: []string{"gateway.request", "gateway.request_orchestration"},
		},
		{
			Name:          "select active lora, low queue",
			Requests:      integration.ReqLLM(logger, "test2", ModelSQLLora, ModelSQLLoraTarget),
			Pods:          []PodState{P(0, 0, 0.2, "foo", "bar"), P(1, 0, 0.1, "foo", ModelSQLLoraTarget), P(2, 10, 0.2, "foo", "bar")},
			WantResponses: ExpectRouteTo(addr(1), ModelSQLLoraTarget, "test2"),
			WantMetrics: map[string]string{
				"inference_objective_request_total": MetricReqTotal(ModelSQLLora, ModelSQLLoraTarget, 2),
			},
		},
		{
			Name:     "no backend pods available",
			Requests: integration.ReqHeaderOnly(map[string]string{"content-type": "application/json"}),
			WantResponses: ExpectReject(envoyTypePb.StatusCode_InternalServerError,
				"inference error: Internal - no pods available in datastore"),
		},
		{
			Name:     "request missing model field",
			Requests: integration.ReqRaw(map[string]string{"content-type": "application/json"}, `{"prompt":"hello world"}`),
			WantResponses: ExpectReject(envoyTypePb.StatusCode_BadRequest,
				"inference error: BadRequest - model not found in request body"),
		},
		// --- hermetic_test.go ---
		{
			Name:          "select lora despite higher kv cache (affinity)",
			Requests:      integration.ReqLLM(logger, "test3", ModelSQLLora, ModelSQLLoraTarget),
			Pods:          []PodState{P(0, 10, 0.2, "foo", "bar"), P(1, 10, 0.4, "foo", ModelSQLLoraTarget), P(2, 10, 0.3, "foo")},
			WantResponses: ExpectRouteTo(addr(1), ModelSQLLoraTarget, "test3"),
			WantMetrics: map[string]string{
				"inference_objective_request_total": MetricReqTotal(ModelSQLLora, ModelSQLLoraTarget, 2),
			},
		},
		{
			Name:       "passthrough parser success",
			ConfigText: PassthroughConfig,
			Requests: integration.ReqRaw(map[string]string{
				"hi": "mom", reqcommon.RequestIdHeaderKey: "test-request-id", metadata.ObjectiveKey: ModelMyModel,
			}, "passthrough-parser"),
			Pods:          []PodState{P(0, 3, 0.2), P(1, 0, 0.1), P(2, 10, 0.2)},
			WantResponses: ExpectPassthroughRouteTo(addr(1), []byte("passthrough-parser")),
			WantMetrics: map[string]string{
				"inference_objective_request_total": MetricReqTotal("", "", 2),
				"inference_pool_ready_pods":         MetricReadyPods(3),
			},
		},
		{
			Name:          "do not shed requests by default",
			Requests:      integration.ReqLLM(logger, "test4", ModelSQLLora, ModelSQLLoraTarget),
			Pods:          []PodState{P(0, 6, 0.2, "foo", "bar", ModelSQLLoraTarget), P(1, 0, 0.85, "foo"), P(2, 10, 0.9, "foo")},
			WantResponses: ExpectRouteTo(addr(0), ModelSQLLoraTarget, "test4"),
			WantMetrics: map[string]string{
				"inference_objective_request_total": MetricReqTotal(ModelSQLLora, ModelSQLLoraTarget, 2),
			},
		},
		{
			Name:     "invalid json body",
			Requests: integration.ReqRaw(map[string]string{"hi": "mom"}, "no healthy upstream"),
			Pods:     []PodState{P(0, 0, 0.2, "foo", "bar")},
			WantResponses: ExpectReject(envoyTypePb.StatusCode_BadRequest,
				"inference error: BadRequest - error unmarshaling request bodyMap: invalid character 'o' in literal null (expecting 'u')"),
		},
		{
			Name: "split body across chunks",
			Requests: integration.ReqRaw(map[string]string{
				"hi": "mom", metadata.ObjectiveKey: ModelSheddable, metadata.ModelNameRewriteKey: ModelSheddableTarget,
				reqcommon.RequestIdHeaderKey: "test-request-id",
			}, `{"max_tokens":100,"model":"sql-lo`, `ra-sheddable","prompt":"test6","temperature":0}`),
			Pods:          []PodState{P(0, 4, 0.2, "foo", "bar", ModelSheddableTarget), P(1, 4, 0.85, "foo", ModelSheddableTarget)},
			WantResponses: ExpectRouteTo(addr(0), ModelSheddableTarget, "test6"),
			WantMetrics: map[string]string{
				"inference_objective_request_total": MetricReqTotal(ModelSheddable, ModelSheddableTarget, 0),
			},
		},
		{
			Name: "subsetting: select best from subset",
			Requests: integration.GenerateStreamedRequestSet(logger, "test2", ModelSQLLora, ModelSQLLoraTarget,
				[]string{addr(0), addr(1), addr(2)}),
			Pods:          []PodState{P(0, 0, 0.2, "foo"), P(1, 0, 0.1, "foo", ModelSQLLoraTarget), P(2, 10, 0.2, "foo")},
			WantResponses: ExpectRouteTo(addr(1), ModelSQLLoraTarget, "test2"),
		},
		{
			Name:          "subsetting: partial match",
			Requests:      integration.GenerateStreamedRequestSet(logger, "test2", ModelSQLLora, ModelSQLLoraTarget, []string{addr(2)}),
			Pods:          []PodState{P(0, 0, 0.2, "foo"), P(1, 0, 0.1, "foo", ModelSQLLoraTarget), P(2, 10, 0.2, "foo")},
			WantResponses: ExpectRouteTo(addr(2), ModelSQLLoraTarget, "test2"),
		},
		{
			Name:     "subsetting: no pods match",
			Requests: integration.GenerateStreamedRequestSet(logger, "test2", ModelSQLLora, ModelSQLLoraTarget, []string{addr(98)}),
			Pods:     []PodState{P(0, 0, 0.2, "foo"), P(1, 0, 0.1, "foo", ModelSQLLoraTarget)},
			WantResponses: ExpectReject(envoyTypePb.StatusCode_ServiceUnavailable,
				"inference error: ServiceUnavailable - failed to find endpoint candidates for serving the request"),
		},
		{
			Name: "passthrough: model not in objectives",
			Requests: integration.ReqRaw(map[string]string{
				"hi": "mom", metadata.ObjectiveKey: ModelDirect, metadata.ModelNameRewriteKey: ModelDirect,
				reqcommon.RequestIdHeaderKey: "test-request-id",
			}, `{"max_tokens":100,"model":"direct-`, `model","prompt":"test6","temperature":0}`),
			Pods:          []PodState{P(0, 4, 0.2, "foo", "bar", ModelSheddableTarget)},
			WantResponses: ExpectRouteTo(addr(0), ModelDirect, "test6"),
			WantMetrics: map[string]string{
				"inference_objective_request_total": MetricReqTotal(ModelDirect, ModelDirect, 2),
			},
		},
		{
			Name:          "rewrite request model",
			Requests:      integration.ReqLLM(logger, "test-rewrite", ModelToBeWritten, ModelToBeWritten),
			Pods:          []PodState{P(0, 0, 0.1, "foo", ModelAfterRewrite)},
			WantResponses: ExpectRouteTo(addr(0), ModelAfterRewrite, "test-rewrite"),
			WantMetrics: map[string]string{
				"inference_objective_request_total": MetricReqTotal(ModelToBeWritten, ModelAfterRewrite, 0),
			},
			RequiresCRDs: true,
		},
		{
			Name:     "protocol: simple GET (header only)",
			Requests: integration.ReqHeaderOnly(map[string]string{"content-type": "text/event-stream", "status": "200"}),
			Pods:     []PodState{P(0, 0, 0, "foo")},
			// GIE expects no response at all (its harness reads none).
		},
		{
			Name: "response buffering: multi-chunk JSON",
			Requests: ResponseOnly(map[string]string{"content-type": "application/json"},
				`{"max_tokens":100,"model":"sql-lo`, `ra-sheddable","prompt":"test6","temperature":0}`),
			Pods: []PodState{P(0, 4, 0.2, ModelSheddableTarget)},
			WantResponses: ExpectBufferResp(
				fmt.Sprintf(`{"max_tokens":100,"model":%q,"prompt":"test6","temperature":0}`, ModelSheddable), "application/json"),
		},
		{
			Name:          "response buffering: invalid JSON",
			Requests:      ResponseOnly(map[string]string{"content-type": "application/json"}, "no healthy upstream"),
			Pods:          []PodState{P(0, 4, 0.2, ModelSheddableTarget)},
			WantResponses: ExpectBufferResp("no healthy upstream", "application/json"),
		},
		{
			Name: "response buffering: empty EOS chunk (JSON)",
			Requests: ResponseOnly(map[string]string{"content-type": "application/json"},
				`{"max_tokens":100,"model":"sql-lora-sheddable","prompt":"test6","temperature":0}`, ""),
			Pods: []PodState{P(0, 4, 0.2, ModelSheddableTarget)},
			WantResponses: ExpectBufferResp(
				fmt.Sprintf(`{"max_tokens":100,"model":%q,"prompt":"test6","temperature":0}`, ModelSheddable), "application/json"),
		},
		{
			Name: "response streaming: SSE token counting",
			Requests: ResponseOnly(map[string]string{"content-type": "text/event-stream", "status": "200"},
				`data: {}`,
				`data: {"usage":{"prompt_tokens":7,"total_tokens":17,"completion_tokens":10}}`+"\n"+`data: [DONE]`,
				""),
			Pods:         []PodState{P(0, 4, 0.2, ModelSheddableTarget)},
			WaitForModel: ModelSheddable,
			WantResponses: ExpectStreamResp(
				`data: {}`,
				`data: {"usage":{"prompt_tokens":7,"total_tokens":17,"completion_tokens":10}}`+"\n"+`data: [DONE]`,
				""),
			// Labels are empty because the request phase was skipped.
			WantMetrics: map[string]string{"inference_objective_input_tokens": metricInputTokens7},
		},
	}
}

// --- GIE's expectation builders (common_tests.go) ---

func routeResponse(endpoint string, body []byte) []*extProcPb.ProcessingResponse {
	return integration.NewRequestBufferedResponse(endpoint, body,
		&envoyCorev3.HeaderValueOption{Header: &envoyCorev3.HeaderValue{Key: "hi", RawValue: []byte("mom")}},
		&envoyCorev3.HeaderValueOption{Header: &envoyCorev3.HeaderValue{Key: reqcommon.RequestIdHeaderKey, RawValue: []byte("test-request-id")}},
	)
}

// ExpectRouteTo is GIE's ExpectRouteTo: routed to endpoint, the body re-encoded with the target
// model.
func ExpectRouteTo(endpoint, targetModel, prompt string) []*extProcPb.ProcessingResponse {
	j, _ := json.Marshal(map[string]any{"max_tokens": 100, "model": targetModel, "prompt": prompt, "temperature": 0})
	return routeResponse(endpoint, j)
}

// ExpectPassthroughRouteTo is GIE's ExpectPassthroughRouteTo: routed, body unparsed.
func ExpectPassthroughRouteTo(endpoint string, raw []byte) []*extProcPb.ProcessingResponse {
	return routeResponse(endpoint, raw)
}

// ExpectReject is GIE's ExpectReject: an immediate response with code and body.
func ExpectReject(code envoyTypePb.StatusCode, msg string) []*extProcPb.ProcessingResponse {
	return integration.NewImmediateErrorResponse(code, msg)
}

// DebugResponseHeader is GIE's debugging response header, which pdgate drops on purpose.
const DebugResponseHeader = "x-went-into-resp-headers"

func headerOpt(k, v string) *envoyCorev3.HeaderValueOption {
	return &envoyCorev3.HeaderValueOption{Header: &envoyCorev3.HeaderValue{Key: k, RawValue: []byte(v)}}
}

// ExpectBufferResp is GIE's ExpectBufferResp: response headers echoed with the debugging
// header, the whole body in one frame.
func ExpectBufferResp(body, contentType string) []*extProcPb.ProcessingResponse {
	return integration.NewResponseBufferedResponse(body, contentType != "application/grpc",
		headerOpt(DebugResponseHeader, "true"), headerOpt("content-type", contentType))
}

// ExpectStreamResp is GIE's ExpectStreamResp: SSE headers echoed with the debugging header,
// every chunk passed through.
func ExpectStreamResp(chunks ...string) []*extProcPb.ProcessingResponse {
	res := []*extProcPb.ProcessingResponse{integration.NewResponseHeaders(
		headerOpt(DebugResponseHeader, "true"), headerOpt("content-type", "text/event-stream"), headerOpt("status", "200"))}
	for i, c := range chunks {
		res = append(res, integration.NewResponseStreamChunk(c, i == len(chunks)-1))
	}
	return res
}

// --- GIE's metric expectations ---

// MetricReqTotal is GIE's metricReqTotal: one inference_objective_request_total sample.
func MetricReqTotal(model, target string, priority int) string {
	return CleanMetric(fmt.Sprintf(`
    # HELP inference_objective_request_total [ALPHA] Counter of inference objective requests broken out for each model and target model.
    # TYPE inference_objective_request_total counter
    inference_objective_request_total{model_name=%q,priority=%q,target_model_name=%q} 1
    `, model, strconv.Itoa(priority), target))
}

// MetricReadyPods is GIE's metricReadyPods: the pool's inference_pool_ready_pods gauge.
func MetricReadyPods(count int) string {
	return CleanMetric(fmt.Sprintf(`
    # HELP inference_pool_ready_pods [ALPHA] The number of ready pods in the inference server pool.
    # TYPE inference_pool_ready_pods gauge
    inference_pool_ready_pods{name=%q} %d
    `, PoolName, count))
}

// CleanMetric is GIE's cleanMetric: indentation removed, a trailing newline.
func CleanMetric(s string) string {
	var cleaned []string
	for _, l := range strings.Split(s, "\n") {
		if t := strings.TrimSpace(l); t != "" {
			cleaned = append(cleaned, t)
		}
	}
	return strings.Join(cleaned, "\n") + "\n"
}

var metricInputTokens7 = func() string {
	var b strings.Builder
	b.WriteString("# HELP inference_objective_input_tokens [ALPHA] Inference objective input token count distribution for requests in each model.\n")
	b.WriteString("# TYPE inference_objective_input_tokens histogram\n")
	for _, le := range []string{"1", "8", "16", "32", "64", "128", "256", "512", "1024", "2048", "4096", "8192", "16384",
		"32778", "65536", "131072", "262144", "524288", "1.048576e+06", "+Inf"} {
		n := 1
		if le == "1" {
			n = 0
		}
		fmt.Fprintf(&b, "inference_objective_input_tokens_bucket{model_name=\"\",target_model_name=\"\",le=%q} %d\n", le, n)
	}
	b.WriteString("inference_objective_input_tokens_sum{model_name=\"\",target_model_name=\"\"} 7\n")
	b.WriteString("inference_objective_input_tokens_count{model_name=\"\",target_model_name=\"\"} 1\n")
	return b.String()
}()
