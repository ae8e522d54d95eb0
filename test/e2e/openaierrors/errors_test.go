// Package openaierrors checks pdgate's own error answers with a real OpenAI client library
// (github.com/openai/openai-go): a lab-shaped deployment of real processes (simulators,
// sidecars, the EPP in standalone mode, the dev gateway) on loopback, and every error the
// EPP or the gateway answers itself must surface in the SDK as an *openai.Error with the
// right status, message and type, as vLLM's errors do.
package openaierrors

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go"
	"github.com/openai/openai-go/option"

	"github.com/pdgate/pdgate/cmd/pdgate/lab"
	"github.com/pdgate/pdgate/plugins/wire/protocol"
	"github.com/pdgate/pdgate/test/testsupport"
	"github.com/pdgate/pdgate/test/testsupport/labtest"
)

var (
	binDir   string
	repoRoot string
)

func TestMain(m *testing.M) {
	testsupport.Main(m, "openaierrors-e2e", &binDir, &repoRoot, "sim", "sidecar", "epp", "gateway")
}

const (
	model     = "meta-llama/Llama-3.1-8B-Instruct"
	bodyLimit = 64 << 10 // the EPP's --max-request-body-bytes here
)

// start runs a lab of one prefill and one decode pod (llm-d's P/D config, whose prefix-based
// decider also gates Prefer: if-available) and returns the gateway's base URL once a request
// went through.
func start(t *testing.T) string {
	t.Helper()
	cfg := filepath.Join(repoRoot, "config")
	topo := labtest.WriteTopology(t, `name: openai-errors
eppConfig: `+cfg+`/lab/epp/pd.yaml
simProfile: `+cfg+`/sim/llama3-8b-h100.yaml
timeScale: 20
model: `+model+`
eppArgs: ["--max-request-body-bytes=65536"]
sidecarArgs: ["--prefill-failure-policy=fail-fast", "--decode-response-timeout=2s"]
pods:
- {name: prefill-a, role: prefill, roleset: rs-a, engine: vllm, kvConnector: nixl}
- {name: decode-a, role: decode, roleset: rs-a, engine: vllm, kvConnector: nixl}
`)
	return labtest.Start(t, lab.Options{Topology: topo, BinDir: binDir, Subnet: "127.0.83"}).URL
}

func client(url string) openai.Client {
	return openai.NewClient(option.WithBaseURL(url+"/v1/"), option.WithAPIKey("none"), option.WithMaxRetries(0))
}

// completion is a call of the completions API for prompt with the request options given.
func completion(c openai.Client, prompt string, maxTokens int64, opts ...option.RequestOption) func(context.Context) error {
	return func(ctx context.Context) error {
		_, err := c.Completions.New(ctx, openai.CompletionNewParams{Model: model,
			Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String(prompt)}, MaxTokens: openai.Int(maxTokens)}, opts...)
		return err
	}
}

func TestSDKReadsPdgateErrors(t *testing.T) {
	url := start(t)
	c := client(url)
	// ~3,600 tokens, never cached (the EPP records a prompt on its picks even when a leg
	// fails: each prefill case needs a prompt of its own)
	long := strings.Repeat("the quick brown fox jumps over the lazy dog ", 400)
	tests := []struct {
		name       string
		call       func(ctx context.Context) error
		wantStatus int
		wantType   string
		wantParam  string
		wantMsg    string
		wantHeader [2]string
		sidecar    bool // the sidecar answers, not the EPP
	}{
		{name: "malformed JSON: the EPP's 400",
			call: func(ctx context.Context) error {
				return c.Post(ctx, "completions", nil, nil, option.WithRequestBody("application/json", []byte(`{"model":`)))
			},
			wantStatus: 400, wantType: "invalid_request_error", wantMsg: "error unmarshaling request body"},
		{name: "a model no pod serves: the EPP's 404, vLLM's body",
			call: func(ctx context.Context) error {
				_, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "no-such-model",
					Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}})
				return err
			},
			wantStatus: 404, wantType: "NotFoundError", wantParam: "model", wantMsg: "The model `no-such-model` does not exist.",
			wantHeader: [2]string{protocol.HeaderErrorCause, protocol.CauseModelNotFound}},
		{name: "Prefer: if-available with nothing cached: the EPP's 412",
			call:       completion(c, long, 1, option.WithHeader("Prefer", "if-available")),
			wantStatus: 412, wantType: "invalid_request_error", wantMsg: protocol.ConditionalDecodeMessage},
		{name: "a body over the EPP's limit: 413",
			call:       completion(c, strings.Repeat("a", bodyLimit+1), 1),
			wantStatus: 413, wantType: "invalid_request_error", wantMsg: "exceeds the EPP limit of 65536 bytes"},
		// The sidecar's own answers (the simulator injects the fault the x-sim-fault header names).
		{name: "a failed prefill leg under fail-fast: the sidecar's 500",
			call:       completion(c, long+" prefill-fail", 1, option.WithHeader("x-sim-fault", "prefill-fail")),
			wantStatus: 500, wantType: "InternalServerError", wantMsg: "prefill request failed",
			wantHeader: [2]string{protocol.HeaderErrorPrefill, "true"}, sidecar: true},
		{name: "a prefill engine that drops the connection under fail-fast: the sidecar's 503",
			call:       completion(c, strings.Repeat("pack my box with five dozen liquor jugs ", 400), 1, option.WithHeader("x-sim-fault", "drop-connection")),
			wantStatus: 503, wantType: "ServiceUnavailableError", wantMsg: "prefill",
			wantHeader: [2]string{protocol.HeaderErrorPrefill, "true"}, sidecar: true},
		{name: "a prefill that answers 200 without producing its KV (SGLang #33507's abort): the sidecar's 503",
			call:       completion(c, strings.Repeat("sphinx of black quartz judge my vow ", 450), 1, option.WithHeader("x-sim-fault", "prefill-abort")),
			wantStatus: 503, wantType: "ServiceUnavailableError", wantMsg: "incomplete_prefill",
			wantHeader: [2]string{protocol.HeaderErrorPrefill, "true"}, sidecar: true},
		{name: "a decode that reports half its prompt's KV missing (a partial NIXL read it recomputed): the sidecar's 502",
			call:       completion(c, strings.Repeat("how vexingly quick daft zebras jump ", 400), 1, option.WithHeader("x-sim-fault", "partial-kv")),
			wantStatus: 502, wantType: "InternalServerError", wantMsg: "partial_kv",
			wantHeader: [2]string{protocol.HeaderErrorDecode, "true"}, sidecar: true},
		{name: "a decode engine that drops the connection: the sidecar's 502",
			call:       completion(c, "drop", 4, option.WithHeader("x-sim-fault", "drop-connection")),
			wantStatus: 502, wantType: "InternalServerError", wantMsg: "decode leg failed",
			wantHeader: [2]string{protocol.HeaderErrorDecode, "true"}, sidecar: true},
		{name: "a decode engine past the response timeout: the sidecar's 504",
			call:       completion(c, "hang", 4, option.WithHeader("x-sim-fault", "hang-first-token")),
			wantStatus: 504, wantType: "GatewayTimeoutError", wantMsg: "decode engine did not",
			wantHeader: [2]string{protocol.HeaderErrorDecode, "true"}, sidecar: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			err := tt.call(ctx)
			var apiErr *openai.Error
			if !errors.As(err, &apiErr) {
				t.Fatalf("want an *openai.Error, got %T %v", err, err)
			}
			if apiErr.StatusCode != tt.wantStatus || apiErr.Type != tt.wantType || apiErr.Param != tt.wantParam ||
				!strings.Contains(apiErr.Message, tt.wantMsg) {
				t.Fatalf("status %d type %q param %q message %q; want %d %q %q containing %q (raw %s)",
					apiErr.StatusCode, apiErr.Type, apiErr.Param, apiErr.Message, tt.wantStatus, tt.wantType, tt.wantParam, tt.wantMsg, apiErr.RawJSON())
			}
			if ct := apiErr.Response.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("content-type %q", ct)
			}
			if h := tt.wantHeader; h[0] != "" && apiErr.Response.Header.Get(h[0]) != h[1] {
				t.Errorf("header %s = %q, want %q", h[0], apiErr.Response.Header.Get(h[0]), h[1])
			}
			if !tt.sidecar && apiErr.Response.Header.Get(protocol.HeaderErrorPrefill) != "" {
				t.Errorf("an EPP answer labelled a failed prefill")
			}
			if !tt.sidecar && apiErr.Response.Header.Get(protocol.HeaderErrorCause) == "" {
				t.Errorf("an EPP answer without %s", protocol.HeaderErrorCause)
			}
		})
	}
}
