package aibrixenginemetrics

// Mapping names the metric families of one engine. Empty names are not read.
type Mapping struct {
	GenThroughput       string `json:"genThroughput,omitempty"`       // gauge, tokens/s
	GenTokensTotal      string `json:"genTokensTotal,omitempty"`      // counter; rate used when the gauge is missing
	Running             string `json:"running,omitempty"`             // gauge
	Waiting             string `json:"waiting,omitempty"`             // gauge
	KVUsage             string `json:"kvUsage,omitempty"`             // gauge, 0..1
	PrefillTime         string `json:"prefillTime,omitempty"`         // histogram, seconds
	FinishedTotal       string `json:"finishedTotal,omitempty"`       // counter of finished requests (drain rate)
	DrainRate1m         string `json:"drainRate1m,omitempty"`         // optional gauge that already holds the 1m rate
	PrefillPreallocReqs string `json:"prefillPreallocReqs,omitempty"` // gauge
	DecodePreallocReqs  string `json:"decodePreallocReqs,omitempty"`  // gauge
}

// ProcessStartMetric is the process start time every engine's Prometheus client exports
// (the client library's process collector, not an engine metric), read for every engine.
const ProcessStartMetric = "process_start_time_seconds"

// BuiltinMappings are the metric names of the engines pdgate knows. Keys are engine names as
// found in inference.networking.k8s.io/engine-type or AIBrix's engine label (podmodel.LabelEngine).
var BuiltinMappings = map[string]Mapping{
	"vllm": {
		GenThroughput: "vllm:avg_generation_throughput_toks_per_s", GenTokensTotal: "vllm:generation_tokens_total",
		Running: "vllm:num_requests_running", Waiting: "vllm:num_requests_waiting", KVUsage: "vllm:kv_cache_usage_perc",
		PrefillTime: "vllm:request_prefill_time_seconds", FinishedTotal: "vllm:request_success_total",
	},
	"sglang": {
		GenThroughput: "sglang:gen_throughput", GenTokensTotal: "sglang:generation_tokens_total",
		Running: "sglang:num_running_reqs", Waiting: "sglang:num_queue_reqs", KVUsage: "sglang:token_usage",
		PrefillTime: "sglang:request_prefill_time_seconds", FinishedTotal: "sglang:num_requests_total",
		PrefillPreallocReqs: "sglang:num_prefill_prealloc_queue_reqs", DecodePreallocReqs: "sglang:num_decode_prealloc_queue_reqs",
	},
	"trtllm-serve": {
		GenThroughput: "trtllm_generation_throughput_toks_per_s", GenTokensTotal: "trtllm_generation_tokens_total",
		Running: "trtllm_num_requests_running", Waiting: "trtllm_num_requests_waiting", KVUsage: "trtllm_kv_cache_utilization",
		PrefillTime: "trtllm_request_prefill_time_seconds", FinishedTotal: "trtllm_request_success_total",
	},
}

// engineAliases maps AIBrix engine names onto the mapping keys.
var engineAliases = map[string]string{"trtllm": "trtllm-serve", "tensorrt-llm": "trtllm-serve"}
