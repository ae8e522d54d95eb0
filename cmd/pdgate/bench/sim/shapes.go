package simbench

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/pdgate/pdgate/plugins/lib/podmodel"
)

// Shape is a fleet's split into prefill, decode and combined pods as a ratio P:D:C; every
// shape of a comparison gets the same number of GPUs.
type Shape struct {
	Name    string `json:"name"`
	Prefill int    `json:"prefill"`
	Decode  int    `json:"decode"`
	// Combined pods serve whole requests: the combined-only fleet (0:0:1) or the hybrid
	// fleets AIBrix runs (rolesets plus combined pods, e.g. 1:1:2).
	Combined int `json:"combined"`
}

// ParseShape reads "combined", "pd" (1:1), "hybrid" (1:1:2), "pd-P:D" or "hybrid-P:D:C".
func ParseShape(s string) (Shape, error) {
	s = strings.TrimSpace(s)
	switch s {
	case "combined":
		return Shape{Name: s, Combined: 1}, nil
	case "pd":
		return Shape{Name: "pd-1:1", Prefill: 1, Decode: 1}, nil
	case "hybrid":
		return Shape{Name: "hybrid-1:1:2", Prefill: 1, Decode: 1, Combined: 2}, nil
	}
	kind, ratio, ok := strings.Cut(s, "-")
	parts := strings.Split(ratio, ":")
	nums := make([]int, len(parts))
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			ok = false
		}
		nums[i] = n
	}
	switch {
	case ok && kind == "pd" && len(nums) == 2 && nums[0] > 0 && nums[1] > 0:
		return Shape{Name: s, Prefill: nums[0], Decode: nums[1]}, nil
	case ok && kind == "hybrid" && len(nums) == 3 && nums[0] > 0 && nums[1] > 0 && nums[2] > 0:
		return Shape{Name: s, Prefill: nums[0], Decode: nums[1], Combined: nums[2]}, nil
	}
	return Shape{}, fmt.Errorf("fleet shape %q: want combined, pd, hybrid, pd-P:D (e.g. pd-2:1) or hybrid-P:D:C (e.g. hybrid-1:1:2)", s)
}

// IsCombined reports a combined-only fleet.
func (s Shape) IsCombined() bool { return s.Prefill == 0 && s.Decode == 0 }

// Counts splits n GPUs by the ratio (largest remainder), keeping at least one prefill and
// one decode pod in a P/D or hybrid fleet.
func (s Shape) Counts(n int) (prefill, decode, combined int, err error) {
	if s.IsCombined() {
		return 0, 0, n, nil
	}
	if n < 2 {
		return 0, 0, 0, fmt.Errorf("shape %s needs at least 2 pods, got %d", s.Name, n)
	}
	total := s.Prefill + s.Decode + s.Combined
	shares := []int{s.Prefill, s.Decode, s.Combined}
	counts := make([]int, 3)
	rem := make([]float64, 3)
	left := n
	for i, w := range shares {
		exact := float64(n) * float64(w) / float64(total)
		counts[i] = int(exact)
		rem[i] = exact - float64(counts[i])
		left -= counts[i]
	}
	for ; left > 0; left-- {
		best := 0
		for i := range rem {
			if shares[i] > 0 && rem[i] > rem[best] || shares[best] == 0 {
				best = i
			}
		}
		counts[best]++
		rem[best] = -1
	}
	for i := 0; i < 2; i++ { // at least one prefill and one decode pod
		if counts[i] == 0 {
			j := 2
			if counts[j] <= 1 {
				j = 1 - i
			}
			counts[j]--
			counts[i]++
		}
	}
	return counts[0], counts[1], counts[2], nil
}

// Layout lays out n pods: prefill and decode pods in AIBrix rolesets (as many rolesets as the
// smaller of the two counts, the pods dealt over them in turn) labelled for llm-d and AIBrix
// as FleetPD does, then the combined pods (llm-d role "both", no roleset).
func (s Shape) Layout(n int, model string) ([]PodSpec, error) {
	np, nd, nc, err := s.Counts(n)
	if err != nil {
		return nil, err
	}
	out := make([]PodSpec, 0, n)
	sets := min(np, nd)
	add := func(role string, count int) {
		for k := range count {
			p := fleetPod(len(out), role, model)
			if role != RoleCombined {
				p.Labels[podmodel.LabelRoleName] = role
				p.Labels[podmodel.LabelRolesetName] = fmt.Sprintf("rs-%d", k%sets)
			}
			out = append(out, p)
		}
	}
	add(RolePrefill, np)
	add(RoleDecode, nd)
	add(RoleCombined, nc)
	return out, nil
}
