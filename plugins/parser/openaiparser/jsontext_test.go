package openaiparser

// This file keeps the go-json-experiment/jsontext implementation of the request walk that was
// measured against the hand-written scanner (scan.go, decode.go) and not taken because it was
// slower on the parser's bodies (README, "Why a hand-written scanner"). It lives in a test file
// only so that BenchmarkWalk can measure both side by side in one run whenever jsontext (or
// the standard library's encoding/json/v2 it becomes) changes; TestJSONTextWalkAgrees keeps it
// decoding exactly what the scanner decodes.

import (
	"encoding/json"
	"errors"
	"fmt"

	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/lib/bodyjson"
)

// jtDecoded is what one jsontext pass yields (decoded's fields, name tokens unsplit).
type jtDecoded struct {
	body    *fwksched.LLMRequestBody
	model   string
	modelOK bool
	stream  bool
	members []jtMember
}

// jtMember is one top-level name token and the span of its value in the body.
type jtMember struct {
	key   []byte
	value []byte
}

// jtDecoder is decoder's twin on jsontext: it fills the API struct GIE's openai-parser fills,
// with encoding/json's semantics for every field (case-insensitive keys, last duplicate wins and merges into what an earlier one
// decoded, null leaves scalars alone, a type mismatch rejects the body). The large fields
// (chat messages and their text, the completions prompt) are decoded by hand from the tokens
// jsontext hands out (sub-slices of the body); small ones are handed to encoding/json on their
// own span, which gives the exact semantics at a cost proportional to their size.
type jtDecoder struct {
	r       *jtReader
	typeErr bool
	d       jtDecoded
}

// jtFieldIndex is fieldIndex for a jsontext name token.
func jtFieldIndex(tok []byte, names []string) int {
	return keyIndex(jtNameBytes(tok), names)
}

// keyIs reports whether the name token is exactly name (after unescaping).
func jtKeyIs(tok []byte, name string) bool {
	return string(jtNameBytes(tok)) == name
}

// decodeFast decodes body for api in one pass. It returns errSyntax (wrapping jsontext's
// SyntacticError) when the body is not valid JSON, and errAPI when it is but does not fit the
// API.
func decodeJSONText(body []byte, api string) (*jtDecoded, error) {
	r := newJTReader(body)
	defer r.release()
	dc := &jtDecoder{r: r}
	if r.peek() != '{' {
		return nil, errNotObject
	}
	out := &fwksched.LLMRequestBody{}
	var field func(tok []byte) bool
	switch api {
	case "chat":
		c := &fwksched.ChatCompletionsRequest{}
		out.ChatCompletions = c
		field = func(tok []byte) bool { return dc.chatField(c, jtFieldIndex(tok, chatFields)) }
	case "responses":
		c := &fwksched.ResponsesRequest{}
		out.Responses = c
		targets := []any{&c.Input, &c.Instructions, &c.Tools, &c.CacheSalt}
		field = func(tok []byte) bool { return dc.delegate(targets, jtFieldIndex(tok, responsesFields)) }
	case "conversations":
		c := &fwksched.ConversationsRequest{}
		out.Conversations = c
		targets := []any{&c.Items, &c.Metadata, &c.CacheSalt}
		field = func(tok []byte) bool { return dc.delegate(targets, jtFieldIndex(tok, conversationFields)) }
	case "embeddings":
		c := &fwksched.EmbeddingsRequest{}
		out.Embeddings = c
		targets := []any{&c.Input, &c.CacheSalt}
		field = func(tok []byte) bool { return dc.delegate(targets, jtFieldIndex(tok, embeddingsFields)) }
	default:
		c := &fwksched.CompletionsRequest{}
		out.Completions = c
		field = func(tok []byte) bool {
			switch jtFieldIndex(tok, completionsFields) {
			case 0:
				return dc.prompt(&c.Prompt)
			case 1:
				return dc.delegate([]any{nil, &c.CacheSalt}, 1)
			}
			return r.skip()
		}
	}
	ok := r.members(func(tok []byte) bool {
		start := r.valueStart()
		if !field(tok) {
			return false
		}
		v := body[start:r.offset()]
		dc.d.members = append(dc.d.members, jtMember{key: tok, value: v})
		switch {
		case jtKeyIs(tok, "model"):
			dc.d.modelOK = v[0] == '"'
			dc.d.model = ""
			if dc.d.modelOK {
				dc.d.model = bodyjson.Unquote(v)
			}
		case jtKeyIs(tok, "stream"):
			dc.d.stream = string(v) == "true"
		}
		return true
	})
	if !ok || !r.atEOF() {
		if r.err == nil {
			r.err = errors.New("data after the top-level object")
		}
		return nil, fmt.Errorf("%w: %w", errSyntax, r.err)
	}
	dc.d.body = out
	if dc.typeErr {
		return &dc.d, errAPI
	}
	return &dc.d, nil
}

// delegate decodes the value into targets[i] with encoding/json (exact semantics, including
// merging into what a duplicate key decoded earlier); i < 0 skips an unknown key.
func (dc *jtDecoder) delegate(targets []any, i int) bool {
	if i < 0 {
		return dc.r.skip()
	}
	span, ok := dc.r.value()
	if !ok {
		return false
	}
	if err := json.Unmarshal(span, targets[i]); err != nil {
		dc.typeErr = true
	}
	return true
}

// mismatch records a type mismatch (the body will be rejected) and steps over the value.
func (dc *jtDecoder) mismatch() bool {
	dc.typeErr = true
	return dc.r.skip()
}

func (dc *jtDecoder) chatField(c *fwksched.ChatCompletionsRequest, i int) bool {
	switch i {
	case -1:
		return dc.r.skip()
	case 0:
		return dc.messages(&c.Messages)
	}
	targets := [...]any{nil, &c.Tools, &c.Documents, &c.ChatTemplate, &c.ReturnAssistantTokensMask,
		&c.ContinueFinalMessage, &c.AddGenerationPrompt, &c.ChatTemplateKWArgs, &c.CacheSalt}
	return dc.delegate(targets[:], i)
}

// messages decodes an array of messages into *dst as encoding/json decodes into an existing
// slice: elements are decoded over what is already there (a duplicate "messages" key merges),
// the slice is cut to the new length, and an empty array gives an empty, non-nil slice.
func (dc *jtDecoder) messages(dst *[]fwksched.Message) bool {
	switch dc.r.peek() {
	case 'n':
		*dst = nil
		return dc.r.null()
	case '[':
	default:
		return dc.mismatch()
	}
	msgs := *dst
	count := 0
	ok := dc.r.elements(func(n int) bool {
		switch {
		case n >= cap(msgs):
			msgs = append(msgs, fwksched.Message{})
		case n >= len(msgs):
			msgs = msgs[:n+1]
		}
		count = n + 1
		return dc.message(&msgs[n])
	})
	if !ok {
		return false
	}
	msgs = msgs[:count]
	if count == 0 {
		msgs = []fwksched.Message{}
	}
	*dst = msgs
	return true
}

func (dc *jtDecoder) message(m *fwksched.Message) bool {
	return dc.object(func(i int) bool {
		switch i {
		case 0:
			return dc.stringInto(&m.Role)
		case 1:
			return dc.content(&m.Content)
		}
		return dc.r.skip()
	}, messageFields)
}

// stringInto decodes a JSON string into *dst; null leaves it alone, anything else is a type
// mismatch.
func (dc *jtDecoder) stringInto(dst *string) bool {
	switch dc.r.peek() {
	case '"':
		tok, ok := dc.r.value()
		if ok {
			*dst = bodyjson.Unquote(tok)
		}
		return ok
	case 'n':
		return dc.r.null()
	}
	return dc.mismatch()
}

// content follows Content.UnmarshalJSON: a string (null counts as "") sets Raw, an array of
// blocks sets Structured, anything else is an error.
func (dc *jtDecoder) content(c *fwksched.Content) bool {
	switch dc.r.peek() {
	case '"':
		return dc.stringInto(&c.Raw)
	case 'n':
		c.Raw = ""
		return dc.r.null()
	case '[':
		var blocks []fwksched.ContentBlock
		typeErr := dc.typeErr
		dc.typeErr = false
		ok := dc.r.elements(func(n int) bool {
			blocks = append(blocks, fwksched.ContentBlock{})
			return dc.block(&blocks[n])
		})
		if !ok {
			return false
		}
		if dc.typeErr {
			// Content.UnmarshalJSON fails as a whole ("content format not supported").
			return true
		}
		dc.typeErr = typeErr
		if blocks == nil {
			blocks = []fwksched.ContentBlock{}
		}
		c.Structured = blocks
		return true
	}
	return dc.mismatch()
}

// block decodes one content block as encoding/json decodes into a fresh ContentBlock.
func (dc *jtDecoder) block(b *fwksched.ContentBlock) bool {
	return dc.object(func(i int) bool {
		switch i {
		case 0:
			return dc.stringInto(&b.Type)
		case 1:
			return dc.stringInto(&b.Text)
		case 2:
			return dc.object(func(i int) bool {
				if i == 0 {
					return dc.stringInto(&b.ImageURL.Url)
				}
				return dc.r.skip()
			}, urlFields)
		case 3:
			return dc.object(func(i int) bool {
				switch i {
				case 0:
					return dc.stringInto(&b.InputAudio.Data)
				case 1:
					return dc.stringInto(&b.InputAudio.Format)
				}
				return dc.r.skip()
			}, audioFields)
		case 4:
			return dc.object(func(i int) bool {
				if i == 0 {
					return dc.stringInto(&b.VideoURL.Url)
				}
				return dc.r.skip()
			}, urlFields)
		}
		return dc.r.skip()
	}, blockFields)
}

// object decodes a JSON object into a struct whose fields are names (null leaves it alone,
// a non-object is a type mismatch); field(i) consumes the value of field i, -1 for unknown.
func (dc *jtDecoder) object(field func(i int) bool, names []string) bool {
	switch dc.r.peek() {
	case 'n':
		return dc.r.null()
	case '{':
	default:
		return dc.mismatch()
	}
	return dc.r.members(func(tok []byte) bool {
		return field(jtFieldIndex(tok, names))
	})
}

// prompt follows Prompt.UnmarshalJSON: a string sets Raw, an array decodes into Strings,
// anything else (null included) is an error.
func (dc *jtDecoder) prompt(p *fwksched.Prompt) bool {
	switch dc.r.peek() {
	case '"':
		return dc.stringInto(&p.Raw)
	case '[':
		span, ok := dc.r.value()
		if !ok {
			return false
		}
		if err := json.Unmarshal(span, &p.Strings); err != nil {
			dc.typeErr = true
		}
		return true
	}
	return dc.mismatch()
}
