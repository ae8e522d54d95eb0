package tokenestimate

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"testing"

	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
)

// refEstimator is the estimate backend as it was before the single-pass packer (it copied
// every text into a pending buffer and packed it on flush); Estimate must agree with it
// token for token.
type refEstimator struct {
	sizes    *estimator // image and video sizing, unchanged
	pending  []byte
	tokens   []uint32
	features []fwksched.MultiModalFeature
}

func refEstimate(request *fwksched.LLMRequest, p EstimateParams) *fwksched.TokenizedPrompt {
	p.Defaults()
	if request == nil || request.Body == nil {
		return nil
	}
	e := &refEstimator{sizes: &estimator{p: p, headers: request.Headers}}
	b := request.Body
	switch {
	case b.ChatCompletions != nil:
		if len(b.ChatCompletions.Tools) > 0 {
			js, _ := json.Marshal(b.ChatCompletions.Tools)
			e.text(string(js))
		}
		for _, m := range b.ChatCompletions.Messages {
			e.flush() // each message starts on a token boundary
			e.text(m.Role)
			if m.Content.Raw != "" {
				e.text(m.Content.Raw)
			}
			for _, blk := range m.Content.Structured {
				e.block(blk)
			}
		}
	case b.Completions != nil:
		e.text(b.Completions.Prompt.PlainText())
	case b.Responses != nil:
		js, _ := json.Marshal([]map[string]any{{"instructions": b.Responses.Instructions}, {"tools": b.Responses.Tools}, {"input": b.Responses.Input}})
		e.text(string(js))
	case b.Conversations != nil:
		js, _ := json.Marshal(b.Conversations.Items)
		e.text(string(js))
	case b.Embeddings != nil:
		js, _ := json.Marshal(b.Embeddings.Input)
		e.text(string(js))
	default:
		return nil
	}
	e.flush()
	return &fwksched.TokenizedPrompt{TokenIDs: e.tokens, MultiModalFeatures: e.features}
}

func (e *refEstimator) text(s string) { e.pending = append(e.pending, s...) }

func (e *refEstimator) flush() {
	for len(e.pending) > 0 {
		var w [BytesPerToken]byte
		n := copy(w[:], e.pending)
		e.pending = e.pending[n:]
		e.tokens = append(e.tokens, binary.LittleEndian.Uint32(w[:]))
	}
	e.pending = e.pending[:0]
}

func (e *refEstimator) block(b fwksched.ContentBlock) {
	switch b.Type {
	case "text":
		e.text(b.Text)
	case "image_url":
		w, h := e.sizes.imageSize(b.ImageURL.Url)
		e.item("image", b.ImageURL.Url, e.sizes.imageTokens(w, h))
	case "video_url":
		e.item("video", b.VideoURL.Url, e.sizes.videoTokens())
	case "input_audio":
		n := (len(b.InputAudio.Data) + len(b.InputAudio.Format) + BytesPerToken - 1) / BytesPerToken
		e.item("audio", b.InputAudio.Format+":"+b.InputAudio.Data, max(n, 1))
	default:
		js, _ := json.Marshal(b)
		e.text(string(js))
	}
}

func (e *refEstimator) item(modality, content string, n int) {
	e.flush()
	h := fnv.New64a()
	_, _ = h.Write([]byte(content))
	sum := h.Sum64()
	tok := uint32(sum) ^ uint32(sum>>32)
	e.features = append(e.features, fwksched.MultiModalFeature{Modality: fwksched.Modality(modality),
		Hash: strconv.FormatUint(sum, 16), Offset: len(e.tokens), Length: n})
	for i := 0; i < n; i++ {
		e.tokens = append(e.tokens, tok)
	}
}

func sameEstimate(t *testing.T, req *fwksched.LLMRequest, p EstimateParams) {
	t.Helper()
	got, want := Estimate(req, p), refEstimate(req, p)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Estimate differs from the reference:\n got %+v\nwant %+v", got, want)
	}
}

// TestEstimateMatchesReference: token IDs, their count and the multimodal features are
// those of the previous implementation for every request shape, including texts whose
// lengths leave 0-3 bytes pending across messages, blocks and multimodal items.
func TestEstimateMatchesReference(t *testing.T) {
	img := pngDataURL(t, 64, 32)
	bodies := []string{
		`{"messages":[]}`,
		`{"messages":[{"role":"","content":""}]}`,
		`{"messages":[{"role":"user","content":"hello"}]}`,
		`{"messages":[{"role":"u","content":"a"},{"role":"as","content":"bcd"},{"role":"sys","content":"efghijk"}]}`,
		`{"messages":[{"role":"user","content":[{"type":"text","text":"abcd"},{"type":"text","text":"efgh"}]}]}`,
		`{"messages":[{"role":"user","content":[{"type":"text","text":"ab"},{"type":"image_url","image_url":{"url":"https://x/y.png"}},{"type":"text","text":"c"}]}]}`,
		`{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"` + img + `"}},{"type":"text","text":"hi"}]}]}`,
		`{"messages":[{"role":"user","content":[{"type":"video_url","video_url":{"url":"v"}},{"type":"input_audio","input_audio":{"data":"AAAAAAAA","format":"wav"}}]}]}`,
		`{"messages":[{"role":"user","content":[{"type":"image_embeds","image_embeds":"xyz"},{"type":"text","text":"tail"}]}]}`,
		`{"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],"messages":[{"role":"user","content":"q"}]}`,
	}
	for _, body := range bodies {
		for _, p := range []EstimateParams{{}, {ImageEstimator: "static", ImageStaticTokens: 3}} {
			sameEstimate(t, chatReq(t, body, map[string]string{HeaderVideoFPS: "2", HeaderVideoDuration: "1.5"}), p)
		}
	}
	for _, prompt := range []string{"", "a", "abcd", "abcdefghi", strings.Repeat("xyz", 1000)} {
		sameEstimate(t, &fwksched.LLMRequest{Body: &fwksched.LLMRequestBody{Completions: &fwksched.CompletionsRequest{Prompt: fwksched.Prompt{Raw: prompt}}}}, EstimateParams{})
	}
	sameEstimate(t, &fwksched.LLMRequest{Body: &fwksched.LLMRequestBody{Responses: &fwksched.ResponsesRequest{Input: "hi", Instructions: "be brief"}}}, EstimateParams{})
	sameEstimate(t, &fwksched.LLMRequest{Body: &fwksched.LLMRequestBody{Embeddings: &fwksched.EmbeddingsRequest{Input: []any{"a", "bc"}}}}, EstimateParams{})
	sameEstimate(t, &fwksched.LLMRequest{Body: &fwksched.LLMRequestBody{}}, EstimateParams{})
	sameEstimate(t, nil, EstimateParams{})

	// Random chats: every length modulo 4 of roles and texts, mixed with multimodal items.
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 300; i++ {
		var msgs []map[string]any
		for m := r.IntN(5); m >= 0; m-- {
			role := strings.Repeat("r", r.IntN(6))
			if r.IntN(2) == 0 {
				msgs = append(msgs, map[string]any{"role": role, "content": strings.Repeat("é", r.IntN(9)) + strings.Repeat("t", r.IntN(9))})
				continue
			}
			var blocks []map[string]any
			for k := r.IntN(4); k >= 0; k-- {
				switch r.IntN(4) {
				case 0:
					blocks = append(blocks, map[string]any{"type": "image_url", "image_url": map[string]any{"url": fmt.Sprint("u", r.IntN(3))}})
				case 1:
					blocks = append(blocks, map[string]any{"type": "input_audio", "input_audio": map[string]any{"data": strings.Repeat("A", r.IntN(10)), "format": "wav"}})
				default:
					blocks = append(blocks, map[string]any{"type": "text", "text": strings.Repeat("b", r.IntN(11))})
				}
			}
			msgs = append(msgs, map[string]any{"role": role, "content": blocks})
		}
		js, _ := json.Marshal(map[string]any{"messages": msgs})
		sameEstimate(t, chatReq(t, string(js), nil), EstimateParams{ImageEstimator: "static", ImageStaticTokens: 1 + r.IntN(3)})
	}
}

func FuzzEstimateMatchesReference(f *testing.F) {
	f.Add(`{"messages":[{"role":"user","content":"x"}]}`)
	f.Add(`{"messages":[{"role":"u","content":[{"type":"text","text":"abc"},{"type":"image_url","image_url":{"url":"q"}},{"type":"x"}]}]}`)
	f.Fuzz(func(t *testing.T, body string) {
		var c fwksched.ChatCompletionsRequest
		if json.Unmarshal([]byte(body), &c) != nil {
			return
		}
		sameEstimate(t, &fwksched.LLMRequest{Body: &fwksched.LLMRequestBody{ChatCompletions: &c}}, EstimateParams{ImageEstimator: "static"})
	})
}

// BenchmarkEstimate: the estimate of a chat request is one pass over the prompt bytes with
// one allocation for the token IDs (ref: the previous implementation).
func BenchmarkEstimate(b *testing.B) {
	for _, size := range []int{1 << 10, 16 << 10, 220 << 10} {
		text := strings.Repeat("The quick brown fox jumps over the lazy dog. ", size/45+1)[:size]
		c := &fwksched.ChatCompletionsRequest{Messages: []fwksched.Message{{Role: "system", Content: fwksched.Content{Raw: "You are helpful."}},
			{Role: "user", Content: fwksched.Content{Raw: text}}}}
		req := &fwksched.LLMRequest{Body: &fwksched.LLMRequestBody{ChatCompletions: c}}
		for _, impl := range []struct {
			name string
			fn   func(*fwksched.LLMRequest, EstimateParams) *fwksched.TokenizedPrompt
		}{{"new", Estimate}, {"ref", refEstimate}} {
			b.Run(fmt.Sprintf("%dKB/%s", size>>10, impl.name), func(b *testing.B) {
				b.SetBytes(int64(size))
				b.ReportAllocs()
				for b.Loop() {
					_ = impl.fn(req, EstimateParams{})
				}
			})
		}
	}
}
