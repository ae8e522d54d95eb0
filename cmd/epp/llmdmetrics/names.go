// Package llmdmetrics serves the EPP's metrics under llm-d's names as well as their own, so that
// a dashboard or alert written for llm-d v0.11's EPP reads pdgate's unchanged.
//
// llm-d v0.11 renamed every EPP metric family to llm_d_epp_*: GIE's inference_objective_*,
// inference_pool_* and inference_extension_* families and llm-d's own
// llm_d_inference_scheduler_* ones. pdgate's EPP emits GIE's names (it runs GIE's metrics
// package) and its own pdgate_* names. With --llm-d-metric-names, every family that has an
// llm-d twin is also exposed under the twin's name: the same samples, labels and help, copied
// at scrape time. Nothing is renamed away, so dashboards on either name keep working.
package llmdmetrics

import "strings"

// Prefix is llm-d v0.11's EPP metric prefix.
const Prefix = "llm_d_epp_"

// exact maps families whose llm-d name is not the old name with its prefix swapped.
var exact = map[string]string{
	"inference_objective_request_sizes":                            "request_size_bytes",
	"inference_objective_response_sizes":                           "response_size_bytes",
	"inference_objective_input_tokens":                             "request_input_tokens",
	"inference_objective_output_tokens":                            "request_output_tokens",
	"inference_objective_prompt_cached_tokens":                     "request_cached_tokens",
	"inference_objective_running_requests":                         "request_running",
	"inference_objective_normalized_time_per_output_token_seconds": "request_ntpot_seconds",
	"inference_pool_ready_pods":                                    "ready_endpoints",
	// pdgate's own families that mirror llm-d's (same labels and meaning, plugin READMEs).
	"pdgate_disagg_decisions_total": "disagg_decision_total",
	// The precise prefix index's families that count what llm-d's KV-cache index and KV-event
	// subscribers count (plugins/precise/kvevents README). The labels are pdgate's: llm-d splits
	// its event counters by pod_identifier (and stores skipped by cache_kind too), pdgate by
	// result or reason, so a dashboard that sums over the labels reads the same total.
	"pdgate_kv_events_index_evictions_total":       "kv_cache_index_evictions_total",
	"pdgate_kv_events_lookups_total":               "kv_cache_index_lookup_requests_total",
	"pdgate_kv_events_messages_total":              "kv_cache_events_messages_received_total",
	"pdgate_kv_events_subscriber_reconnects_total": "kv_cache_events_subscriber_reconnections_total",
	"pdgate_kv_events_stores_skipped_total":        "kv_cache_events_stores_skipped_total",
}

// deprecated are the llm-d names still dual-emitted beside the llm_d_epp_ ones in v0.11 (the
// kvcache_index_* aliases of llm_d_epp_kv_cache_index_*, removed not before v0.12), keyed by
// the llm_d_epp_ name.
var deprecated = map[string]string{
	Prefix + "kv_cache_index_evictions_total":       "kvcache_index_evictions_total",
	Prefix + "kv_cache_index_lookup_requests_total": "kvcache_index_lookup_requests_total",
}

// prefixes are families renamed by dropping the old prefix (llm-d v0.11's table: request_total,
// request_error_total, request_duration_seconds; the pool averages; the scheduler, plugin and
// flow-control families; the data layer's error counters).
var prefixes = []string{"inference_objective_", "inference_pool_", "inference_extension_", "llm_d_inference_scheduler_"}

// Names returns every llm-d v0.11 name a metric family is served under: its llm_d_epp_ name,
// then the deprecated alias v0.11 still emits beside it, if any.
func Names(family string) []string {
	name, ok := Name(family)
	if !ok {
		return nil
	}
	if alias, ok := deprecated[name]; ok {
		return []string{name, alias}
	}
	return []string{name}
}

// Name returns the llm-d v0.11 name of a metric family, and whether it has one.
func Name(family string) (string, bool) {
	if n, ok := exact[family]; ok {
		return Prefix + n, true
	}
	for _, p := range prefixes {
		if rest, ok := strings.CutPrefix(family, p); ok && rest != "" {
			return Prefix + rest, true
		}
	}
	return "", false
}
