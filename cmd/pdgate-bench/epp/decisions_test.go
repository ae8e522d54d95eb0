package epp

import (
	"strings"
	"testing"
)

func TestParseDecisions(t *testing.T) {
	text := `# HELP pdgate_disagg_decisions_total Disaggregation decisions.
# TYPE pdgate_disagg_decisions_total counter
pdgate_disagg_decisions_total{decision_type="decode-only",model_name="m"} 12
pdgate_disagg_decisions_total{decision_type="prefill-decode",model_name="m"} 88
pdgate_disagg_decisions_total{decision_type="prefill-decode",model_name="other"} 2
# TYPE pdgate_pd_decisions_total counter
pdgate_pd_decisions_total{decision_type="decode-only",model_name="m"} 1
# TYPE inference_pool_per_pod_queue_size gauge
inference_pool_per_pod_queue_size{model_server_pod="p0",name="pool"} 0
`
	before, err := parseDecisions(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	if before["decode-only"] != 13 || before["prefill-decode"] != 90 || len(before) != 2 {
		t.Fatalf("parsed %v", before)
	}
	after, err := parseDecisions(strings.NewReader(strings.Replace(text, "} 12", "} 2012", 1)))
	if err != nil {
		t.Fatal(err)
	}
	phase := after.sub(before)
	if got := phase.String(); got != "decode-only 2000" {
		t.Fatalf("phase %q", got)
	}
	if got := (Decisions{}).String(); got != "none counted" {
		t.Fatalf("empty %q", got)
	}
	if _, err := parseDecisions(strings.NewReader("pdgate_disagg_decisions_total{ 1\n")); err == nil {
		t.Fatal("malformed exposition accepted")
	}
}

func TestDecisionsText(t *testing.T) {
	runs := []LoadResult{{Decisions: Decisions{"decode-only": 1990, "prefill-decode": 10}}, {Decisions: Decisions{"decode-only": 2000}}}
	if got := decisionsText(runs); got != ", decisions: decode-only 1990, prefill-decode 10 / decode-only 2000" {
		t.Fatalf("%q", got)
	}
	if got := decisionsText([]LoadResult{{}}); got != "" {
		t.Fatalf("without counters %q", got)
	}
}
