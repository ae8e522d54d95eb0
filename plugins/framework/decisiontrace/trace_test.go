package decisiontrace

import (
	"strings"
	"testing"

	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
)

func TestFromCycleStateSharesOneTrace(t *testing.T) {
	cs := fwksched.NewCycleState()
	if FromCycleState(cs) != nil {
		t.Fatal("an untraced cycle has no trace")
	}
	var untraced *Trace // every method of a nil trace is a no-op
	untraced.Stage("prefill", false, "x")
	untraced.Note("p", "%d", 1)
	untraced.Filter("p", "f", 1, 1)
	untraced.Score("p", "s", nil)
	untraced.Picked("p", nil)
	if untraced.Compact() != "" {
		t.Fatal("nil trace compact")
	}
	Start(cs)
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
	if Start(nil) == nil || FromCycleState(nil) != nil {
		t.Fatal("Start(nil) gives a detached trace; FromCycleState(nil) none")
	}
}
