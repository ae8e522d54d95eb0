package soak

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/pdgate/pdgate/cmd/pdgate/lab"
)

// gatewayTimeout is the lab gateway's --request-timeout (its default, 10m, is far beyond the
// watchdog timeouts this soak sets, so the bound checked is the watchdogs').
const requestBound = 20 * time.Second

var client = &http.Client{Timeout: requestBound + 10*time.Second}

type result struct {
	status  int
	header  http.Header
	body    []byte
	done    bool
	elapsed time.Duration
}

func send(base string, stream bool, maxTokens int, fault string) result {
	body, _ := json.Marshal(map[string]any{"model": "meta-llama/Llama-3.1-8B-Instruct", "stream": stream, "max_tokens": maxTokens,
		"messages": []map[string]string{{"role": "user", "content": "Summarise the benefits of disaggregated serving for long prompts."}}})
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, base+"/v1/chat/completions", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if fault != "" {
		req.Header.Set("x-sim-fault", fault)
	}
	begin := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return result{elapsed: time.Since(begin)}
	}
	defer resp.Body.Close()
	res := result{status: resp.StatusCode, header: resp.Header}
	if !stream || resp.StatusCode != http.StatusOK {
		b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		res.body, res.done = b, err == nil
	} else {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if strings.TrimSpace(sc.Text()) == "data: [DONE]" {
				res.done = true
			}
		}
	}
	res.elapsed = time.Since(begin)
	return res
}

// outcome: "200", "cut" (stream broken before [DONE], the documented signal once headers
// went out), "lost" (no answer), "<status>/<error header or OpenAI error type>", or
// "<status>/undocumented".
func outcome(r result) string {
	switch {
	case r.status == 0:
		return "lost"
	case r.status == http.StatusOK && r.done:
		return "200"
	case r.status == http.StatusOK:
		return "cut"
	}
	for _, h := range []string{"x-error-pd-prefill", "x-error-pd-decode", "x-error-pd-encode"} {
		if r.header.Get(h) == "true" {
			return strconv.Itoa(r.status) + "/" + h
		}
	}
	var e struct {
		Error json.RawMessage `json:"error"`
		Type  string          `json:"type"`
	}
	if json.Unmarshal(bytes.TrimSpace(r.body), &e) == nil && (len(e.Error) > 0 || e.Type != "") {
		return strconv.Itoa(r.status) + "/error-body"
	}
	return strconv.Itoa(r.status) + "/undocumented"
}

func scrape(url string) (map[string]float64, error) {
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	return lab.ParseMetrics(bytes.NewReader(b))
}
