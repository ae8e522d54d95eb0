// Package aibrixenginemetrics is the aibrix-engine-metrics-extractor plugin: a GIE data-layer
// extractor that reads, from a model server's Prometheus metrics, what AIBrix's PD policies
// need beyond GIE's core metrics (generation throughput, running and waiting counts, KV usage,
// the prefill-time histogram's mean, the running-request drain rate, SGLang's PD
// pre-allocation queues) for the vllm, sglang and trtllm-serve metric names, and stores them as
// the endpoint attribute of plugins/lib/engineattr.
package aibrixenginemetrics
