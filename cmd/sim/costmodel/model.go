package costmodel

import (
	"math"
	"time"
)

func ms(v float64) time.Duration {
	return time.Duration(math.Round(v * float64(time.Millisecond)))
}

// PrefillSpan is the compute time of prompt tokens [start, end) given that tokens before
// start are already in KV: the linear GEMM term plus the causal attention term, which grows
// with the context each new token attends to (superlinear at long context).
func (p *Profile) PrefillSpan(start, end int) time.Duration {
	if end <= start {
		return 0
	}
	s, e := float64(start), float64(end)
	return ms(p.Prefill.LinearMsPerToken*(e-s) + p.Prefill.QuadraticMsPerToken2*(e*e-s*s))
}

// PrefillOverhead is the fixed cost of a step that runs any prefill.
func (p *Profile) PrefillOverhead() time.Duration { return ms(p.Prefill.OverheadMs) }

// PrefillTime is the time of a whole prefill of tokens prompt tokens of which cached are
// already in KV (prefix cache), in one step.
func (p *Profile) PrefillTime(tokens, cached int) time.Duration {
	if cached >= tokens {
		return 0
	}
	return p.PrefillOverhead() + p.PrefillSpan(cached, tokens)
}

// DecodeStep is one decode iteration for batch sequences with residentKV tokens of KV read.
func (p *Profile) DecodeStep(batch, residentKV int) time.Duration {
	if batch <= 0 {
		return 0
	}
	return ms(p.Decode.BaseMs + p.Decode.PerSeqMs*float64(batch) + p.Decode.PerKVTokenMs*float64(residentKV))
}

// KVTransferTime is the time to move tokens tokens of KV between two servers.
func (p *Profile) KVTransferTime(tokens int) time.Duration {
	if tokens <= 0 {
		return 0
	}
	bytes := float64(tokens) * p.KVTransfer.BytesPerToken
	return ms(p.KVTransfer.LatencyMs + bytes/(p.KVTransfer.BandwidthGBps*1e9)*1e3)
}

// CPULoadTime is the time to load tokens tokens of KV from the CPU offload tier into GPU
// memory (the KV bytes per token of the transfer model, over the host link); 0 without a tier.
func (p *Profile) CPULoadTime(tokens int) time.Duration {
	if tokens <= 0 || p.CPUOffload.BandwidthGBps <= 0 {
		return 0
	}
	bytes := float64(tokens) * p.KVTransfer.BytesPerToken
	return ms(bytes / (p.CPUOffload.BandwidthGBps * 1e9) * 1e3)
}

// Encode is the encoder time of items multimodal items.
func (p *Profile) Encode(items int) time.Duration {
	if items <= 0 {
		return 0
	}
	return ms(p.Encoder.MsPerItem * float64(items))
}
