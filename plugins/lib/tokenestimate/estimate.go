// Package tokenestimate is llm-d's tokenizer-free token estimate (text packed 4 bytes a token,
// images and video by size hints). It is a library because the token-producer plugin, the
// profile handler (combined-mode threshold), the prefix decider and the precise prefix cache
// all estimate a prompt the same way and must not import one another.
package tokenestimate

import (
	"bytes"
	"cmp"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image"
	_ "image/gif"  // register decoders for data-URL images
	_ "image/jpeg" // register decoders for data-URL images
	_ "image/png"  // register decoders for data-URL images
	"math"
	"strconv"
	"strings"

	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/wire/bytetokens"
	"github.com/pdgate/pdgate/plugins/wire/protocol"
)

// BytesPerToken is the estimate backend's token width (llm-d's value).
const BytesPerToken = bytetokens.BytesPerToken

// Video hint headers (llm-d's names).
const (
	HeaderVideoFPS        = "x-llm-d-video-fps"
	HeaderVideoDuration   = "x-llm-d-video-duration-seconds"
	HeaderVideoResolution = "x-llm-d-video-resolution"
)

// EstimateParams tune the tokenizer-free estimate.
type EstimateParams struct {
	// ImageEstimator: "dynamic" (width×height/ImageFactor, decoded from data URLs, else the
	// default resolution) or "static" (ImageStaticTokens per image).
	ImageEstimator    string `json:"imageEstimator,omitempty"`
	ImageFactor       int    `json:"imageFactor,omitempty"`
	ImageStaticTokens int    `json:"imageStaticTokens,omitempty"`
	DefaultWidth      int    `json:"defaultWidth,omitempty"`
	DefaultHeight     int    `json:"defaultHeight,omitempty"`
	// Video: sampled frames = ceil(duration × fps), each costing one default-resolution image
	// unless x-llm-d-video-resolution says otherwise.
	VideoFPS             float64 `json:"videoFPS,omitempty"`
	VideoDurationSeconds float64 `json:"videoDurationSeconds,omitempty"`
}

// Defaults fills the unset (zero) knobs with llm-d's defaults.
func (p *EstimateParams) Defaults() {
	p.ImageEstimator = cmp.Or(p.ImageEstimator, "dynamic")
	p.ImageFactor = cmp.Or(p.ImageFactor, 1024)
	p.ImageStaticTokens = cmp.Or(p.ImageStaticTokens, 256)
	p.DefaultWidth = cmp.Or(p.DefaultWidth, 640)
	p.DefaultHeight = cmp.Or(p.DefaultHeight, 360)
	p.VideoFPS = cmp.Or(p.VideoFPS, 1)
	p.VideoDurationSeconds = cmp.Or(p.VideoDurationSeconds, 10)
}

// Validate rejects knobs the estimate cannot use, naming the field.
func (p EstimateParams) Validate() error {
	switch p.ImageEstimator {
	case "dynamic", "static":
	default:
		return fmt.Errorf("estimate.imageEstimator must be dynamic or static, got %q", p.ImageEstimator)
	}
	if p.ImageFactor < 1 || p.ImageStaticTokens < 1 || p.DefaultWidth < 1 || p.DefaultHeight < 1 {
		return fmt.Errorf("estimate.imageFactor, imageStaticTokens, defaultWidth and defaultHeight must be >= 1")
	}
	if !(p.VideoFPS > 0) || !(p.VideoDurationSeconds > 0) || math.IsInf(p.VideoFPS, 0) || math.IsInf(p.VideoDurationSeconds, 0) {
		return fmt.Errorf("estimate.videoFPS and videoDurationSeconds must be > 0")
	}
	return nil
}

// estimator packs request bytes into 4-byte pseudo-tokens; multimodal items are aligned to a
// token boundary and occupy N copies of a token derived from a hash of their content.
// Text is packed as it arrives (one linear pass, no copy of the prompt): only the up to
// three bytes of an unfinished token wait in pend until more text or a flush completes it.
// The packing and the chat template are plugins/wire/bytetokens', which the simulator uses too, so
// the ids estimated here are the ids a simulated engine caches (precise prefix routing).
type estimator struct {
	p        EstimateParams
	headers  map[string]string
	pk       bytetokens.Packer
	features []fwksched.MultiModalFeature
}

// Estimate returns the estimated TokenizedPrompt of a request (nil when it has no body).
func Estimate(request *fwksched.LLMRequest, p EstimateParams) *fwksched.TokenizedPrompt {
	p.Defaults()
	if request == nil || request.Body == nil {
		return nil
	}
	e := &estimator{p: p, headers: request.Headers}
	b := request.Body
	switch {
	case b.ChatCompletions != nil:
		if len(b.ChatCompletions.Tools) > 0 {
			js, _ := json.Marshal(b.ChatCompletions.Tools)
			e.grow(len(js) + chatBytesBound(b.ChatCompletions.Messages))
			e.bytes(js)
		} else {
			e.grow(chatBytesBound(b.ChatCompletions.Messages))
		}
		for _, m := range b.ChatCompletions.Messages {
			e.pk.ChatMessage(m.Role, m.Content.Raw)
			for _, blk := range m.Content.Structured {
				e.block(blk)
			}
		}
	case b.Completions != nil:
		s := b.Completions.Prompt.PlainText()
		e.grow(len(s))
		e.text(s)
	case b.Responses != nil:
		js, _ := json.Marshal([]map[string]any{{"instructions": b.Responses.Instructions}, {"tools": b.Responses.Tools}, {"input": b.Responses.Input}})
		e.grow(len(js))
		e.bytes(js)
	case b.Conversations != nil:
		js, _ := json.Marshal(b.Conversations.Items)
		e.grow(len(js))
		e.bytes(js)
	case b.Embeddings != nil:
		js, _ := json.Marshal(b.Embeddings.Input)
		e.grow(len(js))
		e.bytes(js)
	default:
		return nil
	}
	e.pk.Flush()
	return &fwksched.TokenizedPrompt{TokenIDs: e.pk.Tokens, MultiModalFeatures: e.features}
}

// MinTokens is a lower bound on len(Estimate(request).TokenIDs) that packs nothing: the text
// bytes of a chat's messages or a completion's prompt over 4 (a pseudo-token holds at most 4
// bytes; tools, multimodal items and per-message padding only add tokens). 0 for other APIs. A
// caller that only compares the count with a threshold can skip the estimate, and its
// allocation of the whole prompt, when this bound already reaches it.
func MinTokens(request *fwksched.LLMRequest) int {
	if request == nil || request.Body == nil {
		return 0
	}
	switch b := request.Body; {
	case b.ChatCompletions != nil:
		return chatTextBytes(b.ChatCompletions.Messages) / BytesPerToken
	case b.Completions != nil:
		return len(b.Completions.Prompt.PlainText()) / BytesPerToken
	}
	return 0
}

// chatTextBytes is the number of text bytes the chat messages contribute (roles, raw
// contents, text blocks), used to size the token slice once.
func chatTextBytes(msgs []fwksched.Message) int {
	n := 0
	for _, m := range msgs {
		n += len(m.Role) + len(m.Content.Raw)
		for _, blk := range m.Content.Structured {
			if blk.Type == "text" {
				n += len(blk.Text)
			}
		}
	}
	return n
}

// chatBytesBound bounds the bytes the chat messages' text fills, padding included: each
// message starts on a token boundary, so up to 3 bytes pad whatever precedes it (the tools
// JSON or the previous message). Reserving the text alone let the last messages' padding
// outgrow the slice and copy the whole prompt once more.
func chatBytesBound(msgs []fwksched.Message) int {
	if n := chatTextBytes(msgs); n > 0 {
		return n + (BytesPerToken-1)*(len(msgs)+1)
	}
	return 0
}

func (e *estimator) grow(n int) { e.pk.Grow(n) }

func (e *estimator) text(s string) { e.pk.Text(s) }

func (e *estimator) bytes(s []byte) { e.pk.Bytes(s) }

func (e *estimator) block(b fwksched.ContentBlock) {
	switch b.Type {
	case "text":
		e.text(b.Text)
	case "image_url":
		w, h := e.imageSize(b.ImageURL.Url)
		e.item("image", b.ImageURL.Url, e.imageTokens(w, h))
	case "video_url":
		e.item("video", b.VideoURL.Url, e.videoTokens())
	case "input_audio":
		n := (len(b.InputAudio.Data) + len(b.InputAudio.Format) + BytesPerToken - 1) / BytesPerToken
		e.item("audio", b.InputAudio.Format+":"+b.InputAudio.Data, max(n, 1))
	default:
		// Unknown block types (e.g. image_embeds) count by their JSON size.
		js, _ := json.Marshal(b)
		e.bytes(js)
	}
}

func (e *estimator) item(modality, content string, n int) {
	e.pk.Flush()
	sum, tok := bytetokens.ItemHash(content)
	e.features = append(e.features, fwksched.MultiModalFeature{Modality: fwksched.Modality(modality),
		Hash: strconv.FormatUint(sum, 16), Offset: len(e.pk.Tokens), Length: n})
	e.pk.Repeat(tok, n)
}

func (e *estimator) imageTokens(w, h int) int {
	if e.p.ImageEstimator == "static" {
		return e.p.ImageStaticTokens
	}
	return max(w*h/e.p.ImageFactor, 1)
}

// imageSize decodes the dimensions of a base64 data URL; anything else (remote URLs, bad
// data) gets the default resolution.
func (e *estimator) imageSize(url string) (int, int) {
	if strings.HasPrefix(url, "data:") {
		if i := strings.Index(url, ";base64,"); i >= 0 {
			raw, err := base64.StdEncoding.DecodeString(url[i+len(";base64,"):])
			if err == nil {
				if cfg, _, err := image.DecodeConfig(bytes.NewReader(raw)); err == nil && cfg.Width > 0 && cfg.Height > 0 {
					return cfg.Width, cfg.Height
				}
			}
		}
	}
	return e.p.DefaultWidth, e.p.DefaultHeight
}

func (e *estimator) videoTokens() int {
	fps, dur := e.p.VideoFPS, e.p.VideoDurationSeconds
	if v, err := strconv.ParseFloat(protocol.HeaderValue(e.headers, HeaderVideoFPS), 64); err == nil && v > 0 && !math.IsInf(v, 0) {
		fps = v
	}
	if v, err := strconv.ParseFloat(protocol.HeaderValue(e.headers, HeaderVideoDuration), 64); err == nil && v > 0 && !math.IsInf(v, 0) {
		dur = v
	}
	w, h := e.p.DefaultWidth, e.p.DefaultHeight
	if ww, hh, ok := parseResolution(protocol.HeaderValue(e.headers, HeaderVideoResolution)); ok {
		w, h = ww, hh
	}
	frames := math.Ceil(fps * dur)
	if frames > 1e6 {
		frames = 1e6 // a hint cannot make the estimate explode
	}
	return max(int(frames), 1) * e.imageTokens(w, h)
}

func parseResolution(s string) (int, int, bool) {
	ws, hs, ok := strings.Cut(strings.ToLower(strings.TrimSpace(s)), "x")
	if !ok {
		return 0, 0, false
	}
	w, err1 := strconv.Atoi(strings.TrimSpace(ws))
	h, err2 := strconv.Atoi(strings.TrimSpace(hs))
	if err1 != nil || err2 != nil || w < 1 || h < 1 || w > 1<<15 || h > 1<<15 {
		return 0, 0, false
	}
	return w, h, true
}
