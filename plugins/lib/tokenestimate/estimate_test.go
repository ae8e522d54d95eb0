package tokenestimate

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"image"
	"image/png"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/wire/bytetokens"
	"github.com/pdgate/pdgate/test/testsupport"
)

func chatReq(t *testing.T, body string, headers map[string]string) *fwksched.LLMRequest {
	t.Helper()
	var c fwksched.ChatCompletionsRequest
	if err := json.Unmarshal([]byte(body), &c); err != nil {
		t.Fatal(err)
	}
	return &fwksched.LLMRequest{Headers: headers, Body: &fwksched.LLMRequestBody{ChatCompletions: &c}}
}

func pngDataURL(t *testing.T, w, h int) string {
	t.Helper()
	var buf bytes.Buffer
	if err := png.Encode(&buf, image.NewGray(image.Rect(0, 0, w, h))); err != nil {
		t.Fatal(err)
	}
	return "data:image/png;base64," + base64.StdEncoding.EncodeToString(buf.Bytes())
}

func TestEstimate(t *testing.T) {
	img := pngDataURL(t, 64, 32) // 2048 px / 1024 = 2 tokens
	tests := []struct {
		name       string
		req        func(t *testing.T) *fwksched.LLMRequest
		params     EstimateParams
		wantTokens int
		wantMM     []int // lengths of multimodal features
	}{
		{name: "nil body", req: func(*testing.T) *fwksched.LLMRequest { return &fwksched.LLMRequest{} }, wantTokens: -1},
		{name: "completions ceil(bytes/4)", req: func(*testing.T) *fwksched.LLMRequest {
			return &fwksched.LLMRequest{Body: &fwksched.LLMRequestBody{Completions: &fwksched.CompletionsRequest{Prompt: fwksched.Prompt{Raw: "abcdefghi"}}}}
		}, wantTokens: 3},
		{name: "completions exact multiple", req: func(*testing.T) *fwksched.LLMRequest {
			return &fwksched.LLMRequest{Body: &fwksched.LLMRequestBody{Completions: &fwksched.CompletionsRequest{Prompt: fwksched.Prompt{Raw: "abcdefgh"}}}}
		}, wantTokens: 2},
		{name: "chat role + content", req: func(t *testing.T) *fwksched.LLMRequest {
			return chatReq(t, `{"messages":[{"role":"user","content":"hello"}]}`, nil) // "userhello" = 9 bytes
		}, wantTokens: 3},
		{name: "chat text blocks", req: func(t *testing.T) *fwksched.LLMRequest {
			return chatReq(t, `{"messages":[{"role":"user","content":[{"type":"text","text":"abcd"},{"type":"text","text":"efgh"}]}]}`, nil)
		}, wantTokens: 3}, // user+abcd+efgh = 12 bytes
		{name: "image default resolution", req: func(t *testing.T) *fwksched.LLMRequest {
			return chatReq(t, `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://x/y.png"}}]}]}`, nil)
		}, wantTokens: 1 + 225, wantMM: []int{225}},
		{name: "image decoded from data URL", req: func(t *testing.T) *fwksched.LLMRequest {
			return chatReq(t, `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"`+img+`"}},{"type":"text","text":"hi"}]}]}`, nil)
		}, wantTokens: 1 + 2 + 1, wantMM: []int{2}},
		{name: "static image estimator", params: EstimateParams{ImageEstimator: "static", ImageStaticTokens: 7}, req: func(t *testing.T) *fwksched.LLMRequest {
			return chatReq(t, `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"u"}}]}]}`, nil)
		}, wantTokens: 1 + 7, wantMM: []int{7}},
		{name: "video with hints", req: func(t *testing.T) *fwksched.LLMRequest {
			return chatReq(t, `{"messages":[{"role":"user","content":[{"type":"video_url","video_url":{"url":"v"}}]}]}`,
				map[string]string{HeaderVideoFPS: "2", HeaderVideoDuration: "3", HeaderVideoResolution: "320x320"})
		}, wantTokens: 1 + 6*100, wantMM: []int{600}},
		{name: "video bad hints use defaults", req: func(t *testing.T) *fwksched.LLMRequest {
			return chatReq(t, `{"messages":[{"role":"user","content":[{"type":"video_url","video_url":{"url":"v"}}]}]}`,
				map[string]string{HeaderVideoFPS: "-1", HeaderVideoResolution: "axb"})
		}, wantTokens: 1 + 10*225, wantMM: []int{2250}},
		{name: "audio", req: func(t *testing.T) *fwksched.LLMRequest {
			return chatReq(t, `{"messages":[{"role":"user","content":[{"type":"input_audio","input_audio":{"data":"AAAAAAAA","format":"wav"}}]}]}`, nil)
		}, wantTokens: 1 + 3, wantMM: []int{3}},
		{name: "responses", req: func(*testing.T) *fwksched.LLMRequest {
			return &fwksched.LLMRequest{Body: &fwksched.LLMRequestBody{Responses: &fwksched.ResponsesRequest{Input: "hi"}}}
		}, wantTokens: (len(`[{"instructions":null},{"tools":null},{"input":"hi"}]`) + 3) / 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tp := Estimate(tt.req(t), tt.params)
			if tt.wantTokens < 0 {
				if tp != nil {
					t.Fatal("want nil")
				}
				return
			}
			if tp == nil || len(tp.TokenIDs) != tt.wantTokens || len(tp.MultiModalFeatures) != len(tt.wantMM) {
				t.Fatalf("tokens=%d mm=%v", len(tp.TokenIDs), tp.MultiModalFeatures)
			}
			for i, f := range tp.MultiModalFeatures {
				if f.Length != tt.wantMM[i] || f.Offset+f.Length > len(tp.TokenIDs) || f.Hash == "" {
					t.Fatalf("feature %d: %+v", i, f)
				}
			}
		})
	}
}

// The same image yields the same placeholder tokens (prefix-cache friendly); a different
// one does not.
func TestEstimateMultimodalHashStable(t *testing.T) {
	mk := func(url string) []uint32 {
		return Estimate(chatReq(t, `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"`+url+`"}}]}]}`, nil), EstimateParams{}).TokenIDs
	}
	a, b, c := mk("u1"), mk("u1"), mk("u2")
	if a[len(a)-1] != b[len(b)-1] || a[len(a)-1] == c[len(c)-1] {
		t.Fatal("placeholder tokens must follow the content hash")
	}
}

func TestParseResolution(t *testing.T) {
	for in, ok := range map[string]bool{"640x360": true, " 1X1 ": true, "0x5": false, "5": false, "99999x1": false, "ax1": false} {
		if _, _, got := parseResolution(in); got != ok {
			t.Errorf("%q: %v", in, got)
		}
	}
}

func FuzzEstimateChat(f *testing.F) {
	f.Add(`{"messages":[{"role":"user","content":"x"}]}`, "2", "640x360")
	f.Add(`{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}}]}]}`, "x", "1x1")
	f.Fuzz(func(t *testing.T, body, fps, res string) {
		var c fwksched.ChatCompletionsRequest
		if json.Unmarshal([]byte(body), &c) != nil {
			return
		}
		tp := Estimate(&fwksched.LLMRequest{Headers: map[string]string{HeaderVideoFPS: fps, HeaderVideoResolution: res},
			Body: &fwksched.LLMRequestBody{ChatCompletions: &c}}, EstimateParams{})
		for _, f := range tp.MultiModalFeatures {
			if f.Offset < 0 || f.Length < 1 || f.Offset+f.Length > len(tp.TokenIDs) {
				t.Fatalf("bad feature %+v of %d tokens", f, len(tp.TokenIDs))
			}
		}
		_ = strings.TrimSpace(body)
	})
}

// TestEstimatePaddingAllocatesNothing: messages whose text leaves a token unfinished pad it
// (up to 3 bytes each); that padding must fit the slice Estimate reserved, or the last
// messages copy the whole prompt into a larger one. A chat of odd-length messages allocates
// as often as one of the same messages rounded to whole tokens.
func TestEstimatePaddingAllocatesNothing(t *testing.T) {
	chatOf := func(lens []int) *fwksched.LLMRequest {
		var msgs []fwksched.Message
		for _, n := range lens {
			msgs = append(msgs, msg("u", strings.Repeat("z", n-len("u"))))
		}
		return chat(msgs...)
	}
	for _, lens := range [][]int{
		{8185, 5, 5, 5, 5, 5},
		{24570, 5, 5, 5, 5, 5},
		{10010, 10015, 10010, 10015, 10010, 10015, 10010, 10015, 7},
		{1, 2, 3, 5, 6, 7, 9, 10, 11, 13, 14, 15, 17, 18, 19, 21, 22, 23},
	} {
		aligned := make([]int, len(lens))
		for i, n := range lens {
			aligned[i] = (n + 3) &^ 3
		}
		odd, even := chatOf(lens), chatOf(aligned)
		got := testing.AllocsPerRun(20, func() { Estimate(odd, EstimateParams{}) })
		want := testing.AllocsPerRun(20, func() { Estimate(even, EstimateParams{}) })
		if got != want {
			t.Errorf("message lengths %v: %.0f allocations, %.0f with whole tokens", lens, got, want)
		}
	}
}

// BenchmarkEstimate220KB: the whole estimate of a 220 KB chat prompt (the EPP bench's large
// body, no session), as Estimate reserves its token slice now (not cleared: every token is
// written right after) against a baseline in the same run that reserves it with slices.Grow,
// which clears it first. Both pack the same messages into a slice of the same size; blocks of
// 16 calls alternate so that the collector falls on both. The heap holds 64 MiB live, as an EPP
// holds its caches: in a heap of a few MB the scavenger returns every freed slice to the OS,
// and each call's cost is then the page faults of its fresh 220 KB, whoever clears it. Times
// are the benchmark thread's CPU (testsupport.ThreadCPU).
func BenchmarkEstimate220KB(b *testing.B) {
	req := chat(msg("system", "You are a helpful assistant."), msg("user", strings.Repeat("a long document to summarise, ", 220_000/30)))
	msgs := req.Body.ChatCompletions.Messages
	cleared := func() *fwksched.TokenizedPrompt {
		pk := bytetokens.Packer{Tokens: slices.Grow([]uint32(nil), chatBytesBound(msgs)/BytesPerToken+1)}
		for _, m := range msgs {
			pk.ChatMessage(m.Role, m.Content.Raw)
		}
		pk.Flush()
		return &fwksched.TokenizedPrompt{TokenIDs: pk.Tokens}
	}
	if !reflect.DeepEqual(cleared(), Estimate(req, EstimateParams{})) {
		b.Fatal("the baseline packs other tokens")
	}
	live := make([][]byte, 64)
	for i := range live {
		live[i] = bytes.Repeat([]byte{1}, 1<<20)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	const block = 16
	var now, base time.Duration
	var nowBytes, baseBytes uint64
	var m0, m1 runtime.MemStats
	calls := 0
	for b.Loop() {
		runtime.ReadMemStats(&m0)
		start := testsupport.ThreadCPU()
		for range block {
			Estimate(req, EstimateParams{})
		}
		now += testsupport.ThreadCPU() - start
		runtime.ReadMemStats(&m1)
		nowBytes += m1.TotalAlloc - m0.TotalAlloc
		start = testsupport.ThreadCPU()
		for range block {
			cleared()
		}
		base += testsupport.ThreadCPU() - start
		runtime.ReadMemStats(&m0)
		baseBytes += m0.TotalAlloc - m1.TotalAlloc
		calls += block
	}
	runtime.KeepAlive(live)
	b.ReportMetric(float64(now.Nanoseconds())/float64(calls), "cpu-ns/estimate")
	b.ReportMetric(float64(base.Nanoseconds())/float64(calls), "baseline-cpu-ns/estimate")
	b.ReportMetric(float64(nowBytes)/float64(calls), "B/estimate")
	b.ReportMetric(float64(base)/float64(max(now, 1)), "x-baseline-CPU")
	b.Logf("220 KB chat: estimate %.1f µs, %d B; cleared baseline %.1f µs, %d B; %.2fx", float64(now.Microseconds())/float64(calls), nowBytes/uint64(calls),
		float64(base.Microseconds())/float64(calls), baseBytes/uint64(calls), float64(base)/float64(max(now, 1)))
}
