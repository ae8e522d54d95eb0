package proxy

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

// A prefill leg from a peer sidecar reaching a combined pod's sidecar keeps its producer-side
// handoff fields (rebuilt from the known keys); anything that would make the engine connect
// somewhere, or any other handoff shape, is still dropped.
func TestPeerPrefillLegKeepsProducerFields(t *testing.T) {
	tests := []struct {
		name, body string
		engine     Engine
		key        string
		want       string // the engine's value for key as JSON; "" = absent
		mode       string
	}{
		{name: "trt context_only", engine: EngineTRTLLM, key: "disaggregated_params",
			body: `{"model":"m","max_tokens":1,"disaggregated_params":{"request_type":"context_only","disagg_request_id":4398046511104,"schedule_style":1}}`,
			want: `{"request_type":"context_only","disagg_request_id":4398046511104,"schedule_style":1}`, mode: "prefill-leg"},
		{name: "trt context_only, consumer keys dropped", engine: EngineTRTLLM, key: "disaggregated_params",
			body: `{"model":"m","disaggregated_params":{"request_type":"context_only","ctx_info_endpoint":"tcp://10.9.9.9:1","opaque_state":"eA=="}}`,
			want: `{"request_type":"context_only"}`, mode: "prefill-leg"},
		{name: "trt generation_only is a client's, dropped", engine: EngineTRTLLM, key: "disaggregated_params",
			body: `{"model":"m","disaggregated_params":{"request_type":"generation_only","ctx_request_id":1,"ctx_info_endpoint":"tcp://10.9.9.9:1"}}`,
			mode: "decode-only"},
		{name: "trt non-integer id, dropped", engine: EngineTRTLLM, key: "disaggregated_params",
			body: `{"model":"m","disaggregated_params":{"request_type":"context_only","disagg_request_id":"1"}}`, mode: "decode-only"},
		{name: "trt ignores vllm fields", engine: EngineTRTLLM, key: "kv_transfer_params",
			body: `{"model":"m","kv_transfer_params":{"do_remote_decode":true}}`, mode: "decode-only"},
		{name: "vllm nixl producer", engine: EngineVLLM, key: "kv_transfer_params",
			body: `{"model":"m","kv_transfer_params":{"do_remote_decode":true,"do_remote_prefill":false,"remote_host":null}}`,
			want: nixlPrefillParams, mode: "prefill-leg"},
		{name: "vllm consumer with a remote host, dropped", engine: EngineVLLM, key: "kv_transfer_params",
			body: `{"model":"m","kv_transfer_params":{"do_remote_decode":true,"remote_host":"10.9.9.9","remote_port":1}}`, mode: "decode-only"},
		{name: "vllm do_remote_prefill, dropped", engine: EngineVLLM, key: "kv_transfer_params",
			body: `{"model":"m","kv_transfer_params":{"do_remote_decode":true,"do_remote_prefill":true}}`, mode: "decode-only"},
		{name: "sglang bootstrap fields, dropped", engine: EngineSGLang, key: "bootstrap_host",
			body: `{"model":"m","bootstrap_host":"10.9.9.9","bootstrap_port":8998,"bootstrap_room":1}`, mode: "decode-only"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dec := newFake(t, decodeOK)
			cfg := testConfig(dec)
			cfg.Engine = tt.engine
			env := startProxy(t, cfg)
			resp, body := env.post(t, "/v1/completions", tt.body, nil)
			if resp.StatusCode != 200 || len(dec.requests()) != 1 {
				t.Fatalf("status %d, %d engine requests: %s", resp.StatusCode, len(dec.requests()), body)
			}
			got, ok := dec.requests()[0].Body[tt.key]
			switch {
			case tt.want == "" && ok:
				t.Fatalf("%s reached the engine: %v", tt.key, got)
			case tt.want != "":
				var want any
				_ = json.Unmarshal([]byte(tt.want), &want)
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("%s = %v, want %s", tt.key, got, tt.want)
				}
			}
			// The handler counts the request after the client already has the answer.
			c := env.metrics.Requests.WithLabelValues(string(tt.engine), tt.mode, "200")
			for i := 0; counter(c) != 1 && i < 5000; i++ {
				time.Sleep(time.Millisecond)
			}
			if n := counter(c); n != 1 {
				t.Errorf("requests_total{mode=%q} = %v, want 1", tt.mode, n)
			}
		})
	}
}
