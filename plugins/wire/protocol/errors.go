package protocol

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
)

// OpenAIError is the error body OpenAI-compatible servers return, in vLLM's exact shape
// (vllm/entrypoints/openai ErrorResponse{error: ErrorInfo{message, type, param, code}}, code
// the HTTP status): {"error":{"message":"…","type":"…","param":null,"code":404}}. Everything
// pdgate answers itself (the EPP's immediate responses, the sidecar's and the dev gateway's
// own errors) uses it, so OpenAI clients parse one shape whichever hop answered.
type OpenAIError struct {
	Error OpenAIErrorDetail `json:"error"`
}

// OpenAIErrorDetail is the inner object of OpenAIError. Param names the request field at
// fault ("model" for an unknown model) and is null otherwise; Code is the HTTP status, as vLLM
// sends it (OpenAI's own API sends a string code or null: clients read both).
type OpenAIErrorDetail struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    int     `json:"code"`
}

// ErrorBody renders an OpenAI-shaped error body with a null param. An empty typ is
// TypeForStatus(code).
func ErrorBody(code int, typ, msg string) []byte {
	return ErrorBodyParam(code, typ, msg, "")
}

// ErrorBodyParam is ErrorBody with param set (empty: null).
func ErrorBodyParam(code int, typ, msg, param string) []byte {
	if typ == "" {
		typ = TypeForStatus(code)
	}
	d := OpenAIErrorDetail{Message: msg, Type: typ, Code: code}
	if param != "" {
		d.Param = &param
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // "<", ">" and "&" stay readable in messages
	_ = enc.Encode(OpenAIError{Error: d})
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

// ContentTypeJSON is the content type of every error body pdgate writes.
const ContentTypeJSON = "application/json"

// WriteError is the one writer of pdgate's own HTTP error answers (sidecar, dev gateway):
// content-type application/json, the exact Content-Length, status, ErrorBody. Headers already
// set on w (x-error-pd-*, x-pdgate-*) stay.
func WriteError(w http.ResponseWriter, status int, typ, msg string) {
	WriteErrorBody(w, status, ErrorBody(status, typ, msg))
}

// WriteErrorBody writes a body built by ErrorBody or ErrorBodyParam.
func WriteErrorBody(w http.ResponseWriter, status int, body []byte) {
	h := w.Header()
	h.Set("Content-Type", ContentTypeJSON)
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// TypeForStatus is the error type for a status when the answering site names none: the
// OpenAI type llm-d's EPP (v0.11) gives GIE's error codes, so clients of llm-d's EPP see the
// same values from pdgate's.
func TypeForStatus(status int) string {
	switch status {
	case http.StatusUnauthorized:
		return "authentication_error"
	case http.StatusForbidden:
		return "permission_error"
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusTooManyRequests:
		return "rate_limit_error"
	}
	if status >= 500 {
		return "server_error"
	}
	return "invalid_request_error"
}

// HeaderErrorCause names the cause of every answer the EPP makes itself (the cause label of
// pdgate_epp_immediate_responses_total: "model_not_found", "unknown_profile", "gie_<code>" for
// GIE's errors, ...). pdgate extension.
const HeaderErrorCause = "x-pdgate-error-cause"

// Model-not-found answers: vLLM's own body for a model it does not serve (message, type
// NotFoundError, param "model", code 404), so a client sees the same answer whether the EPP,
// the sidecar or the engine found the model unknown.
const (
	CauseModelNotFound = "model_not_found"
	ModelNotFoundType  = "NotFoundError"
	ModelParam         = "model"
)

// ModelNotFoundMessage is vLLM's message for a model it does not serve.
func ModelNotFoundMessage(model string) string {
	return "The model `" + model + "` does not exist."
}

// ModelNotFoundBody is the 404 body for a model no endpoint serves.
func ModelNotFoundBody(model string) []byte {
	return ErrorBodyParam(http.StatusNotFound, ModelNotFoundType, ModelNotFoundMessage(model), ModelParam)
}

// IsModelNotFound reports whether an upstream answer says the request's model does not
// exist: a 404 whose body is an OpenAI error (vLLM's nested shape, or its older flat one)
// naming param "model", code "model_not_found", or a message "… model … does not exist"
// (vLLM's, and TensorRT-LLM's / SGLang's OpenAI servers that copy it). Any other 404 (a wrong
// path, a KV handoff id) is not a model error.
func IsModelNotFound(status int, body []byte) bool {
	if status != http.StatusNotFound || len(body) == 0 {
		return false
	}
	type detail struct {
		Message string          `json:"message"`
		Param   *string         `json:"param"`
		Code    json.RawMessage `json:"code"`
	}
	var v struct {
		Error *detail `json:"error"`
		detail
	}
	if json.Unmarshal(body, &v) != nil {
		return false
	}
	d := v.detail
	if v.Error != nil {
		d = *v.Error
	}
	if d.Param != nil && *d.Param == ModelParam {
		return true
	}
	if string(d.Code) == `"`+CauseModelNotFound+`"` {
		return true
	}
	m := strings.ToLower(d.Message)
	return strings.Contains(m, "model") && (strings.Contains(m, "does not exist") || strings.Contains(m, "not found"))
}

// ConditionalDecodeMessage is llm-d's message for a conditional-decode (Prefer: if-available)
// miss, and ConditionalDecodeBody the 412 body: llm-d's EPP (v0.11) answers it as JSON with
// type invalid_request_error (its first version sent the text
// "inference error: PreconditionFailed - <message>"; conditional-decode callers match the
// status, not the body).
const ConditionalDecodeMessage = "no decode worker has the requested KV cache"

// ConditionalDecodeBody is the 412 body for a conditional-decode miss.
var ConditionalDecodeBody = string(ErrorBody(http.StatusPreconditionFailed, "invalid_request_error", ConditionalDecodeMessage))

// AnnotationLabelPrefix: GIE's EndpointMetadata carries pod labels only. The EPP mirrors every
// pod annotation into the endpoint's labels under this prefix (both in Kubernetes and in
// standalone mode) so plugins can read model.aibrix.ai/config and friends.
const AnnotationLabelPrefix = "annotation.pdgate.io/"
