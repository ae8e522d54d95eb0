package epp

import (
	"fmt"
	"slices"
)

// Repeats (--repeats N): each measured phase runs N times on the same EPP, and the report gives
// the median repeat's figures with the spread of the net CPU over all of them, so that a
// reader sees how far one figure can be trusted instead of a single number.

// medianRun returns the index of the median of nets (the lower middle of an even count).
func medianRun(nets []float64) int {
	order := make([]int, len(nets))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		switch {
		case nets[a] < nets[b]:
			return -1
		case nets[a] > nets[b]:
			return 1
		}
		return 0
	})
	return order[(len(order)-1)/2]
}

// spread is (max - min) / median of nets, as a fraction; 0 for fewer than two.
func spread(nets []float64) float64 {
	if len(nets) < 2 {
		return 0
	}
	med := nets[medianRun(nets)]
	if med == 0 {
		return 0
	}
	return (slices.Max(nets) - slices.Min(nets)) / med
}

// spreadText is the log's note of the repeats: "; 3 repeats 1.21-1.30, spread 7.1 %".
func spreadText(nets []float64) string {
	if len(nets) < 2 {
		return ""
	}
	return fmt.Sprintf("; %d repeats %.3f-%.3f, spread %.1f %%", len(nets), slices.Min(nets), slices.Max(nets), 100*spread(nets))
}

// spreadCell is the report's spread column: "7.1 % of 3" or "—" for one run.
func spreadCell(nets []float64) string {
	if len(nets) < 2 {
		return "—"
	}
	return fmt.Sprintf("%.1f %% of %d", 100*spread(nets), len(nets))
}
