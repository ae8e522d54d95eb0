// Package openaiparser is pdgate-openai-parser: a request parser for GIE's parser extension point
// that reads an OpenAI-style body once into what the scheduling plugins need and avoids the
// work GIE's openai-parser makes the director do on large bodies.
//
// GIE's openai-parser decodes the body twice (into map[string]any and into the API struct)
// and the director re-marshals the map, so a 220 KB prompt is unescaped into Go strings twice
// and escaped back once. This parser walks the bytes once with a validating scanner that
// decodes only the API struct's fields (the prompt text straight from the bytes), and either
//   - keeps the original bytes (payload: raw), or
//   - hands the director a PayloadMap whose large values are the original JSON text
//     (payload: map), which the director only copies back when it re-marshals.
//
// Decoded strings of 1 KiB or more without escapes (prompts, message contents) share the
// body's bytes instead of copying them, as the map payload's raw values already do: a caller
// must not modify the body while the parsed request is in use. pdgate's request path never
// does (a model rewrite builds a new body).
//
// A response's usage is read with the same scanner, with GIE's openai-parser's semantics
// (usage.go); streamed chunks are parsed by GIE's own code.
package openaiparser

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	fwkrh "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/requesthandling"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/requesthandling/parsers/openai"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/metadata"

	"github.com/pdgate/pdgate/plugins/framework/contract"
	"github.com/pdgate/pdgate/plugins/framework/pluginkit"
)

// Type is the plugin type name.
const Type = "pdgate-openai-parser"

var _ fwkrh.Parser = (*Parser)(nil)

// Parser is pdgate-openai-parser.
type Parser struct {
	tn     fwkplugin.TypedName
	p      Params
	stock  *openai.OpenAIParser // streamed responses and malformed bodies go to GIE's implementation
	fields map[string]bool      // keys decoded regardless of size in map mode
}

// Factory builds the plugin from its YAML parameters.
func Factory(name string, raw json.RawMessage, _ fwkplugin.Handle) (fwkplugin.Plugin, error) {
	return pluginkit.Build(name, raw, parseParams, New)
}

// New builds the parser; p is completed with defaults.
func New(name string, p Params) *Parser {
	return &Parser{
		tn:     pluginkit.TypedName(Type, name),
		p:      p.withDefaults(),
		stock:  openai.NewOpenAIParser(),
		fields: map[string]bool{"model": true, "stream": true},
	}
}

// TypedName implements fwkplugin.Plugin.
func (p *Parser) TypedName() fwkplugin.TypedName { return p.tn }

// envelope holds the top-level fields every API shares; it is embedded next to the API struct
// so one decode fills both.
type envelope struct {
	Model  json.RawMessage `json:"model"`
	Stream json.RawMessage `json:"stream"`
}

type chatEnv struct {
	fwksched.ChatCompletionsRequest
	envelope
}

type completionsEnv struct {
	fwksched.CompletionsRequest
	envelope
}

type responsesEnv struct {
	fwksched.ResponsesRequest
	envelope
}

type conversationsEnv struct {
	fwksched.ConversationsRequest
	envelope
}

type embeddingsEnv struct {
	fwksched.EmbeddingsRequest
	envelope
}

// ParseRequest implements fwkrh.Parser.
func (p *Parser) ParseRequest(ctx context.Context, body []byte, headers map[string]string) (*fwksched.LLMRequestBody, error) {
	out, _, err := p.ParseRequestLocatingModel(ctx, body, headers)
	return out, err
}

// ParseRequestLocatingModel implements contract.ModelLocatingParser: for a raw payload it also
// returns where the model string lies, found in the same pass.
func (p *Parser) ParseRequestLocatingModel(_ context.Context, body []byte, headers map[string]string) (*fwksched.LLMRequestBody, contract.ModelSpan, error) {
	out, d, err := p.parse(body, headers)
	if err != nil || d == nil {
		return out, contract.ModelSpan{}, err
	}
	if _, raw := out.Payload.(fwksched.RawPayload); raw {
		return out, contract.ModelSpan{Model: d.model, Start: d.modelStart, End: d.modelEnd}, nil
	}
	return out, contract.ModelSpan{}, nil
}

// parse is ParseRequest, also returning the pass's result (nil when encoding/json decided).
func (p *Parser) parse(body []byte, headers map[string]string) (*fwksched.LLMRequestBody, *decoded, error) {
	api := apiType(requestPath(headers))
	d, err := decodeFast(body, api)
	switch {
	case errors.Is(err, errNotObject), errors.Is(err, errSyntax):
		if mapErr := bodyMapError(body); mapErr != nil {
			return nil, nil, mapErr
		}
		if errors.Is(err, errSyntax) {
			// encoding/json accepts what the scanner rejected: never seen (the differential
			// fuzz test guards it), but agreeing with GIE matters more than speed here.
			out, err := p.parseStd(body, headers)
			return out, nil, err
		}
		return nil, nil, apiError(api) // a null body
	case err != nil:
		return nil, nil, apiError(api)
	case !checkAPI(d.body):
		return nil, nil, apiError(api)
	}
	out := d.body
	out.Stream = d.stream
	if p.p.Payload == ModeRaw && d.modelOK && !rewriteWanted(headers, d.model) {
		out.Payload = fwksched.RawPayload(body)
		return out, d, nil
	}
	// Map mode, or a raw-mode request whose model is rewritten by header or is missing: the
	// director must see a PayloadMap to rewrite the model (or answer its "model not found").
	m, err := p.payloadMap(d.members)
	if err != nil {
		return nil, nil, err
	}
	out.Payload = m
	return out, d, nil
}

// parseStd is the encoding/json path (decode the API struct, split the object); kept only as
// the fallback should the scanner ever reject what encoding/json accepts.
func (p *Parser) parseStd(body []byte, headers map[string]string) (*fwksched.LLMRequestBody, error) {
	out, env, err := decodeAPI(body, headers)
	if err != nil {
		return nil, err
	}
	out.Stream = string(env.Stream) == "true"
	model, isString := modelName(env.Model)
	if p.p.Payload == ModeRaw && isString && !rewriteWanted(headers, model) {
		out.Payload = fwksched.RawPayload(body)
		return out, nil
	}
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, fmt.Errorf("error unmarshaling request bodyMap: %w", err)
	}
	out.Payload = fwksched.PayloadMap(m)
	return out, nil
}

// ParseResponse implements fwkrh.Parser with GIE's openai-parser behaviour: a non-streaming
// body's usage is read in one pass of the scanner (usageOf); a streamed chunk that cannot
// carry usage (noStreamUsage: every token's chunk but the last) is passed over after one scan;
// the chunk with the usage, a body that is not a JSON object and a syntax error are read by
// GIE's own code.
func (p *Parser) ParseResponse(ctx context.Context, body []byte, headers map[string]string, endOfStream bool) (*fwkrh.ParsedResponse, error) {
	if len(body) > 0 {
		if !eventStream(headers) {
			if usage, ok := usageOf(body); ok {
				return &fwkrh.ParsedResponse{Usage: usage}, nil
			}
		} else if noStreamUsage(body) {
			return &fwkrh.ParsedResponse{}, nil
		}
	}
	return p.stock.ParseResponse(ctx, body, headers, endOfStream)
}

// decodeAPI decodes the body once into the API struct chosen by the request path, with the
// same validation and error texts as GIE's openai-parser.
func decodeAPI(body []byte, headers map[string]string) (*fwksched.LLMRequestBody, *envelope, error) {
	var (
		target any
		env    *envelope
		check  func() (*fwksched.LLMRequestBody, bool)
		apiErr string
	)
	switch apiType(requestPath(headers)) {
	case "conversations":
		v := &conversationsEnv{}
		target, env, apiErr = v, &v.envelope, "invalid conversations request: must have items field"
		check = func() (*fwksched.LLMRequestBody, bool) {
			return &fwksched.LLMRequestBody{Conversations: &v.ConversationsRequest}, len(v.Items) > 0
		}
	case "responses":
		v := &responsesEnv{}
		target, env, apiErr = v, &v.envelope, "invalid responses request: must have input field"
		check = func() (*fwksched.LLMRequestBody, bool) {
			return &fwksched.LLMRequestBody{Responses: &v.ResponsesRequest}, v.Input != nil
		}
	case "chat":
		v := &chatEnv{}
		target, env, apiErr = v, &v.envelope, "invalid chat completions request: must have valid messages field"
		check = func() (*fwksched.LLMRequestBody, bool) {
			return &fwksched.LLMRequestBody{ChatCompletions: &v.ChatCompletionsRequest}, len(v.Messages) > 0
		}
	case "embeddings":
		v := &embeddingsEnv{}
		target, env, apiErr = v, &v.envelope, "invalid embeddings request: must have input field"
		check = func() (*fwksched.LLMRequestBody, bool) {
			return &fwksched.LLMRequestBody{Embeddings: &v.EmbeddingsRequest}, v.Input != nil
		}
	default:
		v := &completionsEnv{}
		target, env, apiErr = v, &v.envelope, "invalid completions request: must have prompt field"
		check = func() (*fwksched.LLMRequestBody, bool) {
			return &fwksched.LLMRequestBody{Completions: &v.CompletionsRequest}, !v.Prompt.IsEmpty()
		}
	}
	if err := json.Unmarshal(body, target); err != nil {
		var syn *json.SyntaxError
		if errors.As(err, &syn) || !startsWithObject(body) {
			// Not a JSON object at all: the text GIE's parser gives for its first decode.
			return nil, nil, fmt.Errorf("error unmarshaling request bodyMap: %w", err)
		}
		return nil, nil, errors.New(apiErr)
	}
	out, ok := check()
	if !ok {
		return nil, nil, errors.New(apiErr)
	}
	return out, env, nil
}

// payloadMap builds the director's map from the top-level members the scan recorded; values
// up to RawValueBytes (and model, stream) are decoded as GIE's parser would, larger ones stay
// as their JSON text (sub-slices of the body). A duplicate key keeps its last value.
func (p *Parser) payloadMap(members []member) (fwksched.PayloadMap, error) {
	m := make(fwksched.PayloadMap, len(members))
	for _, kv := range members {
		key := unquote(kv.key, kv.plain)
		if len(kv.value) > p.p.RawValueBytes && !p.fields[key] {
			m[key] = json.RawMessage(kv.value)
			continue
		}
		sc := scanner{b: kv.value}
		x, err := sc.anyValue()
		if err != nil {
			// encoding/json's words for what is wrong (the scanner only knows that it is)
			if err = json.Unmarshal(kv.value, &x); err == nil {
				err = errors.New("rejected by the scanner, accepted by encoding/json")
			}
			return nil, fmt.Errorf("error unmarshaling request bodyMap: field %q: %w", key, err)
		}
		m[key] = x
	}
	return m, nil
}

// modelName returns the model when the body's "model" is a JSON string.
func modelName(raw json.RawMessage) (string, bool) {
	if len(raw) == 0 || raw[0] != '"' {
		return "", false
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", false
	}
	return s, true
}

// rewriteWanted reports whether the gateway asked for a different model than the body names.
func rewriteWanted(headers map[string]string, model string) bool {
	target := headers[metadata.ModelNameRewriteKey]
	return target != "" && target != model
}

func startsWithObject(b []byte) bool {
	for _, c := range b {
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		case '{':
			return true
		default:
			return false
		}
	}
	return false
}

// requestPath follows GIE's openai-parser: :path, x-original-path, x-forwarded-path, then
// /v1/completions.
func requestPath(headers map[string]string) string {
	for _, k := range []string{":path", "x-original-path", "x-forwarded-path"} {
		if v := headers[k]; v != "" {
			return v
		}
	}
	return "/v1/completions"
}

// apiType maps a path suffix to the API, in GIE's order.
func apiType(path string) string {
	switch {
	case strings.HasSuffix(path, "/conversations"):
		return "conversations"
	case strings.HasSuffix(path, "/responses"):
		return "responses"
	case strings.HasSuffix(path, "/chat/completions"):
		return "chat"
	case strings.HasSuffix(path, "/completions"):
		return "completions"
	case strings.HasSuffix(path, "/embeddings"):
		return "embeddings"
	}
	return "completions"
}
