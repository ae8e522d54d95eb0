package openaiparser

import (
	"bytes"
	"strconv"
	"strings"

	fwkrc "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/requestcontrol"
)

// Object types whose usage names its fields prompt_tokens/completion_tokens or
// input_tokens/output_tokens, as GIE's openai-parser tells them apart.
const (
	objectChatCompletion      = "chat.completion"
	objectChatCompletionChunk = "chat.completion.chunk"
	objectTextCompletion      = "text_completion"
	objectResponse            = "response"
	objectConversation        = "conversation"
)

// eventStream reports a streamed response (text/event-stream), whose chunks GIE's parser reads:
// any key that folds to content-type with a value containing it in any case. The gateway's
// lower-case key is looked up first, since a streamed answer asks once per token.
func eventStream(headers map[string]string) bool {
	if v, ok := headers["content-type"]; ok && strings.Contains(strings.ToLower(v), "text/event-stream") {
		return true
	}
	for k, v := range headers {
		if strings.EqualFold(k, "content-type") && strings.Contains(strings.ToLower(v), "text/event-stream") {
			return true
		}
	}
	return false
}

// usageOf reads the usage of a non-streaming response body in one pass of the scanner, as GIE's
// openai-parser reads it after decoding the whole body into a map (its cost at 1 KB was 6 % of
// a P/D request's CPU in the EPP): the top-level "usage" object, its field names chosen by the
// top-level "object" string; each key exact, the last of a repeated key winning; a number
// truncated to int; "usage" null or absent: no usage. ok is false for what GIE must decide
// (not a JSON object, a syntax error), so that its error text is the one returned.
//
// Where GIE's parser panics on a value of the wrong type ("usage" or "prompt_token_details" not
// an object, a count that is not a number), that value counts as absent; a count outside
// float64's range counts as absent too, where GIE fails the whole body.
func usageOf(body []byte) (usage *fwkrc.Usage, ok bool) {
	s := scanner{b: body}
	if s.peek() != '{' {
		return nil, false
	}
	var object string
	var usageStart, usageEnd int
	walked := s.members(func(tok []byte, plain bool) bool {
		start := s.i
		switch {
		case keyIs(tok, plain, "object"):
			object = ""
			if s.peek() == '"' {
				st, en, plainV, ok := s.str()
				if ok {
					object = unquote(body[st:en], plainV)
				}
				return ok
			}
		case keyIs(tok, plain, "usage"):
			if !s.skip() {
				return false
			}
			usageStart, usageEnd = start, s.i
			return true
		}
		return s.skip()
	})
	if walked {
		s.ws()
		walked = s.i == len(body)
	}
	if !walked {
		return nil, false
	}
	u := counts(body[usageStart:usageEnd])
	if u == nil {
		return nil, true
	}
	out := &fwkrc.Usage{TotalTokens: u.get("total_tokens")}
	in, outTok := "prompt_tokens", "completion_tokens"
	switch {
	case strings.HasPrefix(object, objectResponse) || strings.HasPrefix(object, objectConversation):
		in, outTok = "input_tokens", "output_tokens"
	case object == objectChatCompletion || object == objectChatCompletionChunk || object == objectTextCompletion:
	default:
		// Either naming: the Responses API's wins where both are present, as in GIE.
		if u.has("input_tokens") {
			in = "input_tokens"
		}
		if u.has("output_tokens") {
			outTok = "output_tokens"
		}
	}
	out.PromptTokens, out.CompletionTokens = u.get(in), u.get(outTok)
	// GIE reads "prompt_token_details" (not OpenAI's "prompt_tokens_details"); kept so that
	// usage accounting stays GIE's.
	if d := counts(u.value("prompt_token_details")); d != nil && d.has("cached_tokens") {
		out.PromptTokenDetails = &fwkrc.PromptTokenDetails{CachedTokens: d.get("cached_tokens")}
	}
	return out, true
}

// usageCounts are one JSON object's members (an already validated object), looked up by
// exact key from the last: the member a map decode would keep.
type usageCounts []member

// counts reads the object v; nil when v is absent, null or not an object.
func counts(v []byte) usageCounts {
	s := scanner{b: v}
	if len(v) == 0 || s.peek() != '{' {
		return nil
	}
	u := make(usageCounts, 0, 8)
	s.members(func(tok []byte, plain bool) bool {
		start := s.i
		s.skip()
		u = append(u, member{key: tok, plain: plain, value: v[start:s.i]})
		return true
	})
	return u
}

// value is the last member named key, or nil.
func (u usageCounts) value(key string) []byte {
	for i := len(u) - 1; i >= 0; i-- {
		if keyIs(u[i].key, u[i].plain, key) {
			return u[i].value
		}
	}
	return nil
}

// number is key's count as GIE's map decode holds it (float64); ok is false when key is
// absent or its value is not a number within float64's range.
func (u usageCounts) number(key string) (f float64, ok bool) {
	v := u.value(key)
	if len(v) == 0 || v[0] != '-' && (v[0] < '0' || v[0] > '9') {
		return 0, false
	}
	f, err := strconv.ParseFloat(string(v), 64)
	if err != nil {
		return 0, false
	}
	return f, true
}

func (u usageCounts) has(key string) bool {
	_, ok := u.number(key)
	return ok
}

func (u usageCounts) get(key string) int {
	f, _ := u.number(key)
	return int(f)
}

// noStreamUsage reports that GIE's openai-parser finds no usage in a streamed chunk, without
// decoding it. GIE decodes every "data: " line into a struct with usage, response and type
// fields (encoding/json: keys matched without regard to case, the struct kept from line to
// line); a token's chunk carries none of those keys, so each decode sets nothing and the
// chunk's usage is nil. Each line's top-level keys are read instead (topLevelKeysAvoid): a line
// that does not open an object, a top-level key with an escape, or one that folds to usage,
// response or type answers false, and GIE's code reads the chunk. The decode per token was most
// of a streamed answer's parsing cost: a chunk of ~200 bytes, each of the hundreds in an answer.
func noStreamUsage(chunk []byte) bool {
	for len(chunk) > 0 {
		line := chunk
		if i := bytes.IndexByte(chunk, '\n'); i >= 0 {
			line, chunk = chunk[:i], chunk[i+1:]
		} else {
			chunk = nil
		}
		content, ok := bytes.CutPrefix(line, []byte(streamDataPrefix))
		if !ok || string(content) == "[DONE]" {
			continue
		}
		if !topLevelKeysAvoid(content, "usage", "response", "type") {
			return false
		}
	}
	return true
}

// streamDataPrefix starts the server-sent-event lines GIE's parser decodes.
const streamDataPrefix = "data: "

// topLevelKeysAvoid reports that b opens a JSON object (after white space) none of whose
// top-level keys equals one of names under Unicode case folding, every top-level key free of
// escapes. It follows the structure only (strings, nesting, commas), not the grammar: for
// valid JSON it finds the keys encoding/json finds; for invalid JSON its answer does not
// matter, since encoding/json checks a whole value before it sets any field, so a line that is
// not valid JSON sets nothing in GIE's decode either.
func topLevelKeysAvoid(b []byte, names ...string) bool {
	s := scanner{b: b}
	s.ws()
	if s.i == len(b) || b[s.i] != '{' {
		return false
	}
	depth, expectKey := 0, false
	for i := s.i; i < len(b); i++ {
		switch b[i] {
		case '{', '[':
			depth++
			expectKey = depth == 1
		case '}', ']':
			depth--
		case ',':
			expectKey = depth == 1
		case '"':
			end, plain := stringEnd(b, i+1)
			if end < 0 {
				return true // unterminated: not valid JSON
			}
			if expectKey {
				if !plain {
					return false
				}
				for _, n := range names {
					if strings.EqualFold(string(b[i+1:end]), n) {
						return false
					}
				}
				expectKey = false
			}
			i = end
		}
	}
	return true
}

// stringEnd returns the index of the quote that closes the string whose contents start at
// b[from], and whether the contents hold no backslash; -1 when it is not closed. It is not the
// scanner's str: str validates every byte's class, which the key walk does not need (a line
// that is not valid JSON sets nothing in GIE's decode), and reading a streamed chunk's strings
// with it cost 5 % of a streamed request's instructions (f5e6fde, reverted).
func stringEnd(b []byte, from int) (end int, plain bool) {
	plain = true
	for j := from; j < len(b); {
		q := bytes.IndexByte(b[j:], '"')
		if q < 0 {
			return -1, plain
		}
		q += j
		if bytes.IndexByte(b[j:q], '\\') < 0 {
			return q, plain
		}
		plain = false
		// The quote closes the string unless an odd run of backslashes precedes it.
		n := 0
		for k := q - 1; k >= from && b[k] == '\\'; k-- {
			n++
		}
		if n%2 == 0 {
			return q, plain
		}
		j = q + 1
	}
	return -1, plain
}
