package podmodel

import (
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/go-logr/logr"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
)

// Engine is a model server dialect.
type Engine string

// Engines AIBrix knows.
const (
	EngineVLLM   Engine = "vllm"
	EngineSGLang Engine = "sglang"
	EngineTRTLLM Engine = "trtllm"
)

// ParseEngine accepts vllm, sglang, trtllm (and GIE's trtllm-serve spelling), case-insensitive.
func ParseEngine(s string) (Engine, bool) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "vllm":
		return EngineVLLM, true
	case "sglang":
		return EngineSGLang, true
	case "trtllm", "trtllm-serve", "tensorrt-llm":
		return EngineTRTLLM, true
	}
	return "", false
}

// ValidateEngines requires every pod of one model that can serve HTTP (Routable) to run the
// same engine (a missing label counts as vllm), and returns that engine.
func ValidateEngines(pods []Pod) (Engine, error) {
	var first *Pod
	for i := range pods {
		p := &pods[i]
		if !p.Routable {
			continue
		}
		if first == nil {
			first = p
			continue
		}
		if p.Engine != first.Engine {
			return "", fmt.Errorf("pods of one model disagree on %s: %s is %q, %s is %q",
				LabelEngine, first.Key, first.Engine, p.Key, p.Engine)
		}
	}
	if first == nil {
		return EngineVLLM, nil
	}
	return first.Engine, nil
}

// ModelConfigOf returns the model-level config: the first pod, by key order, that carries a
// parsable annotation. (AIBrix uses ready-pod order; key order keeps the choice stable.)
func ModelConfigOf(pods []Pod) *ModelConfig {
	var best *Pod
	for i := range pods {
		if pods[i].Config == nil {
			continue
		}
		if best == nil || pods[i].Key < best.Key {
			best = &pods[i]
		}
	}
	if best == nil {
		return nil
	}
	return best.Config
}

// ModelConfigOfEndpoints is ModelConfigOf read straight from the endpoints' metadata, for
// callers that need nothing else of the pods (the rate cap runs on every request).
func ModelConfigOfEndpoints(eps []fwkEndpoint) *ModelConfig {
	var best *ModelConfig
	bestKey := ""
	for _, ep := range eps {
		if ep == nil || ep.GetMetadata() == nil {
			continue
		}
		meta := ep.GetMetadata()
		raw, ok := meta.Labels[annotationConfig]
		if !ok {
			continue
		}
		cfg, _ := ParseConfig(raw)
		if cfg == nil {
			continue
		}
		name := meta.PodName
		if name == "" {
			name = meta.NamespacedName.Name
		}
		if key := meta.NamespacedName.Namespace + "/" + name; best == nil || key < bestKey {
			best, bestKey = cfg, key
		}
	}
	return best
}

// FromEndpoints resolves a candidate list and logs invalid annotations once per pod.
func FromEndpoints(log logr.Logger, eps []fwkEndpoint) []Pod {
	out := make([]Pod, 0, len(eps))
	for _, ep := range eps {
		p := FromEndpoint(ep)
		Report(log, p)
		out = append(out, p)
	}
	return out
}

// reported remembers which (pod, problem) pairs were logged, so a bad annotation is logged
// once per pod and value, not once per request.
var reported sync.Map

// Report logs the pod's invalid labels/annotations the first time each one is seen.
func Report(log logr.Logger, p Pod) {
	var problems []string
	if p.ConfigErr != nil {
		problems = append(problems, p.ConfigErr.Error())
	}
	problems = append(problems, p.Invalid...)
	sort.Strings(problems)
	for _, pr := range problems {
		if _, seen := reported.LoadOrStore(p.Key+"\x00"+pr, struct{}{}); !seen {
			log.Info("ignoring invalid pod label or annotation (treated as absent)", "pod", p.Key, "problem", pr)
		}
	}
}

// PromptTokens is the prompt length used for buckets and auto profiles: the token producer's
// count when one ran, else round(characters/4) of the prompt text (AIBrix counts tiktoken
// cl100k_base tokens, which pdgate does not embed).
func PromptTokens(req *fwkRequest) int {
	if req == nil {
		return 0
	}
	if req.TokenizedPrompt != nil && len(req.TokenizedPrompt.TokenIDs) > 0 {
		return len(req.TokenizedPrompt.TokenIDs)
	}
	if req.Body == nil {
		return 0
	}
	return (PromptTextLen(req.Body) + 2) / 4
}

// RequestHints returns the config-profile: auto facts of a request: PromptTokens, and
// max_tokens (else max_completion_tokens) from a parsed body, -1 when absent or unreadable.
func RequestHints(req *fwkRequest) AutoHints {
	h := AutoHints{PromptTokens: PromptTokens(req), MaxTokens: -1}
	if req == nil || req.Body == nil {
		return h
	}
	if pm, ok := req.Body.Payload.(fwksched.PayloadMap); ok {
		for _, key := range []string{"max_tokens", "max_completion_tokens"} {
			if v, ok := pm[key].(float64); ok {
				h.MaxTokens = int(v)
				break
			}
		}
	}
	return h
}
