package loadgen

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pdgate/pdgate/cmd/pdgate/workload"
	"github.com/pdgate/pdgate/plugins/wire/protocol"
)

// Leg is one stage a pod served for a request, per the decision trace.
type Leg struct {
	Pod   string
	Stage string // prefill, decode, encode
}

// Classifier turns an x-pdgate-decision header into a decision type and the legs it names.
type Classifier func(decision string) (kind string, legs []Leg)

// Config drives one run.
type Config struct {
	// URL is the gateway's base URL (http://127.0.0.1:8080).
	URL string
	// Replicas are further gateways, each in front of its own EPP replica over the same pods:
	// requests go round-robin over URL and Replicas, as a load balancer in front of several
	// gateways sends them (a request and its re-send after a 412 go to the same one).
	Replicas []string
	Gen      workload.Generator
	// Duration stops issuing requests after this long (0: until the generator or
	// MaxRequests ends).
	Duration time.Duration
	// Rate is requests per second (0: closed loop, as fast as Concurrency allows).
	Rate float64
	// Concurrency bounds requests in flight (default 8).
	Concurrency int
	// MaxRequests bounds the number of requests (0: no bound besides Duration).
	MaxRequests int
	// Trace sends x-pdgate-trace: 1 so the EPP returns x-pdgate-decision.
	Trace bool
	// RequestTimeout bounds one request (default 2m); a request that hits it is "hung".
	RequestTimeout time.Duration
	// DrainTimeout bounds the wait for in-flight requests once issuing stops (default 60s).
	DrainTimeout time.Duration
	// Classify interprets decision headers; nil counts every decision as "unknown".
	Classify Classifier
	// KeepTraces keeps the last N decisions in the result.
	KeepTraces int
	// KeepSamples records every request's outcome and latencies in Result.Samples (for
	// per-request analyses such as SLO goodput and CDFs).
	KeepSamples bool
	// Progress receives a progress bar (nil: none).
	Progress io.Writer
	Client   *http.Client
}

// TraceRecord is one request's decision as the client saw it.
type TraceRecord struct {
	Kind     string `json:"kind"`
	Status   int    `json:"status"`
	Decision string `json:"decision"`
	Type     string `json:"type"`
}

// Result is the JSON `pdgate lab --json` prints.
type Result struct {
	DurationS         float64                   `json:"durationS"`
	RequestsSent      int                       `json:"requestsSent"`
	ResponsesByStatus map[string]int            `json:"responsesByStatus"`
	TransportErrors   int                       `json:"transportErrors"`
	StreamErrors      int                       `json:"streamErrors"`
	Hung              int                       `json:"hung"`
	Decisions         map[string]int            `json:"decisions"`
	PodLegs           map[string]map[string]int `json:"podLegs"`
	Kinds             map[string]int            `json:"kinds"`
	Conditional412    int                       `json:"conditional412"`
	OutputTokens      int                       `json:"outputTokens"`
	LatencyMS         struct {
		TTFT Percentiles `json:"ttft"`
		TPOT Percentiles `json:"tpot"`
		E2E  Percentiles `json:"e2e"`
	} `json:"latencyMs"`
	Traces []TraceRecord `json:"traces,omitempty"`
	// Samples holds one entry per request, in completion order (Config.KeepSamples).
	Samples []Sample `json:"samples,omitempty"`
}

// Sample is one request as the client saw it. Latencies are wall milliseconds; TTFT and TPOT
// are 0 when not measured (no token, or a single token for TPOT).
type Sample struct {
	Kind string `json:"kind"`
	// IssuedMS is when the request was sent, in milliseconds since the run started.
	IssuedMS float64 `json:"issuedMs"`
	Status   int     `json:"status"`
	// OK: a 200 whose body ended without a transport or stream error.
	OK       bool    `json:"ok"`
	Decision string  `json:"decision,omitempty"` // the classified decision type
	Tokens   int     `json:"tokens"`
	TTFTMS   float64 `json:"ttftMs"`
	TPOTMS   float64 `json:"tpotMs"`
	E2EMS    float64 `json:"e2eMs"`
}

type collector struct {
	mu              sync.Mutex
	res             Result
	ttft, tpot, e2e []time.Duration
	done, ok        int
}

// Run drives the workload and returns the summary. It never returns before every request
// it started has ended (each is bounded by RequestTimeout and the drain timeout).
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if cfg.Gen == nil || cfg.URL == "" {
		return nil, errors.New("loadgen: URL and generator are required")
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 8
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = 2 * time.Minute
	}
	if cfg.DrainTimeout <= 0 {
		cfg.DrainTimeout = 60 * time.Second
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: cfg.Concurrency, DisableCompression: true}}
	}
	if cfg.Duration <= 0 && cfg.MaxRequests <= 0 {
		return nil, errors.New("loadgen: a duration or a request count is required (every run is bounded)")
	}
	c := &collector{res: Result{ResponsesByStatus: map[string]int{}, Decisions: map[string]int{},
		PodLegs: map[string]map[string]int{}, Kinds: map[string]int{}}}
	runCtx, cancelRun := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelRun()
	issueCtx := ctx
	if cfg.Duration > 0 {
		var cancel context.CancelFunc
		issueCtx, cancel = context.WithTimeout(ctx, cfg.Duration)
		defer cancel()
	}
	start := time.Now()
	stopProgress := c.progress(cfg, start)
	sem := make(chan struct{}, cfg.Concurrency)
	var wg sync.WaitGroup
	sent := 0
issue:
	for cfg.MaxRequests <= 0 || sent < cfg.MaxRequests {
		req, ok := cfg.Gen.Next()
		if !ok {
			break
		}
		var wait time.Duration
		if req.At > 0 {
			wait = time.Until(start.Add(req.At))
		} else if cfg.Rate > 0 {
			wait = time.Until(start.Add(time.Duration(float64(sent) / cfg.Rate * float64(time.Second))))
		}
		if wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-issueCtx.Done():
				t.Stop()
				break issue
			}
		}
		select {
		case sem <- struct{}{}:
		case <-issueCtx.Done():
			break issue
		}
		if issueCtx.Err() != nil {
			<-sem
			break
		}
		base := cfg.URL
		if n := len(cfg.Replicas); n > 0 && sent%(n+1) > 0 {
			base = cfg.Replicas[sent%(n+1)-1]
		}
		sent++
		wg.Add(1)
		go func(req workload.Request, issued time.Duration) {
			defer wg.Done()
			defer func() { <-sem }()
			o := do(runCtx, cfg, base, req)
			o.issued = issued
			c.record(cfg, req, o)
		}(req, time.Since(start))
	}
	issued := time.Now()
	drained := make(chan struct{})
	go func() { wg.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(cfg.DrainTimeout):
		cancelRun() // what is still running now is hung; cancelling ends it
		<-drained
	case <-ctx.Done():
		cancelRun() // interrupted: end what is in flight now
		<-drained
	}
	stopProgress()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.res.RequestsSent = sent
	c.res.DurationS = round3(issued.Sub(start).Seconds())
	c.res.LatencyMS.TTFT, c.res.LatencyMS.TPOT, c.res.LatencyMS.E2E = Summarize(c.ttft), Summarize(c.tpot), Summarize(c.e2e)
	return &c.res, nil
}

// outcome is what one request produced.
type outcome struct {
	status       int
	transportErr error
	hung         bool
	streamErr    bool
	got412       bool
	decision     string
	ttft, e2e    time.Duration
	tokens       int
	issued       time.Duration
}

func do(ctx context.Context, cfg Config, base string, req workload.Request) outcome {
	if req.Conditional {
		o := send(ctx, cfg, base, req, true)
		if o.status != http.StatusPreconditionFailed {
			return o
		}
		// The coordinator's second step: the full pipeline after the 412.
		o2 := send(ctx, cfg, base, req, false)
		o2.got412 = true
		return o2
	}
	return send(ctx, cfg, base, req, false)
}

func send(ctx context.Context, cfg Config, base string, req workload.Request, prefer bool) outcome {
	rctx, cancel := context.WithTimeout(ctx, cfg.RequestTimeout)
	defer cancel()
	start := time.Now()
	hr, err := http.NewRequestWithContext(rctx, http.MethodPost, strings.TrimRight(base, "/")+req.Path, bytes.NewReader(req.Body))
	if err != nil {
		return outcome{transportErr: err}
	}
	hr.Header.Set("Content-Type", "application/json")
	for k, v := range req.Headers {
		hr.Header.Set(k, v)
	}
	if cfg.Trace {
		hr.Header.Set(protocol.HeaderTrace, "1")
	}
	if prefer {
		hr.Header.Set("Prefer", "if-available")
	}
	resp, err := cfg.Client.Do(hr)
	if err != nil {
		return outcome{transportErr: err, hung: rctx.Err() != nil}
	}
	defer resp.Body.Close()
	o := outcome{status: resp.StatusCode, decision: resp.Header.Get(protocol.HeaderDecision)}
	if resp.StatusCode == http.StatusOK && strings.Contains(resp.Header.Get("Content-Type"), "text/event-stream") {
		o.ttft, o.tokens, o.streamErr, err = readSSE(resp.Body, start)
		if err == nil {
			// Read to the end after [DONE] so the exchange completes on both sides.
			_, err = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		}
	} else {
		_, err = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<20))
		o.ttft = time.Since(start)
	}
	o.e2e = time.Since(start)
	if err != nil {
		o.transportErr, o.hung = err, rctx.Err() != nil
	}
	return o
}

// readSSE reads an OpenAI event stream: TTFT is the first event carrying generated text,
// tokens the number of such events, or usage.completion_tokens when reported.
func readSSE(r io.Reader, start time.Time) (ttft time.Duration, tokens int, streamErr bool, err error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 8<<20)
	usage := 0
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "data:") {
			continue
		}
		data := strings.TrimSpace(strings.TrimPrefix(line, "data:"))
		if data == "[DONE]" {
			break
		}
		var ev struct {
			Error   json.RawMessage `json:"error"`
			Choices []struct {
				Text  string `json:"text"`
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
			Usage *struct {
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
		}
		if json.Unmarshal([]byte(data), &ev) != nil {
			continue
		}
		if len(ev.Error) > 0 && string(ev.Error) != "null" {
			streamErr = true
		}
		if ev.Usage != nil && ev.Usage.CompletionTokens > 0 {
			usage = ev.Usage.CompletionTokens
		}
		for _, ch := range ev.Choices {
			if ch.Text != "" || ch.Delta.Content != "" {
				if tokens == 0 {
					ttft = time.Since(start)
				}
				tokens++
			}
		}
	}
	if usage > 0 {
		tokens = usage
	}
	return ttft, tokens, streamErr, sc.Err()
}

func (c *collector) record(cfg Config, req workload.Request, o outcome) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.done++
	c.res.Kinds[req.Kind]++
	if o.got412 {
		c.res.Conditional412++
	}
	switch {
	case o.hung:
		c.res.Hung++
	case o.transportErr != nil && o.status == 0:
		c.res.TransportErrors++
	}
	if o.status != 0 {
		c.res.ResponsesByStatus[strconv.Itoa(o.status)]++
	}
	if o.streamErr || (o.transportErr != nil && o.status != 0 && !o.hung) {
		c.res.StreamErrors++
	}
	decisionType := ""
	if o.decision != "" {
		kind, legs := "unknown", []Leg(nil)
		if cfg.Classify != nil {
			kind, legs = cfg.Classify(o.decision)
		}
		c.res.Decisions[kind]++
		decisionType = kind
		for _, l := range legs {
			if c.res.PodLegs[l.Pod] == nil {
				c.res.PodLegs[l.Pod] = map[string]int{}
			}
			c.res.PodLegs[l.Pod][l.Stage]++
		}
		if cfg.KeepTraces > 0 {
			c.res.Traces = append(c.res.Traces, TraceRecord{Kind: req.Kind, Status: o.status, Decision: o.decision, Type: kind})
			if len(c.res.Traces) > cfg.KeepTraces {
				c.res.Traces = c.res.Traces[1:]
			}
		}
	} else if o.status == http.StatusOK {
		c.res.Decisions["untraced"]++
	}
	ok := o.status == http.StatusOK && o.transportErr == nil && !o.streamErr
	var ttft, tpot time.Duration
	if ok {
		c.ok++
		c.e2e = append(c.e2e, o.e2e)
		c.res.OutputTokens += o.tokens
		if o.tokens > 0 && o.ttft > 0 {
			ttft = o.ttft
			c.ttft = append(c.ttft, o.ttft)
		}
		if o.tokens > 1 {
			tpot = (o.e2e - o.ttft) / time.Duration(o.tokens-1)
			c.tpot = append(c.tpot, tpot)
		}
	}
	if cfg.KeepSamples {
		c.res.Samples = append(c.res.Samples, Sample{Kind: req.Kind, IssuedMS: msf(o.issued), Status: o.status,
			OK: ok, Decision: decisionType, Tokens: o.tokens, TTFTMS: msf(ttft), TPOTMS: msf(tpot), E2EMS: msf(o.e2e)})
	}
}

func msf(d time.Duration) float64 { return round3(float64(d) / float64(time.Millisecond)) }

// progress draws a bar on cfg.Progress every 200 ms until stopped.
func (c *collector) progress(cfg Config, start time.Time) (stop func()) {
	if cfg.Progress == nil {
		return func() {}
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				fmt.Fprint(cfg.Progress, "\r\033[K")
				return
			case <-t.C:
				c.mu.Lock()
				n, ok := c.done, c.ok
				c.mu.Unlock()
				fmt.Fprint(cfg.Progress, "\r\033[K"+bar(time.Since(start), cfg.Duration)+
					fmt.Sprintf(" %d done, %d ok", n, ok))
			}
		}
	}()
	return func() { close(done); <-finished }
}

func bar(elapsed, total time.Duration) string {
	const width = 30
	if total <= 0 {
		return fmt.Sprintf("[%s]", elapsed.Truncate(time.Second))
	}
	f := float64(elapsed) / float64(total)
	if f > 1 {
		f = 1
	}
	n := int(f * width)
	return fmt.Sprintf("[%s%s] %s/%s", strings.Repeat("#", n), strings.Repeat(".", width-n),
		elapsed.Truncate(time.Second), total)
}
