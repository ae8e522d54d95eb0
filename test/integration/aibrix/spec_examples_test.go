package aibrix

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/pdgate/pdgate/cmd/pdgate/cli"
	sidecarapp "github.com/pdgate/pdgate/cmd/sidecar/app"
	"github.com/pdgate/pdgate/plugins/lib/podmodel"
	"github.com/pdgate/pdgate/plugins/wire/protocol"
)

// specExample is one YAML example of AIBrix's PD specification (testdata/spec): a pod
// template's metadata, a bare annotations block, a Deployment env list or Helm values.
type specExample struct {
	Metadata struct {
		Labels      map[string]string `json:"labels"`
		Annotations map[string]string `json:"annotations"`
	} `json:"metadata"`
	Annotations map[string]string `json:"annotations"`
	Env         []struct {
		Name  string `json:"name"`
		Value string `json:"value"`
	} `json:"env"`
	GatewayPlugin struct {
		Container struct {
			Envs map[string]string `json:"envs"`
		} `json:"container"`
	} `json:"gatewayPlugin"`
}

// loadSpecExample parses testdata/spec/file strictly (a key the document prints that this
// struct does not know fails the test) and checks every model.aibrix.ai/config annotation is
// one pdgate parses: an unparsable annotation is treated as absent by the EPP, which would let
// a routing assertion pass for the wrong reason.
func loadSpecExample(t *testing.T, file string) specExample {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata/spec", file))
	if err != nil {
		t.Fatal(err)
	}
	var x specExample
	if err := yaml.UnmarshalStrict(data, &x); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	for k, v := range x.annotations() {
		if k != configAnn {
			continue
		}
		if _, err := podmodel.ParseConfig(v); err != nil {
			t.Fatalf("%s: pdgate does not accept the documented %s: %v", file, configAnn, err)
		}
	}
	return x
}

func (x specExample) annotations() map[string]string {
	if len(x.Metadata.Annotations) > 0 {
		return x.Metadata.Annotations
	}
	return x.Annotations
}

// env is the gateway environment the example sets (a Deployment env list or Helm's
// gatewayPlugin.container.envs).
func (x specExample) env() map[string]string {
	out := map[string]string{}
	for _, e := range x.Env {
		out[e.Name] = e.Value
	}
	for k, v := range x.GatewayPlugin.Container.Envs {
		out[k] = v
	}
	return out
}

// specPod is a pod built from the document's examples: labels from a pod template, the
// annotations of the template or of an annotation example, and another roleset-name where the
// text describes one (an incomplete roleset).
type specPod struct {
	name        string
	template    string // example with metadata.labels
	annotations string // example whose annotations the pod carries; "" = the template's own
	roleset     string // replaces roleset-name when set
}

// specRequest is one request and the routing the document describes for it.
type specRequest struct {
	name    string
	headers map[string]string
	tokens  int  // prompt length (pdgate's estimate: 4 characters a token)
	chat    bool // the document's curl request, verbatim, to /v1/chat/completions
	// want: decode is the destination pod; prefill the pod of x-prefiller-host-port, "" for
	// none (a standard pod, or a non-pd strategy). status is an expected error answer.
	decode, prefill string
	status          int
	bodyHas         string
}

// The curl example of "Step 2 — Enable PD Routing", sent as printed.
const curlBody = `{"model": "my-model", "messages": [{"role": "user", "content": "Hello"}]}`

// Every YAML example of AIBrix's PD specification (testdata/spec, copied exactly from the
// document) is loaded into the pods, environment and EPP configuration it describes, the EPP
// configuration passes `pdgate validate` (cli.Validate, the EPP's own constructor) under that
// environment, and the real EPP assembly routes each request as the document says over real
// ext_proc. No AIBrix example is an EPP configuration, so none is expected to be refused.
func TestSpecificationExamples(t *testing.T) {
	const (
		pdConfig        = "../../../config/aibrix-pd.yaml"
		bucketingConfig = "../../../config/aibrix/bucketing.yaml"
		// randomDefault: aibrix-pd.yaml on a gateway whose default routing strategy is random
		// (AIBrix's ROUTING_ALGORITHM), so that "make pd the default" is observable.
		randomDefault = "random-default"
	)
	var (
		prefill     = specPod{name: "prefill-0", template: "02-prefill-pod.yaml"}
		decode      = specPod{name: "decode-0", template: "03-decode-pod.yaml"}
		lonePrefill = specPod{name: "prefill-1", template: "02-prefill-pod.yaml", roleset: "group-1"}
		loneDecode  = specPod{name: "decode-2", template: "03-decode-pod.yaml", roleset: "group-2"}
		pair        = func(ann string) []specPod {
			p, d := prefill, decode
			p.annotations, d.annotations = ann, ann
			return []specPod{p, d}
		}
		standard = specPod{name: "standard-0", template: "06-standard-inference-pod.yaml"}
		pd       = func(n int) specRequest {
			return specRequest{name: fmt.Sprintf("%d tokens", n), tokens: n, decode: "decode-0", prefill: "prefill-0"}
		}
		std = func(n int) specRequest {
			return specRequest{name: fmt.Sprintf("%d tokens", n), tokens: n, decode: "standard-0"}
		}
		noBucket = func(n int) specRequest {
			return specRequest{name: fmt.Sprintf("%d tokens", n), tokens: n, status: 503,
				bodyHas: "no prompt-length bucket matches prompt length"}
		}
		random   = map[string]string{protocol.HeaderRoutingStrategy: "random"}
		complete = []specPod{
			{name: "prefill-0", template: "12-complete-prefill-pod.yaml"},
			{name: "decode-0", template: "13-complete-decode-pod.yaml"},
			{name: "standard-0", template: "14-complete-standard-pod.yaml"},
		}
	)
	tests := []struct {
		name string
		// examples are the documented YAML examples the case is built from; env examples set
		// the gateway's environment.
		examples []string
		config   string
		pods     []specPod
		requests []specRequest
		check    func(t *testing.T) // extra assertion, run under the case's environment
	}{
		{
			// Step 1: a prefill and a decode pod of roleset group-0 pair; "If a roleset has only
			// a prefill pod or only a decode pod, the gateway skips that entire roleset."
			name:     "templates pair in one roleset, incomplete rolesets skipped",
			examples: []string{"02-prefill-pod.yaml", "03-decode-pod.yaml"},
			config:   pdConfig,
			pods:     []specPod{prefill, decode, lonePrefill, loneDecode},
			requests: []specRequest{pd(1), pd(40), pd(200), pd(1000), pd(3000), pd(9000)},
		},
		{
			// Step 2: "Set routing-strategy: pd on individual requests" (the curl example).
			name:     "routing-strategy: pd per request",
			examples: []string{"02-prefill-pod.yaml", "03-decode-pod.yaml"},
			config:   randomDefault,
			pods:     []specPod{prefill, decode},
			requests: []specRequest{
				{name: "no header: the gateway default (random)", chat: true, decode: "decode-0"},
				{name: "curl example", chat: true, headers: map[string]string{protocol.HeaderRoutingStrategy: "pd"},
					decode: "decode-0", prefill: "prefill-0"},
			},
		},
		{
			// Step 2: "To make pd the default for a model, add the config annotation"; a header
			// still overrides it (which lockedRoutingStrategy prevents, next case).
			name:     "profile routingStrategy pd is the model's default",
			examples: []string{"02-prefill-pod.yaml", "03-decode-pod.yaml", "04-pd-default-annotation.yaml"},
			config:   randomDefault,
			pods:     pair("04-pd-default-annotation.yaml"),
			requests: []specRequest{
				{name: "no header", chat: true, decode: "decode-0", prefill: "prefill-0"},
				pd(500),
				{name: "routing-strategy: random overrides", chat: true, headers: random, decode: "decode-0"},
			},
		},
		{
			// Step 2: lockedRoutingStrategy pins pd against a routing-strategy header.
			name:     "lockedRoutingStrategy pins pd",
			examples: []string{"02-prefill-pod.yaml", "03-decode-pod.yaml", "05-locked-routing-strategy-annotation.yaml"},
			config:   randomDefault,
			pods:     pair("05-locked-routing-strategy-annotation.yaml"),
			requests: []specRequest{
				{name: "routing-strategy: random", chat: true, headers: random, decode: "decode-0", prefill: "prefill-0"},
				{name: "no header", chat: true, decode: "decode-0", prefill: "prefill-0"},
			},
		},
		{
			// Step 3: a standard pod (no role-name, combined: true, no range: "accepts any prompt
			// length") beside a complete pair: the pair serves.
			name: "standard pod beside a complete pair",
			examples: []string{"02-prefill-pod.yaml", "03-decode-pod.yaml", "04-pd-default-annotation.yaml",
				"06-standard-inference-pod.yaml", "07-prompt-length-bucketing-env.yaml"},
			config:   pdConfig,
			pods:     append(pair("04-pd-default-annotation.yaml"), standard),
			requests: []specRequest{pd(1), pd(2048), pd(20000)},
		},
		{
			// Step 3: "The matching PD roleset is incomplete (for example, a decode pod is
			// unavailable)" → the standard pod, at any prompt length.
			name: "standard pod serves when the roleset is incomplete",
			examples: []string{"02-prefill-pod.yaml", "04-pd-default-annotation.yaml",
				"06-standard-inference-pod.yaml", "07-prompt-length-bucketing-env.yaml"},
			config:   pdConfig,
			pods:     []specPod{{name: "prefill-0", template: "02-prefill-pod.yaml", annotations: "04-pd-default-annotation.yaml"}, standard},
			requests: []specRequest{std(1), std(2048), std(20000)},
		},
		{
			// Prompt-Length Bucketing: the range 0..2048 is inclusive at both ends; a prompt
			// outside every bucket goes to the standard pod.
			name: "bucket range with a standard pod",
			examples: []string{"02-prefill-pod.yaml", "03-decode-pod.yaml", "08-bucket-range-annotation.yaml",
				"06-standard-inference-pod.yaml", "07-prompt-length-bucketing-env.yaml"},
			config:   pdConfig,
			pods:     append(pair("08-bucket-range-annotation.yaml"), standard),
			requests: []specRequest{pd(1), pd(2047), pd(2048), std(2049), std(20000)},
		},
		{
			// Step 0: outside every bucket and no standard pod: an error.
			name:     "bucket range without a standard pod",
			examples: []string{"02-prefill-pod.yaml", "03-decode-pod.yaml", "08-bucket-range-annotation.yaml", "07-prompt-length-bucketing-env.yaml"},
			config:   pdConfig,
			pods:     pair("08-bucket-range-annotation.yaml"),
			requests: []specRequest{pd(1), pd(2048), noBucket(2049)},
		},
		{
			// "Bucketing only takes effect when AIBRIX_PROMPT_LENGTH_BUCKETING=true is set":
			// without the variable the range is ignored and the pair serves every length.
			name:     "bucket range without AIBRIX_PROMPT_LENGTH_BUCKETING",
			examples: []string{"02-prefill-pod.yaml", "03-decode-pod.yaml", "08-bucket-range-annotation.yaml", "06-standard-inference-pod.yaml"},
			config:   pdConfig,
			pods:     append(pair("08-bucket-range-annotation.yaml"), standard),
			requests: []specRequest{pd(2048), pd(2049), pd(20000)},
		},
		{
			name:     "conductor policies",
			examples: []string{"02-prefill-pod.yaml", "03-decode-pod.yaml", "09-conductor-annotation.yaml"},
			config:   pdConfig,
			pods:     append(pair("09-conductor-annotation.yaml"), lonePrefill, loneDecode),
			requests: []specRequest{pd(10), pd(300), pd(5000)},
		},
		{
			name:     "token_load prefill policy",
			examples: []string{"02-prefill-pod.yaml", "03-decode-pod.yaml", "10-token-load-annotation.yaml"},
			config:   pdConfig,
			pods:     append(pair("10-token-load-annotation.yaml"), lonePrefill, loneDecode),
			requests: []specRequest{pd(10), pd(300), pd(5000)},
		},
		{
			name:     "hybrid_cache_load prefill policy",
			examples: []string{"02-prefill-pod.yaml", "03-decode-pod.yaml", "11-hybrid-cache-load-annotation.yaml"},
			config:   pdConfig,
			pods:     append(pair("11-hybrid-cache-load-annotation.yaml"), lonePrefill, loneDecode),
			requests: []specRequest{pd(10), pd(300), pd(5000)},
		},
		{
			// Complete Example: the pair for 0–2048, the standard pod for 2048+ (and overflow).
			// At 2048 both ranges match; the idle pair keeps it (the standard pod only takes a
			// request a pair could serve when PD is hot).
			name: "complete example",
			examples: []string{"12-complete-prefill-pod.yaml", "13-complete-decode-pod.yaml",
				"14-complete-standard-pod.yaml", "15-complete-gateway-plugin-values.yaml"},
			config:   pdConfig,
			pods:     complete,
			requests: []specRequest{pd(1), pd(1000), pd(2047), pd(2048), std(2049), std(30000)},
		},
		{
			// The same with adaptive bucket serving on (AIBRIX_BUCKET_SERVE=true, the shipped
			// bucketing config): with one roleset the plan holds no band and "the request
			// routes exactly as it would without the plan".
			name: "complete example with adaptive bucket serving",
			examples: []string{"12-complete-prefill-pod.yaml", "13-complete-decode-pod.yaml",
				"14-complete-standard-pod.yaml", "15-complete-gateway-plugin-values.yaml"},
			config:   bucketingConfig,
			pods:     complete,
			requests: []specRequest{pd(1), pd(2048), std(2049), pd(700), std(9000)},
		},
		{
			// Complete Example with the decode pod down: the roleset is incomplete, the
			// standard pod takes what its range (min 2048, inclusive) covers, the rest fails.
			name: "complete example, decode pod down",
			examples: []string{"12-complete-prefill-pod.yaml", "14-complete-standard-pod.yaml",
				"15-complete-gateway-plugin-values.yaml"},
			config:   pdConfig,
			pods:     []specPod{complete[0], complete[2]},
			requests: []specRequest{noBucket(1), noBucket(2047), std(2048), std(30000)},
		},
		{
			// TensorRT-LLM Parallel Scheduling: the variable is read where pdgate runs the
			// dispatch (the sidecar's --trt-schedule-style default); "Other engines ... are
			// unaffected": the EPP routes the documented vLLM pods as before.
			name:     "AIBRIX_TRT_SCHEDULE_STYLE=generation_first",
			examples: []string{"01-trt-generation-first-env.yaml", "02-prefill-pod.yaml", "03-decode-pod.yaml"},
			config:   pdConfig,
			pods:     []specPod{prefill, decode},
			requests: []specRequest{pd(10), pd(3000)},
			check: func(t *testing.T) {
				if got := sidecarapp.NewOptions().TRTSchedule; got != "generation_first" {
					t.Fatalf("sidecar schedule style %q, want generation_first from the environment", got)
				}
			},
		},
	}

	// Every example of testdata/spec is exercised by some case.
	files, err := filepath.Glob("testdata/spec/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	used := map[string]bool{}
	for _, tt := range tests {
		for _, f := range tt.examples {
			used[f] = true
		}
	}
	for _, f := range files {
		if !used[filepath.Base(f)] {
			t.Errorf("example %s is exercised by no case", filepath.Base(f))
		}
	}
	if len(files) != 15 {
		t.Errorf("testdata/spec has %d examples, the document 15", len(files))
	}

	for ci, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			examples := map[string]specExample{}
			for _, f := range tt.examples {
				x := loadSpecExample(t, f)
				examples[f] = x
				for k, v := range x.env() {
					t.Setenv(k, v)
				}
			}
			for _, p := range tt.pods {
				for _, f := range []string{p.template, p.annotations} {
					if f != "" && !slices.Contains(tt.examples, f) {
						t.Fatalf("pod %s is built from %s, which the case does not list", p.name, f)
					}
				}
			}
			// The gateway's environment is exactly what the case's examples set.
			for _, k := range []string{"AIBRIX_PROMPT_LENGTH_BUCKETING", "AIBRIX_BUCKET_SERVE", "AIBRIX_TRT_SCHEDULE_STYLE"} {
				if _, ok := os.LookupEnv(k); ok && !setBy(examples, k) {
					t.Fatalf("%s is set in the test's environment but by no example of the case", k)
				}
			}

			config := tt.config
			if config == randomDefault {
				config = randomDefaultConfig(t, pdConfig)
			}
			data, err := os.ReadFile(config)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := cli.Validate(context.Background(), data); err != nil {
				t.Fatalf("pdgate validate refused %s under the example's environment: %v", config, err)
			}

			pods := make([]pod, len(tt.pods))
			for i, sp := range tt.pods {
				pods[i] = buildSpecPod(t, examples, sp, fmt.Sprintf("127.0.6.%d", 10*ci+i+1))
			}
			e := startEPP(t, config, pods)
			if tt.check != nil {
				tt.check(t)
			}
			for i, r := range tt.requests {
				var a answer
				if r.chat {
					a = e.sendPath(t, pods, "/v1/chat/completions", r.headers, curlBody)
				} else {
					a = e.sendPath(t, pods, "/v1/completions", r.headers, specBody(fmt.Sprintf("spec%d-%d", ci, i), r.tokens))
				}
				if r.status != 0 {
					if a.immediate != r.status || !strings.Contains(a.body, r.bodyHas) {
						t.Errorf("%s: got %+v, want %d %q", r.name, a, r.status, r.bodyHas)
					}
					continue
				}
				if a.immediate != 0 || a.decode != r.decode || a.prefill != r.prefill {
					t.Errorf("%s: got status %d decode %q prefill %q (%q), want decode %q prefill %q",
						r.name, a.immediate, a.decode, a.prefill, a.body, r.decode, r.prefill)
				}
			}
		})
	}
}

func setBy(examples map[string]specExample, k string) bool {
	for _, x := range examples {
		if _, ok := x.env()[k]; ok {
			return true
		}
	}
	return false
}

// buildSpecPod makes a pod with exactly the labels of its template example and the
// annotations of its annotation example (or the template's own).
func buildSpecPod(t *testing.T, examples map[string]specExample, sp specPod, ip string) pod {
	t.Helper()
	tmpl := examples[sp.template]
	if len(tmpl.Metadata.Labels) == 0 {
		t.Fatalf("%s has no metadata.labels", sp.template)
	}
	labels := map[string]string{}
	for k, v := range tmpl.Metadata.Labels {
		labels[k] = v
	}
	if sp.roleset != "" {
		labels[rolesetName] = sp.roleset
	}
	ann := tmpl.Metadata.Annotations
	if sp.annotations != "" {
		ann = examples[sp.annotations].annotations()
		if len(ann) == 0 {
			t.Fatalf("%s has no annotations", sp.annotations)
		}
	}
	var annotations map[string]string
	if len(ann) > 0 {
		annotations = map[string]string{}
		for k, v := range ann {
			annotations[k] = v
		}
	}
	return pod{name: sp.name, ip: ip, labels: labels, annotations: annotations}
}

// randomDefaultConfig writes config/aibrix-pd.yaml with defaultRoutingStrategy: random.
func randomDefaultConfig(t *testing.T, base string) string {
	t.Helper()
	data, err := os.ReadFile(base)
	if err != nil {
		t.Fatal(err)
	}
	const anchor = "- type: aibrix-pd-pair\n  parameters:\n"
	if !strings.Contains(string(data), anchor) {
		t.Fatalf("%s: aibrix-pd-pair parameters not found", base)
	}
	out := strings.Replace(string(data), anchor, anchor+"    defaultRoutingStrategy: random\n", 1)
	path := filepath.Join(t.TempDir(), "aibrix-pd-random-default.yaml")
	if err := os.WriteFile(path, []byte(out), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// specBody is a completion request for the document's model with a prompt of n estimated
// tokens (n >= 1: the parser refuses an empty prompt).
func specBody(tag string, n int) string {
	b, _ := json.Marshal(map[string]any{"model": "my-model", "prompt": promptOf(tag, n), "max_tokens": 8})
	return string(b)
}

// sendPath is send with a request path of the caller's choice. The destination is the decode
// pod at the pool's target port; x-prefiller-host-port names the prefill pod at the engine
// port its model.aibrix.ai/port label declares.
func (e *epp) sendPath(t *testing.T, pods []pod, path string, headers map[string]string, body string) answer {
	t.Helper()
	e.mu.Lock()
	e.seq++
	id := fmt.Sprintf("spec-req-%d", e.seq)
	e.mu.Unlock()
	r, done, err := e.Open(path, withRequestID(headers, id), body, 20*time.Second)
	defer done()
	if err != nil {
		t.Error(err)
		return answer{}
	}
	a := answer{immediate: r.Immediate, body: r.Body, set: r.Set}
	if a.immediate == 0 {
		a.decode = e.podAt(t, a.set["x-gateway-destination-endpoint"])
		if hp := a.set[protocol.HeaderPrefillerHostPort]; hp != "" {
			host, port, err := net.SplitHostPort(hp)
			if err != nil {
				t.Fatalf("%s: %q: %v", protocol.HeaderPrefillerHostPort, hp, err)
			}
			for _, p := range pods {
				if p.ip == host {
					a.prefill = p.name
					if want := p.labels["model.aibrix.ai/port"]; port != want {
						t.Errorf("%s %q: want the port of model.aibrix.ai/port (%q)", protocol.HeaderPrefillerHostPort, hp, want)
					}
				}
			}
			if a.prefill == "" {
				t.Fatalf("%s %q is no pod of the pool", protocol.HeaderPrefillerHostPort, hp)
			}
		}
	}
	return a
}
