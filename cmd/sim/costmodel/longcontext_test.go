package costmodel

import (
	"math"
	"testing"
	"time"
)

// Llama-3.1-8B's shape (config.json): what the FLOP and KV-byte counts below use.
const (
	llama8BParams  = 8.03e9
	llama8BLayers  = 32
	llama8BDModel  = 4096
	llama8BKVHeads = 8
	llama8BHeadDim = 128
)

// prefillFLOPs is a whole prefill of n tokens: 2 FLOPs per parameter per token (GEMMs) plus
// causal attention, QKᵀ and PV over half the n×n scores: 2·layers·d_model·n².
func prefillFLOPs(n float64) float64 {
	return 2*llama8BParams*n + 2*llama8BLayers*llama8BDModel*n*n
}

// The built-in profile at the Mooncake trace's prompt lengths (README: "Long context"): its
// whole-prompt prefill runs at an effective 430-490 TFLOPS from 8k to 126k tokens, inside the
// band of what H100 kernels reach on real prefills (FlashAttention-2 ~35 % of 989 TFLOPS,
// FlashAttention-3 ~620 TFLOPS at 16k, head dim 128; TensorRT-LLM's Llama-3.1-70B 32k-token
// TTFT of 472 ms on 32 GH200 = ~400 TFLOPS per GPU), and its KV costs Llama-3-8B's 128 KiB per
// token, so 400k tokens of KV hold 32 mean Mooncake prompts.
func TestBuiltinIsCredibleAtLongContext(t *testing.T) {
	p := Default()
	for _, tc := range []struct {
		tokens   int
		wantMs   float64 // PrefillSpan(0, n): 0.032·n + 6.5e-7·n²
		min, max float64 // effective TFLOPS band
	}{
		{8192, 305.76, 350, 620},
		{12035, 479.27, 350, 620}, // the trace's mean prompt
		{32768, 1746.51, 350, 620},
		{65536, 4888.88, 350, 620},
		{126195, 14389.61, 350, 620}, // the trace's longest prompt
	} {
		got := float64(p.PrefillSpan(0, tc.tokens)) / float64(time.Millisecond)
		if math.Abs(got-tc.wantMs) > 0.01 {
			t.Errorf("%d tokens: prefill %.2f ms, want %.2f", tc.tokens, got, tc.wantMs)
		}
		tflops := prefillFLOPs(float64(tc.tokens)) / (got / 1e3) / 1e12
		if tflops < tc.min || tflops > tc.max {
			t.Errorf("%d tokens: effective %.0f TFLOPS, outside the published [%v, %v]", tc.tokens, tflops, tc.min, tc.max)
		}
	}
	kvBytes := 2.0 * llama8BLayers * llama8BKVHeads * llama8BHeadDim * 2 // K and V, BF16
	if p.KVTransfer.BytesPerToken != kvBytes {
		t.Errorf("KV bytes per token %v, want Llama-3-8B's %v", p.KVTransfer.BytesPerToken, kvBytes)
	}
	// reading a resident token's KV at the decode step's bandwidth (the weights' 16 GB in baseMs)
	bw := 16.06e9 / (p.Decode.BaseMs / 1e3)
	if perKV := kvBytes / bw * 1e3; math.Abs(perKV-p.Decode.PerKVTokenMs)/p.Decode.PerKVTokenMs > 0.05 {
		t.Errorf("perKVTokenMs %v, want %v (128 KiB at the weights' %.2f TB/s)", p.Decode.PerKVTokenMs, perKV, bw/1e12)
	}
	if fit := p.KVCapacityTokens / (12035 + 343); fit != 32 {
		t.Errorf("%d mean Mooncake requests fit the KV capacity, want 32", fit)
	}
}
