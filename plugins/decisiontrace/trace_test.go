package decisiontrace

import (
	"strings"
	"testing"

	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
)

func TestFromCycleStateSharesOneTrace(t *testing.T) {
	cs := fwksched.NewCycleState()
	FromCycleState(cs).Stage("prefill", false, "uncached 12 < 256; ok")
	FromCycleState(cs).Note("x", "n=%d", 3)
	tr := FromCycleState(cs)
	if len(tr.Stages) != 1 || len(tr.Notes) != 1 {
		t.Fatalf("trace not shared: %+v", tr)
	}
	got := tr.Compact()
	if !strings.Contains(got, "prefill-skipped=uncached 12 < 256  ok") {
		t.Fatalf("compact = %q", got)
	}
	if FromCycleState(nil) == nil {
		t.Fatal("nil cycle state must give a detached trace")
	}
}
