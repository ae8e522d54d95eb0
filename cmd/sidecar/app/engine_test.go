package app

import (
	"strings"
	"testing"
	"time"
)

// A bad setting for an engine the pod does not run is a warning (the default applies); a bad
// setting the engine uses is refused naming the variable or flag, the value and the allowed
// values; AIBRIX_TRT_SCHEDULE_STYLE keeps AIBrix's "unknown → context_first, logged" rule.
func TestEngineScopedSettings(t *testing.T) {
	tests := []struct {
		name     string
		env      map[string]string
		mutate   func(o *Options)
		wantErr  []string // substrings, all required
		wantWarn string
		check    func(o *Options) bool
	}{
		{name: "schedule style typo on a vLLM pod", env: map[string]string{"AIBRIX_TRT_SCHEDULE_STYLE": "bogus"},
			wantWarn: `AIBRIX_TRT_SCHEDULE_STYLE="bogus"`, check: func(o *Options) bool { return o.TRTSchedule == "context_first" }},
		{name: "schedule style typo on a TRT pod keeps AIBrix's default", env: map[string]string{"AIBRIX_TRT_SCHEDULE_STYLE": "bogus"},
			mutate: func(o *Options) { o.Engine = "trtllm" }, wantWarn: "AIBrix keeps the default",
			check: func(o *Options) bool { return o.TRTSchedule == "context_first" }},
		{name: "Generation-First is generation_first", env: map[string]string{"AIBRIX_TRT_SCHEDULE_STYLE": "Generation-First"},
			mutate: func(o *Options) { o.Engine = "trtllm" }, check: func(o *Options) bool { return o.TRTSchedule == "generation_first" }},
		{name: "schedule style flag typo on a TRT pod is refused", mutate: func(o *Options) { o.Engine, o.TRTSchedule = "trtllm", "both" },
			wantErr: []string{`--trt-schedule-style "both"`, "context_first, generation_first"}},
		{name: "unknown KV connector on an SGLang pod", env: map[string]string{"AIBRIX_KV_CONNECTOR_TYPE": "mooncake"},
			mutate: func(o *Options) { o.Engine = "sglang" }, wantWarn: "--engine sglang does not use it",
			check: func(o *Options) bool { return o.KVConnector == "shfs" }},
		{name: "unknown KV connector on a vLLM pod is refused", env: map[string]string{"AIBRIX_KV_CONNECTOR_TYPE": "mooncake"},
			wantErr: []string{`AIBRIX_KV_CONNECTOR_TYPE="mooncake"`, "nixlv2, shfs, nixl, shared-storage"}},
		{name: "machine id out of range on a vLLM pod", env: map[string]string{"AIBRIX_TRT_MACHINE_ID": "5000"},
			wantWarn: "AIBRIX_TRT_MACHINE_ID", check: func(o *Options) bool { return o.TRTMachineID == 0 }},
		{name: "machine id not a number on a TRT pod", env: map[string]string{"AIBRIX_TRT_MACHINE_ID": "seven"},
			mutate: func(o *Options) { o.Engine = "trtllm" }, wantErr: []string{`AIBRIX_TRT_MACHINE_ID="seven"`, "[0,1024)"}},
		{name: "bootstrap port on a vLLM pod", env: map[string]string{"SGLANG_BOOTSTRAP_PORT": "x"}, wantWarn: "SGLANG_BOOTSTRAP_PORT",
			check: func(o *Options) bool { return o.BootstrapPort == 8998 }},
		{name: "bootstrap port on an SGLang pod", env: map[string]string{"SGLANG_BOOTSTRAP_PORT": "70000"},
			mutate: func(o *Options) { o.Engine = "sglang" }, wantErr: []string{`SGLANG_BOOTSTRAP_PORT="70000"`, "1..65535"}},
		{name: "abort timeout on a vLLM pod", env: map[string]string{"AIBRIX_DECODE_ABORT_TIMEOUT": "-1"}, wantWarn: "AIBRIX_DECODE_ABORT_TIMEOUT",
			check: func(o *Options) bool { return o.AbortTimeout == 3*time.Second }},
		{name: "abort retry delay on an SGLang pod", env: map[string]string{"AIBRIX_DECODE_ABORT_RETRY_DELAY": "soon"},
			mutate: func(o *Options) { o.Engine = "sglang" }, wantErr: []string{`AIBRIX_DECODE_ABORT_RETRY_DELAY="soon"`}},
		{name: "a flag replacing a bad variable wins", env: map[string]string{"AIBRIX_KV_CONNECTOR_TYPE": "bogus"},
			mutate: func(o *Options) { o.KVConnector = "nixlv2" }, check: func(o *Options) bool { return o.KVConnector == "nixlv2" }},
		{name: "unknown engine", mutate: func(o *Options) { o.Engine = "tgi" }, wantErr: []string{`--engine "tgi"`, "vllm, sglang, trtllm"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("INFERENCE_POOL", "")
			for _, k := range []string{"AIBRIX_TRT_SCHEDULE_STYLE", "AIBRIX_KV_CONNECTOR_TYPE", "AIBRIX_TRT_MACHINE_ID", "SGLANG_BOOTSTRAP_PORT",
				"AIBRIX_DECODE_ABORT_TIMEOUT", "AIBRIX_DECODE_ABORT_RETRY_DELAY"} {
				t.Setenv(k, tt.env[k])
			}
			o := NewOptions()
			o.AllowlistDisable = true
			if tt.mutate != nil {
				tt.mutate(o)
			}
			err := o.Validate()
			if len(tt.wantErr) > 0 {
				for _, want := range tt.wantErr {
					if err == nil || !strings.Contains(err.Error(), want) {
						t.Fatalf("err %v, want it to contain %q", err, want)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("refused: %v", err)
			}
			warns := strings.Join(o.warnings, "\n")
			if (tt.wantWarn == "") != (warns == "") || !strings.Contains(warns, tt.wantWarn) {
				t.Fatalf("warnings %q, want %q", warns, tt.wantWarn)
			}
			if tt.check != nil && !tt.check(o) {
				t.Fatalf("settings after the check: %+v", o)
			}
		})
	}
}
