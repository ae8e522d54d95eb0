package contract

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"

	"github.com/pdgate/pdgate/plugins/wire/protocol"
)

// Answer is an early answer: the EPP answers the client with Status, Body and Headers instead
// of forwarding the request. A plugin returns it as an error from a hook that returns errors
// (PrepareRequestData, AdmitRequest, ProfileHandler.ProcessResults), or records it with Record
// from a hook that does not (Filter, Score, Pick, PreRequest). The first answer wins.
type Answer struct {
	Status  int
	Body    []byte
	Headers []Header
	Cause   Cause
	// Message is the human-readable reason (logs, traces); the body already carries it.
	Message string
}

// Header is one response header of an Answer.
type Header struct{ Name, Value string }

// Error implements error.
func (a *Answer) Error() string {
	return fmt.Sprintf("%d %s (%s): %s", a.Status, http.StatusText(a.Status), a.Cause, a.Message)
}

// NewAnswer builds an answer with an OpenAI-shaped JSON error body, the shape every
// OpenAI-compatible client parses.
func NewAnswer(status int, cause Cause, errType, msg string) *Answer {
	return &Answer{
		Status:  status,
		Body:    protocol.ErrorBody(status, errType, msg),
		Headers: []Header{{Name: "content-type", Value: protocol.ContentTypeJSON}},
		Cause:   cause,
		Message: msg,
	}
}

// NewTextAnswer builds an answer with a plain-text body. pdgate's own answers are all JSON
// (NewAnswer); this is for a plugin that must reproduce another system's text body.
func NewTextAnswer(status int, cause Cause, body, msg string) *Answer {
	return &Answer{
		Status:  status,
		Body:    []byte(body),
		Headers: []Header{{Name: "content-type", Value: "text/plain"}},
		Cause:   cause,
		Message: msg,
	}
}

// ResponseHeaders are the headers a goes out with: its own and, unless it sets one, the
// x-pdgate-error-cause header naming its Cause (the word the EPP's immediate-responses metric
// labels it with), so a client and an operator read the same cause.
func (a *Answer) ResponseHeaders() []Header {
	out := make([]Header, 0, len(a.Headers)+1)
	named := false
	for _, h := range a.Headers {
		out = append(out, h)
		named = named || strings.EqualFold(h.Name, protocol.HeaderErrorCause)
	}
	if !named && a.Cause != "" {
		out = append(out, Header{Name: protocol.HeaderErrorCause, Value: string(a.Cause)})
	}
	return out
}

// WithHeader adds a response header and returns a.
func (a *Answer) WithHeader(name, value string) *Answer {
	a.Headers = append(a.Headers, Header{Name: name, Value: value})
	return a
}

// AnswerOf finds an Answer in err's chain.
func AnswerOf(err error) (*Answer, bool) {
	var a *Answer
	if errors.As(err, &a) && a != nil {
		return a, true
	}
	return nil, false
}

// ConditionalDecodeMiss is llm-d's 412 for a conditional-decode miss: llm-d's message in the
// OpenAI JSON body llm-d's EPP sends since v0.11 (conditional-decode callers match the status).
func ConditionalDecodeMiss() *Answer {
	return &Answer{
		Status:  http.StatusPreconditionFailed,
		Body:    []byte(protocol.ConditionalDecodeBody),
		Headers: []Header{{Name: "content-type", Value: protocol.ContentTypeJSON}},
		Cause:   CauseConditionalDecodeMiss,
		Message: protocol.ConditionalDecodeMessage,
	}
}

// ModelNotFound is the 404 for a model no endpoint of the pool serves: vLLM's own body
// (protocol.ModelNotFoundBody) and x-pdgate-error-cause: model_not_found.
func ModelNotFound(model string) *Answer {
	return &Answer{
		Status: http.StatusNotFound,
		Body:   protocol.ModelNotFoundBody(model),
		Headers: []Header{{Name: "content-type", Value: protocol.ContentTypeJSON},
			{Name: protocol.HeaderErrorCause, Value: protocol.CauseModelNotFound}},
		Cause:   CauseModelNotFound,
		Message: protocol.ModelNotFoundMessage(model),
	}
}

type answerSlotKey struct{}

// answerSlot holds the first answer recorded for one request. Scheduling plugins may run on
// several goroutines (GIE's PrepareData runs on its own), hence the lock.
type answerSlot struct {
	mu sync.Mutex
	a  *Answer
}

// WithAnswerSlot returns a context on which plugins can Record an answer for one request.
// The EPP calls it once per request before the first plugin hook.
func WithAnswerSlot(ctx context.Context) context.Context {
	return context.WithValue(ctx, answerSlotKey{}, &answerSlot{})
}

// Record records a as the request's answer. It reports false when another answer was recorded
// first or when ctx carries no slot (a plugin driven outside the EPP, e.g. by a unit test).
func Record(ctx context.Context, a *Answer) bool {
	s, _ := ctx.Value(answerSlotKey{}).(*answerSlot)
	if s == nil || a == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.a != nil {
		return false
	}
	s.a = a
	return true
}

// Recorded returns the answer recorded on ctx, or nil.
func Recorded(ctx context.Context) *Answer {
	s, _ := ctx.Value(answerSlotKey{}).(*answerSlot)
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.a
}
