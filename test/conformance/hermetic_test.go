package conformance

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"

	extProcPb "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/gateway-api-inference-extension/apix/v1alpha2"
	reqcommon "sigs.k8s.io/gateway-api-inference-extension/pkg/common/request"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/metadata"
	"sigs.k8s.io/gateway-api-inference-extension/test/integration"

	"github.com/pdgate/pdgate/cmd/epp/extproc"
	"github.com/pdgate/pdgate/plugins/wire/protocol"
	"github.com/pdgate/pdgate/test/giehermetic"
)

// Model names of GIE's hermetic suite.
const (
	modelMyModel       = giehermetic.ModelMyModel
	modelMyModelTarget = giehermetic.ModelMyModelTarget
	modelSQLLora       = giehermetic.ModelSQLLora
	modelSQLLoraTarget = giehermetic.ModelSQLLoraTarget
	modelSheddable     = giehermetic.ModelSheddable
	modelSheddableTgt  = giehermetic.ModelSheddableTarget
	modelDirect        = giehermetic.ModelDirect
	modelToBeWritten   = giehermetic.ModelToBeWritten
	modelAfterRewrite  = giehermetic.ModelAfterRewrite
	modelShedNegative  = "shed-me" // an objective with negative priority (sheddable), not in GIE's manifest
)

// gieTestConfig is GIE v1.5.0's hermetic default config (test/integration/epp/testdata/
// default-config.yaml in the GIE module).
const gieTestConfig = giehermetic.DefaultConfig

// conformanceCase is one request sequence run through both paths.
type conformanceCase struct {
	name       string
	configText string // empty: gieTestConfig
	requests   []*extProcPb.ProcessingRequest
	pods       []podState
	// requiresCRDs: the case needs GIE's InferenceModelRewrite (skipped without CRDs, as in GIE).
	requiresCRDs bool
	// objectives are added to the datastore (in both modes) for cases beyond GIE's manifest.
	objectives []*v1alpha2.InferenceObjective
	// want anchors the stock outcome to what GIE's own suite expects of it ("route <ip:port>",
	// "reject <status>", "response"), so a mis-assembled stock path cannot pass by agreeing
	// with a mis-assembled pdgate path.
	want string
	// jsonBody: the request body is not in encoding/json's canonical form; GIE re-encodes
	// it, pdgate forwards the client's bytes (documented). Bodies compare as JSON values and
	// Content-Length must match each path's own body.
	jsonBody bool
}

// hermeticCases are GIE v1.5.0's commonTestCases then hermeticTests (giehermetic.Cases, at
// GIE's addresses), each anchored to what GIE's expected responses mean, then the cases this
// suite adds.
func hermeticCases() []conformanceCase {
	var cases []conformanceCase
	for _, c := range giehermetic.Cases(giehermetic.GIEAddress) {
		tc := conformanceCase{name: c.Name, configText: c.ConfigText, requests: c.Requests, requiresCRDs: c.RequiresCRDs,
			want: gieAnchors[c.Name]}
		for _, p := range c.Pods {
			tc.pods = append(tc.pods, P(p.Index, p.QueueSize, p.KVCacheUsage, p.ActiveModels...))
		}
		if c.WantResponses != nil {
			tc.want = summary(giehermetic.Normalise(c.Requests, c.WantResponses, nil))
		}
		cases = append(cases, tc)
	}
	return append(cases, []conformanceCase{
		// --- beyond GIE's suite: whole exchanges and the paths GIE's cases do not reach ---
		{
			name: "shed sheddable request when saturated",
			requests: integration.ReqRaw(map[string]string{metadata.ObjectiveKey: modelShedNegative, reqcommon.RequestIdHeaderKey: "shed"},
				`{"model":"shed-me","prompt":"x"}`),
			pods:       []podState{P(0, 10, 0.95), P(1, 12, 0.99)},
			objectives: []*v1alpha2.InferenceObjective{objective(modelShedNegative, -1)},
			want:       "reject 429",
		},
		{
			name: "full exchange: model rewrite, JSON response rewritten back, usage",
			requests: append(integration.ReqLLM(logger, "full", modelMyModel, modelMyModelTarget),
				responseOnly(map[string]string{"content-type": "application/json", "status": "200"},
					`{"id":"1","model":"my-model-12345","usage":{"prompt_tokens":3,"completion_tokens":5,"total_tokens":8}}`)...),
			pods: []podState{P(0, 0, 0.1), P(1, 9, 0.9)},
			want: "route 192.168.1.1:8000",
		},
		{
			name: "full exchange: streaming request, SSE response",
			requests: append(integration.ReqLLMWithStream(logger, "sse", modelSQLLora, modelSQLLoraTarget),
				responseOnly(map[string]string{"content-type": "text/event-stream", "status": "200"},
					`data: {"model":"sql-lora-1fdg2","choices":[{"text":"a"}]}`+"\n\n",
					`data: {"model":"sql-lora-1fdg2","usage":{"prompt_tokens":4,"completion_tokens":2,"total_tokens":6}}`+"\n\n"+"data: [DONE]\n\n",
					"")...),
			pods: []podState{P(0, 0, 0.1, modelSQLLoraTarget)},
			want: "route 192.168.1.1:8000",
		},
		{
			name: "full exchange: model server error status",
			requests: append(integration.ReqLLM(logger, "err", modelMyModel, ""),
				responseOnly(map[string]string{"content-type": "application/json", "status": "500"}, `{"error":"boom"}`)...),
			pods: []podState{P(0, 0, 0.1)},
			want: "route 192.168.1.1:8000",
		},
		{
			name: "client request id generated, no objective",
			requests: integration.ReqRaw(map[string]string{"content-type": "application/json", "x-custom": "kept"},
				`{"model":"m","prompt":"p","stream":false}`),
			pods: []podState{P(0, 0, 0.1)},
			want: "route 192.168.1.1:8000",
		},
		{
			name: "non-canonical JSON body (whitespace, key order)",
			requests: integration.ReqRaw(map[string]string{reqcommon.RequestIdHeaderKey: "nc"},
				"{ \"prompt\" : \"a<b\",\n  \"model\": \"my-model\", \"max_tokens\": 1e2 }"),
			pods:     []podState{P(0, 0, 0.1)},
			want:     "route 192.168.1.1:8000",
			jsonBody: true,
		},
		{
			name: "non-canonical JSON body with a model rewrite",
			requests: integration.ReqRaw(map[string]string{reqcommon.RequestIdHeaderKey: "ncr", metadata.ModelNameRewriteKey: modelMyModelTarget},
				"{\"prompt\": [\"a\", \"b\"],\t\"model\" : \"my-model\" ,\"n\":1}"),
			pods:     []podState{P(0, 0, 0.1)},
			want:     "route 192.168.1.1:8000",
			jsonBody: true,
		},
	}...)
}

// gieAnchors are the outcomes of GIE's cases whose expected responses GIE's suite leaves
// unchecked: the header-only request still goes to the one pod.
var gieAnchors = map[string]string{"protocol: simple GET (header only)": "route 192.168.1.1:8000"}

func objective(name string, priority int) *v1alpha2.InferenceObjective {
	return &v1alpha2.InferenceObjective{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec:       v1alpha2.InferenceObjectiveSpec{Priority: prio(priority), PoolRef: v1alpha2.PoolObjectReference{Name: poolName}},
	}
}

// responseOnly is the response phase as Envoy sends it to ext_proc (GIE's ReqResponseOnly).
func responseOnly(headers map[string]string, chunks ...string) []*extProcPb.ProcessingRequest {
	return giehermetic.ResponseOnly(headers, chunks...)
}

// pair is one case's two EPPs over equal datastores.
type pair struct {
	stock, pdgate     extProcPb.ExternalProcessorClient
	stockTr, pdgateTr *tracked
}

// newPair builds stock GIE and pdgate for config over two datastores with w's contents.
func newPair(t *testing.T, w world, config string, extra []*v1alpha2.InferenceObjective, path extproc.Options) pair {
	t.Helper()
	ctx := t.Context()
	dsStock, dsPdgate := w.datastore(ctx), w.datastore(ctx)
	for _, o := range extra {
		dsStock.ObjectiveSet(o.DeepCopy())
		dsPdgate.ObjectiveSet(o.DeepCopy())
	}
	var p pair
	p.stock, p.stockTr = serve(t, newStock(t, ctx, config, dsStock))
	p.pdgate, p.pdgateTr = serve(t, newPdgate(t, ctx, config, dsPdgate, path).Server)
	return p
}

// compare returns a readable diff of two outcomes, empty when they conform.
func compare(stock, pdgate outcome) string {
	return cmp.Diff(stock, pdgate)
}

// summary is the short form of an outcome the want anchors check.
func summary(o outcome) string {
	switch {
	case o.Immediate != nil:
		return "reject " + strconv.Itoa(o.Immediate.Status)
	case o.Routed:
		return "route " + o.Destination
	case o.RespHeaders != nil:
		return "response"
	}
	return "nothing (" + o.StreamErr + ")"
}

// normaliseJSONBody applies the documented body difference: pdgate forwards the client's bytes
// where GIE re-encodes the parsed map. Each path's Content-Length must be its own body's
// length; then both bodies are compared as JSON values.
func normaliseJSONBody(t *testing.T, who string, o *outcome) {
	t.Helper()
	if cl := o.UpstreamHeaders["content-length"]; cl != strconv.Itoa(len(o.UpstreamBody)) {
		t.Errorf("%s: content-length %s for a %d-byte body", who, cl, len(o.UpstreamBody))
	}
	delete(o.UpstreamHeaders, "content-length")
	var v any // numbers as float64: 1e2 and 100 are the same JSON value
	if err := json.Unmarshal([]byte(o.UpstreamBody), &v); err != nil {
		t.Fatalf("%s: upstream body is not JSON: %v", who, err)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
	o.UpstreamBody = "json:" + strings.TrimSpace(buf.String())
}

// TestHermeticConformance runs every case of GIE v1.5.0's hermetic suite (and the whole
// exchanges added here) through stock GIE and pdgate and fails on any difference that
// cmd/epp/README.md does not document. Like GIE's suite it runs with GIE's CRD objects
// (objectives, the model rewrite) and without them (standalone, no CRDs).
func TestHermeticConformance(t *testing.T) {
	for _, mode := range []struct {
		name string
		crds bool
	}{{"with-crds", true}, {"no-crds", false}} {
		t.Run(mode.name, func(t *testing.T) {
			for _, tc := range hermeticCases() {
				t.Run(tc.name, func(t *testing.T) {
					if tc.requiresCRDs && !mode.crds {
						t.Skip("needs GIE's InferenceModelRewrite, absent without CRDs (GIE skips it too)")
					}
					cfg := tc.configText
					if cfg == "" {
						cfg = gieTestConfig
					}
					p := newPair(t, world{pods: tc.pods, crds: mode.crds}, cfg, tc.objectives, extproc.Options{})
					stock := run(t, p.stock, tc.requests)
					pd := run(t, p.pdgate, tc.requests)
					t.Logf("stock outcome: %+v", stock)
					if got := summary(stock); got != tc.want {
						t.Fatalf("stock GIE: %s, GIE's suite expects %s: the harness does not assemble GIE as its suite does\n%+v", got, tc.want, stock)
					}
					if pd.DebugHeader {
						t.Errorf("pdgate sent GIE's debugging header %s to the client", debugResponseHeader)
					}
					stock.DebugHeader = false // GIE adds it to every response (documented)
					if giehermetic.DropErrorCause(&pd) {
						t.Errorf("pdgate's %d answer names no cause (%s)", pd.Immediate.Status, protocol.HeaderErrorCause)
					}
					if tc.jsonBody {
						normaliseJSONBody(t, "stock", &stock)
						normaliseJSONBody(t, "pdgate", &pd)
					}
					if d := compare(stock, pd); d != "" {
						t.Errorf("pdgate diverges from stock GIE (-stock +pdgate):\n%s", d)
					}
				})
			}
		})
	}
}

// TestComparisonBites proves the comparison fails on divergence: a real stock outcome against
// mutated copies (each one thing a broken request path could get wrong), and a real run of
// pdgate over a datastore whose metrics pick another pod.
func TestComparisonBites(t *testing.T) {
	tc := hermeticCases()[0] // select lower queue and kv cache
	p := newPair(t, world{pods: tc.pods, crds: true}, gieTestConfig, nil, extproc.Options{})
	stock := run(t, p.stock, tc.requests)
	if d := compare(stock, run(t, p.pdgate, tc.requests)); d != "" {
		t.Fatalf("baseline must conform:\n%s", d)
	}
	clone := func() outcome {
		c := stock
		c.UpstreamHeaders = map[string]string{}
		for k, v := range stock.UpstreamHeaders {
			c.UpstreamHeaders[k] = v
		}
		c.Metrics = map[string]string{}
		for k, v := range stock.Metrics {
			c.Metrics[k] = v
		}
		return c
	}
	mutations := map[string]func(*outcome){
		"destination":     func(o *outcome) { o.Destination = "192.168.1.3:8000" },
		"lb metadata":     func(o *outcome) { o.LBMetadata = strings.Replace(o.LBMetadata, "1.2", "1.3", 1) },
		"header dropped":  func(o *outcome) { delete(o.UpstreamHeaders, "hi") },
		"header added":    func(o *outcome) { o.UpstreamHeaders["x-went-into-resp-headers"] = "true" },
		"body byte":       func(o *outcome) { o.UpstreamBody = strings.Replace(o.UpstreamBody, "test1", "test2", 1) },
		"immediate":       func(o *outcome) { o.Immediate = &immediate{Status: 429} },
		"metric count":    func(o *outcome) { bump(o.Metrics, "inference_objective_request_total") },
		"histogram count": func(o *outcome) { bump(o.Metrics, "inference_objective_request_sizes") },
		"metric missing": func(o *outcome) {
			for k := range o.Metrics {
				if strings.HasPrefix(k, "inference_extension_scheduler_e2e") {
					delete(o.Metrics, k)
				}
			}
		},
	}
	for name, mutate := range mutations {
		c := clone()
		mutate(&c)
		if compare(stock, c) == "" {
			t.Errorf("mutation %q went unnoticed", name)
		}
	}

	// A whole divergent run: pdgate sees pod 2 as the idle one.
	skewed := world{pods: []podState{P(0, 3, 0.2), P(1, 10, 0.9), P(2, 0, 0.1)}, crds: true}
	q := newPair(t, skewed, gieTestConfig, nil, extproc.Options{})
	if d := compare(stock, run(t, q.pdgate, tc.requests)); !strings.Contains(d, "192.168.1.3:8000") {
		t.Errorf("a run routed elsewhere must diverge on the destination, diff:\n%s", d)
	}
}

// bump adds one to every series of family (the mutation a double count would make).
func bump(m map[string]string, family string) {
	for k, v := range m {
		if !strings.HasPrefix(k, family+"{") {
			continue
		}
		if n, err := strconv.ParseFloat(v, 64); err == nil {
			m[k] = fmt.Sprintf("%g", n+1)
		} else if c, ok := strings.CutPrefix(v, "count="); ok {
			n, _ := strconv.Atoi(c)
			m[k] = fmt.Sprintf("count=%d", n+1)
		}
	}
}
