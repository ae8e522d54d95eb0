package runner

import (
	"testing"
	"time"

	"github.com/pdgate/pdgate/plugins/framework/plugintest"
)

func TestOptions(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		wantErr string
		check   func(t *testing.T, o *Options)
	}{
		{name: "standalone gets a pool name", args: []string{"--endpoints-file", "e.yaml"},
			check: func(t *testing.T, o *Options) {
				if !o.Standalone() || o.PoolName != StandalonePoolName || o.MaxRequestBodyBytes != DefaultMaxRequestBodyBytes {
					t.Fatalf("%+v", o)
				}
			}},
		{name: "alias of --decision-trace", args: []string{"--endpoints-file", "e.yaml", "--allow-decision-trace=true"},
			check: func(t *testing.T, o *Options) {
				if !o.DecisionTrace {
					t.Fatal("alias not honoured")
				}
			}},
		{name: "kubernetes mode needs a pool", args: nil, wantErr: "either pool-name or endpoint-selector must be set"},
		{name: "kubernetes mode", args: []string{"--pool-name", "p"},
			check: func(t *testing.T, o *Options) {
				if o.Standalone() || o.PoolNamespace == "" {
					t.Fatalf("%+v", o)
				}
			}},
		{name: "file and selector exclude each other", args: []string{"--endpoints-file", "e", "--endpoint-selector", "a=b", "--endpoint-target-ports", "8000"},
			wantErr: "--endpoints-file and --endpoint-selector exclude each other"},
		{name: "no leader election standalone", args: []string{"--endpoints-file", "e", "--ha-enable-leader-election"},
			wantErr: "--ha-enable-leader-election needs Kubernetes mode"},
		{name: "negative body limit", args: []string{"--endpoints-file", "e", "--max-request-body-bytes", "-1"},
			wantErr: "--max-request-body-bytes -1"},
		{name: "zero poll interval", args: []string{"--endpoints-file", "e", "--endpoints-poll-interval", "0s"},
			wantErr: "--endpoints-poll-interval"},
		{name: "the collector's heap floor defaults to 64 MiB", args: []string{"--endpoints-file", "e"},
			check: func(t *testing.T, o *Options) {
				if got := o.GCMinHeap.Value(); got != 64<<20 {
					t.Fatalf("--gc-min-heap default %d", got)
				}
			}},
		{name: "a quantity sets the heap floor, 0 turns it off", args: []string{"--endpoints-file", "e", "--gc-min-heap", "0"},
			check: func(t *testing.T, o *Options) {
				if got := o.GCMinHeap.Value(); got != 0 {
					t.Fatalf("--gc-min-heap 0 read as %d", got)
				}
			}},
		{name: "negative heap floor", args: []string{"--endpoints-file", "e", "--gc-min-heap", "-1Mi"},
			wantErr: "--gc-min-heap -1Mi: want >= 0"},
		{name: "malformed heap floor", args: []string{"--endpoints-file", "e", "--gc-min-heap", "lots"},
			wantErr: "gc-min-heap"},
		{name: "GIE's deprecated metric flags stay rejected", args: []string{"--endpoints-file", "e", "--total-queued-requests-metric", "x"},
			wantErr: "deprecated"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, err := ParseArgs(tt.args)
			if plugintest.WantErr(t, err, tt.wantErr) {
				return
			}
			tt.check(t, o)
		})
	}
}

func TestRefreshIntervalFromAIBrixEnv(t *testing.T) {
	tests := []struct {
		name, env string
		args      []string
		want      time.Duration
		wantErr   string
	}{
		{name: "unset: GIE's default", want: 50 * time.Millisecond},
		{name: "AIBrix variable is the default", env: "200", want: 200 * time.Millisecond},
		{name: "an explicit flag wins", env: "200", args: []string{"--refresh-metrics-interval=75ms"}, want: 75 * time.Millisecond},
		{name: "malformed value names the variable", env: "fast", wantErr: "AIBRIX_POD_METRIC_REFRESH_INTERVAL_MS"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.env != "" {
				t.Setenv("AIBRIX_POD_METRIC_REFRESH_INTERVAL_MS", tt.env)
			}
			o, err := ParseArgs(append([]string{"--endpoints-file=x.yaml"}, tt.args...))
			if plugintest.WantErr(t, err, tt.wantErr) {
				return
			}
			if o.RefreshMetricsInterval != tt.want {
				t.Fatalf("interval %s, want %s", o.RefreshMetricsInterval, tt.want)
			}
		})
	}
}
