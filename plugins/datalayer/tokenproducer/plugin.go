// Package tokenproducer implements llm-d's token-producer: a GIE PrepareData plugin that fills
// LLMRequest.TokenizedPrompt before scheduling, with the tokenizer-free estimate backend
// (default) or vLLM's render endpoints.
package tokenproducer

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/log"
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	fwkrc "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/requestcontrol"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/framework/contract"
	"github.com/pdgate/pdgate/plugins/framework/pluginkit"
	"github.com/pdgate/pdgate/plugins/internal/deprecation"
	"github.com/pdgate/pdgate/plugins/lib/tokenestimate"
	"github.com/pdgate/pdgate/plugins/wire/protocol"
)

// Plugin type names; "tokenizer" is llm-d's deprecated alias.
const (
	Type       = "token-producer"
	LegacyType = "tokenizer"
)

// Backends.
const (
	BackendEstimate = "estimate"
	BackendVLLM     = "vllm"
)

var _ fwkrc.PrepareDataPlugin = &Producer{}

// Producer is token-producer.
type Producer struct {
	typedName fwkplugin.TypedName
	params    Parameters
	render    *vllmRender
	// sessions packs only a follow-up turn's new messages (nil: off).
	sessions *tokenestimate.SessionCache
}

// sessionKey is the request's session ID: the first configured header that is set, qualified
// by the header's name (the cache itself keeps a session's model and starts over on another).
func (p *Producer) sessionKey(request *fwksched.LLMRequest) string {
	if p.sessions == nil || request == nil {
		return ""
	}
	for _, h := range p.params.SessionCache.Headers {
		if v := strings.TrimSpace(protocol.HeaderValue(request.Headers, h)); v != "" {
			return h + "\x00" + v
		}
	}
	return ""
}

// TypedName implements fwkplugin.Plugin.
func (p *Producer) TypedName() fwkplugin.TypedName { return p.typedName }

// Params returns the effective parameters.
func (p *Producer) Params() Parameters { return p.params }

// Backend returns the selected backend.
func (p *Producer) Backend() string { return p.params.Backend }

// Produces implements fwkplugin.ProducerPlugin.
func (p *Producer) Produces() map[string]any {
	return map[string]any{contract.TokenizedPromptKey: contract.TokenizedPromptData{}}
}

// Consumes implements fwkplugin.ConsumerPlugin (nothing).
func (p *Producer) Consumes() map[string]any { return map[string]any{} }

// PrepareRequestData fills request.TokenizedPrompt. An already-set prompt is kept
// (idempotent). The estimate is always computed first, so a failing or slow vLLM render
// leaves the estimate in place; the render result replaces it only when it arrives before
// GIE's PrepareData deadline (400 ms in v1.5.0).
func (p *Producer) PrepareRequestData(ctx context.Context, request *fwksched.LLMRequest, _ []fwksched.Endpoint) error {
	if request == nil || request.TokenizedPrompt != nil {
		return nil
	}
	// The debug logger gets its values only when enabled: WithValues allocates on every call.
	logger := pluginkit.DebugLogger(ctx)
	if logger.Enabled() {
		logger = logger.WithValues("plugin", p.typedName.String(), "requestID", request.RequestId)
	}
	est := p.sessions.Estimate(request, p.params.Estimate, p.sessionKey(request))
	request.TokenizedPrompt = est
	if p.params.Backend != BackendVLLM {
		if est != nil && logger.Enabled() { // a disabled Info still boxes its arguments
			logger.Info("estimated prompt tokens", "backend", BackendEstimate, "tokens", len(est.TokenIDs), "multimodalItems", len(est.MultiModalFeatures))
		}
		return nil
	}
	ids, err := p.render.tokenize(ctx, request)
	if err != nil {
		return fmt.Errorf("token-producer %s: vLLM render failed, using the estimate: %w", p.typedName.Name, err)
	}
	if ctx.Err() != nil {
		return fmt.Errorf("token-producer %s: vLLM render returned after the data-producer deadline, using the estimate", p.typedName.Name)
	}
	tp := &fwksched.TokenizedPrompt{TokenIDs: ids}
	if est != nil {
		tp.MultiModalFeatures = est.MultiModalFeatures
	}
	request.TokenizedPrompt = tp
	logger.Info("tokenized prompt", "backend", BackendVLLM, "tokens", len(ids))
	return nil
}

// Parameters of token-producer.
type Parameters struct {
	Backend   string                       `json:"-"`
	ModelName string                       `json:"modelName,omitempty"`
	Estimate  tokenestimate.EstimateParams `json:"-"`
	VLLM      VLLMParams                   `json:"-"`
	// SessionCache (pdgate's) lets a follow-up turn of a session pack only its new messages.
	SessionCache SessionCacheParams `json:"-"`
}

// SessionCacheParams configure the estimate's session cache.
type SessionCacheParams struct {
	// Headers carry the session ID, tried in order (default x-session-id, llm-d's and
	// AIBrix's session header).
	Headers []string `json:"headers,omitempty"`
	// MaxBytes bounds the sessions held (token slices and per-message lengths; default 64 MiB);
	// 0 turns the cache off.
	MaxBytes *int `json:"maxBytes,omitempty"`
}

// Session cache defaults.
const (
	DefaultSessionHeader        = "x-session-id"
	DefaultSessionCacheMaxBytes = 64 << 20
)

// VLLMParams configure the vLLM render backend.
type VLLMParams struct {
	URL       string
	Timeout   time.Duration
	MMTimeout time.Duration
}

type rawVLLM struct {
	HTTP      string          `json:"http,omitempty"`
	URL       string          `json:"url,omitempty"`
	Timeout   json.RawMessage `json:"timeout,omitempty"`
	MMTimeout json.RawMessage `json:"mmTimeout,omitempty"`
}

type rawParams struct {
	ModelName          string                        `json:"modelName,omitempty"`
	Estimate           *tokenestimate.EstimateParams `json:"estimate,omitempty"`
	VLLM               *rawVLLM                      `json:"vllm,omitempty"`
	UDSTokenizerConfig json.RawMessage               `json:"udsTokenizerConfig,omitempty"`
	SessionCache       *SessionCacheParams           `json:"sessionCache,omitempty"`
}

// ParseParameters decodes, selects the backend and validates.
func ParseParameters(pluginType, name string, raw json.RawMessage) (Parameters, error) {
	p := Parameters{Backend: BackendEstimate}
	var r rawParams
	err := pluginkit.Decode(pluginType, name, raw, &r)
	if err != nil {
		return p, err
	}
	set := 0
	for _, b := range []bool{r.Estimate != nil, r.VLLM != nil, len(r.UDSTokenizerConfig) > 0} {
		if b {
			set++
		}
	}
	if set > 1 {
		return p, fmt.Errorf("only one of 'estimate', 'vllm', or 'udsTokenizerConfig' may be set")
	}
	if len(r.UDSTokenizerConfig) > 0 {
		return p, fmt.Errorf("token-producer: 'udsTokenizerConfig' (llm-d's deprecated gRPC-over-UDS tokenizer) is not supported by pdgate; use 'vllm' or 'estimate'")
	}
	p.ModelName = r.ModelName
	if p.SessionCache, err = sessionCacheParams(r.SessionCache); err != nil {
		return p, err
	}
	if r.Estimate != nil {
		p.Estimate = *r.Estimate
	}
	p.Estimate.Defaults()
	if err := p.Estimate.Validate(); err != nil {
		return p, fmt.Errorf("token-producer: %w", err)
	}
	if r.VLLM == nil && r.ModelName == "" {
		return p, nil
	}
	p.Backend = BackendVLLM
	v := VLLMParams{URL: "http://localhost:8000", Timeout: 5 * time.Second, MMTimeout: 30 * time.Second}
	if r.VLLM != nil {
		if r.VLLM.HTTP != "" && r.VLLM.URL != "" && r.VLLM.HTTP != r.VLLM.URL {
			return p, fmt.Errorf("token-producer: vllm.http and vllm.url disagree (%q vs %q); set one", r.VLLM.HTTP, r.VLLM.URL)
		}
		if u := firstNonEmpty(r.VLLM.URL, r.VLLM.HTTP); u != "" {
			v.URL = u
		}
		var err error
		if v.Timeout, err = parseDuration("vllm.timeout", r.VLLM.Timeout, v.Timeout); err != nil {
			return p, err
		}
		if v.MMTimeout, err = parseDuration("vllm.mmTimeout", r.VLLM.MMTimeout, v.MMTimeout); err != nil {
			return p, err
		}
	}
	if !strings.HasPrefix(v.URL, "http://") && !strings.HasPrefix(v.URL, "https://") {
		return p, fmt.Errorf("token-producer: vllm.url must start with http:// or https://, got %q", v.URL)
	}
	v.URL = strings.TrimRight(v.URL, "/")
	p.VLLM = v
	return p, nil
}

// sessionCacheParams applies the session cache's defaults and validates it.
func sessionCacheParams(r *SessionCacheParams) (SessionCacheParams, error) {
	c := SessionCacheParams{Headers: []string{DefaultSessionHeader}, MaxBytes: new(DefaultSessionCacheMaxBytes)}
	if r == nil {
		return c, nil
	}
	if r.Headers != nil {
		if len(r.Headers) == 0 {
			return c, fmt.Errorf("token-producer: sessionCache.headers must name at least one header (set maxBytes 0 to turn the cache off)")
		}
		c.Headers = nil
		for i, h := range r.Headers {
			h = strings.ToLower(strings.TrimSpace(h))
			if h == "" {
				return c, fmt.Errorf("token-producer: sessionCache.headers[%d] is empty", i)
			}
			c.Headers = append(c.Headers, h)
		}
	}
	if r.MaxBytes != nil {
		if *r.MaxBytes < 0 {
			return c, fmt.Errorf("token-producer: sessionCache.maxBytes must be >= 0 (0 = off), got %d", *r.MaxBytes)
		}
		c.MaxBytes = r.MaxBytes
	}
	return c, nil
}

// parseDuration accepts a Go duration string ("5s") or a number of seconds.
func parseDuration(field string, raw json.RawMessage, def time.Duration) (time.Duration, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return def, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			return 0, fmt.Errorf("token-producer: %s must be a positive duration like \"5s\", got %q", field, s)
		}
		return d, nil
	}
	var f float64
	if err := json.Unmarshal(raw, &f); err != nil || !(f > 0) || f > 3600 {
		return 0, fmt.Errorf("token-producer: %s must be a positive duration like \"5s\" or seconds in (0, 3600], got %s", field, string(raw))
	}
	return time.Duration(f * float64(time.Second)), nil
}

func firstNonEmpty(v ...string) string {
	for _, s := range v {
		if s != "" {
			return s
		}
	}
	return ""
}

// Factory creates token-producer.
func Factory(name string, raw json.RawMessage, handle fwkplugin.Handle) (fwkplugin.Plugin, error) {
	return newProducer(Type, name, raw)
}

// LegacyFactory creates the deprecated "tokenizer" alias.
func LegacyFactory(name string, raw json.RawMessage, handle fwkplugin.Handle) (fwkplugin.Plugin, error) {
	deprecation.Once(pluginkit.Context(handle), LegacyType, "Deprecated: plugin type 'tokenizer' is deprecated, use 'token-producer' instead")
	p, err := newProducer(Type, name, raw)
	if err != nil {
		// The message keeps llm-d's wording, which names token-producer.
		return nil, fmt.Errorf("%s %q: %w", LegacyType, name, err)
	}
	return p, nil
}

func newProducer(pluginType, name string, raw json.RawMessage) (*Producer, error) {
	params, err := ParseParameters(pluginType, name, raw)
	if err != nil {
		return nil, err
	}
	p := &Producer{typedName: fwkplugin.TypedName{Type: pluginType, Name: name}, params: params}
	if n := params.SessionCache.MaxBytes; n != nil && *n > 0 {
		p.sessions = tokenestimate.NewSessionCache(*n)
	}
	if params.Backend == BackendVLLM {
		p.render = newVLLMRender(params)
	}
	return p, nil
}

// AutoName is the instance name of an auto-created producer.
const AutoName = "token-producer-auto"

// EnsureProducer adds an estimate token-producer to the handle unless one exists, for
// consumers of TokenizedPrompt (llm-d registers token-producer as that key's default
// producer). The EPP calls it once the whole plugin list exists (pluginset).
func EnsureProducer(handle fwkplugin.Handle) {
	if handle == nil {
		return
	}
	for _, pl := range handle.GetAllPlugins() {
		if _, ok := pl.(*Producer); ok {
			return
		}
	}
	p, _ := newProducer(Type, AutoName, nil)
	handle.AddPlugin(AutoName, p)
	log.FromContext(handle.Context()).V(1).Info("auto-created token-producer (estimate backend) for TokenizedPrompt consumers")
}
