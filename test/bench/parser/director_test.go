// Package parser runs pdgate-openai-parser inside GIE's real director (loaded through the
// EPP's plugin registration), checking what reaches the model server: the original bytes when
// nothing is rewritten, the rewritten model when the gateway asks for one.
package parser

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/config/loader"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/datalayer"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/datastore"
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/handlers"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/requestcontrol"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/scheduling"

	"github.com/pdgate/pdgate/cmd/epp/pluginset"
)

func configFor(mode string) string {
	return `apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: queue-scorer
- type: max-score-picker
- type: single-profile-handler
- type: pdgate-openai-parser
  parameters: {payload: ` + mode + `}
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: queue-scorer
  - pluginRef: max-score-picker
parser:
  pluginRef: pdgate-openai-parser
`
}

func newDirector(t testing.TB, cfgText string) *requestcontrol.Director {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	logger := logr.Discard()
	raw, _, err := pluginset.LoadRaw([]byte(cfgText), logger)
	if err != nil {
		t.Fatal(err)
	}
	rt := datalayer.NewRuntime(time.Hour)
	pool := datalayer.NewEndpointPool("default", "pool")
	pool.TargetPorts = []int{8000}
	ds := datastore.NewDatastore(ctx, rt, 0).WithEndpointPool(pool)
	handle := fwkplugin.NewEppHandle(ctx, func() []types.NamespacedName { return nil })
	cfg, err := loader.InstantiateAndConfigure(raw, handle, logger)
	if err != nil {
		t.Fatal(err)
	}
	ds.PodUpdateOrAddIfNotExist(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p0", Namespace: "default"},
		Status: corev1.PodStatus{PodIP: "127.0.0.1", Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}})
	reqCfg := requestcontrol.NewConfig()
	reqCfg.AddPlugins(handle.GetAllPlugins()...)
	cands := requestcontrol.NewDatastoreEndpointCandidates(ds)
	adm := requestcontrol.NewLegacyAdmissionController(cfg.SaturationDetector, cands)
	return requestcontrol.NewDirectorWithConfig(ds, scheduling.NewSchedulerWithConfig(cfg.SchedulerConfig), adm,
		handlers.NewParser(cfg.ParserConfig), cands, reqCfg)
}

func TestDirectorWithFastParser(t *testing.T) {
	body := `{"model":"m","messages":[{"role":"user","content":"hello"}],"max_tokens":5}`
	tests := []struct {
		mode, rewrite       string
		wantSame            bool
		wantModel, incoming string
	}{
		{mode: "raw", wantSame: true, wantModel: "m"},
		{mode: "raw", rewrite: "m", wantSame: true, wantModel: "m"},
		{mode: "raw", rewrite: "m2", wantModel: "m2", incoming: "m"},
		{mode: "map", wantModel: "m", incoming: "m"},
		{mode: "map", rewrite: "m2", wantModel: "m2", incoming: "m"},
	}
	for _, tt := range tests {
		t.Run(tt.mode+"/"+tt.rewrite, func(t *testing.T) {
			dir := newDirector(t, configFor(tt.mode))
			headers := map[string]string{":path": "/v1/chat/completions", "x-request-id": "r1"}
			reqCtx := &handlers.RequestContext{Request: &handlers.Request{Headers: headers, RawBody: []byte(body)}}
			if tt.rewrite != "" {
				headers["x-gateway-model-name-rewrite"] = tt.rewrite
				reqCtx.TargetModelName = tt.rewrite // what GIE's header handling does
			}
			out, err := dir.HandleRequest(context.Background(), reqCtx)
			if err != nil {
				t.Fatal(err)
			}
			if tt.wantSame && string(out.Request.RawBody) != body {
				t.Fatalf("body changed: %s", out.Request.RawBody)
			}
			var sent map[string]any
			if err := json.Unmarshal(out.Request.RawBody, &sent); err != nil {
				t.Fatal(err)
			}
			if sent["model"] != tt.wantModel || sent["max_tokens"] != 5.0 || out.IncomingModelName != tt.incoming {
				t.Fatalf("sent %v, incoming %q", sent, out.IncomingModelName)
			}
			// Plugins see the model in both modes (raw mode fills it in PrepareRequestData).
			if got := out.SchedulingRequest.TargetModel; got != tt.wantModel {
				t.Fatalf("LLMRequest.TargetModel %q, want %q", got, tt.wantModel)
			}
			if out.TargetEndpoint != "127.0.0.1:8000" || out.RequestSize != len(out.Request.RawBody) {
				t.Fatalf("target %q size %d", out.TargetEndpoint, out.RequestSize)
			}
		})
	}
}
