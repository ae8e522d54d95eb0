package chart

import (
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestRejectedValues: bad values fail the install with a message naming the value to fix,
// whether values.schema.json or the chart's own checks catch them.
func TestRejectedValues(t *testing.T) {
	base := []string{"inferencePool.modelServers.matchLabels.app=x"}
	cases := []struct {
		name string
		sets []string
		want string
	}{
		{"typo in a key", []string{"inferenceExtension.replica=2"}, "replica"},
		{"failure mode", []string{"inferenceExtension.failureMode=Maybe"}, "failureMode"},
		{"ha mode", []string{"inferenceExtension.ha.mode=primary-backup"}, "mode"},
		{"zero replicas", []string{"inferenceExtension.replicas=0"}, "replicas"},
		{"port out of range", []string{"inferenceExtension.extProcPort=70000"}, "extProcPort"},
		{"engine", []string{"modelServers.enabled=true", "modelServers.engine=tgi"}, "engine"},
		{"GIE provider", []string{"provider.name=gke"}, "provider"},
		{"GIE latency predictor", []string{"inferenceExtension.latencyPredictor.enabled=true"}, "latencyPredictor"},
		{"unknown config file", []string{"inferenceExtension.pluginsConfigFile=nope.yaml"}, `pluginsConfigFile "nope.yaml" is not in the EPP ConfigMap`},
		{"deprecated metric flag", []string{"inferenceExtension.flags.total-queued-requests-metric=x"}, "flags.total-queued-requests-metric: GIE v1.5.0 rejects"},
		{"flag the chart owns", []string{"inferenceExtension.flags.pool-name=other"}, "flags.pool-name: the chart sets this flag"},
		{"active-active without redis", []string{"inferenceExtension.replicas=2", "inferenceExtension.ha.mode=active-active"}, "set redis.enabled=true or redis.address"},
		{"active-active without a ledger", []string{"inferenceExtension.pluginsConfigFile=pd-plugins.yaml", "inferenceExtension.replicas=2", "inferenceExtension.ha.mode=active-active", "redis.enabled=true"}, "has no pd-token-ledger plugin"},
		{"redis twice", []string{"redis.enabled=true", "redis.address=r:6379"}, "exclusive"},
		{"redis address", []string{"redis.address=no-port"}, "address"},
		{"no sample pods", []string{"modelServers.enabled=true", "modelServers.rolesets=null"}, "no pod is requested"},
		{"alwaysDisaggregate with another config", []string{"inferenceExtension.pdConfig.alwaysDisaggregate=true"}, "set inferenceExtension.pluginsConfigFile=pd-plugins.yaml"},
		{"negative threshold", []string{"inferenceExtension.pdConfig.nonCachedTokens=-1"}, "nonCachedTokens"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := render(t, "demo", testNS, values(t, nil, append(append([]string{}, base...), tc.sets...)...))
			if err == nil {
				t.Fatalf("install accepted %v", tc.sets)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not mention %q", err, tc.want)
			}
		})
	}
}

// TestCustomConfigWins: a user config under a shipped name replaces the shipped one, and the
// EPP loads the file the values name.
func TestCustomConfigWins(t *testing.T) {
	custom := "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: queue-scorer\n"
	vals := values(t, nil, "inferencePool.modelServers.matchLabels.app=x", "inferenceExtension.pluginsConfigFile=pd-plugins.yaml")
	vals["inferenceExtension"].(map[string]any)["pluginsCustomConfig"] = map[string]any{"pd-plugins.yaml": custom}
	objs := mustRender(t, "demo", testNS, vals)
	got := field(t, find(t, objs, "ConfigMap", "demo-epp"), "data", "pd-plugins.yaml")
	if got != custom {
		t.Fatalf("pd-plugins.yaml = %q, want the user's config", got)
	}
}

// TestPDConfigKnobs: the rendered P/D config follows pdConfig.
func TestPDConfigKnobs(t *testing.T) {
	cases := []struct {
		sets    []string
		want    []string
		wantNot []string
	}{
		{nil, []string{"type: prefix-based-pd-decider", "nonCachedTokens: 256", "prefill: pd-decider", "name: decode", "name: prefill",
			"type: pdgate-openai-parser", "payload: raw", "pluginRef: pdgate-openai-parser"}, nil},
		{[]string{"inferencePool.parser=openai-parser"}, []string{"type: openai-parser", "pluginRef: openai-parser"}, []string{"pdgate-openai-parser"}},
		{[]string{"inferenceExtension.pdConfig.nonCachedTokens=1024"}, []string{"nonCachedTokens: 1024"}, nil},
		{[]string{"inferenceExtension.pluginsConfigFile=pd-plugins.yaml", "inferenceExtension.pdConfig.alwaysDisaggregate=true"}, []string{"type: always-disagg-pd-decider"}, nil},
		{[]string{"inferencePool.modelServerType=trtllm-serve"}, []string{`path: "/prometheus/metrics"`, `defaultEngine: "trtllm-serve"`}, nil},
		{[]string{"inferencePool.modelServerProtocol=grpc"}, []string{"type: vllmgrpc-parser", "pluginRef: vllmgrpc-parser"}, []string{"pdgate-openai-parser"}},
	}
	for _, tc := range cases {
		vals := values(t, nil, append([]string{"inferencePool.modelServers.matchLabels.app=x"}, tc.sets...)...)
		text := field(t, find(t, mustRender(t, "demo", testNS, vals), "ConfigMap", "demo-epp"), "data", "pd-plugins.yaml").(string)
		for _, w := range tc.want {
			if !strings.Contains(text, w) {
				t.Errorf("%v: pd-plugins.yaml lacks %q:\n%s", tc.sets, w, text)
			}
		}
		for _, w := range tc.wantNot {
			if strings.Contains(text, w) {
				t.Errorf("%v: pd-plugins.yaml must not contain %q:\n%s", tc.sets, w, text)
			}
		}
	}
}

// TestActiveActive: every replica serves, Redis is wired into the ledger's variables, and
// updates roll one replica at a time.
func TestActiveActive(t *testing.T) {
	sample := filepath.Join(repoRoot(t), "config", "samples", "ha-active-active.yaml")
	cases := []struct {
		name, wantHost, wantPort string
		sets                     []string
	}{
		{"chart redis", "aa-redis." + testNS + ".svc", "6379", nil},
		{"external redis", "redis.cache.svc", "6380", []string{"redis.enabled=false", "redis.address=redis.cache.svc:6380"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			objs := mustRender(t, "aa", testNS, values(t, []string{sample}, tc.sets...))
			dep := find(t, objs, "Deployment", "aa-epp")
			if s := field(t, dep, "spec", "strategy", "type"); s != "RollingUpdate" {
				t.Errorf("strategy %v, want RollingUpdate", s)
			}
			env := eppEnv(t, dep)
			if env["REDIS_HOST"] != tc.wantHost || env["REDIS_PORT"] != tc.wantPort {
				t.Errorf("REDIS_HOST=%q REDIS_PORT=%q, want %s:%s", env["REDIS_HOST"], env["REDIS_PORT"], tc.wantHost, tc.wantPort)
			}
			if (lookup(objs, "Deployment", "aa-redis") != nil) != (tc.sets == nil) {
				t.Errorf("chart Redis rendered=%v, want %v", lookup(objs, "Deployment", "aa-redis") != nil, tc.sets == nil)
			}
		})
	}
}

// eppEnv returns the EPP container's literal environment values.
func eppEnv(t *testing.T, dep *unstructured.Unstructured) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, e := range container(t, dep, "containers", "epp")["env"].([]any) {
		m := e.(map[string]any)
		if v, ok := m["value"].(string); ok {
			env[m["name"].(string)] = v
		}
	}
	return env
}

// TestGoMemLimit: the EPP's GOMEMLIMIT is 90 % of its memory limit unless set or turned off,
// and a malformed value is refused.
func TestGoMemLimit(t *testing.T) {
	cases := []struct {
		name string
		sets []string
		want string // "" = not set
	}{
		{"default 4Gi limit", nil, "3686MiB"},
		{"limit in Mi", []string{"inferenceExtension.resources.limits.memory=512Mi"}, "460MiB"},
		{"explicit", []string{"inferenceExtension.goMemLimit=900MiB"}, "900MiB"},
		{"off", []string{"inferenceExtension.goMemLimit=off"}, ""},
		{"limit in other units", []string{"inferenceExtension.resources.limits.memory=2G"}, ""},
		{"no limit", []string{"inferenceExtension.resources.limits=null"}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			vals := values(t, nil, append([]string{"inferencePool.modelServers.matchLabels.app=x"}, tc.sets...)...)
			env := eppEnv(t, find(t, mustRender(t, "demo", testNS, vals), "Deployment", "demo-epp"))
			if got, set := env["GOMEMLIMIT"]; got != tc.want || set != (tc.want != "") {
				t.Fatalf("GOMEMLIMIT = %q (set %v), want %q", got, set, tc.want)
			}
		})
	}
	_, err := render(t, "demo", testNS, values(t, nil, "inferencePool.modelServers.matchLabels.app=x", "inferenceExtension.goMemLimit=lots"))
	if err == nil || !strings.Contains(err.Error(), "goMemLimit") {
		t.Fatalf("goMemLimit=lots: %v", err)
	}
}
