// Package stageadmission runs stage-aware admission under a prefill-heavy overload in the
// lab: real simulators, sidecars, the EPP in Kubernetes mode (an InferenceObjective
// makes the traffic sheddable) and the dev gateway.
package stageadmission

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go"
	"github.com/openai/openai-go/option"

	"github.com/pdgate/pdgate/cmd/pdgate/lab"
	"github.com/pdgate/pdgate/test/testsupport/kubetest"
	"github.com/pdgate/pdgate/test/testsupport/labtest"
)

const repoRoot = "../../.."

// The EPP's config: GIE's utilization detector at its defaults.
const (
	queueDepthThreshold  = 5.0
	kvCacheUtilThreshold = 0.8
)

// class is one traffic class's tally.
type class struct {
	mu       sync.Mutex
	sent     int
	statuses map[int]int
	reasons  map[string]int
	ttftMS   []float64
}

func (c *class) add(status int, reason string, ttft time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sent++
	c.statuses[status]++
	if reason != "" {
		c.reasons[reason]++
	}
	if status == http.StatusOK {
		c.ttftMS = append(c.ttftMS, float64(ttft.Microseconds())/1000)
	}
}

func (c *class) p99() float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.ttftMS) == 0 {
		return 0
	}
	s := append([]float64(nil), c.ttftMS...)
	sort.Float64s(s)
	return s[(len(s)*99-1)/100]
}

// request sends one sheddable streamed completion and returns its status, llm-d's drop
// reason and the time to the first SSE data event.
func request(client *http.Client, url, model, prompt string) (int, string, time.Duration) {
	body, _ := json.Marshal(map[string]any{"model": model, "prompt": prompt, "max_tokens": 4, "stream": true})
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/completions", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("x-gateway-inference-objective", "batch")
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return -1, err.Error(), 0
	}
	defer resp.Body.Close()
	var ttft time.Duration
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if ttft == 0 && strings.HasPrefix(sc.Text(), "data: {") {
			ttft = time.Since(start)
		}
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, resp.Header.Get("x-llm-d-request-dropped-reason"), ttft
}

// engineMetrics scrapes the simulator's waiting queue and KV use.
func engineMetrics(client *http.Client, addr string) (waiting, kv float64, err error) {
	resp, err := client.Get("http://" + addr + "/metrics")
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 2 {
			continue
		}
		v, _ := strconv.ParseFloat(f[1], 64)
		switch {
		case strings.HasPrefix(f[0], "vllm:num_requests_waiting"):
			waiting = v
		case strings.HasPrefix(f[0], "vllm:kv_cache_usage_perc"):
			kv = v
		}
	}
	return waiting, kv, sc.Err()
}

// sample is one scrape of every pod: the prefill queue against its SLO (the detector's
// queueDepthThreshold), and what GIE's utilization detector computes fleet-wide and per
// stage over the same numbers.
type sample struct {
	at                     time.Duration
	prefillQueueMax        float64
	fleet, prefill, decode float64
}

func utilization(waiting, kv float64) float64 {
	return max(waiting/queueDepthThreshold, kv/kvCacheUtilThreshold)
}

// Under a prefill-heavy overload (16 closed-loop clients sending long uncached prompts to two
// prefill pods that run one request at a time, mixed with 2 clients sending short
// decode-only prompts), all sheddable: stage-aware admission answers long prompts 429
// (rejected-saturated) while every short prompt is served. GIE's fleet-wide rule (one value
// for the whole pool, computed here from the same scrapes) treats both classes alike: it
// sheds both or neither at any moment.
func TestPrefillOverloadShedsLongKeepsDecodeOnly(t *testing.T) {
	l := labtest.Start(t, lab.Options{Topology: filepath.Join(repoRoot, "config/lab/admission/stage-admission.yaml"),
		Subnet: "127.0.74", Kubernetes: true, KubeAssets: kubetest.NeedAssets(t),
		ReadyTimeout: 2 * time.Minute, Out: io.Discard, Err: io.Discard})
	client := &http.Client{Timeout: time.Minute}
	model := l.Plan.Topology.Model
	long, short := &class{statuses: map[int]int{}, reasons: map[string]int{}}, &class{statuses: map[int]int{}, reasons: map[string]int{}}

	var stop atomic.Bool
	var samples []sample
	start := time.Now()
	scraped := make(chan struct{})
	go func() {
		defer close(scraped)
		for !stop.Load() {
			var s sample
			var pf, dc []float64
			for _, pod := range l.Plan.Pods {
				w, kv, err := engineMetrics(client, pod.EngineAddr())
				if err != nil {
					continue
				}
				u := utilization(w, kv)
				if pod.Role == lab.RolePrefill {
					pf = append(pf, u)
					s.prefillQueueMax = max(s.prefillQueueMax, w)
				} else {
					dc = append(dc, u)
				}
			}
			mean := func(v []float64) float64 {
				if len(v) == 0 {
					return 0
				}
				sum := 0.0
				for _, x := range v {
					sum += x
				}
				return sum / float64(len(v))
			}
			s.at, s.prefill, s.decode, s.fleet = time.Since(start), mean(pf), mean(dc), mean(append(pf, dc...))
			samples = append(samples, s)
			time.Sleep(100 * time.Millisecond)
		}
	}()

	var wg sync.WaitGroup
	var seq atomic.Int64
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				n := seq.Add(1)
				prompt := fmt.Sprintf("Document %d. %s", n, strings.Repeat(fmt.Sprintf("Section %d of a long uncached report on disaggregated serving. ", n), 120))
				long.add(request(client, l.URL, model, prompt))
			}
		}()
	}
	// While the prefill tier is overloaded, a real OpenAI client sends long prompts until one
	// is shed: it must read the 429 as an API error (vLLM's JSON shape, rate_limit_error) with
	// llm-d's drop reason.
	sdkShed := make(chan error, 1)
	go func() { sdkShed <- sdkReadsShedding(model, l.URL, &stop) }()
	var shortWG sync.WaitGroup
	for w := 0; w < 2; w++ {
		shortWG.Add(1)
		go func(w int) {
			defer shortWG.Done()
			for i := 0; i < 60; i++ {
				short.add(request(client, l.URL, model, fmt.Sprintf("Short question %d-%d: what is a KV cache?", w, i)))
			}
		}(w)
	}
	shortWG.Wait()
	stop.Store(true)
	wg.Wait()
	<-scraped

	overSLO, tierOverSLO, peak := 0, 0, 0.0
	byDepth := map[float64]int{}
	for _, s := range samples {
		if s.prefillQueueMax > queueDepthThreshold {
			overSLO++
		}
		if s.prefill > 1 { // the detector's own rule: the tier's mean above its threshold
			tierOverSLO++
		}
		peak = max(peak, s.prefillQueueMax)
		byDepth[s.prefillQueueMax]++
	}
	fleetSheds, fleetAdmits := 0, 0
	for _, s := range samples {
		if s.fleet >= 1 {
			fleetSheds++
		} else {
			fleetAdmits++
		}
	}
	t.Logf("long  (prefill):     sent %d, 2xx %d, 429 %d, other %v, p99 TTFT %.0f ms", long.sent, long.statuses[200], long.statuses[429], long.statuses, long.p99())
	t.Logf("short (decode-only): sent %d, 2xx %d, 429 %d, other %v, reasons %v, p99 TTFT %.0f ms", short.sent, short.statuses[200], short.statuses[429], short.statuses, short.reasons, short.p99())
	t.Logf("prefill queue (max over prefill pods) above its SLO of %.0f waiting in %d of %d scrapes; peak %.0f; scrapes by depth %v; the prefill tier's mean above it in %d", queueDepthThreshold, overSLO, len(samples), peak, byDepth, tierOverSLO)
	t.Logf("fleet-wide utilization detector over the same scrapes: >= 1 (sheds both classes) in %d, < 1 (admits both) in %d", fleetSheds, fleetAdmits)
	for i, s := range samples {
		if i%5 == 0 {
			t.Logf("  t=%5.1fs prefill queue max %2.0f (SLO %.0f)  stage prefill %.2f decode %.2f  fleet-wide %.2f", s.at.Seconds(), s.prefillQueueMax, queueDepthThreshold, s.prefill, s.decode, s.fleet)
		}
	}

	// The EPP counts the prefill legs it sent since each pod's last scrape (cmd/epp/admission
	// dispatches.go), so shedding starts as the queue reaches its threshold; without that the
	// queue sat above it in nearly every scrape (27 of 29). Requests admitted in the same few
	// milliseconds can still pass it by one.
	// The detector judges the tier's mean; one pod can sit a request above the other.
	if overSLO*2 > len(samples) || tierOverSLO*4 > len(samples) {
		t.Errorf("the prefill queue was above its SLO in %d of %d scrapes (the tier's mean in %d): admission sheds too late", overSLO, len(samples), tierOverSLO)
	}
	if short.statuses[200] != short.sent {
		t.Errorf("decode-only traffic: %d of %d served (%v), want all", short.statuses[200], short.sent, short.statuses)
	}
	if long.statuses[429] == 0 || long.reasons["rejected-saturated"] != long.statuses[429] {
		t.Errorf("long prompts: statuses %v reasons %v, want 429 rejected-saturated under the prefill overload", long.statuses, long.reasons)
	}
	if err := <-sdkShed; err != nil {
		t.Errorf("openai SDK on a shed request: %v", err)
	}
	for code := range long.statuses {
		if code != 200 && code != 429 {
			t.Errorf("long prompts: %d answered %d", long.statuses[code], code)
		}
	}
}

// sdkReadsShedding sends long sheddable prompts through openai-go until one is shed, and checks
// that the SDK reads the 429 as an API error with its type, message and drop reason.
func sdkReadsShedding(model, url string, stop *atomic.Bool) error {
	c := openai.NewClient(option.WithBaseURL(url+"/v1/"), option.WithAPIKey("none"), option.WithMaxRetries(0),
		option.WithHeader("x-gateway-inference-objective", "batch"))
	prompt := strings.Repeat("An uncached report on shedding, read by a real OpenAI client. ", 120)
	for i := 0; !stop.Load(); i++ {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		_, err := c.Completions.New(ctx, openai.CompletionNewParams{Model: openai.CompletionNewParamsModel(model),
			Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String(fmt.Sprintf("%d %s", i, prompt))}, MaxTokens: openai.Int(1)})
		cancel()
		if err == nil {
			continue
		}
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) {
			return fmt.Errorf("want an *openai.Error, got %T %v", err, err)
		}
		if apiErr.StatusCode != http.StatusTooManyRequests || apiErr.Type != "rate_limit_error" || apiErr.Message == "" ||
			apiErr.Response.Header.Get("x-llm-d-request-dropped-reason") != "rejected-saturated" ||
			apiErr.Response.Header.Get("Content-Type") != "application/json" {
			return fmt.Errorf("status %d type %q message %q reason %q content-type %q (raw %s)", apiErr.StatusCode, apiErr.Type, apiErr.Message,
				apiErr.Response.Header.Get("x-llm-d-request-dropped-reason"), apiErr.Response.Header.Get("Content-Type"), apiErr.RawJSON())
		}
		return nil
	}
	return errors.New("no long prompt was shed while the overload lasted")
}
