package epp

import (
	"context"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/pdgate/pdgate/test/inprocepp"
	"github.com/pdgate/pdgate/test/testsupport"
)

// TestLLMDMetricNames: with --llm-d-metric-names the real EPP's /metrics page carries every
// sample of GIE's request, info and plugin-duration families a second time under llm-d v0.11's llm_d_epp_* name,
// identical but for the name. (The registry wrapper is process-wide once installed, so the
// page without the flag is checked by the unit tests of cmd/epp/llmdmetrics, not here.)
func TestLLMDMetricNames(t *testing.T) {
	la, lb, port := listenPair(t)
	fakeVLLM(t, la, 0)
	fakeVLLM(t, lb, 0)
	file := filepath.Join(t.TempDir(), "endpoints.yaml")
	writeFile(t, file, endpointsYAML(port, "a"))
	o := parseOpts(t, "--endpoints-file", file, "--secure-serving=false", "--grpc-port", "0",
		"--grpc-health-port", "0", "--metrics-port", "0", "--llm-d-metric-names")
	addrs := inprocepp.RunBinary(context.Background(), t, o)
	epp := dialEPP(t, addrs.GRPC)
	waitDestination(t, epp, "127.0.0.2:"+strconv.Itoa(port))
	exchange(t, epp, nil, completion)

	_, mport, _ := strings.Cut(addrs.Metrics, "]:")
	if mport == "" {
		_, mport, _ = strings.Cut(addrs.Metrics, ":")
	}
	page := testsupport.Scrape(t, "http://127.0.0.1:"+mport+"/metrics")
	for _, pair := range [][2]string{
		{"inference_objective_request_total", "llm_d_epp_request_total"},
		{"inference_extension_info", "llm_d_epp_info"},
		{"inference_extension_plugin_duration_seconds_count", "llm_d_epp_plugin_duration_seconds_count"},
	} {
		legacy, twin := samples(page, pair[0]), samples(page, pair[1])
		if len(legacy) == 0 {
			t.Fatalf("no %s sample on the page", pair[0])
		}
		for _, line := range legacy {
			if want := pair[1] + strings.TrimPrefix(line, pair[0]); !slices.Contains(twin, want) {
				t.Errorf("%q has no twin %q among %q", line, want, twin)
			}
		}
	}
}

// samples are the page's sample lines of one family (name followed by labels or a space).
func samples(page, family string) []string {
	var out []string
	for _, line := range strings.Split(page, "\n") {
		if strings.HasPrefix(line, family+"{") || strings.HasPrefix(line, family+" ") {
			out = append(out, line)
		}
	}
	return out
}
