package giehermetic

import (
	"testing"

	reqcommon "sigs.k8s.io/gateway-api-inference-extension/pkg/common/request"
)

// TestCases pins the table's shape: GIE's 19 distinct cases, and expectations that mean what
// GIE's suite means by them.
func TestCases(t *testing.T) {
	cases := Cases(GIEAddress)
	if len(cases) != 19 {
		t.Fatalf("%d cases, GIE v1.5.0's hermetic suite has 19 distinct ones", len(cases))
	}
	seen := map[string]bool{}
	for _, c := range cases {
		if seen[c.Name] {
			t.Errorf("case %q twice", c.Name)
		}
		seen[c.Name] = true
		if len(c.Requests) == 0 {
			t.Errorf("%s: no requests", c.Name)
		}
	}
	first := Normalise(cases[0].Requests, cases[0].WantResponses, nil)
	if !first.Routed || first.Destination != "192.168.1.2:8000" || !first.ClearRouteCache || !first.UpstreamEOS ||
		first.UpstreamHeaders[reqcommon.RequestIdHeaderKey] != "test-request-id" || first.UpstreamHeaders["hi"] != "mom" ||
		first.UpstreamBody != `{"max_tokens":100,"model":"my-model-12345","prompt":"test1","temperature":0}` {
		t.Errorf("GIE's first expectation reduces to %+v", first)
	}
	buffered := Normalise(cases[15].Requests, cases[15].WantResponses, nil)
	if !buffered.DebugHeader || buffered.RespHeaders["content-type"] != "application/json" || !buffered.RespEOS {
		t.Errorf("%s reduces to %+v", cases[15].Name, buffered)
	}
}
