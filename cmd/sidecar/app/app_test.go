package app

import (
	"context"
	"crypto/tls"
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
)

func TestEnvDefaults(t *testing.T) {
	t.Setenv("AIBRIX_PREFILL_REQUEST_TIMEOUT", "12")
	t.Setenv("AIBRIX_DECODE_FIRST_RESPONSE_TIMEOUT", "0")
	t.Setenv("AIBRIX_KV_CONNECTOR_TYPE", "SHFS")
	t.Setenv("AIBRIX_TRT_MACHINE_ID", "17")
	o := NewOptions()
	if o.PrefillTimeout != 12*time.Second || o.FirstResponseTimeout != 0 || o.KVConnector != "shfs" || o.TRTMachineID != 17 {
		t.Fatalf("env not applied: %+v", o)
	}
	if o.StreamIdleTimeout != 120*time.Second || o.AbortTimeout != 3*time.Second || o.AbortRetryDelay != 2*time.Second || o.ResponseTimeout != 0 {
		t.Fatalf("defaults wrong: %+v", o)
	}
	// A flag still wins over the variable.
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	o.BindFlags(fs)
	if err := fs.Parse([]string{"--prefill-timeout", "3s"}); err != nil || o.PrefillTimeout != 3*time.Second {
		t.Fatalf("flag: %v %v", err, o.PrefillTimeout)
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		mutate  func(o *Options)
		wantErr string
	}{
		{name: "ok", mutate: func(o *Options) { o.Allowlist = "10.0.0.1:1" }},
		{name: "no allow-list", mutate: func(*Options) {}, wantErr: "allow-list is on by default"},
		{name: "disable conflicts", mutate: func(o *Options) { o.AllowlistDisable = true; o.Allowlist = "10.0.0.1:1" }, wantErr: "conflicts"},
		{name: "pool and static", mutate: func(o *Options) { o.InferencePool = "p"; o.AllowlistFile = "f" }, wantErr: "--inference-pool conflicts"},
		{name: "bad env for every engine", env: map[string]string{"AIBRIX_PREFILL_REQUEST_TIMEOUT": "-1"}, mutate: func(o *Options) { o.AllowlistDisable = true }, wantErr: "AIBRIX_PREFILL_REQUEST_TIMEOUT"},
		{name: "bad stage", mutate: func(o *Options) { o.AllowlistDisable = true; o.EnableTLS = "prefiller,gpu" }, wantErr: "--enable-tls"},
		{name: "half tls", mutate: func(o *Options) { o.AllowlistDisable = true; o.TLSCertFile = "c" }, wantErr: "go together"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("INFERENCE_POOL", "")
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			o := NewOptions()
			tt.mutate(o)
			err := o.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err %v, want %q", err, tt.wantErr)
			}
		})
	}
}

func TestProxyConfigRejectsBadValues(t *testing.T) {
	engine := httptest.NewServer(http.NotFoundHandler())
	defer engine.Close()
	for name, mutate := range map[string]func(o *Options){
		"--engine":             func(o *Options) { o.Engine = "tgi" },
		"--kv-connector":       func(o *Options) { o.KVConnector = "mooncake" },
		"--trt-schedule-style": func(o *Options) { o.Engine, o.TRTSchedule = "trtllm", "both" },
		"--trt-machine-id":     func(o *Options) { o.Engine, o.TRTMachineID = "trtllm", 1024 },
		"--engine-url":         func(o *Options) { o.EngineURL = "ftp://x" },
	} {
		o := NewOptions()
		o.Listen, o.EngineURL, o.AllowlistDisable, o.Logger = "127.0.0.1:0", engine.URL, true, logr.Discard()
		mutate(o)
		// A bounded context: a setting that is wrongly accepted must fail the test, not hang it.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := Run(ctx, o)
		cancel()
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: err %v", name, err)
		}
	}
}

// startRun runs the sidecar with o in the background until cancel, and returns the address it
// listens on and Run's result. A Run that ends before it listens fails the test.
func startRun(t *testing.T, o *Options) (addr string, cancel context.CancelFunc, done <-chan error) {
	t.Helper()
	listening := make(chan string, 1)
	o.OnListening = func(a string) { listening <- a }
	ctx, cancel := context.WithCancel(context.Background())
	result := make(chan error, 1)
	go func() { result <- Run(ctx, o) }()
	select {
	case a := <-listening:
		return a, cancel, result
	case err := <-result:
		cancel()
		t.Fatalf("Run ended before listening: %v", err)
		return "", nil, nil
	}
}

// TestRunServesAndShutsDownGracefully: a stream in flight when the context ends still
// completes; TLS with a self-signed certificate serves.
func TestRunServesAndShutsDownGracefully(t *testing.T) {
	release := make(chan struct{})
	engine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: {\"choices\":[]}\n\n")
		w.(http.Flusher).Flush()
		<-release
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
	}))
	defer engine.Close()
	o := NewOptions()
	o.Listen, o.EngineURL, o.Allowlist, o.Logger, o.TLSSelfSigned = "127.0.0.1:0", engine.URL, "10.0.0.1:1", logr.Discard(), true
	addr, cancel, done := startRun(t, o)
	base := "https://" + addr
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // self-signed test cert
	resp, err := client.Get(base + HealthPath)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("health: %v", err)
	}
	_ = resp.Body.Close()
	resp, err = client.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m","stream":true,"messages":[]}`))
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	if _, err := resp.Body.Read(buf); err != nil {
		t.Fatal(err)
	}
	cancel() // shutdown begins with the stream in flight
	// Release the stream only once shutdown has begun (the listener refuses new connections),
	// however fast or slow Run notices the cancelled context.
	fresh := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true,
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // self-signed test cert
	for i := 0; ; i++ {
		r, err := fresh.Get(base + HealthPath)
		if err != nil {
			break
		}
		_ = r.Body.Close()
		if i == 1000 {
			t.Fatal("the listener still accepts connections 10s after the context ended")
		}
		time.Sleep(10 * time.Millisecond)
	}
	close(release)
	rest, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil || !strings.Contains(string(rest), "[DONE]") {
		t.Fatalf("in-flight stream cut by shutdown: %v %q", err, rest)
	}
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	m, err := client.Get(base + MetricsPath)
	if err == nil {
		_ = m.Body.Close()
		t.Fatal("listener still open after shutdown")
	}
}
