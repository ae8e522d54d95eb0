package handoffcompat

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"

	"github.com/pdgate/pdgate/plugins/wire/protocol"
)

// mirrored is key set as a pod annotation, as the EPP shows it to plugins.
func mirrored(key string) string { return protocol.AnnotationLabelPrefix + key }

func TestOf(t *testing.T) {
	tests := []struct {
		name    string
		labels  map[string]string
		want    string
		invalid []string
	}{
		{name: "nothing", labels: nil, want: "none"},
		{name: "unrelated labels", labels: map[string]string{"llm-d.ai/role": "decode"}, want: "none"},
		{name: "every attribute", labels: map[string]string{
			LabelConnector: "NIXL", LabelTransferProtocol: " RDMA ", LabelBlockSize: "16", LabelTPSize: "4", LabelDPSize: "2",
			LabelModel: "llama", LabelRevision: "abc123", LabelTransferGroup: "g1"},
			want: "connector=nixl,transfer_protocol=rdma,block_size=16,tp_size=4,dp_size=2,model=llama,revision=abc123,transfer_group=g1"},
		{name: "annotation mirrored", labels: map[string]string{mirrored(LabelRevision): "r2"}, want: "revision=r2"},
		{name: "label wins over annotation", labels: map[string]string{LabelRevision: "r1", mirrored(LabelRevision): "r2"}, want: "revision=r1"},
		{name: "sizes as numbers", labels: map[string]string{LabelTPSize: "08"}, want: "tp_size=8"},
		{name: "invalid sizes left out", labels: map[string]string{LabelTPSize: "four", LabelBlockSize: "0", LabelDPSize: "-1", LabelModel: "m"},
			want: "model=m", invalid: []string{LabelDPSize + "=-1", LabelBlockSize + "=0", LabelTPSize + "=four"}},
		{name: "blank is left out", labels: map[string]string{LabelTransferGroup: "  "}, want: "none"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, invalid := Of(tc.labels)
			if got := s.String(); got != tc.want {
				t.Errorf("Of = %s, want %s", got, tc.want)
			}
			if strings.Join(invalid, " ") != strings.Join(tc.invalid, " ") {
				t.Errorf("invalid = %v, want %v", invalid, tc.invalid)
			}
			// Declares is the cheap pre-check: it may say yes to a blank value, never no to a
			// declared one.
			if (tc.want != "none" || len(tc.invalid) > 0) && !Declares(tc.labels) {
				t.Error("Declares = false for a pod that declares something")
			}
		})
	}
}

func TestCompatible(t *testing.T) {
	none := Spec{}
	nixl := none.With(Connector, "nixl")
	tests := []struct {
		name     string
		a, b     Spec
		want     bool
		mismatch Attr
	}{
		{name: "neither declares", a: none, b: none, want: true},
		{name: "one side declares", a: nixl.With(Revision, "r1"), b: none, want: true},
		{name: "connector compared case-insensitively", a: nixl, b: none.With(Connector, "NIXL"), want: true},
		{name: "connector differs", a: nixl, b: none.With(Connector, "mooncake"), mismatch: Connector},
		{name: "protocol differs", a: none.With(TransferProtocol, "rdma"), b: none.With(TransferProtocol, "tcp"), mismatch: TransferProtocol},
		{name: "block size differs", a: none.With(BlockSize, "16"), b: none.With(BlockSize, "32"), mismatch: BlockSize},
		{name: "block size equal as numbers", a: none.With(BlockSize, "16"), b: none.With(BlockSize, "016"), want: true},
		{name: "tp differs", a: none.With(TPSize, "2"), b: none.With(TPSize, "4"), mismatch: TPSize},
		{name: "dp differs", a: none.With(DPSize, "1"), b: none.With(DPSize, "2"), mismatch: DPSize},
		{name: "model differs", a: none.With(Model, "a"), b: none.With(Model, "b"), mismatch: Model},
		{name: "revision differs", a: none.With(Revision, "r1"), b: none.With(Revision, "r2"), mismatch: Revision},
		{name: "revision is case-sensitive", a: none.With(Revision, "abc"), b: none.With(Revision, "ABC"), mismatch: Revision},
		{name: "group differs", a: none.With(TransferGroup, "g1"), b: none.With(TransferGroup, "g2"), mismatch: TransferGroup},
		{name: "first mismatch in table order", a: nixl.With(TransferGroup, "g1"), b: none.With(Connector, "shfs").With(TransferGroup, "g2"), mismatch: Connector},
		{name: "disjoint declarations", a: nixl, b: none.With(TransferGroup, "g2"), want: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Compatible(tc.a, tc.b); got != tc.want {
				t.Errorf("Compatible(%s, %s) = %v, want %v", tc.a, tc.b, got, tc.want)
			}
			if got := Compatible(tc.b, tc.a); got != tc.want {
				t.Errorf("Compatible is not symmetric for %s, %s", tc.a, tc.b)
			}
			m, bad := Mismatch(tc.a, tc.b)
			if bad == tc.want || (bad && m != tc.mismatch) {
				t.Errorf("Mismatch = %s, %v; want %s", m, bad, tc.mismatch)
			}
		})
	}
}

func TestFirstMismatch(t *testing.T) {
	none := Spec{}
	side := []Spec{none.With(Revision, "r1"), none.With(TPSize, "2")}
	if a, ok := FirstMismatch(side, []Spec{none.With(Revision, "r2").With(TPSize, "4")}); !ok || a != TPSize {
		t.Errorf("FirstMismatch = %s, %v; want tp_size", a, ok)
	}
	if _, ok := FirstMismatch(side, []Spec{none}); ok {
		t.Error("FirstMismatch found a mismatch against a pod that declares nothing")
	}
}

func TestParseFallback(t *testing.T) {
	for in, want := range map[string]Fallback{"": LocalPrefill, "local-prefill": LocalPrefill, "error": Fail} {
		if got, err := ParseFallback("p", in); err != nil || got != want {
			t.Errorf("ParseFallback(%q) = %q, %v", in, got, err)
		}
	}
	if _, err := ParseFallback("p", "drop"); err == nil || !strings.Contains(err.Error(), `p="drop"`) {
		t.Errorf("ParseFallback(drop) error = %v", err)
	}
}

func TestCounterSharedAcrossPlugins(t *testing.T) {
	reg := prometheus.NewRegistry()
	var counters [2]*Counter // two plugins, one series set
	for i := range counters {
		c, err := NewCounter(reg)
		if err != nil {
			t.Fatalf("plugin %d: %v", i, err)
		}
		counters[i] = c
	}
	counters[0].Inc(Revision, LocalPrefill)
	counters[1].Inc(Revision, LocalPrefill)
	counters[1].Inc(Connector, Fail)
	if got := counters[0].Count(Revision, LocalPrefill); got != 2 {
		t.Errorf("revision/local_prefill = %g, want 2", got)
	}
	if got := counters[1].Count(Connector, Fail); got != 1 {
		t.Errorf("connector/error = %g, want 1", got)
	}
	var nilCounter *Counter
	nilCounter.Inc(Model, Fail) // a plugin built without metrics must not panic
	if nilCounter.Count(Model, Fail) != 0 {
		t.Error("a nil counter counts")
	}
}

func TestOfAllocatesNothingForUndeclaredPods(t *testing.T) {
	labels := map[string]string{"llm-d.ai/role": "decode", "model.aibrix.ai/engine": "vllm"}
	if n := testing.AllocsPerRun(100, func() { _, _ = Of(labels); _ = Declares(labels) }); n != 0 {
		t.Errorf("Of + Declares allocate %g times for a pod that declares nothing", n)
	}
	declared := map[string]string{LabelRevision: "r1", LabelTPSize: "4", LabelConnector: "nixl"}
	if n := testing.AllocsPerRun(100, func() { _, _ = Of(declared) }); n != 0 {
		t.Errorf("Of allocates %g times for plainly written values", n)
	}
}

func TestCache(t *testing.T) {
	var c Cache
	md := &fwkdl.EndpointMetadata{Labels: map[string]string{LabelRevision: "r1"}}
	if got := c.Of(md).Get(Revision); got != "r1" {
		t.Fatalf("Of = %q", got)
	}
	if n := testing.AllocsPerRun(100, func() { _ = c.Of(md) }); n != 0 {
		t.Errorf("a cached spec allocates %g times", n)
	}
	// a pod's change arrives as a new metadata object
	if got := c.Of(&fwkdl.EndpointMetadata{Labels: map[string]string{LabelRevision: "r2"}}).Get(Revision); got != "r2" {
		t.Errorf("new metadata read as %q", got)
	}
	for range cacheLimit + 10 {
		c.Of(&fwkdl.EndpointMetadata{})
	}
	if n := c.n.Load(); n > cacheLimit {
		t.Errorf("cache holds %d entries, limit %d", n, cacheLimit)
	}
	if c.Of(nil) != (Spec{}) {
		t.Error("nil metadata declares something")
	}
	a := &fwkdl.EndpointMetadata{Labels: map[string]string{LabelTPSize: "4"}}
	b := &fwkdl.EndpointMetadata{Labels: map[string]string{LabelTPSize: "04"}}
	if c.Ref(a) != c.Ref(b) || c.Ref(&fwkdl.EndpointMetadata{}) != c.Ref(nil) {
		t.Error("equal specs are not interned")
	}
}
