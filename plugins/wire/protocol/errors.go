package protocol

import "encoding/json"

// OpenAIError is the error body OpenAI-compatible servers return; the sidecar and the EPP's
// immediate responses use it so clients parse one shape.
type OpenAIError struct {
	Error OpenAIErrorDetail `json:"error"`
}

// OpenAIErrorDetail is the inner object of OpenAIError.
type OpenAIErrorDetail struct {
	Message string `json:"message"`
	Type    string `json:"type"`
	Code    int    `json:"code"`
}

// ErrorBody renders an OpenAI-shaped error body.
func ErrorBody(code int, typ, msg string) []byte {
	b, _ := json.Marshal(OpenAIError{Error: OpenAIErrorDetail{Message: msg, Type: typ, Code: code}})
	return b
}

// ConditionalDecodeMessage is llm-d's message for a conditional-decode (Prefer: if-available)
// miss, and ConditionalDecodeBody the 412 body llm-d's EPP answers with.
const (
	ConditionalDecodeMessage = "no decode worker has the requested KV cache"
	ConditionalDecodeBody    = "inference error: PreconditionFailed - " + ConditionalDecodeMessage
)

// AnnotationLabelPrefix: GIE's EndpointMetadata carries pod labels only. The EPP mirrors every
// pod annotation into the endpoint's labels under this prefix (both in Kubernetes and in
// standalone mode) so plugins can read model.aibrix.ai/config and friends.
const AnnotationLabelPrefix = "annotation.pdgate.io/"
