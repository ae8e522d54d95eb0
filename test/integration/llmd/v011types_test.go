package llmd

import (
	"context"
	"encoding/json"
	"testing"

	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/requestcontrol/outlenbucket"
)

// labelled is one pod of a v0.11 attribute case: its name, loopback IP and labels.
type labelled struct {
	name, ip string
	labels   map[string]string
}

// pickCase is one pool and the pod one request must land on.
type pickCase struct {
	name string
	pods []labelled
	want string
}

// labels builds a pod's labels from key, value pairs, leaving out the empty values.
func labels(kv ...string) map[string]string {
	out := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] != "" {
			out[kv[i]] = kv[i+1]
		}
	}
	return out
}

// pickCases runs each case on its own EPP (its own pods) and checks which pod one request
// lands on.
func pickCases(t *testing.T, config string, cases []pickCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pods := make([]pod, len(tc.pods))
			ips := map[string]string{}
			for i, p := range tc.pods {
				pods[i] = pod(p)
				ips[p.name] = p.ip
			}
			e := startEPP(t, config, pods)
			if a := e.send(t, "/v1/completions", nil, completionBody("which pod")); a.destination != hostPort(ips[tc.want], e.port) {
				t.Fatalf("want %s (%s): %s", tc.want, ips[tc.want], a)
			}
		})
	}
}

// endpoint-attribute-weight-scorer through the real ext_proc stream: the heaviest tier wins,
// and a pod whose tier is missing or unlisted scores like the lightest tier, not 0, so a
// small second signal (bias) lifts it above a bronze pod.
func TestEndpointAttributeWeightScorer(t *testing.T) {
	tier := func(tier, bias string) map[string]string {
		return labels("example.com/tier", tier, "example.com/bias", bias)
	}
	pickCases(t, "testdata/v011types/attribute-weight.yaml", []pickCase{
		{"heaviest tier wins", []labelled{
			{"gold", "127.0.0.201", tier("gold", "0")}, {"bronze", "127.0.0.202", tier("bronze", "1")}, {"none", "127.0.0.203", tier("", "0")},
		}, "gold"},
		{"missing tier scores the lowest weight, not 0", []labelled{
			{"bronze", "127.0.0.204", tier("bronze", "0")}, {"none", "127.0.0.205", tier("", "1")},
		}, "none"},
		{"unlisted tier scores the lowest weight", []labelled{
			{"bronze", "127.0.0.206", tier("bronze", "0")}, {"silver", "127.0.0.207", tier("silver", "1")},
		}, "silver"},
	})
}

// label-producer's list form through the real ext_proc stream: a text label reaches the
// weight scorer (which names the producer), a number-mode label the numeric attribute scorer,
// and a label that is not a number counts 0 without failing the request.
func TestLabelProducer(t *testing.T) {
	gpu := func(gpu, speed string) map[string]string {
		return labels("example.com/gpu", gpu, "example.com/speed", speed)
	}
	pickCases(t, "testdata/v011types/label-producer.yaml", []pickCase{
		{"string label weighs the gpu", []labelled{{"h100", "127.0.0.211", gpu("h100", "")}, {"l4", "127.0.0.212", gpu("l4", "")}}, "h100"},
		{"number label adds speed", []labelled{{"h100", "127.0.0.213", gpu("h100", "0")}, {"l4", "127.0.0.214", gpu("l4", "8")}}, "l4"},
		{"non-numeric label counts 0", []labelled{{"h100", "127.0.0.215", gpu("h100", "fast")}, {"l4", "127.0.0.216", gpu("l4", "6")}}, "l4"},
	})
}

// probeType is a test scorer that prefers the pod whose example.com/bucket label names the
// bucket outlen-bucket wrote on the candidates, so the pick shows the request's bucket.
const probeType = "v011-outlen-bucket-probe"

type outlenProbe struct{ tn fwkplugin.TypedName }

func (p *outlenProbe) TypedName() fwkplugin.TypedName    { return p.tn }
func (p *outlenProbe) Category() fwksched.ScorerCategory { return fwksched.Affinity }
func (p *outlenProbe) Score(_ context.Context, _ *fwksched.CycleState, _ *fwksched.LLMRequest, eps []fwksched.Endpoint) map[fwksched.Endpoint]float64 {
	out := make(map[fwksched.Endpoint]float64, len(eps))
	for _, ep := range eps {
		if ep.GetMetadata().Labels["example.com/bucket"] == outlenbucket.Of(ep).String() {
			out[ep] = 1
		}
	}
	return out
}

func init() {
	fwkplugin.Register(probeType, func(name string, _ json.RawMessage, _ fwkplugin.Handle) (fwkplugin.Plugin, error) {
		return &outlenProbe{tn: fwkplugin.TypedName{Type: probeType, Name: name}}, nil
	})
}

// outlen-bucket through the real ext_proc stream: GIE's parser reads the body, outlen-bucket
// classifies it before scheduling (PR #2309's rules), and the probe's pick shows the bucket.
func TestOutlenBucket(t *testing.T) {
	ips := map[outlenbucket.Bucket]string{outlenbucket.Long: "127.0.0.221", outlenbucket.Short: "127.0.0.222", outlenbucket.Unknown: "127.0.0.223"}
	var pods []pod
	for b, ip := range ips {
		pods = append(pods, pod{name: "bucket-" + string(b), ip: ip, labels: map[string]string{"example.com/bucket": string(b)}})
	}
	e := startEPP(t, "testdata/v011types/outlen-bucket.yaml", pods)
	tool := map[string]any{"type": "function", "function": map[string]any{"name": "get_weather", "parameters": map[string]any{"type": "object"}}}
	for _, tc := range []struct {
		name  string
		extra map[string]any // top-level body fields besides model and messages
		want  outlenbucket.Bucket
	}{
		{"enable_thinking", map[string]any{"chat_template_kwargs": map[string]any{"enable_thinking": true}}, outlenbucket.Long},
		{"thinking_budget over 4000", map[string]any{"chat_template_kwargs": map[string]any{"thinking_budget": 8192}}, outlenbucket.Long},
		{"top-level thinking_budget over 4000", map[string]any{"thinking_budget": 6000}, outlenbucket.Long},
		{"thinking wins over tools", map[string]any{"tools": []any{tool}, "chat_template_kwargs": map[string]any{"enable_thinking": true}}, outlenbucket.Long},
		{"tools, thinking off", map[string]any{"tools": []any{tool}, "chat_template_kwargs": map[string]any{"enable_thinking": false}}, outlenbucket.Short},
		{"tools alone", map[string]any{"tools": []any{tool}}, outlenbucket.Short},
		{"thinking_budget of 4000", map[string]any{"chat_template_kwargs": map[string]any{"thinking_budget": 4000}}, outlenbucket.Unknown},
		{"plain chat", nil, outlenbucket.Unknown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := map[string]any{"model": "m", "messages": []map[string]any{{"role": "user", "content": "hi"}}}
			for k, v := range tc.extra {
				body[k] = v
			}
			raw, err := json.Marshal(body)
			if err != nil {
				t.Fatal(err)
			}
			if a := e.send(t, "/v1/chat/completions", nil, string(raw)); a.destination != hostPort(ips[tc.want], e.port) {
				t.Fatalf("want bucket %s (%s): %s", tc.want, ips[tc.want], a)
			}
		})
	}
	if a := e.send(t, "/v1/completions", nil, completionBody("no chat fields")); a.destination != hostPort(ips[outlenbucket.Unknown], e.port) {
		t.Fatalf("a completions request is UNKNOWN: %s", a)
	}
}
