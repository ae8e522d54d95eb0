package simbench

import "github.com/pdgate/pdgate/cmd/sim/costmodel"

// CapacityPerGPU estimates one GPU's sustainable request rate for a mean request: the prefill
// compute (with the step overhead amortised over the chunk budget) plus the request's share
// of decode steps at a reference batch of 64, or of as many mean requests as the KV capacity
// holds when that is fewer (the engine reserves prompt + output per sequence: 32 of the
// Mooncake trace's 12k-token prompts on the 8B H100 profile's 400k tokens; the Azure trace's
// batch of 64 fits). A P/D fleet splits the same work over its prefill and decode halves. It
// counts every prompt token as computed (no prefix-cache hits), and it only sets the offered
// load's scale; saturation with the trace's heavy-tailed lengths comes earlier or later.
func CapacityPerGPU(p *costmodel.Profile, meanPrompt, meanOutput float64) float64 {
	n := int(meanPrompt)
	chunk := float64(max(p.ChunkedPrefillTokens, n))
	prefill := ms(p.PrefillSpan(0, n)) + ms(p.PrefillOverhead())*meanPrompt/chunk
	batch := referenceBatch(p, meanPrompt, meanOutput)
	step := ms(p.DecodeStep(batch, batch*int(meanPrompt+meanOutput/2)))
	decode := meanOutput * step / float64(batch)
	return 1000 / (prefill + decode)
}

// referenceBatch is the capacity estimate's decode batch: 64, or the mean requests the KV
// capacity holds (at least 1).
func referenceBatch(p *costmodel.Profile, meanPrompt, meanOutput float64) int {
	const batch = 64
	if p.KVCapacityTokens <= 0 || meanPrompt+meanOutput <= 0 {
		return batch
	}
	return max(1, min(batch, int(float64(p.KVCapacityTokens)/(meanPrompt+meanOutput))))
}
