package epp

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
)

// Model is the model name every bench request asks for (the fake pods serve it).
const Model = "m"

var vocabulary = strings.Fields(`the of and to in is that for on with as by this are from be or at an
which it not can data model request prefill decode cache token latency throughput report section
table figure result system user context document retrieval answer question policy cluster node pod
memory compute network storage budget quarter revenue customer contract clause appendix summary`)

// chatRequest is an OpenAI chat completion request body.
type chatRequest struct {
	Model       string        `json:"model"`
	Messages    []chatMessage `json:"messages"`
	MaxTokens   int           `json:"max_tokens"`
	Temperature float64       `json:"temperature"`
	Stream      bool          `json:"stream"`
}

type chatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// ChatBody returns an OpenAI chat completion body of about size bytes (within 8 bytes for
// sizes from 256 up): a short system prompt and a user message made of a document (words
// with a line break every ~12 words, as in a pasted RAG context), both led by a marker unique
// to seed, so distinct seeds share no prompt prefix.
//
// The prompt's first block (the prefix indexes hash 64 bytes from the system message's role
// on) must differ too. With one system prompt for all seeds every body shared that block, and
// an llm-d P/D EPP sent every new body to the decode pods already holding it (prefix score
// above 0 against 0, the fake pods' queues being equal): to one pod when the first requests
// happened to be recorded before the next ones were scored. At 16 KB the 64 bodies then
// outgrew that pod's 8,192 blocks and, cycled, missed every time, so each request took a
// prefill leg, while an EPP whose first requests landed on several pods served nearly every
// request decode-only: two levels of cost per request between processes of one binary.
func ChatBody(size int, seed uint64) []byte { return chatBody(size, seed, false) }

// ChatStreamBody is ChatBody asking for a streamed answer ("stream": true).
func ChatStreamBody(size int, seed uint64) []byte { return chatBody(size, seed, true) }

func chatBody(size int, seed uint64, stream bool) []byte {
	req := chatRequest{Model: Model, MaxTokens: 128, Temperature: 0.7, Stream: stream, Messages: []chatMessage{
		{Role: "system", Content: "Session " + strconv.FormatUint(seed, 10) + ". You are a careful assistant. Answer from the documents provided."},
		{Role: "user"},
	}}
	rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	marker := "doc " + strconv.FormatUint(seed, 10) + ": "
	var text strings.Builder
	text.WriteString(marker)
	for i := 1; ; i++ {
		text.WriteString(vocabulary[rng.IntN(len(vocabulary))])
		if i%12 == 0 {
			text.WriteString("\n") // two bytes once JSON-escaped
		} else {
			text.WriteByte(' ')
		}
		if text.Len() > size {
			break
		}
	}
	full := text.String()
	// Shrink the document until the encoded body fits; each step removes the excess bytes.
	n := len(full)
	for {
		req.Messages[1].Content = full[:n]
		b, _ := json.Marshal(req)
		over := len(b) - size
		if over <= 0 || n <= len(marker) {
			return b
		}
		n -= max(1, over/2)
		n = max(n, len(marker))
	}
}

// BurstBody is a short chat turn with a prompt of its own (distinct from its first bytes).
func BurstBody(i int) []byte {
	b, _ := json.Marshal(chatRequest{Model: Model, MaxTokens: 64, Temperature: 0.7, Messages: []chatMessage{
		{Role: "user", Content: fmt.Sprintf("%d: independent question number %d, please answer briefly", i*7919, i)},
	}})
	return b
}

// CompletionBody is the model server's non-streaming answer, with usage for token accounting.
func CompletionBody(i, promptTokens int) []byte {
	return fmt.Appendf(nil, `{"id":"chatcmpl-%d","object":"chat.completion","created":1764633600,"model":%q,`+
		`"choices":[{"index":0,"message":{"role":"assistant","content":"The report's figures agree with the table in section 3."},`+
		`"finish_reason":"stop"}],"usage":{"prompt_tokens":%d,"completion_tokens":12,"total_tokens":%d}}`,
		i, Model, promptTokens, promptTokens+12)
}

// StreamedCompletion is the model server's streamed answer as vLLM sends it with
// stream_options.include_usage: one server-sent event per generated token, each a
// chat.completion.chunk of one word, then an event with empty choices and the usage, then
// [DONE]. events counts the token events; each event is one frame to the EPP, as Envoy relays
// an upstream that flushes every token.
func StreamedCompletion(i, promptTokens, events int) [][]byte {
	out := make([][]byte, 0, events+2)
	for e := range events {
		word := vocabulary[(i+e)%len(vocabulary)]
		out = append(out, fmt.Appendf(nil, `data: {"id":"chatcmpl-%d","object":"chat.completion.chunk","created":1764633600,"model":%q,`+
			`"choices":[{"index":0,"delta":{"content":" %s"},"logprobs":null,"finish_reason":null}]}`+"\n\n", i, Model, word))
	}
	out = append(out,
		fmt.Appendf(nil, `data: {"id":"chatcmpl-%d","object":"chat.completion.chunk","created":1764633600,"model":%q,"choices":[],`+
			`"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}}`+"\n\n", i, Model, promptTokens, events, promptTokens+events),
		[]byte("data: [DONE]\n\n"))
	return out
}

// StreamResponseHeaders are a streamed answer's response headers (no Content-Length).
func StreamResponseHeaders() map[string]string {
	return map[string]string{":status": "200", "content-type": "text/event-stream"}
}

// RequestHeaders are the headers Envoy forwards for a chat completion.
func RequestHeaders(id string, bodyLen int) map[string]string {
	return map[string]string{
		":method": "POST", ":path": "/v1/chat/completions", ":authority": "pdgate-bench.local", ":scheme": "http",
		"content-type": "application/json", "content-length": strconv.Itoa(bodyLen),
		"x-request-id": id, "user-agent": "pdgate-bench/1", "accept": "application/json",
	}
}

// ResponseHeaders are the model server's response headers as Envoy presents them.
func ResponseHeaders(bodyLen int) map[string]string {
	return map[string]string{":status": "200", "content-type": "application/json", "content-length": strconv.Itoa(bodyLen)}
}
