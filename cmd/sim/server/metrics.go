package server

import (
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/pdgate/pdgate/cmd/sim/batching"
)

// metricNames are one dialect's metric names ("" = the engine has none).
type metricNames struct {
	waiting, running, kvUsage, kvUsageAlt, genThroughput, promptThroughput       string
	prefillTime, ttft, tpot, e2e, success, promptTokens, genTokens, preemptions  string
	cacheInfo, blockLabel, blocksLabel, blockSizeGauge, numBlocksGauge, loraInfo string
	prefillPrealloc, decodePrealloc                                              string
	// engine request intervals (requestDone): vLLM has all four; SGLang has the queue and a
	// per-stage histogram instead of decode/inference; TensorRT-LLM only the queue
	queueTime, decodeTime, inferenceTime, stageTime string
}

var dialectMetrics = map[string]metricNames{
	DialectVLLM: {waiting: "vllm:num_requests_waiting", running: "vllm:num_requests_running",
		kvUsage: "vllm:kv_cache_usage_perc", kvUsageAlt: "vllm:gpu_cache_usage_perc",
		genThroughput: "vllm:avg_generation_throughput_toks_per_s", promptThroughput: "vllm:avg_prompt_throughput_toks_per_s",
		prefillTime: "vllm:request_prefill_time_seconds", ttft: "vllm:time_to_first_token_seconds",
		tpot: "vllm:time_per_output_token_seconds", e2e: "vllm:e2e_request_latency_seconds",
		success: "vllm:request_success_total", promptTokens: "vllm:prompt_tokens_total", genTokens: "vllm:generation_tokens_total",
		preemptions: "vllm:num_preemptions_total", cacheInfo: "vllm:cache_config_info", blockLabel: "block_size",
		blocksLabel: "num_gpu_blocks", loraInfo: "vllm:lora_requests_info",
		queueTime: "vllm:request_queue_time_seconds", decodeTime: "vllm:request_decode_time_seconds",
		inferenceTime: "vllm:request_inference_time_seconds"},
	DialectSGLang: {waiting: "sglang:num_queue_reqs", running: "sglang:num_running_reqs", kvUsage: "sglang:token_usage",
		genThroughput: "sglang:gen_throughput", prefillTime: "sglang:request_prefill_time_seconds",
		ttft: "sglang:time_to_first_token_seconds", tpot: "sglang:inter_token_latency_seconds",
		e2e: "sglang:e2e_request_latency_seconds", success: "sglang:num_requests_total",
		promptTokens: "sglang:prompt_tokens_total", genTokens: "sglang:generation_tokens_total",
		cacheInfo: "sglang:cache_config_info", blockLabel: "page_size", blocksLabel: "num_pages",
		prefillPrealloc: "sglang:num_prefill_prealloc_queue_reqs", decodePrealloc: "sglang:num_decode_prealloc_queue_reqs",
		queueTime: "sglang:queue_time_seconds", stageTime: "sglang:per_stage_req_latency_seconds"},
	DialectTRTLLM: {waiting: "trtllm_num_requests_waiting", running: "trtllm_num_requests_running",
		kvUsage: "trtllm_kv_cache_utilization", genThroughput: "trtllm_generation_throughput_toks_per_s",
		prefillTime: "trtllm_request_prefill_time_seconds", ttft: "trtllm_time_to_first_token_seconds",
		tpot: "trtllm_time_per_output_token_seconds", e2e: "trtllm_e2e_request_latency_seconds",
		success: "trtllm_request_success_total", promptTokens: "trtllm_prompt_tokens_total",
		genTokens: "trtllm_generation_tokens_total", blockSizeGauge: "trtllm_kv_cache_tokens_per_block",
		numBlocksGauge: "trtllm_kv_cache_max_blocks", queueTime: "trtllm_request_queue_time_seconds"},
}

var latencyBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80}

// simMetrics is one instance's registry; it is also the scheduler's Observer.
type simMetrics struct {
	in    *Instance
	names metricNames
	reg   *prometheus.Registry

	prefillTime, ttft, tpot, e2e        prometheus.Histogram
	queueTime, decodeTime, inferTime    prometheus.Histogram // nil where the dialect has none
	stageTime                           *prometheus.HistogramVec
	success, promptTok, genTok, preempt prometheus.Counter
	handoffs, faults                    *prometheus.CounterVec
	prefixHits                          prometheus.Counter

	mu      sync.Mutex
	samples []sample
	descs   sync.Map // name -> *prometheus.Desc, built once (scrapes come every 50 ms)
}

func (m *simMetrics) desc(name string, keys []string) *prometheus.Desc {
	if d, ok := m.descs.Load(name); ok {
		return d.(*prometheus.Desc)
	}
	d := prometheus.NewDesc(name, "Simulated engine gauge "+name+".", keys, nil)
	m.descs.Store(name, d)
	return d
}

type sample struct {
	at                          time.Time
	prompt, generated, finished int
}

func newSimMetrics(in *Instance) *simMetrics {
	n := dialectMetrics[in.opts.Dialect]
	labels := prometheus.Labels{"model_name": in.opts.Model}
	m := &simMetrics{in: in, names: n, reg: prometheus.NewRegistry()}
	hist := func(name, help string) prometheus.Histogram {
		h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, ConstLabels: labels, Buckets: latencyBuckets})
		m.reg.MustRegister(h)
		return h
	}
	ctr := func(name, help string) prometheus.Counter {
		if name == "" {
			return prometheus.NewCounter(prometheus.CounterOpts{Name: "unused", Help: "unused"})
		}
		c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: labels})
		m.reg.MustRegister(c)
		return c
	}
	m.prefillTime = hist(n.prefillTime, "Prefill time of requests in seconds (model time).")
	m.ttft = hist(n.ttft, "Time to first token in seconds (model time).")
	m.tpot = hist(n.tpot, "Time per output token in seconds (model time).")
	m.e2e = hist(n.e2e, "End-to-end request latency in seconds (model time).")
	optHist := func(name, help string) prometheus.Histogram {
		if name == "" {
			return nil
		}
		return hist(name, help)
	}
	m.queueTime = optHist(n.queueTime, "Time from entering the scheduler's waiting queue to the first step that works on the request (model time).")
	m.decodeTime = optHist(n.decodeTime, "Time from the first to the last generated token (model time).")
	m.inferTime = optHist(n.inferenceTime, "Time from the first scheduled step to the last generated token (model time).")
	if n.stageTime != "" {
		m.stageTime = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: n.stageTime, Help: "Time of each stage of requests (model time).",
			ConstLabels: labels, Buckets: latencyBuckets}, []string{"stage"})
		m.reg.MustRegister(m.stageTime)
	}
	m.success = ctr(n.success, "Finished requests.")
	m.promptTok = ctr(n.promptTokens, "Prompt tokens processed.")
	m.genTok = ctr(n.genTokens, "Generated tokens.")
	m.preempt = ctr(n.preemptions, "Preemptions.")
	m.prefixHits = ctr("pdgate_sim_prefix_cache_hit_tokens_total", "Prompt tokens served from the prefix cache or a KV handoff.")
	m.handoffs = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pdgate_sim_kv_handoffs_total",
		Help: "KV handoffs by result (produced, pulled, failed).", ConstLabels: labels}, []string{"result"})
	m.faults = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pdgate_sim_faults_total",
		Help: "Injected faults by kind.", ConstLabels: labels}, []string{"fault"})
	// process_start_time_seconds, as vLLM's and SGLang's Python Prometheus clients export it:
	// the EPP reads a change as an engine restart.
	m.reg.MustRegister(m.handoffs, m.faults, m, collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.samples = []sample{{at: in.clock.Now()}}
	return m
}

func (m *simMetrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
}

// Observer (called under the scheduler's lock: no blocking).

func (m *simMetrics) PrefillDone(_ *batching.Request, computed int, _ time.Duration) {
	m.promptTok.Add(float64(computed))
}
func (m *simMetrics) Finished(r *batching.Request) {}
func (m *simMetrics) Preempted(*batching.Request)  { m.preempt.Inc() }

// intervals are a finished request's engine intervals in seconds (model time), with vLLM's
// definitions, from the scheduler's own timestamps: queue = queued → first scheduled, prefill
// = first scheduled → first token, decode = first → last token, inference = first scheduled →
// last token (preemptions stay inside the interval they hit). A decode leg queues once its KV
// has arrived, so the pull is in none of them. scheduled/firstToken say which are defined.
type intervals struct {
	queue, prefill, decode, inference float64
	scheduled, firstToken             bool
}

func intervalsOf(p batching.Progress) intervals {
	iv := intervals{scheduled: !p.ScheduledAt.IsZero(), firstToken: !p.ScheduledAt.IsZero() && !p.FirstTokenAt.IsZero()}
	if iv.scheduled {
		iv.queue = p.ScheduledAt.Sub(p.SubmittedAt).Seconds()
	}
	if iv.firstToken {
		iv.prefill = p.FirstTokenAt.Sub(p.ScheduledAt).Seconds()
		iv.decode = p.LastTokenAt.Sub(p.FirstTokenAt).Seconds()
		iv.inference = p.LastTokenAt.Sub(p.ScheduledAt).Seconds()
	}
	return iv
}

// requestDone records a finished request's latencies (model time).
func (m *simMetrics) requestDone(arrival time.Time, p batching.Progress, decodeLeg bool) {
	if p.Err != nil {
		return
	}
	m.success.Inc()
	m.genTok.Add(float64(p.Generated))
	if !p.FirstTokenAt.IsZero() {
		m.ttft.Observe(p.FirstTokenAt.Sub(arrival).Seconds())
		if p.Generated > 1 {
			m.tpot.Observe(p.DoneAt.Sub(p.FirstTokenAt).Seconds() / float64(p.Generated-1))
		}
	}
	m.e2e.Observe(p.DoneAt.Sub(arrival).Seconds())
	iv := intervalsOf(p)
	if !iv.scheduled {
		return
	}
	observe(m.queueTime, iv.queue)
	// SGLang names a stage by the queue it left: a decode leg waits in the decode queue
	queueStage := "prefill_waiting"
	if decodeLeg {
		queueStage = "decode_waiting"
	}
	m.stage(queueStage, iv.queue)
	if !iv.firstToken {
		return
	}
	m.prefillTime.Observe(iv.prefill)
	observe(m.decodeTime, iv.decode)
	observe(m.inferTime, iv.inference)
	if !decodeLeg { // the KV came from a prefill server: SGLang's decode runs no prefill forward
		m.stage("prefill_forward", iv.prefill)
	}
	m.stage("decode_loop", iv.decode)
}

func observe(h prometheus.Histogram, v float64) {
	if h != nil {
		h.Observe(v)
	}
}

func (m *simMetrics) stage(name string, v float64) {
	if m.stageTime != nil {
		m.stageTime.WithLabelValues(name).Observe(v)
	}
}

var (
	descDrain = prometheus.NewDesc("pdgate_sim_running_requests_drain_rate_1m",
		"Finished requests per second over the last minute (model time).", []string{"model_name"}, nil)
	descPendingKV = prometheus.NewDesc("pdgate_sim_kv_handoffs_pending",
		"Produced KV handoffs not yet pulled.", []string{"model_name"}, nil)
)

// Describe is empty: the gauges below are unchecked (their names depend on the dialect).
func (m *simMetrics) Describe(chan<- *prometheus.Desc) {}

// Collect reads the scheduler at scrape time, so no gauge is updated per step.
func (m *simMetrics) Collect(ch chan<- prometheus.Metric) {
	st := m.in.sched.Stats()
	now := m.in.clock.Now()
	model := m.in.opts.Model
	gauge := func(name string, v float64, kv ...string) {
		if name == "" {
			return
		}
		var keys, vals []string
		keys = append(keys, "model_name")
		vals = append(vals, model)
		for i := 0; i+1 < len(kv); i += 2 {
			keys, vals = append(keys, kv[i]), append(vals, kv[i+1])
		}
		ch <- prometheus.MustNewConstMetric(m.desc(name, keys), prometheus.GaugeValue, v, vals...)
	}
	n := m.names
	usage := float64(st.KVUsedTokens) / float64(st.KVCapacityTokens)
	gauge(n.waiting, float64(st.Waiting))
	gauge(n.running, float64(st.Running))
	gauge(n.kvUsage, usage)
	gauge(n.kvUsageAlt, usage)
	bs, blocks := m.in.prof.BlockSize, m.in.prof.KVCapacityTokens/m.in.prof.BlockSize
	gauge(n.cacheInfo, 1, n.blockLabel, strconv.Itoa(bs), n.blocksLabel, strconv.Itoa(blocks))
	gauge(n.blockSizeGauge, float64(bs))
	gauge(n.numBlocksGauge, float64(blocks))
	gauge(n.loraInfo, 1, "running_lora_adapters", "", "waiting_lora_adapters", "", "max_lora", "0")
	prealloc := 0
	if m.in.opts.Role == RolePrefill {
		prealloc = st.Waiting
	}
	gauge(n.prefillPrealloc, float64(prealloc))
	gauge(n.decodePrealloc, float64(m.in.pullWaiting.Load()))

	gen, prompt, drain := m.rates(now, st)
	gauge(n.genThroughput, gen)
	gauge(n.promptThroughput, prompt)
	ch <- prometheus.MustNewConstMetric(descDrain, prometheus.GaugeValue, drain, model)
	ch <- prometheus.MustNewConstMetric(descPendingKV, prometheus.GaugeValue, float64(m.in.store.pending()), model)
}

// rates: throughputs over the newest sample at least 1 s old (vLLM logged them per interval),
// drain over the oldest sample within the last minute. Samples are kept at >= 1 s spacing.
func (m *simMetrics) rates(now time.Time, st batching.Stats) (gen, prompt, drain float64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	cur := sample{at: now, prompt: st.PromptTokens, generated: st.GeneratedTokens, finished: st.Finished}
	for len(m.samples) > 1 && now.Sub(m.samples[1].at) >= time.Minute {
		m.samples = m.samples[1:]
	}
	var thr *sample
	for i := len(m.samples) - 1; i >= 0; i-- {
		if now.Sub(m.samples[i].at) >= time.Second {
			thr = &m.samples[i]
			break
		}
	}
	if thr == nil {
		thr = &m.samples[0]
	}
	if dt := now.Sub(thr.at).Seconds(); dt > 0 {
		gen = float64(cur.generated-thr.generated) / dt
		prompt = float64(cur.prompt-thr.prompt) / dt
	}
	old := m.samples[0]
	if dt := now.Sub(old.at).Seconds(); dt > 0 {
		drain = float64(cur.finished-old.finished) / dt
	}
	if now.Sub(m.samples[len(m.samples)-1].at) >= time.Second {
		m.samples = append(m.samples, cur)
	}
	return gen, prompt, drain
}
