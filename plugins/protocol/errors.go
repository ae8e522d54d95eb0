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
