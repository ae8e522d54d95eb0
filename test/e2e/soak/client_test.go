package soak

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/pdgate/pdgate/test/testsupport"
)

// gatewayTimeout is the lab gateway's --request-timeout (its default, 10m, is far beyond the
// watchdog timeouts this soak sets, so the bound checked is the watchdogs').
const requestBound = 20 * time.Second

var client = &http.Client{Timeout: requestBound + 10*time.Second}

type result = testsupport.Answer

func send(base string, stream bool, maxTokens int, fault string) result {
	hdr := map[string]string{}
	if fault != "" {
		hdr["x-sim-fault"] = fault
	}
	req, _ := testsupport.JSONRequest(context.Background(), base+"/v1/chat/completions", hdr,
		testsupport.ChatBody("meta-llama/Llama-3.1-8B-Instruct", "Summarise the benefits of disaggregated serving for long prompts.",
			map[string]any{"stream": stream, "max_tokens": maxTokens}))
	return testsupport.Do(client, req, stream)
}

// outcome classifies a result (testsupport.Outcome): any JSON error body is "error-body".
func outcome(r result) string {
	return testsupport.Outcome(r, func(body []byte) string {
		var e struct {
			Error json.RawMessage `json:"error"`
			Type  string          `json:"type"`
		}
		if json.Unmarshal(bytes.TrimSpace(body), &e) == nil && (len(e.Error) > 0 || e.Type != "") {
			return "error-body"
		}
		return ""
	})
}
