package bucketplanner

import (
	"slices"
	"sort"
)

type segment struct {
	min, max int
	cover    []int // group indices
	weight   float64
}

func upper(g Group) int {
	if g.Max <= 0 || g.Max > openMax {
		return openMax
	}
	return g.Max
}

func lower(g Group) int { return max(g.Min, 0) }

// segments cuts the declared ranges into maximal segments with a constant covering set.
func segments(groups []Group) []segment {
	pts := map[int]bool{}
	for _, g := range groups {
		if lower(g) > upper(g) {
			continue
		}
		pts[lower(g)] = true
		pts[upper(g)+1] = true
	}
	cuts := make([]int, 0, len(pts))
	for p := range pts {
		cuts = append(cuts, p)
	}
	sort.Ints(cuts)
	var out []segment
	for i := 0; i+1 < len(cuts); i++ {
		lo, hi := cuts[i], cuts[i+1]-1
		var cover []int
		for gi, g := range groups {
			if lower(g) <= lo && hi <= upper(g) && lower(g) <= upper(g) {
				cover = append(cover, gi)
			}
		}
		if len(cover) == 0 {
			continue
		}
		if n := len(out); n > 0 && out[n-1].max+1 == lo && slices.Equal(out[n-1].cover, cover) {
			out[n-1].max = hi
			continue
		}
		out = append(out, segment{min: lo, max: hi, cover: cover})
	}
	return out
}

// Compute returns the bands for groups under the histogram vector (weights or masses).
func Compute(groups []Group, vec []float64) []Band {
	segs := segments(groups)
	total := 0.0
	for i := range segs {
		for b, w := range vec {
			if c := BinCentre(b); c >= segs[i].min && c <= segs[i].max {
				segs[i].weight += w
			}
		}
		total += segs[i].weight
	}
	if total <= 0 {
		return nil
	}
	replicas := 0
	for _, g := range groups {
		replicas += max(g.Replicas, 1)
	}
	exclusive := make([]float64, len(groups))
	for _, s := range segs {
		if len(s.cover) == 1 {
			exclusive[s.cover[0]] += s.weight
		}
	}
	need := make([]float64, len(groups))
	for gi, g := range groups {
		target := total * float64(max(g.Replicas, 1)) / float64(replicas)
		if n := target - exclusive[gi]; n > 0 {
			need[gi] = n
		}
	}
	var split []segment
	for _, s := range segs {
		if len(s.cover) >= 2 && s.weight/total >= MinSplitShare {
			split = append(split, s)
		}
	}
	sort.SliceStable(split, func(i, j int) bool { return split[i].weight > split[j].weight })
	budget := MaxBands
	var bands []Band
	for _, s := range split {
		if budget <= 0 {
			break
		}
		var active []int
		for _, gi := range s.cover {
			if need[gi] > 0 {
				active = append(active, gi)
			}
		}
		sort.SliceStable(active, func(i, j int) bool {
			if need[active[i]] != need[active[j]] {
				return need[active[i]] > need[active[j]]
			}
			return groups[active[i]].Name < groups[active[j]].Name
		})
		parts := min(len(active), budget)
		if parts == 0 {
			continue
		}
		if parts == 1 {
			if len(active) == 1 {
				bands = append(bands, Band{Min: s.min, Max: s.max, Roleset: groups[active[0]].Name})
				budget--
			}
			continue
		}
		active = active[:parts]
		cuts := placeCuts(s, active, need, vec)
		if cuts == nil {
			continue
		}
		lo := s.min
		for i, gi := range active {
			hi := s.max
			if i < len(cuts) {
				hi = cuts[i] - 1
			}
			bands = append(bands, Band{Min: lo, Max: hi, Roleset: groups[gi].Name})
			if i < len(cuts) {
				lo = cuts[i]
			}
		}
		budget -= parts
	}
	sort.Slice(bands, func(i, j int) bool { return bands[i].Min < bands[j].Min })
	return bands
}

// placeCuts returns len(active)-1 cuts (band i ends at cut_i − 1) so consecutive bands carry
// the segment's traffic in proportion to the active groups' needs, using the cumulative
// weight at bin centres; when the histogram cannot place them, an even split of the interval;
// cuts are strictly increasing inside (min, max]; nil when impossible.
func placeCuts(s segment, active []int, need, vec []float64) []int {
	n := len(active)
	sumNeed := 0.0
	for _, gi := range active {
		sumNeed += need[gi]
	}
	type pt struct {
		centre int
		cum    float64
	}
	var pts []pt
	cum := 0.0
	for b, w := range vec {
		c := BinCentre(b)
		if c < s.min || c > s.max || w <= 0 {
			continue
		}
		cum += w
		pts = append(pts, pt{c, cum})
	}
	cuts := make([]int, 0, n-1)
	acc := 0.0
	for j := 0; j < n-1; j++ {
		acc += need[active[j]]
		goal := cum * acc / sumNeed
		cut := -1
		for _, p := range pts {
			if p.cum >= goal {
				cut = p.centre + 1
				break
			}
		}
		if cut < 0 || cum <= 0 {
			width := int64(s.max) - int64(s.min) + 1
			cut = s.min + int(width*int64(j+1)/int64(n))
		}
		cuts = append(cuts, cut)
	}
	prev := s.min
	for i := range cuts {
		if cuts[i] <= prev {
			cuts[i] = prev + 1
		}
		if cuts[i] > s.max {
			return nil
		}
		prev = cuts[i]
	}
	return cuts
}
