package podmodel

import (
	"testing"

	"k8s.io/apimachinery/pkg/types"
	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/wire/protocol"
)

func meta(name string, labels map[string]string) *fwkdl.EndpointMetadata {
	return &fwkdl.EndpointMetadata{
		NamespacedName: types.NamespacedName{Namespace: "ns", Name: name + "-rank-0"},
		PodName:        name, Address: "10.0.0.1", Port: "8000", Labels: labels,
	}
}

const cfgAnn = protocol.AnnotationLabelPrefix + AnnotationConfig

func TestFromMetadata(t *testing.T) {
	tests := []struct {
		name        string
		labels      map[string]string
		role        Role
		src         RoleSource
		engine      Engine
		port        string
		kv          string
		bootstrap   int
		routable    bool
		invalid     int
		configErr   bool
		inRoleset   bool
		hasConfig   bool
		servesPre   bool
		servesDecod bool
	}{
		{name: "empty", labels: nil, role: RoleNone, engine: EngineVLLM, port: "8000", bootstrap: 8998, routable: true},
		{name: "llm-d decode", labels: map[string]string{LabelLLMDRole: "decode"}, role: RoleDecode, src: SourceLLMD,
			engine: EngineVLLM, port: "8000", bootstrap: 8998, routable: true, servesDecod: true},
		{name: "llm-d both is prefill-decode", labels: map[string]string{LabelLLMDRole: "both"}, role: RolePrefillDecode,
			src: SourceLLMD, engine: EngineVLLM, port: "8000", bootstrap: 8998, routable: true},
		{name: "llm-d wins over aibrix", labels: map[string]string{LabelLLMDRole: "prefill", LabelRoleName: "decode"},
			role: RolePrefill, src: SourceLLMD, engine: EngineVLLM, port: "8000", bootstrap: 8998, routable: true, servesPre: true},
		{name: "unknown llm-d falls back to aibrix", labels: map[string]string{LabelLLMDRole: "bogus", LabelRoleName: "decode"},
			role: RoleDecode, src: SourceAIBrix, engine: EngineVLLM, port: "8000", bootstrap: 8998, routable: true, servesDecod: true},
		{name: "aibrix prefill in roleset", labels: map[string]string{LabelRoleName: "prefill", LabelRolesetName: "rs0",
			LabelEngine: "SGLang", LabelPort: "9000", LabelKVConnectorType: "NIXL",
			protocol.AnnotationLabelPrefix + AnnotationBootstrap: "9100"},
			role: RolePrefill, src: SourceAIBrix, engine: EngineSGLang, port: "9000", kv: "nixl", bootstrap: 9100,
			routable: true, inRoleset: true, servesPre: true},
		{name: "aibrix other role", labels: map[string]string{LabelRoleName: "all", LabelRolesetName: "rs0"},
			role: RoleOther, src: SourceAIBrix, engine: EngineVLLM, port: "8000", bootstrap: 8998, routable: true},
		{name: "engine from annotation", labels: map[string]string{protocol.AnnotationLabelPrefix + LabelEngine: "trtllm"},
			engine: EngineTRTLLM, port: "8000", bootstrap: 8998, routable: true},
		{name: "multi-node leader index 0", labels: map[string]string{LabelRoleName: "decode", LabelRolesetName: "a", LabelPodGroupIndex: "0"},
			role: RoleDecode, src: SourceAIBrix, engine: EngineVLLM, port: "8000", bootstrap: 8998, routable: true, inRoleset: true, servesDecod: true},
		{name: "multi-node follower", labels: map[string]string{LabelRoleName: "decode", LabelRolesetName: "a", LabelPodGroupIndex: "1"},
			role: RoleDecode, src: SourceAIBrix, engine: EngineVLLM, port: "8000", bootstrap: 8998, routable: false, servesDecod: true},
		{name: "invalid values ignored", labels: map[string]string{LabelEngine: "tgi", LabelPort: "0", LabelKVConnectorType: "foo",
			protocol.AnnotationLabelPrefix + AnnotationBootstrap: "99999999999"},
			engine: EngineVLLM, port: "8000", bootstrap: 8998, routable: true, invalid: 4},
		{name: "bootstrap port out of tcp range", labels: map[string]string{protocol.AnnotationLabelPrefix + AnnotationBootstrap: "70000"},
			engine: EngineVLLM, port: "8000", bootstrap: 8998, routable: true, invalid: 1},
		{name: "bad config json", labels: map[string]string{cfgAnn: "{"}, engine: EngineVLLM, port: "8000", bootstrap: 8998,
			routable: true, configErr: true},
		{name: "config without profiles", labels: map[string]string{cfgAnn: `{"profiles":{}}`}, engine: EngineVLLM, port: "8000",
			bootstrap: 8998, routable: true, configErr: true},
		{name: "good config", labels: map[string]string{cfgAnn: `{"profiles":{"default":{"routingStrategy":"pd"}}}`},
			engine: EngineVLLM, port: "8000", bootstrap: 8998, routable: true, hasConfig: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := FromMetadata(meta("p", tt.labels))
			if p.Role != tt.role || p.RoleSource != tt.src || p.Engine != tt.engine || p.Port != tt.port ||
				p.KVConnector != tt.kv || p.BootstrapPort != tt.bootstrap || p.Routable != tt.routable ||
				len(p.Invalid) != tt.invalid || (p.ConfigErr != nil) != tt.configErr || p.InRoleset() != tt.inRoleset ||
				(p.Config != nil) != tt.hasConfig || p.ServesPrefill() != tt.servesPre || p.ServesDecode() != tt.servesDecod {
				t.Fatalf("got %+v", p)
			}
			if p.Key != "ns/p" || p.Name != "p" {
				t.Fatalf("key %q name %q", p.Key, p.Name)
			}
		})
	}
}

func TestBucketSuits(t *testing.T) {
	tests := []struct {
		lo, hi, n int
		want      bool
	}{
		{0, 0, 0, true}, {0, 0, 1 << 30, true},
		{10, 20, 9, false}, {10, 20, 10, true}, {10, 20, 20, true}, {10, 20, 21, false},
		{30, 20, 25, false}, {30, 20, 30, false},
		{30, 0, 29, false}, {30, 0, 30, true}, {30, -5, 31, true},
		{-5, 10, 0, true},
	}
	for _, tt := range tests {
		if got := BucketSuits(tt.lo, tt.hi, tt.n); got != tt.want {
			t.Errorf("BucketSuits(%d,%d,%d)=%v want %v", tt.lo, tt.hi, tt.n, got, tt.want)
		}
	}
}

func TestIsCombinedAndBucket(t *testing.T) {
	combinedCfg := `{"profiles":{"default":{"routingConfig":{"combined":true,"promptLenBucketMaxLength":100}},
	  "long":{"routingConfig":{"combined":false,"promptLenBucketMinLength":101}}}}`
	tests := []struct {
		name     string
		labels   map[string]string
		header   string
		combined bool
		suits50  bool
	}{
		{"llm-d prefill-decode", map[string]string{LabelLLMDRole: "prefill-decode"}, "", true, true},
		{"llm-d encode-prefill-decode", map[string]string{LabelLLMDRole: "encode-prefill-decode"}, "", true, true},
		{"aibrix combined", map[string]string{LabelRoleName: "all", LabelRolesetName: "rs", cfgAnn: combinedCfg}, "", true, true},
		{"aibrix combined other profile", map[string]string{LabelRoleName: "all", LabelRolesetName: "rs", cfgAnn: combinedCfg}, "long", false, false},
		{"aibrix combined without roleset", map[string]string{LabelRoleName: "all", cfgAnn: combinedCfg}, "", true, true},
		{"aibrix combined without role (user guide)", map[string]string{cfgAnn: combinedCfg}, "", true, true},
		{"aibrix prefill with combined flag", map[string]string{LabelRoleName: "prefill", LabelRolesetName: "rs", cfgAnn: combinedCfg}, "", false, true},
		{"follower never combined", map[string]string{LabelLLMDRole: "both", LabelPodGroupIndex: "2"}, "", false, true},
		{"no config suits all", map[string]string{LabelRoleName: "all", LabelRolesetName: "rs"}, "", false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := FromMetadata(meta("p", tt.labels))
			if tt.combined && !p.ServesWholeRequest(tt.header, AutoHints{MaxTokens: -1}) {
				t.Fatal("combined pods serve whole requests")
			}
			if got := p.IsCombined(tt.header, AutoHints{MaxTokens: -1}); got != tt.combined {
				t.Fatalf("IsCombined=%v want %v", got, tt.combined)
			}
			if got := p.Suits(50, tt.header, AutoHints{MaxTokens: -1}); got != tt.suits50 {
				t.Fatalf("Suits(50)=%v want %v", got, tt.suits50)
			}
		})
	}
}

func TestServesWholeRequest(t *testing.T) {
	tests := []struct {
		labels map[string]string
		want   bool
	}{
		{nil, true},
		{map[string]string{cfgAnn: `{"profiles":{"default":{}}}`}, false},
		{map[string]string{LabelRolesetName: "rs"}, false},
		{map[string]string{LabelLLMDRole: "decode"}, false},
		{map[string]string{LabelPodGroupIndex: "1"}, false},
	}
	for i, tt := range tests {
		if p := FromMetadata(meta("p", tt.labels)); p.ServesWholeRequest("", AutoHints{}) != tt.want {
			t.Errorf("%d: got %v want %v", i, !tt.want, tt.want)
		}
	}
}

func TestRolesets(t *testing.T) {
	mk := func(name, role, rs, idx string) Pod {
		l := map[string]string{LabelRoleName: role, LabelRolesetName: rs}
		if idx != "" {
			l[LabelRoleReplicaIdx] = idx
		}
		return FromMetadata(meta(name, l))
	}
	pods := []Pod{
		mk("a-p0", "prefill", "a", ""), mk("a-d0", "decode", "a", ""), mk("a-d1", "decode", "a", ""),
		mk("b-p0", "prefill", "b", ""), // incomplete
		mk("c-d0", "decode", "c", ""),  // incomplete
		mk("d-p0", "prefill", "d", "0"), mk("d-p1", "prefill", "d", "0"), mk("d-d0", "decode", "d", "1"),
		mk("x-all", "all", "a", ""),
		FromMetadata(meta("nors", map[string]string{LabelRoleName: "decode"})),
	}
	all := GroupRolesets(pods)
	if len(all) != 4 {
		t.Fatalf("got %d rolesets", len(all))
	}
	el := EligibleRolesets(pods)
	if len(el) != 2 || el[0].Name != "a" || el[1].Name != "d" {
		t.Fatalf("eligible %+v", el)
	}
	if el[0].PrefillReplicas != 1 || el[0].DecodeReplicas != 2 || el[1].PrefillReplicas != 1 || el[1].DecodeReplicas != 1 {
		t.Fatalf("cardinality %+v", el)
	}
}

func TestValidateEngines(t *testing.T) {
	v := FromMetadata(meta("a", nil))
	v2 := FromMetadata(meta("b", map[string]string{LabelEngine: "vllm"}))
	s := FromMetadata(meta("c", map[string]string{LabelEngine: "sglang"}))
	if e, err := ValidateEngines([]Pod{v, v2}); err != nil || e != EngineVLLM {
		t.Fatalf("got %v %v", e, err)
	}
	if _, err := ValidateEngines([]Pod{v, s}); err == nil {
		t.Fatal("mismatch must fail")
	}
	if e, err := ValidateEngines(nil); err != nil || e != EngineVLLM {
		t.Fatalf("empty: %v %v", e, err)
	}
	// A multi-node follower (no HTTP) is not asked which engine it runs.
	follower := FromMetadata(meta("d", map[string]string{LabelEngine: "sglang", LabelPodGroupIndex: "1"}))
	if e, err := ValidateEngines([]Pod{follower, v, v2}); err != nil || e != EngineVLLM {
		t.Fatalf("follower counted: %v %v", e, err)
	}
	if e, err := ValidateEngines([]Pod{follower}); err != nil || e != EngineVLLM {
		t.Fatalf("followers only: %v %v", e, err)
	}
}

// ModelConfigOfEndpoints reads the same config as ModelConfigOf over the resolved pods.
func TestModelConfigOfEndpoints(t *testing.T) {
	cfgA := `{"defaultProfile":"a","profiles":{"a":{"routingStrategy":"pd"}}}`
	cfgB := `{"defaultProfile":"b","profiles":{"b":{"routingStrategy":"random"}}}`
	for _, tc := range []struct {
		name string
		eps  []fwkEndpoint
	}{
		{"none", nil},
		{"no config", []fwkEndpoint{fwksched.NewEndpoint(meta("a", nil), nil, nil)}},
		{"lowest key wins", []fwkEndpoint{
			fwksched.NewEndpoint(meta("z", map[string]string{cfgAnn: cfgA}), nil, nil),
			fwksched.NewEndpoint(meta("b", map[string]string{cfgAnn: cfgB}), nil, nil),
			fwksched.NewEndpoint(meta("a", map[string]string{cfgAnn: "not json"}), nil, nil)}},
	} {
		pods := make([]Pod, 0, len(tc.eps))
		for _, ep := range tc.eps {
			pods = append(pods, FromEndpoint(ep))
		}
		if got, want := ModelConfigOfEndpoints(tc.eps), ModelConfigOf(pods); got != want {
			t.Errorf("%s: %v, want %v", tc.name, got, want)
		}
	}
}
