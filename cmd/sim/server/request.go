package server

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"strings"

	"github.com/pdgate/pdgate/plugins/wire/bytetokens"
)

// API kinds.
const (
	apiChat        = "chat"
	apiCompletions = "completions"
	apiResponses   = "responses"
)

// simRequest is the part of an OpenAI request the simulator acts on; body keeps every field
// for the dialect parsers.
type simRequest struct {
	api          string
	body         map[string]json.RawMessage
	model        string
	stream       bool
	includeUsage bool
	maxTokens    int // -1 when absent
	tokens       []uint32
	mmItems      []string // hash keys of multimodal items
	promptHash   string
}

// badRequest is a client error with its message.
type badRequest struct{ msg string }

func (e *badRequest) Error() string { return e.msg }

func badf(format string, a ...any) error { return &badRequest{msg: fmt.Sprintf(format, a...)} }

func parseRequest(api string, raw []byte, mmTokens int) (*simRequest, error) {
	var body map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&body); err != nil || body == nil {
		return nil, badf("request body must be a JSON object")
	}
	r := &simRequest{api: api, body: body, maxTokens: -1}
	if v, ok := body["model"]; ok {
		if err := json.Unmarshal(v, &r.model); err != nil {
			return nil, badf("model must be a string")
		}
	}
	if v, ok := body["stream"]; ok && string(v) != "null" {
		if err := json.Unmarshal(v, &r.stream); err != nil {
			return nil, badf("stream must be a boolean")
		}
	}
	if v, ok := body["stream_options"]; ok && string(v) != "null" {
		var so struct {
			IncludeUsage bool `json:"include_usage"`
		}
		if err := json.Unmarshal(v, &so); err != nil {
			return nil, badf("stream_options must be an object")
		}
		r.includeUsage = so.IncludeUsage
	}
	limitKeys := []string{"max_tokens", "max_completion_tokens"}
	if api == apiResponses {
		limitKeys = []string{"max_output_tokens"}
	}
	for _, k := range limitKeys {
		v, ok := body[k]
		if !ok || string(v) == "null" {
			continue
		}
		var n int
		if err := json.Unmarshal(v, &n); err != nil || n < 0 {
			return nil, badf("%s must be a non-negative integer", k)
		}
		if r.maxTokens < 0 || n < r.maxTokens {
			r.maxTokens = n
		}
	}
	var err error
	switch api {
	case apiChat:
		err = r.parseChat(mmTokens)
	case apiCompletions:
		err = r.parseCompletion()
	case apiResponses:
		err = r.parseResponses()
	}
	if err != nil {
		return nil, err
	}
	if len(r.tokens) == 0 {
		return nil, badf("prompt is empty")
	}
	h := sha256.New()
	var b [4]byte
	for _, t := range r.tokens {
		binary.LittleEndian.PutUint32(b[:], t)
		h.Write(b[:])
	}
	r.promptHash = hex.EncodeToString(h.Sum(nil)[:16])
	return r, nil
}

// bytesToTokens is the simulator's tokenizer: plugins/wire/bytetokens (llm-d's estimate, bytes
// zero-padded to 4 and read as little-endian uint32), the one the EPP's estimate uses.
func bytesToTokens(dst []uint32, b []byte) []uint32 { return bytetokens.Tokenize(dst, b) }

func (r *simRequest) parseCompletion() error {
	if v, ok := r.body["prompt_token_ids"]; ok {
		return r.intTokens(v, "prompt_token_ids")
	}
	v, ok := r.body["prompt"]
	if !ok {
		return badf("prompt is required")
	}
	var s string
	if err := json.Unmarshal(v, &s); err == nil {
		r.tokens = bytesToTokens(nil, []byte(s))
		return nil
	}
	var ss []string
	if err := json.Unmarshal(v, &ss); err == nil {
		if len(ss) != 1 {
			return badf("prompt: the simulator serves one prompt per request, got %d", len(ss))
		}
		r.tokens = bytesToTokens(nil, []byte(ss[0]))
		return nil
	}
	return r.intTokens(v, "prompt")
}

func (r *simRequest) intTokens(v json.RawMessage, field string) error {
	var ids []int64
	if err := json.Unmarshal(v, &ids); err != nil {
		return badf("%s must be a string or an array of token ids", field)
	}
	for _, id := range ids {
		if id < 0 || id > 1<<32-1 {
			return badf("%s: token id %d out of range", field, id)
		}
		r.tokens = append(r.tokens, uint32(id))
	}
	return nil
}

type chatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

type contentPart struct {
	Type     string `json:"type"`
	Text     string `json:"text"`
	ImageURL *struct {
		URL string `json:"url"`
	} `json:"image_url"`
	AudioURL *struct {
		URL string `json:"url"`
	} `json:"audio_url"`
	InputAudio json.RawMessage `json:"input_audio"`
}

func (r *simRequest) parseChat(mmTokens int) error {
	if v, ok := r.body["prompt_token_ids"]; ok {
		return r.intTokens(v, "prompt_token_ids")
	}
	var msgs []chatMessage
	v, ok := r.body["messages"]
	if !ok {
		return badf("messages is required")
	}
	if err := json.Unmarshal(v, &msgs); err != nil {
		return badf("messages must be an array of {role, content}")
	}
	if len(msgs) == 0 {
		return badf("messages is empty")
	}
	// The chat template is plugins/wire/bytetokens' (the EPP's estimate renders requests the same
	// way, so its block keys are the ones this engine reports in KV events): the tools' JSON,
	// then each message's role and content text, tokenized as one stream; a multimodal item
	// starts on a token boundary.
	var pk bytetokens.Packer
	if v, ok := r.body["tools"]; ok && string(v) != "null" {
		var tools []any
		if err := json.Unmarshal(v, &tools); err != nil {
			return badf("tools must be an array")
		}
		if len(tools) > 0 {
			js, err := json.Marshal(tools)
			if err != nil {
				return badf("tools: %v", err)
			}
			pk.Bytes(js)
		}
	}
	for i, m := range msgs {
		if m.Role == "" {
			return badf("messages[%d].role is required", i)
		}
		if len(m.Content) == 0 || string(m.Content) == "null" {
			pk.ChatMessage(m.Role, "")
			continue
		}
		var s string
		if err := json.Unmarshal(m.Content, &s); err == nil {
			pk.ChatMessage(m.Role, s)
			continue
		}
		var parts []contentPart
		if err := json.Unmarshal(m.Content, &parts); err != nil {
			return badf("messages[%d].content must be a string or an array of parts", i)
		}
		pk.ChatMessage(m.Role, "")
		for j, p := range parts {
			key := ""
			switch p.Type {
			case "text":
				pk.Text(p.Text)
				continue
			case "image_url":
				if p.ImageURL != nil {
					key = "image:" + p.ImageURL.URL
				}
			case "audio_url":
				if p.AudioURL != nil {
					key = "audio:" + p.AudioURL.URL
				}
			case "input_audio":
				key = "input_audio:" + string(p.InputAudio)
			default:
				return badf("messages[%d].content[%d].type %q is not supported", i, j, p.Type)
			}
			if key == "" || strings.HasSuffix(key, ":") {
				return badf("messages[%d].content[%d] has no %s", i, j, p.Type)
			}
			r.mmItems = append(r.mmItems, itemHash(key))
			// each asset starts on a token boundary, then its placeholder tokens
			h := fnv.New32a()
			h.Write([]byte(key))
			pk.Repeat(h.Sum32(), mmTokens)
		}
	}
	pk.Flush()
	r.tokens = pk.Tokens
	return nil
}

func itemHash(key string) string {
	s := sha256.Sum256([]byte(key))
	return hex.EncodeToString(s[:12])
}

func (r *simRequest) parseResponses() error {
	v, ok := r.body["input"]
	if !ok {
		return badf("input is required")
	}
	var s string
	if err := json.Unmarshal(v, &s); err == nil {
		r.tokens = bytesToTokens(nil, []byte("user\n"+s))
		return nil
	}
	var items []chatMessage
	if err := json.Unmarshal(v, &items); err != nil {
		return badf("input must be a string or an array of messages")
	}
	var text bytes.Buffer
	for i, m := range items {
		if i > 0 {
			text.WriteByte('\n')
		}
		text.WriteString(m.Role + "\n")
		var cs string
		if err := json.Unmarshal(m.Content, &cs); err == nil {
			text.WriteString(cs)
			continue
		}
		var parts []contentPart
		if err := json.Unmarshal(m.Content, &parts); err != nil {
			return badf("input[%d].content must be a string or an array of parts", i)
		}
		for _, p := range parts {
			text.WriteString(p.Text)
		}
	}
	r.tokens = bytesToTokens(nil, text.Bytes())
	return nil
}
