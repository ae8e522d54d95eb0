package simbench

import "testing"

func TestShapeCounts(t *testing.T) {
	for _, tc := range []struct {
		shape   string
		n       int
		p, d, c int
	}{
		{"combined", 64, 0, 0, 64},
		{"pd", 64, 32, 32, 0},
		{"hybrid", 64, 16, 16, 32},
		{"pd-2:1", 64, 43, 21, 0},
		{"pd-1:2", 64, 21, 43, 0},
		{"pd-1:3", 4, 1, 3, 0},
		{"hybrid-1:1:2", 4, 1, 1, 2},
		{"hybrid-1:1:6", 4, 1, 1, 2}, // at least one prefill and one decode pod
		{"pd-3:1", 2, 1, 1, 0},
	} {
		s, err := ParseShape(tc.shape)
		if err != nil {
			t.Fatal(err)
		}
		p, d, c, err := s.Counts(tc.n)
		if err != nil || p != tc.p || d != tc.d || c != tc.c {
			t.Errorf("%s at %d pods: %d:%d:%d (%v), want %d:%d:%d", tc.shape, tc.n, p, d, c, err, tc.p, tc.d, tc.c)
		}
		pods, err := s.Layout(tc.n, "m")
		if err != nil || len(pods) != tc.n {
			t.Fatalf("%s: Layout gave %d pods (%v)", tc.shape, len(pods), err)
		}
		roles := map[string]int{}
		sets := map[string]map[string]int{}
		for _, pod := range pods {
			roles[pod.Role]++
			if rs := pod.Labels["roleset-name"]; rs != "" {
				if sets[rs] == nil {
					sets[rs] = map[string]int{}
				}
				sets[rs][pod.Role]++
			}
			if pod.Role == RoleCombined && (pod.Labels["role-name"] != "" || pod.Labels["llm-d.ai/role"] != "both") {
				t.Errorf("%s: combined pod labels %v", tc.shape, pod.Labels)
			}
		}
		if roles[RolePrefill] != tc.p || roles[RoleDecode] != tc.d || roles[RoleCombined] != tc.c {
			t.Errorf("%s: roles %v", tc.shape, roles)
		}
		for rs, m := range sets {
			if m[RolePrefill] == 0 || m[RoleDecode] == 0 {
				t.Errorf("%s: roleset %s lacks a role: %v", tc.shape, rs, m)
			}
		}
	}
	for _, bad := range []string{"", "pd-1", "pd-0:1", "hybrid-1:1", "hybrid-1:1:0", "foo-1:1", "pd-a:b"} {
		if _, err := ParseShape(bad); err == nil {
			t.Errorf("ParseShape(%q): no error", bad)
		}
	}
}
