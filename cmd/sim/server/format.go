package server

import (
	"bytes"
	"encoding/json"
	"net/http"
)

type usage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	TotalTokens         int `json:"total_tokens"`
	PromptTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

func newUsage(prompt, completion, cached int) *usage {
	u := &usage{PromptTokens: prompt, CompletionTokens: completion, TotalTokens: prompt + completion}
	u.PromptTokensDetails.CachedTokens = cached
	return u
}

// responsesUsage is the Responses API's usage shape.
func (u *usage) responses() map[string]any {
	return map[string]any{"input_tokens": u.PromptTokens, "output_tokens": u.CompletionTokens,
		"total_tokens": u.TotalTokens, "input_tokens_details": map[string]any{"cached_tokens": u.PromptTokensDetails.CachedTokens}}
}

type respMeta struct {
	api     string
	id      string
	model   string
	created int64
}

// fullBody is a non-streaming response; extra fields go at the top level, choiceExtra into
// choices[0].
func fullBody(m respMeta, text, finish string, u *usage, extra, choiceExtra map[string]any) map[string]any {
	var body map[string]any
	switch m.api {
	case apiChat:
		choice := map[string]any{"index": 0, "message": map[string]any{"role": "assistant", "content": text},
			"logprobs": nil, "finish_reason": finish}
		for k, v := range choiceExtra {
			choice[k] = v
		}
		body = map[string]any{"id": m.id, "object": "chat.completion", "created": m.created, "model": m.model,
			"choices": []any{choice}, "usage": u}
	case apiCompletions:
		choice := map[string]any{"index": 0, "text": text, "logprobs": nil, "finish_reason": finish}
		for k, v := range choiceExtra {
			choice[k] = v
		}
		body = map[string]any{"id": m.id, "object": "text_completion", "created": m.created, "model": m.model,
			"choices": []any{choice}, "usage": u}
	default:
		status := "completed"
		if finish == "length" {
			status = "incomplete"
		}
		body = map[string]any{"id": m.id, "object": "response", "created_at": m.created, "model": m.model,
			"status": status, "output": []any{map[string]any{"type": "message", "id": "msg_" + m.id, "role": "assistant",
				"status": "completed", "content": []any{map[string]any{"type": "output_text", "text": text, "annotations": []any{}}}}},
			"usage": u.responses()}
	}
	for k, v := range extra {
		body[k] = v
	}
	return body
}

// sse writes server-sent events for one streaming response.
type sse struct {
	w         http.ResponseWriter
	f         http.Flusher
	m         respMeta
	buf       []byte
	pre, post []byte // a token event is pre + JSON string + post (built once per stream)
}

func newSSE(w http.ResponseWriter, m respMeta) *sse {
	f, _ := w.(http.Flusher)
	return &sse{w: w, f: f, m: m}
}

func (s *sse) header() {
	h := s.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	s.w.WriteHeader(http.StatusOK)
}

func (s *sse) event(name string, v any) {
	b, _ := json.Marshal(v)
	if name != "" {
		s.buf = append(s.buf, "event: "+name+"\n"...)
	}
	s.buf = append(s.buf, "data: "...)
	s.buf = append(s.buf, b...)
	s.buf = append(s.buf, "\n\n"...)
}

func (s *sse) flush() {
	if len(s.buf) > 0 {
		_, _ = s.w.Write(s.buf)
		s.buf = s.buf[:0]
	}
	if s.f != nil {
		s.f.Flush()
	}
}

// flushHeaders sends the status and headers, keeping what is buffered.
func (s *sse) flushHeaders() {
	if s.f != nil {
		s.f.Flush()
	}
}

func (s *sse) start() {
	switch s.m.api {
	case apiChat:
		s.event("", s.chatChunk(map[string]any{"role": "assistant", "content": ""}, nil))
	case apiResponses:
		s.event("response.created", map[string]any{"type": "response.created",
			"response": map[string]any{"id": s.m.id, "object": "response", "status": "in_progress", "model": s.m.model}})
	}
}

func (s *sse) chatChunk(delta map[string]any, finish any) map[string]any {
	return map[string]any{"id": s.m.id, "object": "chat.completion.chunk", "created": s.m.created, "model": s.m.model,
		"choices": []any{map[string]any{"index": 0, "delta": delta, "logprobs": nil, "finish_reason": finish}}}
}

const tokenMark = "\u0000tok\u0000"

// token writes one token event from the per-stream template: no map or reflection per token.
func (s *sse) token(id uint32) {
	if s.pre == nil {
		mark := len(s.buf)
		s.text(tokenMark)
		ev := append([]byte(nil), s.buf[mark:]...)
		s.buf = s.buf[:mark]
		q, _ := json.Marshal(tokenMark)
		i := bytes.Index(ev, q)
		s.pre, s.post = ev[:i], ev[i+len(q):]
	}
	s.buf = append(s.buf, s.pre...)
	s.buf = append(s.buf, quotedToken(id)...)
	s.buf = append(s.buf, s.post...)
}

func (s *sse) text(t string) {
	switch s.m.api {
	case apiChat:
		s.event("", s.chatChunk(map[string]any{"content": t}, nil))
	case apiCompletions:
		s.event("", map[string]any{"id": s.m.id, "object": "text_completion", "created": s.m.created, "model": s.m.model,
			"choices": []any{map[string]any{"index": 0, "text": t, "logprobs": nil, "finish_reason": nil}}})
	default:
		s.event("response.output_text.delta", map[string]any{"type": "response.output_text.delta", "item_id": "msg_" + s.m.id,
			"output_index": 0, "content_index": 0, "delta": t})
	}
}

// finish ends the stream: the finish reason, the usage when asked (always for responses), [DONE].
func (s *sse) finish(reason, fullText string, u *usage, includeUsage bool) {
	switch s.m.api {
	case apiChat:
		s.event("", s.chatChunk(map[string]any{}, reason))
		if includeUsage {
			s.event("", map[string]any{"id": s.m.id, "object": "chat.completion.chunk", "created": s.m.created,
				"model": s.m.model, "choices": []any{}, "usage": u})
		}
		s.buf = append(s.buf, "data: [DONE]\n\n"...)
	case apiCompletions:
		s.event("", map[string]any{"id": s.m.id, "object": "text_completion", "created": s.m.created, "model": s.m.model,
			"choices": []any{map[string]any{"index": 0, "text": "", "logprobs": nil, "finish_reason": reason}}})
		if includeUsage {
			s.event("", map[string]any{"id": s.m.id, "object": "text_completion", "created": s.m.created,
				"model": s.m.model, "choices": []any{}, "usage": u})
		}
		s.buf = append(s.buf, "data: [DONE]\n\n"...)
	default:
		s.event("response.completed", map[string]any{"type": "response.completed",
			"response": fullBody(s.m, fullText, reason, u, nil, nil)})
	}
	s.flush()
}

// errorEvent reports a failure after the 200 headers went out.
func (s *sse) errorEvent(code int, typ, msg string) {
	s.event("", map[string]any{"error": map[string]any{"object": "error", "message": msg, "type": typ, "param": nil, "code": code}})
	s.flush()
}

// writeError answers with vLLM's error body.
func writeError(w http.ResponseWriter, code int, kind, typ, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("x-sim-error", kind)
	w.WriteHeader(code)
	b, _ := json.Marshal(map[string]any{"object": "error", "message": msg, "type": typ, "param": nil, "code": code})
	_, _ = w.Write(b)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(b)
}

func errType(code int) string {
	switch {
	case code == http.StatusNotFound:
		return "NotFoundError"
	case code == http.StatusConflict, code == http.StatusGone, code == http.StatusBadRequest:
		return "BadRequestError"
	case code == http.StatusServiceUnavailable:
		return "ServiceUnavailableError"
	case code == http.StatusBadGateway:
		return "BadGateway"
	case code >= 500:
		return "InternalServerError"
	}
	return "BadRequestError"
}
