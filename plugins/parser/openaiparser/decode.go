package openaiparser

import (
	"encoding/json"
	"errors"
	"fmt"

	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
)

// decoded is what one pass over a request body yields.
type decoded struct {
	body    *fwksched.LLMRequestBody
	model   string // the last top-level "model" (exact key, as the director's map lookup)
	modelOK bool   // ... and it is a JSON string
	// modelStart and modelEnd are that string's span in the body, quotes included.
	modelStart, modelEnd int
	stream               bool // the last top-level "stream" is true
	members              []member
}

// member is one top-level key token and the span of its value in the body.
type member struct {
	key   []byte // the key token, quotes included
	plain bool   // the key has no escapes and no non-ASCII bytes
	value []byte
}

// decoder fills the API struct GIE's openai-parser fills, with encoding/json's semantics for
// every field (case-insensitive keys, last duplicate wins and merges into what an earlier one
// decoded, null leaves scalars alone, a type mismatch rejects the body). The large fields
// (chat messages and their text, the completions prompt) are decoded by hand straight from the
// bytes; small ones are handed to encoding/json on their own span, which gives the exact
// semantics at a cost proportional to their size.
type decoder struct {
	s       scanner
	typeErr bool
	d       decoded
}

// API field names, in the order the per-API switch uses.
var (
	chatFields         = []string{"messages", "tools", "documents", "chat_template", "return_assistant_tokens_mask", "continue_final_message", "add_generation_prompt", "chat_template_kwargs", "cache_salt"}
	completionsFields  = []string{"prompt", "cache_salt"}
	responsesFields    = []string{"input", "instructions", "tools", "cache_salt"}
	conversationFields = []string{"items", "metadata", "cache_salt"}
	embeddingsFields   = []string{"input", "cache_salt"}
	messageFields      = []string{"role", "content"}
	blockFields        = []string{"type", "text", "image_url", "input_audio", "video_url"}
	urlFields          = []string{"url"}
	audioFields        = []string{"data", "format"}
	folded             = map[string]string{}
)

func init() {
	for _, names := range [][]string{chatFields, completionsFields, responsesFields, conversationFields, embeddingsFields, messageFields, blockFields, urlFields, audioFields} {
		for _, n := range names {
			folded[n] = string(foldInto(nil, []byte(n)))
		}
	}
}

// fieldIndex matches a key token against struct field names the way encoding/json does.
func fieldIndex(tok []byte, plain bool, names []string) int {
	key := tok[1 : len(tok)-1]
	if !plain {
		key = []byte(unquote(tok, false))
	}
	return keyIndex(key, names)
}

// keyIndex matches an unescaped key against struct field names: an exact match first, then a
// case-folded one; -1 when the key is not a field. Keys fold into a stack buffer, so a key
// that differs from its field only in case allocates nothing.
func keyIndex(key []byte, names []string) int {
	for i, n := range names {
		if string(key) == n {
			return i
		}
	}
	var buf [64]byte
	fk := foldInto(buf[:0], key)
	for i, n := range names {
		if string(fk) == folded[n] {
			return i
		}
	}
	return -1
}

// keyIs reports whether the key token is exactly name (after unescaping).
func keyIs(tok []byte, plain bool, name string) bool {
	if plain {
		return string(tok[1:len(tok)-1]) == name
	}
	return unquote(tok, false) == name
}

var (
	errSyntax    = errors.New("syntax")
	errNotObject = errors.New("not a JSON object")
)

// decodeFast decodes body for api in one pass. It returns errSyntax when the body is not
// valid JSON, and the API's validation error when it is but does not fit the API.
func decodeFast(body []byte, api string) (*decoded, error) {
	dc := &decoder{s: scanner{b: body}}
	if dc.s.peek() != '{' {
		return nil, errNotObject
	}
	out := &fwksched.LLMRequestBody{}
	var field func(tok []byte, plain bool) bool
	switch api {
	case "chat":
		r := &fwksched.ChatCompletionsRequest{}
		out.ChatCompletions = r
		field = func(tok []byte, plain bool) bool { return dc.chatField(r, fieldIndex(tok, plain, chatFields)) }
	case "responses":
		r := &fwksched.ResponsesRequest{}
		out.Responses = r
		targets := []any{&r.Input, &r.Instructions, &r.Tools, &r.CacheSalt}
		field = func(tok []byte, plain bool) bool {
			return dc.delegate(targets, fieldIndex(tok, plain, responsesFields))
		}
	case "conversations":
		r := &fwksched.ConversationsRequest{}
		out.Conversations = r
		targets := []any{&r.Items, &r.Metadata, &r.CacheSalt}
		field = func(tok []byte, plain bool) bool {
			return dc.delegate(targets, fieldIndex(tok, plain, conversationFields))
		}
	case "embeddings":
		r := &fwksched.EmbeddingsRequest{}
		out.Embeddings = r
		targets := []any{&r.Input, &r.CacheSalt}
		field = func(tok []byte, plain bool) bool {
			return dc.delegate(targets, fieldIndex(tok, plain, embeddingsFields))
		}
	default:
		r := &fwksched.CompletionsRequest{}
		out.Completions = r
		field = func(tok []byte, plain bool) bool {
			switch fieldIndex(tok, plain, completionsFields) {
			case 0:
				return dc.prompt(&r.Prompt)
			case 1:
				return dc.delegate([]any{nil, &r.CacheSalt}, 1)
			}
			return dc.skip()
		}
	}
	ok := dc.s.members(func(tok []byte, plain bool) bool {
		start := dc.s.i
		if !field(tok, plain) {
			return false
		}
		v := body[start:dc.s.i]
		dc.d.members = append(dc.d.members, member{key: tok, plain: plain, value: v})
		switch {
		case keyIs(tok, plain, "model"):
			dc.d.modelOK = v[0] == '"'
			dc.d.model = ""
			dc.d.modelStart, dc.d.modelEnd = start, dc.s.i
			if dc.d.modelOK {
				dc.d.model = unquote(v, false)
			}
		case keyIs(tok, plain, "stream"):
			dc.d.stream = string(v) == "true"
		}
		return true
	})
	if ok {
		dc.s.ws()
		ok = dc.s.i == len(body)
	}
	if !ok {
		return nil, errSyntax
	}
	dc.d.body = out
	if dc.typeErr {
		return &dc.d, errAPI
	}
	return &dc.d, nil
}

var errAPI = errors.New("api")

func (dc *decoder) skip() bool { return dc.s.skip() }

// delegate decodes the value into targets[i] with encoding/json (exact semantics, including
// merging into what a duplicate key decoded earlier); i < 0 skips an unknown key.
func (dc *decoder) delegate(targets []any, i int) bool {
	if i < 0 {
		return dc.s.skip()
	}
	span, ok := dc.s.value()
	if !ok {
		return false
	}
	if err := json.Unmarshal(span, targets[i]); err != nil {
		dc.typeErr = true
	}
	return true
}

func (dc *decoder) chatField(r *fwksched.ChatCompletionsRequest, i int) bool {
	switch i {
	case -1:
		return dc.s.skip()
	case 0:
		return dc.messages(&r.Messages)
	}
	targets := [...]any{nil, &r.Tools, &r.Documents, &r.ChatTemplate, &r.ReturnAssistantTokensMask,
		&r.ContinueFinalMessage, &r.AddGenerationPrompt, &r.ChatTemplateKWArgs, &r.CacheSalt}
	return dc.delegate(targets[:], i)
}

// messages decodes an array of messages into *dst as encoding/json decodes into an existing
// slice: elements are decoded over what is already there (a duplicate "messages" key merges),
// the slice is cut to the new length, and an empty array gives an empty, non-nil slice.
func (dc *decoder) messages(dst *[]fwksched.Message) bool {
	switch dc.s.peek() {
	case 'n':
		*dst = nil
		return dc.s.literal("null")
	case '[':
	default:
		dc.typeErr = true
		return dc.s.skip()
	}
	msgs := *dst
	count := 0
	ok := dc.s.elements(func(n int) bool {
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

func (dc *decoder) message(m *fwksched.Message) bool {
	return dc.object(func(i int) bool {
		switch i {
		case 0:
			return dc.stringInto(&m.Role)
		case 1:
			return dc.content(&m.Content)
		}
		return dc.s.skip()
	}, messageFields)
}

// stringInto decodes a JSON string into *dst; null leaves it alone, anything else is a type
// mismatch.
func (dc *decoder) stringInto(dst *string) bool {
	switch dc.s.peek() {
	case '"':
		start, end, plain, ok := dc.s.str()
		if ok {
			*dst = unquoteText(dc.s.b[start:end], plain, dc.s.ascii)
		}
		return ok
	case 'n':
		return dc.s.literal("null")
	}
	dc.typeErr = true
	return dc.s.skip()
}

// content follows Content.UnmarshalJSON: a string (null counts as "") sets Raw, an array of
// blocks sets Structured, anything else is an error.
func (dc *decoder) content(c *fwksched.Content) bool {
	switch dc.s.peek() {
	case '"':
		return dc.stringInto(&c.Raw)
	case 'n':
		c.Raw = ""
		return dc.s.literal("null")
	case '[':
		var blocks []fwksched.ContentBlock
		typeErr := dc.typeErr
		dc.typeErr = false
		ok := dc.s.elements(func(n int) bool {
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
	dc.typeErr = true
	return dc.s.skip()
}

// block decodes one content block as encoding/json decodes into a fresh ContentBlock.
func (dc *decoder) block(b *fwksched.ContentBlock) bool {
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
				return dc.s.skip()
			}, urlFields)
		case 3:
			return dc.object(func(i int) bool {
				switch i {
				case 0:
					return dc.stringInto(&b.InputAudio.Data)
				case 1:
					return dc.stringInto(&b.InputAudio.Format)
				}
				return dc.s.skip()
			}, audioFields)
		case 4:
			return dc.object(func(i int) bool {
				if i == 0 {
					return dc.stringInto(&b.VideoURL.Url)
				}
				return dc.s.skip()
			}, urlFields)
		}
		return dc.s.skip()
	}, blockFields)
}

// object decodes a JSON object into a struct whose fields are names (null leaves it alone,
// a non-object is a type mismatch); field(i) consumes the value of field i, -1 for unknown.
func (dc *decoder) object(field func(i int) bool, names []string) bool {
	switch dc.s.peek() {
	case 'n':
		return dc.s.literal("null")
	case '{':
	default:
		dc.typeErr = true
		return dc.s.skip()
	}
	return dc.s.members(func(tok []byte, plain bool) bool {
		return field(fieldIndex(tok, plain, names))
	})
}

// prompt follows Prompt.UnmarshalJSON: a string sets Raw, an array decodes into Strings,
// anything else (null included) is an error.
func (dc *decoder) prompt(p *fwksched.Prompt) bool {
	switch dc.s.peek() {
	case '"':
		return dc.stringInto(&p.Raw)
	case '[':
		span, ok := dc.s.value()
		if !ok {
			return false
		}
		if err := json.Unmarshal(span, &p.Strings); err != nil {
			dc.typeErr = true
		}
		return true
	}
	dc.typeErr = true
	return dc.s.skip()
}

// checkAPI applies GIE's per-API validation to a decoded body.
func checkAPI(b *fwksched.LLMRequestBody) bool {
	switch {
	case b.ChatCompletions != nil:
		return len(b.ChatCompletions.Messages) > 0
	case b.Completions != nil:
		return !b.Completions.Prompt.IsEmpty()
	case b.Responses != nil:
		return b.Responses.Input != nil
	case b.Conversations != nil:
		return len(b.Conversations.Items) > 0
	case b.Embeddings != nil:
		return b.Embeddings.Input != nil
	}
	return false
}

// apiError is GIE's openai-parser text for a body that is JSON but does not fit the API.
func apiError(api string) error {
	switch api {
	case "conversations":
		return errors.New("invalid conversations request: must have items field")
	case "responses":
		return errors.New("invalid responses request: must have input field")
	case "chat":
		return errors.New("invalid chat completions request: must have valid messages field")
	case "embeddings":
		return errors.New("invalid embeddings request: must have input field")
	}
	return errors.New("invalid completions request: must have prompt field")
}

// bodyMapError reproduces the error text GIE's first decode (into map[string]any) gives for a
// body that is not a JSON object; nil when that decode would succeed (a null body).
func bodyMapError(body []byte) error {
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		return fmt.Errorf("error unmarshaling request bodyMap: %w", err)
	}
	return nil
}
