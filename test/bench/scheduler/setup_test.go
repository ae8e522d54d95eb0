// Package scheduler measures one full scheduling cycle (PrepareData, Schedule, PreRequest and
// the end-of-response hooks) of configs loaded through the EPP's own plugin registration, at
// several pool sizes, against GIE's default config measured in the same run.
package scheduler

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
	fwkrc "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/requestcontrol"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/scheduling"

	eppcore "github.com/pdgate/pdgate/cmd/epp/core"
	"github.com/pdgate/pdgate/plugins/wire/protocol"
)

// benchConfig is one EndpointPickerConfig under test and the pod labels it routes by.
type benchConfig struct {
	name   string
	file   string // relative to the repository root; "" = GIE's default config
	labels func(i, n int) map[string]string
}

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}

func llmdRoles(roles ...string) func(i, n int) map[string]string {
	return func(i, _ int) map[string]string {
		return map[string]string{"llm-d.ai/role": roles[i%len(roles)]}
	}
}

// aibrixPod labels pods as AIBrix rolesets of 2 prefill + 2 decode pods, with prompt-length
// buckets in the mirrored model.aibrix.ai/config annotation (half the rolesets short, half long).
func aibrixPod(i, _ int) map[string]string {
	role := "prefill"
	if i%4 >= 2 {
		role = "decode"
	}
	rs := i / 4
	lo, hi := 0, 2048
	if rs%2 == 1 {
		lo, hi = 2049, 0
	}
	return map[string]string{
		"role-name": role, "roleset-name": fmt.Sprintf("rs%d", rs),
		"model.aibrix.ai/engine": "vllm", "model.aibrix.ai/name": "m",
		protocol.AnnotationLabelPrefix + "model.aibrix.ai/config": fmt.Sprintf(
			`{"profiles":{"default":{"routingStrategy":"pd","routingConfig":{"promptLenBucketMinLength":%d,"promptLenBucketMaxLength":%d}}}}`, lo, hi),
	}
}

func configs() []benchConfig {
	return []benchConfig{
		{name: "a-gie-default", labels: func(int, int) map[string]string { return map[string]string{} }},
		{name: "b-llmd-pd", file: "config/llmd/pd.yaml", labels: llmdRoles("prefill", "decode")},
		{name: "c-aibrix-hybrid", file: "config/bench/aibrix-hybrid.yaml", labels: aibrixPod},
		{name: "d-llmd-epd", file: "config/llmd/e-p-d.yaml", labels: llmdRoles("encode", "prefill", "decode")},
	}
}

// cycle is an instantiated config ready to run request cycles.
type cycle struct {
	sched     *scheduling.Scheduler
	prepare   []fwkrc.PrepareDataPlugin
	pre       []fwkrc.PreRequest
	respBody  []fwkrc.ResponseBody
	endpoints []fwksched.Endpoint
}

func newCycle(tb testing.TB, bc benchConfig, n int) *cycle { return newCycleWith(tb, bc, n, false) }

// newCycleWith builds the cycle; idle pods report all-zero metrics (equal pods for the burst test).
func newCycleWith(tb testing.TB, bc benchConfig, n int, idle bool) *cycle {
	tb.Helper()
	var raw []byte
	if bc.file != "" {
		b, err := os.ReadFile(filepath.Join(repoRoot(), bc.file))
		if err != nil {
			tb.Fatal(err)
		}
		raw = b
	}
	eps := make([]fwksched.Endpoint, n)
	names := make([]types.NamespacedName, n)
	for i := range eps {
		names[i] = types.NamespacedName{Namespace: "default", Name: fmt.Sprintf("pod-%d", i)}
		meta := &fwkdl.EndpointMetadata{NamespacedName: names[i], PodName: names[i].Name,
			Address: fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255), Port: "8000", Labels: bc.labels(i, n)}
		m := fwkdl.NewMetrics()
		if !idle {
			m.WaitingQueueSize, m.RunningRequestsSize, m.KVCacheUsagePercent = i%3, i%5, float64(i%10)/20
		}
		eps[i] = fwksched.NewEndpoint(meta, m, nil)
	}
	// The EPP's own constructor; its context ends with the test, which stops the goroutines
	// plugins start on it.
	core, err := eppcore.New(tb.Context(), eppcore.Options{Config: raw, Standalone: true,
		PodNames: func() []types.NamespacedName { return names }})
	if err != nil {
		tb.Fatalf("%s: %v", bc.name, err)
	}
	h := core.Server.Hooks()
	return &cycle{sched: core.Scheduler, endpoints: eps, prepare: h.PrepareData, pre: h.PreRequest, respBody: h.ResponseBody}
}

// request builds the i-th request: a chat turn sharing a 1.5 KB system prompt, so prefix
// scorers have work to do, and a distinct user message.
func request(i int) *fwksched.LLMRequest {
	sys := "You are a helpful assistant. "
	for len(sys) < 1500 {
		sys += "Answer precisely and cite the documents you were given. "
	}
	return &fwksched.LLMRequest{
		RequestId:   fmt.Sprintf("req-%d", i),
		TargetModel: "m",
		Headers:     map[string]string{"x-request-id": fmt.Sprintf("req-%d", i)},
		Body: &fwksched.LLMRequestBody{ChatCompletions: &fwksched.ChatCompletionsRequest{Messages: []fwksched.Message{
			{Role: "system", Content: fwksched.Content{Raw: sys}},
			{Role: "user", Content: fwksched.Content{Raw: fmt.Sprintf("question %d about the attached report", i%97)}},
		}}, Payload: fwksched.PayloadMap{"model": "m", "max_tokens": 128.0}},
		RequestSizeBytes: 1700,
	}
}

// run executes one request cycle; the endpoint snapshot is cloned per request as the director does.
func (c *cycle) run(ctx context.Context, req *fwksched.LLMRequest) error {
	_, err := c.runOpen(ctx, req, true)
	return err
}

// runOpen runs a cycle and returns the primary pick; with complete=false the request stays in
// flight (no end-of-response hooks), as in a burst that arrives between two metric scrapes.
func (c *cycle) runOpen(ctx context.Context, req *fwksched.LLMRequest, complete bool) (*fwkdl.EndpointMetadata, error) {
	snap := make([]fwksched.Endpoint, len(c.endpoints))
	for i, ep := range c.endpoints {
		snap[i] = fwksched.NewEndpoint(ep.GetMetadata(), ep.GetMetrics(), nil)
	}
	for _, p := range c.prepare {
		_ = p.PrepareRequestData(ctx, req, snap)
	}
	res, err := c.sched.Schedule(ctx, req, snap)
	if err != nil {
		return nil, err
	}
	for _, p := range c.pre {
		p.PreRequest(ctx, req, res)
	}
	target := res.ProfileResults[res.PrimaryProfileName].TargetEndpoints[0].GetMetadata()
	if !complete {
		return target, nil
	}
	resp := &fwkrc.Response{RequestId: req.RequestId, Headers: map[string]string{}, EndOfStream: true,
		Usage: fwkrc.Usage{PromptTokens: 400, CompletionTokens: 128, TotalTokens: 528}}
	for _, p := range c.respBody {
		p.ResponseBody(ctx, req, resp, target)
	}
	return target, nil
}
