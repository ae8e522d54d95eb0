package eppclient

import (
	"strings"
	"testing"
)

func TestListeners(t *testing.T) {
	banner := `
pdgate EPP is up (standalone, endpoints from /tmp/e.yaml)
  ext_proc gRPC : [::]:40123 (plaintext) - point Envoy's ext_proc filter or the dev gateway here:
                  bin/gateway --epp 127.0.0.1:40123 --epp-tls=false --epp-insecure-skip-verify
  gRPC health   : [::]:40124 (grpc_health_v1, service "envoy.service.ext_proc.v3.ExternalProcessor")
  metrics       : http://127.0.0.1:40125/metrics
`
	tests := []struct {
		name, output, wantGRPC, wantMetrics string
	}{
		{"nothing printed yet", "starting\n", "", ""},
		{"the ext_proc line only", banner[:strings.Index(banner, "  gRPC health")], "[::]:40123", ""},
		{"the whole banner", "log line\n" + banner + "later log line\n", "[::]:40123", "http://127.0.0.1:40125/metrics"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g, m := Listeners(tt.output)
			if g != tt.wantGRPC || m != tt.wantMetrics {
				t.Fatalf("Listeners = %q, %q; want %q, %q", g, m, tt.wantGRPC, tt.wantMetrics)
			}
		})
	}
}
