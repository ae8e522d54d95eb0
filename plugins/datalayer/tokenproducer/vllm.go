package tokenproducer

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
)

// vllmRender calls vLLM's /v1/completions/render and /v1/chat/completions/render, which apply
// the chat template and tokenizer without running the model.
type vllmRender struct {
	params Parameters
	client *http.Client
}

func newVLLMRender(p Parameters) *vllmRender {
	return &vllmRender{params: p, client: &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}}
}

const maxRenderResponse = 64 << 20

func (v *vllmRender) tokenize(ctx context.Context, request *fwksched.LLMRequest) ([]uint32, error) {
	body, path, multimodal, err := v.renderRequest(request)
	if err != nil {
		return nil, err
	}
	timeout := v.params.VLLM.Timeout
	if multimodal {
		timeout = v.params.VLLM.MMTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	url := v.params.VLLM.URL + path
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("build render request for %s: %w", url, err)
	}
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := v.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("vLLM render endpoint %s unreachable after %s: %w", url, time.Since(start).Round(time.Millisecond), err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxRenderResponse))
	if err != nil {
		return nil, fmt.Errorf("read render response from %s: %w", url, err)
	}
	if resp.StatusCode/100 != 2 {
		return nil, fmt.Errorf("vLLM render endpoint %s answered %d: %s", url, resp.StatusCode, truncate(data, 200))
	}
	ids, err := ParseRenderResponse(data)
	if err != nil {
		return nil, fmt.Errorf("render response from %s: %w", url, err)
	}
	return ids, nil
}

// renderRequest builds the render body from the parsed request.
func (v *vllmRender) renderRequest(request *fwksched.LLMRequest) ([]byte, string, bool, error) {
	if request == nil || request.Body == nil {
		return nil, "", false, fmt.Errorf("request has no body")
	}
	model := v.params.ModelName
	if model == "" {
		model = request.TargetModel
	}
	b := request.Body
	switch {
	case b.ChatCompletions != nil:
		c := b.ChatCompletions
		body := map[string]any{"model": model, "messages": c.Messages}
		if len(c.Tools) > 0 {
			body["tools"] = c.Tools
		}
		if c.ChatTemplate != "" {
			body["chat_template"] = c.ChatTemplate
		}
		if len(c.ChatTemplateKWArgs) > 0 {
			body["chat_template_kwargs"] = c.ChatTemplateKWArgs
		}
		if c.ContinueFinalMessage {
			body["continue_final_message"] = true
		}
		if c.AddGenerationPrompt {
			body["add_generation_prompt"] = true
		}
		js, err := json.Marshal(body)
		return js, "/v1/chat/completions/render", countMM(c) > 0, err
	case b.Completions != nil:
		js, err := json.Marshal(map[string]any{"model": model, "prompt": b.Completions.Prompt})
		return js, "/v1/completions/render", false, err
	}
	return nil, "", false, fmt.Errorf("vLLM render supports chat completions and completions only")
}

func countMM(c *fwksched.ChatCompletionsRequest) int {
	n := 0
	for _, m := range c.Messages {
		for _, blk := range m.Content.Structured {
			if blk.Type != "text" {
				n++
			}
		}
	}
	return n
}

// ParseRenderResponse extracts the prompt token IDs from a render response. It accepts an
// object or a one-element list carrying "prompt_token_ids" or "token_ids" at the top level or
// under "engine_prompt".
func ParseRenderResponse(data []byte) ([]uint32, error) {
	var anyv any
	if err := json.Unmarshal(data, &anyv); err != nil {
		return nil, fmt.Errorf("not JSON: %w", err)
	}
	if list, ok := anyv.([]any); ok {
		if len(list) == 0 {
			return nil, fmt.Errorf("empty list")
		}
		anyv = list[0]
	}
	obj, ok := anyv.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("expected an object with prompt_token_ids")
	}
	if inner, ok := obj["engine_prompt"].(map[string]any); ok {
		obj = inner
	}
	for _, key := range []string{"prompt_token_ids", "token_ids"} {
		raw, ok := obj[key].([]any)
		if !ok {
			continue
		}
		ids := make([]uint32, 0, len(raw))
		for i, x := range raw {
			f, ok := x.(float64)
			if !ok || f < 0 || f > 4294967295 || f != float64(uint32(f)) {
				return nil, fmt.Errorf("%s[%d] is not a token id", key, i)
			}
			ids = append(ids, uint32(f))
		}
		return ids, nil
	}
	return nil, fmt.Errorf("no prompt_token_ids or token_ids field")
}

func truncate(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "..."
	}
	return string(b)
}
