package alwaysdisagg

import (
	"context"
	"encoding/json"
	"testing"

	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/framework/contract"
)

func chat(t *testing.T, messages string) *fwksched.LLMRequest {
	t.Helper()
	var c fwksched.ChatCompletionsRequest
	if err := json.Unmarshal([]byte(`{"messages":`+messages+`}`), &c); err != nil {
		t.Fatal(err)
	}
	return &fwksched.LLMRequest{RequestId: "r", Body: &fwksched.LLMRequestBody{ChatCompletions: &c}}
}

func TestMultimodalDecider(t *testing.T) {
	tests := []struct {
		name string
		req  func(t *testing.T) *fwksched.LLMRequest
		want bool
	}{
		{"nil request", func(*testing.T) *fwksched.LLMRequest { return nil }, false},
		{"nil body", func(*testing.T) *fwksched.LLMRequest { return &fwksched.LLMRequest{} }, false},
		{"completions", func(*testing.T) *fwksched.LLMRequest {
			return &fwksched.LLMRequest{Body: &fwksched.LLMRequestBody{Completions: &fwksched.CompletionsRequest{}}}
		}, false},
		{"text only", func(t *testing.T) *fwksched.LLMRequest { return chat(t, `[{"role":"user","content":"hi"}]`) }, false},
		{"text blocks", func(t *testing.T) *fwksched.LLMRequest {
			return chat(t, `[{"role":"user","content":[{"type":"text","text":"hi"}]}]`)
		}, false},
		{"image", func(t *testing.T) *fwksched.LLMRequest {
			return chat(t, `[{"role":"user","content":[{"type":"text","text":"x"},{"type":"image_url","image_url":{"url":"http://i/a.png"}}]}]`)
		}, true},
		{"video", func(t *testing.T) *fwksched.LLMRequest {
			return chat(t, `[{"role":"user","content":[{"type":"video_url","video_url":{"url":"http://v"}}]}]`)
		}, true},
		{"audio", func(t *testing.T) *fwksched.LLMRequest {
			return chat(t, `[{"role":"user","content":[{"type":"input_audio","input_audio":{"data":"AAA","format":"wav"}}]}]`)
		}, true},
		{"image_embeds does not trigger", func(t *testing.T) *fwksched.LLMRequest {
			return chat(t, `[{"role":"user","content":[{"type":"image_embeds","text":""}]}]`)
		}, false},
		{"second message", func(t *testing.T) *fwksched.LLMRequest {
			return chat(t, `[{"role":"system","content":"s"},{"role":"user","content":[{"type":"image_url","image_url":{"url":"u"}}]}]`)
		}, true},
	}
	p, _ := MultimodalFactory("mm", nil, nil)
	d := p.(*MultimodalDecider)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := tt.req(t)
			dec := d.Disaggregate(context.Background(), nil, req, nil)
			wantCause := contract.CauseNoMultimodal
			if tt.want {
				wantCause = contract.CauseMultimodal
			}
			if dec.Run != tt.want || HasMultimodalContent(req) != tt.want || dec.Reason == "" || dec.Cause != wantCause {
				t.Fatalf("Disaggregate = %+v, want run=%v cause=%s", dec, tt.want, wantCause)
			}
		})
	}
	if d.TypedName().Type != MultimodalType || d.TypedName().Name != "mm" {
		t.Fatalf("typed name %v", d.TypedName())
	}
}

func TestPDDecider(t *testing.T) {
	p, err := PDFactory("always", json.RawMessage(`{"ignored":1}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	d := p.(*PDDecider)
	for _, req := range []*fwksched.LLMRequest{nil, {RequestId: "x"}} {
		if dec := d.Disaggregate(context.Background(), nil, req, nil); !dec.Run || dec.Cause != contract.CauseAlways {
			t.Fatal("always-disagg-pd-decider must approve")
		}
	}
	if d.TypedName() != (fwkplugin.TypedName{Type: PDType, Name: "always"}) {
		t.Fatalf("typed name %v", d.TypedName())
	}
}
