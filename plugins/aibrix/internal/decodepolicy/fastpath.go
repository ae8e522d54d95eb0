package decodepolicy

import (
	"fmt"
	"math"

	"github.com/pdgate/pdgate/plugins/lib/pdknobs"
)

// FastPath runs AIBrix's three ordered decode load-imbalance checks over candidates (already
// shuffled by the caller; ties go to the first). It returns the picked index or -1, and the
// reason with its numbers.
//  1. request-count spread over pods with a live running metric ≥ decodeLoadImbalanceMinSpread
//     → least loaded;
//  2. throughput spread over pods with a throughput metric > decodeThroughputImbalanceMinSpread
//     → lowest throughput;
//  3. only when every pod has a drain rate > 0: score = count / max(drain, 0.1); when
//     minScore > 0 and maxScore/minScore > decodeScoreRatioThreshold → lowest score.
func FastPath(cands []Candidate, k pdknobs.Knobs) (int, string) {
	if len(cands) == 0 {
		return -1, ""
	}
	minI, maxI := -1, -1
	for i, c := range cands {
		if !c.HasRunning {
			continue
		}
		if minI < 0 || c.Count() < cands[minI].Count() {
			minI = i
		}
		if maxI < 0 || c.Count() > cands[maxI].Count() {
			maxI = i
		}
	}
	if minI >= 0 {
		if spread := cands[maxI].Count() - cands[minI].Count(); spread >= k.DecodeLoadImbalanceMinSpread {
			return minI, fmt.Sprintf("decode count spread %g >= %g", spread, k.DecodeLoadImbalanceMinSpread)
		}
	}
	minI, maxI = -1, -1
	for i, c := range cands {
		if !c.HasThroughput {
			continue
		}
		if minI < 0 || c.Throughput < cands[minI].Throughput {
			minI = i
		}
		if maxI < 0 || c.Throughput > cands[maxI].Throughput {
			maxI = i
		}
	}
	if minI >= 0 {
		if spread := cands[maxI].Throughput - cands[minI].Throughput; spread > k.DecodeThroughputImbalanceMinSpread {
			return minI, fmt.Sprintf("decode throughput spread %g > %g", spread, k.DecodeThroughputImbalanceMinSpread)
		}
	}
	for _, c := range cands {
		if !c.HasDrain || !(c.Drain > 0) {
			return -1, ""
		}
	}
	minI, maxI = 0, 0
	scores := make([]float64, len(cands))
	for i, c := range cands {
		scores[i] = c.Count() / math.Max(c.Drain, drainEpsilon)
		if scores[i] < scores[minI] {
			minI = i
		}
		if scores[i] > scores[maxI] {
			maxI = i
		}
	}
	if scores[minI] > 0 && scores[maxI]/scores[minI] > k.DecodeScoreRatioThreshold {
		return minI, fmt.Sprintf("decode drain score ratio %.3g > %g", scores[maxI]/scores[minI], k.DecodeScoreRatioThreshold)
	}
	return -1, ""
}
