package testsupport

import (
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
)

// WriteVLLMMetrics writes a vLLM /metrics page with the series GIE's data layer reads: waiting
// and running requests, 10% KV cache use, no LoRA adapters, 1000 blocks of 16 tokens.
func WriteVLLMMetrics(w io.Writer, waiting, running int64) {
	_, _ = fmt.Fprintf(w, "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting %d\n"+
		"# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running %d\n"+
		"# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc 0.1\n"+
		"# TYPE vllm:lora_requests_info gauge\nvllm:lora_requests_info{max_lora=\"0\",running_lora_adapters=\"\",waiting_lora_adapters=\"\"} 1\n"+
		"# TYPE vllm:cache_config_info gauge\nvllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"1000\"} 1\n",
		waiting, running)
}

// VLLMMetrics serves WriteVLLMMetrics's page with fixed queues.
func VLLMMetrics(waiting, running int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { WriteVLLMMetrics(w, waiting, running) })
}

// DrainingVLLMMetrics serves WriteVLLMMetrics's page with waiting requests and none running,
// plus a generation throughput and a finished-request counter that grows by one per scrape,
// so that AIBrix's extractor sees a positive drain rate.
func DrainingVLLMMetrics(waiting int64) http.Handler {
	var finished atomic.Int64
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		WriteVLLMMetrics(w, waiting, 0)
		_, _ = fmt.Fprintf(w, "# TYPE vllm:avg_generation_throughput_toks_per_s gauge\nvllm:avg_generation_throughput_toks_per_s 100\n"+
			"# TYPE vllm:request_success_total counter\nvllm:request_success_total %d\n", finished.Add(1))
	})
}
