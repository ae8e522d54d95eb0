package loadgen

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pdgate/pdgate/cmd/pdgate/workload"
)

func TestSummarize(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	hundred := make([]int, 100)
	for i := range hundred {
		hundred[i] = 100 - i // 1..100 reversed
	}
	tests := []struct {
		name string
		in   []time.Duration
		want Percentiles
	}{
		{name: "empty", in: nil, want: Percentiles{}},
		{name: "one", in: ms(7), want: Percentiles{Count: 1, P50: 7, P90: 7, P99: 7, Mean: 7, Max: 7}},
		{name: "1..100", in: ms(hundred...), want: Percentiles{Count: 100, P50: 50, P90: 90, P99: 99, Mean: 50.5, Max: 100}},
		{name: "four", in: ms(4, 1, 3, 2), want: Percentiles{Count: 4, P50: 2, P90: 4, P99: 4, Mean: 2.5, Max: 4}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Summarize(tt.in); got != tt.want {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

// fakeGateway answers like the lab's gateway: SSE with a decision header; "conditional"
// requests with Prefer get a 412; "fail" requests a 503; "hang" requests never end.
func fakeGateway(t *testing.T, prefers *atomic.Int32) *httptest.Server {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var body struct{ Prompt string }
		_ = json.Unmarshal(b, &body)
		if r.Header.Get("x-pdgate-trace") != "1" {
			http.Error(w, "no trace header", 400)
			return
		}
		if r.Header.Get("Prefer") == "if-available" {
			prefers.Add(1)
			w.WriteHeader(http.StatusPreconditionFailed)
			return
		}
		switch body.Prompt {
		case "fail":
			w.WriteHeader(503)
			return
		case "hang":
			w.Header().Set("Content-Type", "text/event-stream")
			w.WriteHeader(200)
			w.(http.Flusher).Flush()
			<-r.Context().Done()
			return
		}
		w.Header().Set("x-pdgate-decision", "decode=d-0;prefill=p-0")
		w.Header().Set("Content-Type", "text/event-stream")
		for i := 0; i < 4; i++ {
			fmt.Fprintf(w, "data: {\"choices\":[{\"text\":\"t%d\"}]}\n\n", i)
			w.(http.Flusher).Flush()
		}
		fmt.Fprint(w, "data: {\"choices\":[],\"usage\":{\"completion_tokens\":4}}\n\ndata: [DONE]\n\n")
	}))
	t.Cleanup(s.Close)
	return s
}

func TestRunCountsEverything(t *testing.T) {
	var prefers atomic.Int32
	gw := fakeGateway(t, &prefers)
	mk := func(prompt string, cond bool) workload.Request {
		return workload.Request{Kind: prompt, Path: "/v1/completions", Body: json.RawMessage(`{"prompt":"` + prompt + `","stream":true}`), Stream: true, Conditional: cond}
	}
	gen := workload.List([]workload.Request{mk("ok", false), mk("ok", false), mk("cond", true), mk("fail", false), mk("hang", false)})
	classify := func(d string) (string, []Leg) {
		if strings.Contains(d, "prefill=") {
			return "prefill-decode", []Leg{{Pod: "d-0", Stage: "decode"}, {Pod: "p-0", Stage: "prefill"}}
		}
		return "decode-only", nil
	}
	res, err := Run(context.Background(), Config{
		URL: gw.URL, Gen: gen, MaxRequests: 10, Concurrency: 2, Trace: true, Classify: classify,
		RequestTimeout: time.Minute, DrainTimeout: 300 * time.Millisecond, KeepTraces: 2, KeepSamples: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.RequestsSent != 5 || res.ResponsesByStatus["200"] != 4 || res.ResponsesByStatus["503"] != 1 {
		t.Fatalf("sent %d statuses %v", res.RequestsSent, res.ResponsesByStatus)
	}
	if res.Hung != 1 || res.Conditional412 != 1 || prefers.Load() != 1 {
		t.Fatalf("hung %d conditional412 %d prefers %d", res.Hung, res.Conditional412, prefers.Load())
	}
	if res.Decisions["prefill-decode"] != 3 || res.PodLegs["p-0"]["prefill"] != 3 || res.PodLegs["d-0"]["decode"] != 3 {
		t.Fatalf("decisions %v legs %v", res.Decisions, res.PodLegs)
	}
	if res.LatencyMS.E2E.Count != 3 || res.LatencyMS.TTFT.Count != 3 || res.LatencyMS.TPOT.Count != 3 || res.OutputTokens != 12 {
		t.Fatalf("latency %+v tokens %d", res.LatencyMS, res.OutputTokens)
	}
	if len(res.Traces) != 2 {
		t.Fatalf("kept %d traces, want 2", len(res.Traces))
	}
	// One sample per request: the three good streams carry their latencies and decision,
	// the 503 and the hung request are recorded as not OK without latencies.
	if len(res.Samples) != 5 {
		t.Fatalf("samples %d, want 5: %+v", len(res.Samples), res.Samples)
	}
	okCount := 0
	for _, s := range res.Samples {
		if !s.OK {
			if s.TTFTMS != 0 || s.TPOTMS != 0 {
				t.Errorf("failed request %+v has latencies", s)
			}
			continue
		}
		okCount++
		if s.Tokens != 4 || s.TTFTMS <= 0 || s.TPOTMS < 0 || s.E2EMS < s.TTFTMS || s.Decision != "prefill-decode" || s.Status != 200 {
			t.Errorf("sample %+v", s)
		}
	}
	if okCount != 3 {
		t.Fatalf("ok samples %d, want 3", okCount)
	}
}

func TestRunNeedsABound(t *testing.T) {
	if _, err := Run(context.Background(), Config{URL: "http://x", Gen: workload.List(nil)}); err == nil {
		t.Fatal("an unbounded run must be refused")
	}
}

func TestReadSSEStreamError(t *testing.T) {
	in := "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: {\"error\":{\"message\":\"kv\"}}\n\n"
	_, tokens, streamErr, err := readSSE(strings.NewReader(in), time.Now())
	if err != nil || tokens != 1 || !streamErr {
		t.Fatalf("tokens %d streamErr %v err %v", tokens, streamErr, err)
	}
}

// TestRunSpreadsOverReplicas: with replica gateways, requests go round-robin over all of
// them.
func TestRunSpreadsOverReplicas(t *testing.T) {
	var hits [3]atomic.Int64
	urls := make([]string, 3)
	for i := range urls {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			hits[i].Add(1)
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"usage":{"completion_tokens":1}}`))
		}))
		defer s.Close()
		urls[i] = s.URL
	}
	reqs := make([]workload.Request, 9)
	for i := range reqs {
		reqs[i] = workload.Request{Kind: "k", Path: "/v1/completions", Body: []byte(`{}`)}
	}
	if _, err := Run(context.Background(), Config{URL: urls[0], Replicas: urls[1:], Gen: workload.List(reqs), MaxRequests: len(reqs)}); err != nil {
		t.Fatal(err)
	}
	for i := range hits {
		if n := hits[i].Load(); n != 3 {
			t.Errorf("gateway %d got %d of 9 requests, want 3", i, n)
		}
	}
}
