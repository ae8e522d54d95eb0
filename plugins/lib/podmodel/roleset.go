package podmodel

import "sort"

// Roleset is one AIBrix roleset: the prefill and decode pods sharing a roleset-name.
type Roleset struct {
	Name            string
	Prefill, Decode []Pod
	// PrefillReplicas and DecodeReplicas count distinct role-replica-index values when any pod
	// carries one, else pods (AIBrix's replica cardinality).
	PrefillReplicas, DecodeReplicas int
}

// Complete reports whether the roleset has at least one prefill and one decode replica.
func (r Roleset) Complete() bool { return r.PrefillReplicas >= 1 && r.DecodeReplicas >= 1 }

// GroupRolesets groups routable roleset pods with prefill or decode roles by roleset-name,
// sorted by name. Pods outside rolesets are not included.
func GroupRolesets(pods []Pod) []Roleset {
	byName := map[string]*Roleset{}
	for _, p := range pods {
		if !p.InRoleset() {
			continue
		}
		rs := byName[p.Roleset]
		if rs == nil {
			rs = &Roleset{Name: p.Roleset}
			byName[p.Roleset] = rs
		}
		if p.ServesPrefill() {
			rs.Prefill = append(rs.Prefill, p)
		} else {
			rs.Decode = append(rs.Decode, p)
		}
	}
	out := make([]Roleset, 0, len(byName))
	for _, rs := range byName {
		rs.PrefillReplicas = replicas(rs.Prefill)
		rs.DecodeReplicas = replicas(rs.Decode)
		out = append(out, *rs)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func replicas(pods []Pod) int {
	idx := map[string]struct{}{}
	for _, p := range pods {
		if p.ReplicaIndex != "" {
			idx[p.ReplicaIndex] = struct{}{}
		}
	}
	if len(idx) > 0 {
		return len(idx)
	}
	return len(pods)
}

// EligibleRolesets returns only the complete rolesets.
func EligibleRolesets(pods []Pod) []Roleset {
	var out []Roleset
	for _, rs := range GroupRolesets(pods) {
		if rs.Complete() {
			out = append(out, rs)
		}
	}
	return out
}
