package contract

import (
	"context"

	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
)

// ModelSpan is where a request body's top-level "model" string lies: body[Start:End] is the
// JSON string, quotes included, of the last top-level "model" key (the one a last-wins reader
// sees) and Model is its value. The zero value says the parser did not locate it.
type ModelSpan struct {
	Model      string
	Start, End int
}

// Found reports whether the span locates a model string.
func (s ModelSpan) Found() bool { return s.End > s.Start }

// ModelLocatingParser is a request parser that reports the model's span from the pass it
// already makes over the body, so the EPP splices a model rewrite into a raw payload without
// validating the whole body a second time. The EPP uses it in place of ParseRequest when the
// configured parser has it.
type ModelLocatingParser interface {
	ParseRequestLocatingModel(ctx context.Context, body []byte, headers map[string]string) (*fwksched.LLMRequestBody, ModelSpan, error)
}
