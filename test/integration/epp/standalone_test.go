package epp

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	healthPb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/pdgate/pdgate/plugins/wire/protocol"
	"github.com/pdgate/pdgate/test/inprocepp"
	"github.com/pdgate/pdgate/test/testsupport"
)

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	// Write-then-rename, like editors and the lab do, so the EPP never reads half a file.
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func endpointsYAML(port int, names ...string) string {
	var b strings.Builder
	b.WriteString("endpoints:\n")
	for _, n := range names {
		addr := map[string]string{"a": "127.0.0.2", "b": "127.0.0.3"}[n]
		fmt.Fprintf(&b, "- name: pod-%s\n  address: %s\n  port: %d\n  labels: {app: vllm}\n  annotations: {model.aibrix.ai/engine: vllm}\n", n, addr, port)
	}
	return b.String()
}

// metricValue is one sample of the EPP's /metrics page served at metricsAddr (any host).
func metricValue(t *testing.T, metricsAddr, series string) float64 {
	t.Helper()
	_, port, _ := strings.Cut(metricsAddr, "]:")
	if port == "" {
		_, port, _ = strings.Cut(metricsAddr, ":")
	}
	return testsupport.MetricSample(t, "http://127.0.0.1:"+port+"/metrics", series)
}

func TestStandaloneHotReloadAndRejection(t *testing.T) {
	la, lb, port := listenPair(t)
	fakeVLLM(t, la, 0)
	fakeVLLM(t, lb, 0)
	dir := t.TempDir()
	file := filepath.Join(dir, "endpoints.yaml")
	writeFile(t, file, endpointsYAML(port, "a"))

	o := parseOpts(t, "--endpoints-file", file, "--endpoints-poll-interval", "100ms",
		"--secure-serving=false", "--grpc-port", "0", "--grpc-health-port", "0", "--metrics-port", "0",
		"--decision-trace", "--max-request-body-bytes", "4096")
	addrs := inprocepp.RunBinary(context.Background(), t, o)
	epp := dialEPP(t, addrs.GRPC)
	a := "127.0.0.2:" + strconv.Itoa(port)
	b := "127.0.0.3:" + strconv.Itoa(port)

	if s := healthStatus(t, addrs.Health, ""); s != healthPb.HealthCheckResponse_SERVING {
		t.Fatalf("health = %v, want SERVING", s)
	}
	waitDestination(t, epp, a)

	t.Run("decision trace header", func(t *testing.T) {
		r := exchange(t, epp, map[string]string{protocol.HeaderTrace: "1"}, completion)
		if got := r.respSet[protocol.HeaderDecision]; got != "default=pod-a" {
			t.Fatalf("x-pdgate-decision = %q, want default=pod-a (headers %v)", got, r.respSet)
		}
		r = exchange(t, epp, nil, completion)
		if _, ok := r.respSet[protocol.HeaderDecision]; ok {
			t.Fatal("decision header returned without x-pdgate-trace")
		}
	})

	t.Run("spoofed routing and internal headers never forwarded", func(t *testing.T) {
		r := exchange(t, epp, map[string]string{
			protocol.HeaderPrefillerHostPort:      "10.6.6.6:8000",
			protocol.HeaderEncoderHostsPorts:      "10.6.6.6:8001",
			protocol.HeaderPrefillerBootstrapPort: "1",
			"x-pdgate-internal-immediate-status":  "412",
			"x-pdgate-internal-immediate-body":    "gotcha",
		}, completion)
		if r.immediate != nil {
			t.Fatalf("client-supplied internal header produced an immediate answer: %v", r.immediate)
		}
		for k, v := range r.set {
			if strings.Contains(v, "10.6.6.6") || strings.HasPrefix(k, "x-pdgate-internal-") {
				t.Errorf("forwarded %s: %s", k, v)
			}
		}
		for _, h := range protocol.RoutingHeaders {
			found := false
			for _, rm := range r.removed {
				found = found || rm == h
			}
			if !found {
				t.Errorf("%s not in RemoveHeaders %v", h, r.removed)
			}
		}
	})

	t.Run("body over the limit is answered 413", func(t *testing.T) {
		big := `{"model":"m","prompt":"` + strings.Repeat("x", 5000) + `"}`
		r := exchange(t, epp, nil, big)
		if r.immediate == nil || r.immediate.GetStatus().GetCode() != 413 {
			t.Fatalf("want 413, got %+v", r)
		}
	})

	// Hot reload: swap a for b without restart.
	writeFile(t, file, endpointsYAML(port, "b"))
	waitDestination(t, epp, b)

	// A malformed file is rejected; b stays in service.
	rejectedBefore := metricValue(t, addrs.Metrics, `pdgate_epp_endpoints_file_reloads_total{result="rejected"}`)
	writeFile(t, file, "endpoints:\n- name: pod-a\n  address: not-an-ip\n  port: 1\n")
	deadline := time.Now().Add(20 * time.Second)
	for metricValue(t, addrs.Metrics, `pdgate_epp_endpoints_file_reloads_total{result="rejected"}`) <= rejectedBefore {
		if time.Now().After(deadline) {
			t.Fatal("malformed file was not rejected within 20s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	for i := 0; i < 5; i++ {
		r := exchange(t, epp, nil, completion)
		if r.immediate != nil || r.set["x-gateway-destination-endpoint"] != b {
			t.Fatalf("after a rejected file: %+v, want destination %s", r, b)
		}
	}
	if n := metricValue(t, addrs.Metrics, "pdgate_epp_standalone_endpoints"); n != 1 {
		t.Fatalf("pdgate_epp_standalone_endpoints = %v, want 1", n)
	}

	// Both endpoints: the file grows back and both are served.
	writeFile(t, file, endpointsYAML(port, "a", "b"))
	deadline = time.Now().Add(20 * time.Second)
	for metricValue(t, addrs.Metrics, "pdgate_epp_standalone_endpoints") != 2 {
		if time.Now().After(deadline) {
			t.Fatal("second endpoint not added within 20s")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestStandaloneRefusesMalformedFirstFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "endpoints.yaml")
	writeFile(t, file, "endpoints:\n- name: a\n  adress: 127.0.0.2\n  port: 1\n")
	o := parseOpts(t, "--endpoints-file", file, "--secure-serving=false",
		"--grpc-port", "0", "--grpc-health-port", "0", "--metrics-port", "0")
	err := runEPPExpectError(t, o)
	if !strings.Contains(err.Error(), `line 3: unknown field "adress"`) {
		t.Fatalf("error %q does not name the line and field", err)
	}
}
