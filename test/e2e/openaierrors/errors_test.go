// Package openaierrors checks pdgate's own error answers with a real OpenAI client library
// (github.com/openai/openai-go): a lab-shaped deployment of real processes (simulators,
// sidecars, the EPP in standalone mode, the dev gateway) on loopback, and every error the
// EPP or the gateway answers itself must surface in the SDK as an *openai.Error with the
// right status, message and type, as vLLM's errors do.
package openaierrors

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/openai/openai-go"
	"github.com/openai/openai-go/option"

	"github.com/pdgate/pdgate/cmd/pdgate/lab"
	"github.com/pdgate/pdgate/plugins/wire/protocol"
	"github.com/pdgate/pdgate/test/testsupport"
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

// start lays out one prefill and one decode pod (llm-d's P/D config, whose prefix-based
// decider also gates Prefer: if-available) and starts every process; it returns the gateway's
// base URL once a request went through.
func start(t *testing.T) string {
	t.Helper()
	topo, err := lab.ParseTopology([]byte(`name: openai-errors
eppConfig: epp/pd.yaml
simProfile: ../sim/llama3-8b-h100.yaml
timeScale: 20
model: `+model+`
sidecarArgs: ["--prefill-failure-policy=fail-fast", "--decode-response-timeout=2s"]
pods:
- {name: prefill-a, role: prefill, roleset: rs-a, engine: vllm, kvConnector: nixl}
- {name: decode-a, role: decode, roleset: rs-a, engine: vllm, kvConnector: nixl}
`), filepath.Join(repoRoot, "config", "lab"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	plan, err := lab.NewPlan(topo, lab.PlanOptions{Subnet: "127.0.83", Dir: dir, BinDir: binDir})
	if err != nil {
		t.Fatal(err)
	}
	if err := plan.CheckPorts(); err != nil {
		t.Skipf("lab ports busy: %v", err)
	}
	endpoints, err := plan.WriteFiles()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range plan.Procs(endpoints) {
		if s.Name == "epp" {
			s.Args = append(s.Args, "--max-request-body-bytes", "65536")
		}
		f, err := os.Create(filepath.Join(dir, s.Name+".log"))
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(s.Binary, s.Args...)
		cmd.Env = append(os.Environ(), s.Env...)
		cmd.Stdout, cmd.Stderr = f, f
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			t.Fatalf("%s: %v", s.Name, err)
		}
		name := s.Name
		t.Cleanup(func() {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			_ = cmd.Wait()
			f.Close()
			if t.Failed() {
				b, _ := os.ReadFile(filepath.Join(dir, name+".log"))
				lines := strings.Split(strings.TrimSpace(string(b)), "\n")
				if len(lines) > 10 {
					lines = lines[len(lines)-10:]
				}
				t.Logf("--- %s\n%s", name, strings.Join(lines, "\n"))
			}
		})
	}
	url := "http://" + plan.GatewayAddr
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c := client(url)
	for {
		_, err := c.Completions.New(ctx, openai.CompletionNewParams{Model: model,
			Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("hi")}, MaxTokens: openai.Int(1)})
		if err == nil {
			return url
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no 200 through the gateway: %v", err)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func client(url string) openai.Client {
	return openai.NewClient(option.WithBaseURL(url+"/v1/"), option.WithAPIKey("none"), option.WithMaxRetries(0))
}

func TestSDKReadsPdgateErrors(t *testing.T) {
	url := start(t)
	c := client(url)
	long := strings.Repeat("the quick brown fox jumps over the lazy dog ", 400) // ~3,600 tokens, never cached
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
			call: func(ctx context.Context) error {
				_, err := c.Completions.New(ctx, openai.CompletionNewParams{Model: model,
					Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String(long)}, MaxTokens: openai.Int(1)},
					option.WithHeader("Prefer", "if-available"))
				return err
			},
			wantStatus: 412, wantType: "invalid_request_error", wantMsg: protocol.ConditionalDecodeMessage},
		{name: "a body over the EPP's limit: 413",
			call: func(ctx context.Context) error {
				_, err := c.Completions.New(ctx, openai.CompletionNewParams{Model: model,
					Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String(strings.Repeat("a", bodyLimit+1))}, MaxTokens: openai.Int(1)})
				return err
			},
			wantStatus: 413, wantType: "invalid_request_error", wantMsg: "exceeds the EPP limit of 65536 bytes"},
		// The sidecar's own answers (the simulator injects the fault the x-sim-fault header names).
		{name: "a failed prefill leg under fail-fast: the sidecar's 500",
			call: func(ctx context.Context) error {
				_, err := c.Completions.New(ctx, openai.CompletionNewParams{Model: model,
					Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String(long + " prefill-fail")}, MaxTokens: openai.Int(1)},
					option.WithHeader("x-sim-fault", "prefill-fail"))
				return err
			},
			wantStatus: 500, wantType: "InternalServerError", wantMsg: "prefill request failed",
			wantHeader: [2]string{protocol.HeaderErrorPrefill, "true"}, sidecar: true},
		{name: "a decode engine that drops the connection: the sidecar's 502",
			call: func(ctx context.Context) error {
				_, err := c.Completions.New(ctx, openai.CompletionNewParams{Model: model,
					Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("drop")}, MaxTokens: openai.Int(4)},
					option.WithHeader("x-sim-fault", "drop-connection"))
				return err
			},
			wantStatus: 502, wantType: "InternalServerError", wantMsg: "decode leg failed",
			wantHeader: [2]string{protocol.HeaderErrorDecode, "true"}, sidecar: true},
		{name: "a decode engine past the response timeout: the sidecar's 504",
			call: func(ctx context.Context) error {
				_, err := c.Completions.New(ctx, openai.CompletionNewParams{Model: model,
					Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("hang")}, MaxTokens: openai.Int(4)},
					option.WithHeader("x-sim-fault", "hang-first-token"))
				return err
			},
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
		})
	}
}
